/**
 * @envtrain/gpu — the WebGPU (Dawn) compute core.
 *
 * @since 0.0.0
 */
export * as Arena from "./Arena.js"
export * as Checkpoint from "./Checkpoint.js"
export * as CpuTwin from "./CpuTwin.js"
export * as Generation from "./Generation.js"
export * as Gpu from "./Gpu.js"
export * as GpuError from "./GpuError.js"
export * as GrpoLoss from "./GrpoLoss.js"
export * as HalfFloat from "./HalfFloat.js"
export * as Matmul from "./Matmul.js"
export * as ModelConfig from "./ModelConfig.js"
export * as Ops from "./Ops.js"
export * as Preset from "./Preset.js"
export * as Program from "./Program.js"
export * as Qwen3 from "./Qwen3.js"
export * as Qwen3Reference from "./Qwen3Reference.js"
export * as Reference from "./Reference.js"
export * as Safetensors from "./Safetensors.js"
export * as Sampling from "./Sampling.js"
export * as StepProgram from "./StepProgram.js"
export * as TinyTransformer from "./TinyTransformer.js"
