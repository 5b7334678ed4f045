#!/usr/bin/env bash
# Re-resolves interop/requirements.in into the pinned lock interop/requirements.txt (run after editing the .in
# file, then commit both; scripts/ensure-venv.sh rebuilds .venv from the new lock on its next run).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${ENVTRAIN_PYTHON:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet -r interop/requirements.in
{
  echo "# The pinned lock of the interop suite's Python environment (.venv). Made from requirements.in by"
  echo "# scripts/lock-venv.sh; scripts/ensure-venv.sh installs exactly this (--no-deps) and rebuilds .venv when it changes."
  echo "# triton is left out on purpose: torch needs it only to compile kernels for CUDA GPUs (torch.compile), and"
  echo "# it is 1 GB of the environment's 6.3 GB; scripts/ensure-venv.sh's dependency check allows exactly that gap."
  "$tmp/venv/bin/python" -m pip freeze --all | grep -v -E '^(pip|triton)=='
} > interop/requirements.txt
echo "interop/requirements.txt: $(grep -c '==' interop/requirements.txt) pinned packages" >&2
