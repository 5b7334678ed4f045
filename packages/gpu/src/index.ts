/**
 * @envtrain/gpu — the WebGPU (Dawn) compute core.
 *
 * @since 0.0.0
 */
export * as Blas from "./cpu/Blas.js"
export * as CpuModel from "./cpu/CpuModel.js"
export * as Gemm from "./cpu/Gemm.js"
export * as WasmGemm from "./cpu/WasmGemm.js"
export * as Checkpoint from "./formats/Checkpoint.js"
export * as ModelConfig from "./formats/ModelConfig.js"
export * as Safetensors from "./formats/Safetensors.js"
export * as Matmul from "./Matmul.js"
export * as Generation from "./model/Generation.js"
export * as Preset from "./model/Preset.js"
export * as Qwen3 from "./model/Qwen3.js"
export * as Qwen3Reference from "./model/Qwen3Reference.js"
export * as Sampling from "./model/Sampling.js"
export * as TinyTransformer from "./model/TinyTransformer.js"
export * as CpuTwin from "./ops/CpuTwin.js"
export * as GrpoLoss from "./ops/GrpoLoss.js"
export * as Ops from "./ops/Ops.js"
export * as Reference from "./ops/Reference.js"
export * as Arena from "./runtime/Arena.js"
export * as Gpu from "./runtime/Gpu.js"
export * as GpuError from "./runtime/GpuError.js"
export * as HalfFloat from "./runtime/HalfFloat.js"
export * as Program from "./runtime/Program.js"
export * as StepProgram from "./runtime/StepProgram.js"
