#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed: the report's check renders it in a real browser, and the browser
# environment drives it. No browser download: the distribution's package, from the machine's configured sources.
set -euo pipefail

[ "$(uname -s)" = "Linux" ] || exit 0
for p in /usr/bin/chromium /usr/bin/chromium-browser; do [ -x "$p" ] && exit 0; done

if [ "$(id -u)" != "0" ]; then
  echo "envtrain: Chromium is not installed; the report's browser check and the browser environment need it." >&2
  echo "Install Debian's package as root, then run this command again:" >&2
  echo "  sudo sh -c 'apt-get update && apt-get install -y chromium'" >&2
  exit 3
fi
echo "envtrain: installing Debian's chromium…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq chromium >&2
echo "envtrain: $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium installed')" >&2
