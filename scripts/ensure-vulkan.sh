#!/usr/bin/env bash
# Makes sure Dawn (npm `webgpu`) can find a Vulkan adapter on Linux.
# On a machine without a GPU driver it installs Mesa's software Vulkan driver (lavapipe)
# from bookworm-backports, because Dawn rejects the stock Debian 12 Mesa 22 lavapipe.
# Idempotent: does nothing when a Vulkan ICD is already present and new enough.
set -euo pipefail

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

FIX_CMD='echo "deb http://deb.debian.org/debian bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list && apt-get update && apt-get install -y libvulkan1 && apt-get install -y -t bookworm-backports mesa-vulkan-drivers'

if [ "$(id -u)" != "0" ]; then
  echo "envtrain: no usable Vulkan driver found, so WebGPU (Dawn) has no adapter." >&2
  echo "Install Mesa's software Vulkan driver (Debian 12) as root, then run this command again:" >&2
  echo "  sudo sh -c '$FIX_CMD'" >&2
  exit 3
fi

if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
fi
echo "envtrain: installing Mesa's software Vulkan driver (libvulkan1, mesa-vulkan-drivers from bookworm-backports)…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq libvulkan1 >&2
apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers >&2
echo "envtrain: Vulkan driver installed: $(dpkg-query -W -f='mesa-vulkan-drivers ${Version}' mesa-vulkan-drivers)" >&2
