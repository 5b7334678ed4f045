#!/usr/bin/env bash
# Makes sure Dawn (npm `webgpu`) can find a Vulkan adapter on Linux.
# On a machine without a GPU driver it installs Mesa's software Vulkan driver (lavapipe)
# from bookworm-backports, because Dawn rejects the stock Debian 12 Mesa 22 lavapipe.
# The backports suite is added from the same mirror as the machine's configured Debian 12 sources (the URI of its
# bookworm main suite, in /etc/apt/sources.list, sources.list.d/*.list or deb822 sources.list.d/*.sources), so no
# mirror is written here.
# Idempotent: does nothing when a Vulkan ICD is already present and new enough.
#
#   bash scripts/ensure-vulkan.sh                   check, and install as root (or print the command to run)
#   bash scripts/ensure-vulkan.sh --backports-line  print the bookworm-backports line derived from the sources
#
# ENVTRAIN_APT_ETC replaces /etc/apt when reading the sources (for tests).
set -euo pipefail

APT_ETC=${ENVTRAIN_APT_ETC:-/etc/apt}

# The `deb` line for bookworm-backports, from the first enabled `deb` source of the suite bookworm with the
# component main: same URI, same options (signed-by and the like). Fails with a message when there is none.
backports_line() {
  local files=() f
  [ -f "$APT_ETC/sources.list" ] && files+=("$APT_ETC/sources.list")
  for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  local line=""
  if [ "${#files[@]}" -gt 0 ]; then
    line=$(awk '
      function has(list, word,   n, i, a) { n = split(list, a, /[ \t]+/); for (i = 1; i <= n; i++) if (a[i] == word) return 1; return 0 }
      function emit(opts, uri) { print "deb " (opts == "" ? "" : "[" opts "] ") uri " bookworm-backports main"; found = 1; exit }
      # deb822 stanza (*.sources): fields until a blank line.
      function stanza_end() {
        if (is822 && has(types, "deb") && has(suites, "bookworm") && has(comps, "main") && tolower(enabled) != "no" && uris != "") {
          split(uris, u, /[ \t]+/)
          emit(signed == "" ? "" : "signed-by=" signed, u[1])
        }
        types = uris = suites = comps = enabled = signed = ""; field = ""
      }
      FNR == 1 { if (is822) stanza_end(); is822 = (FILENAME ~ /\.sources$/) }
      is822 {
        if ($0 ~ /^[ \t]*#/) next
        if ($0 ~ /^[ \t]*$/) { stanza_end(); next }
        if ($0 ~ /^[ \t]/) { if (field == "uris") uris = uris " " $1; next }   # continuation line
        key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val); sub(/[ \t]+$/, "", val); field = key
        if (key == "types") types = val; else if (key == "uris") uris = val; else if (key == "suites") suites = val
        else if (key == "components") comps = val; else if (key == "enabled") enabled = val
        else if (key == "signed-by" && val !~ /BEGIN PGP/) signed = val
        next
      }
      # one-line format: deb [options] uri suite component...
      $1 == "deb" {
        rest = $0; sub(/^[ \t]*deb[ \t]+/, "", rest); opts = ""
        if (rest ~ /^\[/) { opts = rest; sub(/\].*$/, "", opts); sub(/^\[[ \t]*/, "", opts); sub(/[ \t]+$/, "", opts); sub(/^[^\]]*\][ \t]*/, "", rest) }
        split(rest, w, /[ \t]+/)
        comps = ""; for (i = 3; i in w; i++) comps = comps " " w[i]
        if (w[2] == "bookworm" && has(comps, "main")) emit(opts, w[1])
      }
      END { if (!found && is822) stanza_end() }
    ' "${files[@]}")
  fi
  if [ -z "$line" ]; then
    echo "envtrain: no Debian 12 source found to take bookworm-backports from: no enabled 'deb' entry for the suite" \
      "bookworm with the component main in $APT_ETC/sources.list or $APT_ETC/sources.list.d/ (*.list, *.sources)." \
      "Add bookworm-backports from your Debian mirror yourself, e.g. a line 'deb <your mirror> bookworm-backports main'" \
      "in $APT_ETC/sources.list.d/bookworm-backports.list, then run this script again." >&2
    return 1
  fi
  printf '%s\n' "$line"
}

if [ "${1:-}" = "--backports-line" ]; then
  backports_line
  exit
fi

[ "$(uname -s)" = "Linux" ] || exit 0

have_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; }
have_icd() { ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; }
lavapipe_too_old() {
  # Mesa < 23 lavapipe lacks the features Dawn requires; only matters when lavapipe is the ICD.
  local v
  v=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  [ -n "$v" ] && dpkg --compare-versions "$v" lt 23
}

if have_loader && have_icd && ! lavapipe_too_old; then
  exit 0
fi

have_backports() { grep -rqs 'bookworm-backports' "$APT_ETC/sources.list" "$APT_ETC/sources.list.d/"; }
INSTALL_CMD='apt-get update && apt-get install -y libvulkan1 && apt-get install -y -t bookworm-backports mesa-vulkan-drivers'

if [ "$(id -u)" != "0" ]; then
  echo "envtrain: no usable Vulkan driver found, so WebGPU (Dawn) has no adapter." >&2
  echo "Install Mesa's software Vulkan driver (Debian 12) as root, then run this command again:" >&2
  if have_backports; then
    echo "  sudo sh -c '$INSTALL_CMD'" >&2
  elif line=$(backports_line); then
    echo "  sudo sh -c 'echo \"$line\" > $APT_ETC/sources.list.d/bookworm-backports.list && $INSTALL_CMD'" >&2
  fi
  echo "(or: sudo bash scripts/ensure-vulkan.sh, which does the same)" >&2
  exit 3
fi

if ! have_backports; then
  line=$(backports_line)
  echo "envtrain: adding bookworm-backports from the configured Debian mirror: $line" >&2
  printf '%s\n' "$line" > "$APT_ETC/sources.list.d/bookworm-backports.list"
fi
echo "envtrain: installing Mesa's software Vulkan driver (libvulkan1, mesa-vulkan-drivers from bookworm-backports)…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq libvulkan1 >&2
apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers >&2
echo "envtrain: Vulkan driver installed: $(dpkg-query -W -f='mesa-vulkan-drivers ${Version}' mesa-vulkan-drivers)" >&2
