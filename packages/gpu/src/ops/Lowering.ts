/**
 * The lowering of ops to dispatch specs (kernel source, tensor bindings, parameter words, grid, cost estimate),
 * which `Program.compile` compiles: each op's file lowers its own kind; an op over row-blocked tensors lowers per
 * block. `grid` folds a 1-D launch into the 2-D grid the WGSL expects (for models' own kernels).
 *
 * @since 0.0.0
 */
import type { ArenaPlan } from "../runtime/Arena.js"
import { lowerAdamw } from "./adamw.js"
import { lowerAttention, lowerAttentionBackward } from "./attention.js"
import { lowerAxpy } from "./axpy.js"
import { lowerCast } from "./cast.js"
import { lowerEmbedding, lowerEmbeddingBackward } from "./embedding.js"
import { lowerFill } from "./fill.js"
import { lowerGradNorm } from "./gradNorm.js"
import { expandBlocks } from "./internal/blocks.js"
import type { DispatchSpec } from "./internal/dispatch.js"
import { lowerMaskedMean } from "./maskedMean.js"
import { lowerMatmul } from "./matmul.js"
import type { Op } from "./Ops.js"
import { lowerRmsNorm, lowerRmsNormBackward } from "./rmsNorm.js"
import { lowerRope } from "./rope.js"
import { lowerSwiglu, lowerSwigluBackward } from "./swiglu.js"
import { lowerTokenLogprobs, lowerTokenLogprobsBackward } from "./tokenLogprobs.js"

export type { DispatchSpec }
export { grid } from "./internal/dispatch.js"

/** The dispatches of an op (one op over a tensor split into row blocks lowers per block). */
export const lower = (op: Op, plan: ArenaPlan): Array<DispatchSpec> =>
  expandBlocks(op).flatMap((o) => lowerOne(o, plan))

const lowerOne = (op: Op, plan: ArenaPlan): Array<DispatchSpec> => {
  switch (op.kind) {
    case "custom":
      return [{
        label: op.label,
        code: op.code,
        bindings: op.bindings,
        params: op.params,
        groups: op.groups,
        flops: op.flops,
        bytes: op.bytes
      }]
    case "cast":
      return lowerCast(op)
    case "fill":
      return lowerFill(op)
    case "axpy":
      return lowerAxpy(op)
    case "matmul":
      return lowerMatmul(op)
    case "embedding":
      return lowerEmbedding(op)
    case "embeddingBackward":
      return lowerEmbeddingBackward(op)
    case "rmsNorm":
      return lowerRmsNorm(op)
    case "rmsNormBackward":
      return lowerRmsNormBackward(op)
    case "rope":
      return lowerRope(op)
    case "attention":
      return lowerAttention(op)
    case "attentionBackward":
      return lowerAttentionBackward(op)
    case "swiglu":
      return lowerSwiglu(op)
    case "swigluBackward":
      return lowerSwigluBackward(op)
    case "tokenLogprobs":
      return lowerTokenLogprobs(op)
    case "tokenLogprobsBackward":
      return lowerTokenLogprobsBackward(op)
    case "maskedMean":
      return lowerMaskedMean(op)
    case "gradNorm":
      return lowerGradNorm(plan)
    case "adamw":
      return lowerAdamw(plan)
  }
}
