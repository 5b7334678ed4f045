/**
 * The coarse operations a model and its training step are assembled from. An op is plain data naming arena
 * tensors; `Program.compile` lowers a list of them to WGSL dispatches (bind groups made once), and
 * `CpuTwin.run` executes the same list with each op's CPU twin on a host arena, so a whole step can be
 * checked against the CPU.
 *
 * Backward passes are ops too (hand-written per layer): a model emits its forward ops, then the backward ops
 * in reverse, then `gradNorm` and `adamw`. Gradients of parameters always accumulate (`+=`); the step
 * program clears the gradient group before each step.
 *
 * Each op lives in its own file (`ops/rmsNorm.ts`, …; llm.c's one file per layer): the op's data and
 * constructor (re-exported here), its WGSL kernels, its lowering to dispatches, its naive CPU specification
 * (gathered in `Reference`) and the twin that runs the specification on a host arena (dispatched by `CpuTwin`).
 *
 * @example
 * ```ts
 * const t = (name: string) => Arena.tensorOf(plan, name)
 * const ops = [
 *   Ops.embedding({ table: t("param.embed"), ids: t("ids"), out: t("h") }),
 *   Ops.matmul({ a: t("h"), b: t("param.w"), c: t("y"), m: 8, n: 16, k: 32 })
 * ]
 * ```
 *
 * @since 0.0.0
 */
import type { HostArena, Tensor } from "../runtime/Arena.js"
import type { AdamW } from "./adamw.js"
import type { AttentionShape } from "./attention.js"
import type { Attention, AttentionBackward } from "./attention.js"
import type { Axpy } from "./axpy.js"
import type { Cast } from "./cast.js"
import type { Embedding, EmbeddingBackward } from "./embedding.js"
import type { Fill } from "./fill.js"
import type { GradNorm } from "./gradNorm.js"
import type { SubgroupMatrixShape } from "./internal/subgroupMatrix.js"
import type { MaskedMean } from "./maskedMean.js"
import type { Matmul, MatmulTier } from "./matmul.js"
import type { RmsNorm, RmsNormBackward } from "./rmsNorm.js"
import type { Rope } from "./rope.js"
import type { Swiglu, SwigluBackward } from "./swiglu.js"
import type { TokenLogprobs, TokenLogprobsBackward } from "./tokenLogprobs.js"

export type { AttentionShape, SubgroupMatrixShape }
export type {
  AdamW,
  Attention,
  AttentionBackward,
  Axpy,
  Cast,
  Embedding,
  EmbeddingBackward,
  Fill,
  GradNorm,
  MaskedMean,
  Matmul,
  MatmulTier,
  RmsNorm,
  RmsNormBackward,
  Rope,
  Swiglu,
  SwigluBackward,
  TokenLogprobs,
  TokenLogprobsBackward
}
export { adamw } from "./adamw.js"
export { attention, attentionBackward } from "./attention.js"
export { axpy } from "./axpy.js"
export { cast } from "./cast.js"
export { embedding, embeddingBackward } from "./embedding.js"
export { fill } from "./fill.js"
export { gradNorm } from "./gradNorm.js"
export { maskedMean } from "./maskedMean.js"
export { matmul, MATMUL_TIERS } from "./matmul.js"
export { rmsNorm, rmsNormBackward } from "./rmsNorm.js"
export { rope } from "./rope.js"
export { swiglu, swigluBackward } from "./swiglu.js"
export { tokenLogprobs, tokenLogprobsBackward } from "./tokenLogprobs.js"

/**
 * A kernel defined outside this module (a model's own WGSL): its source, tensor bindings (binding 1.. in
 * order, after the uniform parameter block at binding 0), parameter words and grid. `cpu` is its CPU twin,
 * when it has one.
 */
export interface Custom {
  readonly kind: "custom"
  readonly label: string
  readonly code: string
  readonly bindings: ReadonlyArray<Tensor>
  readonly params: ReadonlyArray<readonly ["u" | "f", number]>
  readonly groups: readonly [number, number, number]
  readonly flops: number
  readonly bytes: number
  readonly cpu?: (h: HostArena) => void
}

/** One op of a program's op list (every kind the lowering knows). */
export type Op =
  | Custom
  | Cast
  | Fill
  | Axpy
  | Matmul
  | Embedding
  | EmbeddingBackward
  | RmsNorm
  | RmsNormBackward
  | Rope
  | Attention
  | AttentionBackward
  | Swiglu
  | SwigluBackward
  | TokenLogprobs
  | TokenLogprobsBackward
  | MaskedMean
  | GradNorm
  | AdamW

/** A custom kernel as an op (see {@link Custom}). */
export const custom = (o: Omit<Custom, "kind" | "flops" | "bytes"> & { flops?: number; bytes?: number }): Custom => ({
  ...o,
  kind: "custom",
  flops: o.flops ?? 0,
  bytes: o.bytes ?? 0
})
