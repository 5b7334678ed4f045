#!/usr/bin/env bash
# Makes sure Debian's bubblewrap (bwrap) is installed: every harness rollout runs its agent and verifier in a
# bubblewrap sandbox (packages/harness/src/Sandbox.ts). The distribution's package, from the machine's configured
# sources.
set -euo pipefail
source "$(dirname "$0")/lib/debian-package.sh"

[ "$(uname -s)" = "Linux" ] || exit 0
[ -x /usr/bin/bwrap ] && exit 0
debian_package_install bubblewrap "the harness's sandboxes need it." required "/usr/bin/bwrap --version"
