// Rebuilds the committed WebAssembly kernels (`npm run build:wasm`): the CPU device's sgemm routes, its tiled
// attention and its element-wise kernels. Tests rebuild each into a temp folder (or memory) and fail when the bytes
// differ from the committed files.
import { writeFileSync } from "node:fs"
import wabt from "wabt"
import { assembleAttention, attentionWasmFile } from "../packages/gpu/src/cpu/internal/attentionWat.js"
import { assembleElementwise, elementwiseWasmFile } from "../packages/gpu/src/cpu/internal/elementwiseWat.js"
import { buildInto, committedDir } from "../packages/gpu/src/cpu/internal/sgemmBuild.js"

for (const path of await buildInto(committedDir)) console.log(`wrote ${path}`)
const w = await wabt()
for (
  const [file, assemble] of [[attentionWasmFile, assembleAttention], [
    elementwiseWasmFile,
    assembleElementwise
  ]] as const
) {
  const path = new URL(`../packages/gpu/src/cpu/internal/${file}`, import.meta.url)
  writeFileSync(path, assemble(w))
  console.log(`wrote ${path.pathname}`)
}
