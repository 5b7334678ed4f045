/**
 * The naive CPU specification of every op, gathered from the op files (`ops/<op>.ts`, one specification per op).
 * Slow and obvious plain loops, f64 accumulation, results stored as `Numerics` says (f32 or f64). The kernel
 * twins (`CpuTwin`) run them with f64 storage; the reference model (`Qwen3Reference`) runs the same functions, or,
 * where it has a faster blocked path, a path the tests compare with the specification bit for bit.
 *
 * @since 0.0.0
 */
export { type AdamWStep, cpuAdamw as adamw } from "./adamw.js"
export {
  type AttentionShape,
  cpuAttention as attention,
  cpuAttentionBackward as attentionBackward,
  segmentStart,
  segmentStarts
} from "./attention.js"
export { cpuEmbedding as embedding, cpuEmbeddingBackward as embeddingBackward } from "./embedding.js"
export { cpuGradNorm as gradNorm } from "./gradNorm.js"
export { cpuMaskedMean as maskedMean } from "./maskedMean.js"
export { cpuMatmul as matmul, gemm, type GemmSpec } from "./matmul.js"
export { type FloatArray, type Numerics, numerics, type Precision } from "./Numerics.js"
export { cpuRmsNorm as rmsNorm, cpuRmsNormBackward as rmsNormBackward } from "./rmsNorm.js"
export { cpuRope as rope, cpuRopeBackward as ropeBackward, ropeTables } from "./rope.js"
export { cpuSwiglu as swiglu, cpuSwigluBackward as swigluBackward, silu, siluGrad } from "./swiglu.js"
export {
  cpuTokenLogprobs as tokenLogprobs,
  cpuTokenLogprobsBackward as tokenLogprobsBackward
} from "./tokenLogprobs.js"
