// Rebuilds the committed WebAssembly kernels (`npm run build:wasm`): the sgemm routes of the CPU device.
import { buildInto, committedDir } from "../packages/gpu/src/cpu/internal/sgemmBuild.js"

for (const path of await buildInto(committedDir)) console.log(`wrote ${path}`)
