#!/usr/bin/env bash
# Makes the project's Python environment (.venv) for the interop suite from interop/requirements.txt,
# the pinned lock. Like `npm ci` for node_modules: rebuilt from scratch only when the lock changes
# (a stamp holds the lock's hash), otherwise it returns at once.
# Packages come from whatever index the machine's own pip configuration names.
set -euo pipefail
cd "$(dirname "$0")/.."

lock=interop/requirements.txt
stamp=.venv/.envtrain-requirements-stamp
want=$(sha256sum "$lock" | cut -c1-16)

if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

py=${ENVTRAIN_PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
  echo "envtrain: the interop suite needs Python 3.10 or newer ('$py' is $("$py" --version 2>&1 || echo missing))." >&2
  echo "Install python3 (Debian: apt-get install -y python3 python3-venv) or set ENVTRAIN_PYTHON." >&2
  exit 1
fi

echo "envtrain: making .venv from $lock (first time or the lock changed)…" >&2
start=$(date +%s)
rm -rf .venv
"$py" -m venv .venv
# --no-deps: the lock lists every package, so nothing is resolved (or fetched) behind its back.
.venv/bin/python -m pip install --quiet --no-deps -r "$lock" >&2
# Every requirement met, except torch's triton, which the lock leaves out (see scripts/lock-venv.sh).
if broken=$(.venv/bin/python -m pip check 2>&1 | grep -v -E '^(No broken requirements found\.|torch [^ ]+ requires triton, which is not installed\.)$'); then
  echo "envtrain: .venv's packages do not fit together (is $lock complete?):" >&2
  echo "$broken" >&2
  exit 1
fi
echo "$want" > "$stamp"
echo "envtrain: .venv ready in $(( $(date +%s) - start )) s, $(du -sh .venv | cut -f1) on disk" >&2
