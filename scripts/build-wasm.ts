// Rebuilds the committed WebAssembly kernels (`npm run build:wasm`): the CPU device's sgemm routes and its tiled
// attention. Tests rebuild each into a temp folder and fail when the bytes differ from the committed files.
import { writeFileSync } from "node:fs"
import wabt from "wabt"
import { assembleAttention, attentionWasmFile } from "../packages/gpu/src/cpu/internal/attentionWat.js"
import { buildInto, committedDir } from "../packages/gpu/src/cpu/internal/sgemmBuild.js"

for (const path of await buildInto(committedDir)) console.log(`wrote ${path}`)
const attention = new URL(`../packages/gpu/src/cpu/internal/${attentionWasmFile}`, import.meta.url)
writeFileSync(attention, assembleAttention(await wabt()))
console.log(`wrote ${attention.pathname}`)
