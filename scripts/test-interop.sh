#!/usr/bin/env bash
# `npm run test:interop`: the real OpenEnv, TextArena, OpenSpiel, transformers and TRL as judges.
# Set-up as for `npm test` (npm dependencies, WebGPU adapter, Chromium), then the project's .venv
# from the pinned lock, then both halves: the Python side (pytest, interop/python) and the TypeScript
# side (vitest, interop/test). A skipped test fails the run: on a fresh machine everything must run.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/bootstrap.sh || exit 1
bash scripts/ensure-venv.sh || exit 1
mkdir -p build

status=0
echo "interop: python side (pytest)" >&2
.venv/bin/python -m pytest interop/python -p no:cacheprovider -q -rfEs --junitxml=build/interop-pytest.xml || status=1

echo "interop: typescript side (vitest)" >&2
npx vitest run --config interop/vitest.config.ts --reporter=default --reporter=json \
  --outputFile.json=build/interop-vitest-report.json || status=1

node scripts/test-summary.mjs --pytest build/interop-pytest.xml build/interop-vitest-report.json || status=1
exit $status
