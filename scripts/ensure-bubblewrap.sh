#!/usr/bin/env bash
# Makes sure Debian's bubblewrap (bwrap) is installed: every harness rollout runs its agent and verifier in a
# bubblewrap sandbox (packages/harness/src/Sandbox.ts). The distribution's package, from the machine's configured
# sources.
set -euo pipefail

[ "$(uname -s)" = "Linux" ] || exit 0
[ -x /usr/bin/bwrap ] && exit 0

if [ "$(id -u)" != "0" ]; then
  echo "envtrain: bubblewrap is not installed; the harness's sandboxes need it." >&2
  echo "Install Debian's package as root, then run this command again:" >&2
  echo "  sudo sh -c 'apt-get update && apt-get install -y bubblewrap'" >&2
  exit 3
fi
echo "envtrain: installing Debian's bubblewrap…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq bubblewrap >&2
echo "envtrain: $(/usr/bin/bwrap --version 2>/dev/null || echo 'bubblewrap installed')" >&2
