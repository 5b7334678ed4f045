/**
 * The naive CPU specification of every op, gathered from the op files (`ops/<op>.ts`). They are the specification: slow, obvious, f64 accumulation,
 * used by parity tests and finite-difference gradient checks, never on a hot path.
 *
 * @since 0.0.0
 */
export { type AdamWStep, cpuAdamw as adamw } from "./adamw.js"
export {
  type AttentionShape,
  cpuAttention as attention,
  cpuAttentionBackward as attentionBackward,
  segmentStart
} from "./attention.js"
export { cpuEmbedding as embedding, cpuEmbeddingBackward as embeddingBackward } from "./embedding.js"
export { cpuGradNorm as gradNorm } from "./gradNorm.js"
export { cpuMaskedMean as maskedMean } from "./maskedMean.js"
export { cpuMatmul as matmul, gemm, type GemmSpec } from "./matmul.js"
export { cpuRmsNorm as rmsNorm, cpuRmsNormBackward as rmsNormBackward } from "./rmsNorm.js"
export { cpuRope as rope, ropeAngle } from "./rope.js"
export { cpuSwiglu as swiglu, cpuSwigluBackward as swigluBackward } from "./swiglu.js"
export {
  cpuTokenLogprobs as tokenLogprobs,
  cpuTokenLogprobsBackward as tokenLogprobsBackward
} from "./tokenLogprobs.js"
