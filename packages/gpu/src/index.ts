/**
 * @envtrain/gpu — the WebGPU (Dawn) compute core.
 *
 * @since 0.0.0
 */
export * as Gpu from "./Gpu.js"
export * as GpuError from "./GpuError.js"
export * as Matmul from "./Matmul.js"
export * as Reference from "./Reference.js"
