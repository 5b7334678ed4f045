// Exit 0 when Dawn finds a WebGPU adapter, 1 otherwise. Used by scripts/bootstrap.sh before any TypeScript runs.
import { create } from "webgpu"

let gpu = create([])
const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" })
gpu = null
if (adapter === null) {
  console.error("envtrain: Dawn found no WebGPU adapter (no Vulkan driver?).")
  process.exit(1)
}
console.log(`adapter: ${adapter.info.vendor} / ${adapter.info.architecture} / ${adapter.info.device}`)
process.exit(0)
