#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed: the report's check renders it in a real browser, and the browser
# environment drives it. No browser download: the distribution's package, from the machine's configured sources.
set -euo pipefail
source "$(dirname "$0")/lib/debian-package.sh"

[ "$(uname -s)" = "Linux" ] || exit 0
for p in /usr/bin/chromium /usr/bin/chromium-browser; do [ -x "$p" ] && exit 0; done
debian_package_install chromium "the report's browser check and the browser environment need it." required \
  "/usr/bin/chromium --version"
