# Sourced by scripts/ensure-*.sh: installs one of Debian's packages from the machine's configured sources when it is
# missing, as root, or says how to (the project installs no binaries from anywhere else and compiles nothing).
#
# debian_package_install PACKAGE "WHY IT IS NEEDED" required|optional "COMMAND THAT PRINTS ITS VERSION"
# - required: without root (or apt-get) it prints the command to run and exits 3, stopping the caller.
# - optional: it prints the command and returns 0; the caller's feature falls back, and WHY says to what.
debian_package_install() {
  local package=$1 why=$2 need=$3 version=$4
  if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "envtrain: $package is not installed: $why" >&2
    if [ "$need" = "required" ]; then echo "Install Debian's package as root, then run this command again:" >&2
    else echo "Install Debian's package as root for it:" >&2; fi
    echo "  sudo sh -c 'apt-get update && apt-get install -y $package'" >&2
    [ "$need" = "required" ] && exit 3
    return 0
  fi
  echo "envtrain: installing Debian's $package…" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "$package" >&2
  echo "envtrain: $(eval "$version" 2>/dev/null || echo "$package installed")" >&2
}
