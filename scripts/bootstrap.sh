#!/usr/bin/env bash
# Set-up shared by `npm start` and `npm test`: safe to run every time, fast when nothing is to do.
#  1. installs npm dependencies when node_modules is missing or older than the lock file;
#  2. on Linux, when Dawn finds no WebGPU adapter, installs Mesa's software Vulkan driver (as root)
#     or stops with the exact command to run;
#  3. on Linux, installs Debian's chromium when missing (the same way);
#  4. on Linux, installs Debian's bubblewrap when missing (the harness's sandboxes; the same way);
#  5. on Linux, installs Debian's OpenBLAS when missing and root (the CPU matmuls), else says WebAssembly is used.
set -euo pipefail
cd "$(dirname "$0")/.."

major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "envtrain: Node $(node -v) is too old; install Node 20 or newer." >&2
  exit 1
fi

stamp=node_modules/.envtrain-install-stamp
want=$(cat package.json package-lock.json packages/*/package.json examples/package.json interop/package.json 2>/dev/null | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "envtrain: installing npm dependencies (npm ci)…" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  echo "$want" > "$stamp"
fi

if [ "$(uname -s)" = "Linux" ]; then
  if ! node scripts/probe-adapter.mjs >/dev/null 2>&1; then
    bash scripts/ensure-vulkan.sh
    if ! node scripts/probe-adapter.mjs; then
      echo "envtrain: still no WebGPU adapter after installing the Vulkan driver; see the message above." >&2
      exit 1
    fi
  fi
fi

bash scripts/ensure-chromium.sh
bash scripts/ensure-bubblewrap.sh
bash scripts/ensure-openblas.sh
bash scripts/ensure-postgres.sh
