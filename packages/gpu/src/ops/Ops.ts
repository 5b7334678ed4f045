/**
 * The coarse operations a model and its training step are assembled from. An op is plain data naming arena
 * tensors; `Program.compile` lowers a list of them to WGSL dispatches (bind groups made once), and
 * `CpuTwin.run` executes the same list with the `Reference` twins on a host arena, so a whole step can be
 * checked against the CPU.
 *
 * Backward passes are ops too (hand-written per layer): a model emits its forward ops, then the backward ops
 * in reverse, then `gradNorm` and `adamw`. Gradients of parameters always accumulate (`+=`); the step
 * program clears the gradient group before each step.
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
import type { SubgroupMatrixShape } from "./internal/subgroupMatrix.js"
import type { AttentionShape } from "./Reference.js"

export type { AttentionShape, SubgroupMatrixShape }

export interface Fill {
  readonly kind: "fill"
  readonly out: Tensor
  readonly value: number
}
/** y = beta·y + alpha·x over the first n elements. */
export interface Axpy {
  readonly kind: "axpy"
  readonly x: Tensor
  readonly y: Tensor
  readonly n: number
  readonly alpha: number
  readonly beta: number
}
/**
 * Matmul kernel tiers. "tiled64": 64×64 tile, 4×4 per thread, scalar loads (the default). "tiled64v4" and
 * "tiled128v4" read with vec4 loads (falling back to their scalar twin when a contiguous dim or offset is not a
 * multiple of 4); "tiled128": 128×128 tile, 8×8 per thread, K staged 8 at a time.
 * "tiled128h" (needs the device feature shader-f16): f16-stored operands are read as `vec4<f16>` and staged as
 * f16 in workgroup memory, K staged 16 at a time, f32 products and accumulation; f32 operands as in tiled128v4.
 * Where an f16 operand's contiguous dim or offset is not a multiple of 4 it uses the packed-pair loads instead.
 * "tiled128hh" (experimental): tiled128h with f16 products summed in f16 over each K step of 16 (packed
 * `vec2<f16>` fma) before f32 accumulation, when both operands are f16; about 3 significant digits per partial
 * sum, so only for forward passes that tolerate it. Otherwise it is tiled128h.
 * "subgroupMatrix" (needs chromium-experimental-subgroup-matrix with an f16 → f32 configuration): see
 * `Matmul.chooseTier` and `Matmul.pickSubgroupMatrixConfig`; f16 A and B, f32 C, no epilogue beyond alpha/beta.
 */
export type MatmulTier =
  | "tiled64"
  | "tiled64v4"
  | "tiled128"
  | "tiled128v4"
  | "tiled128h"
  | "tiled128hh"
  | "subgroupMatrix"
export const MATMUL_TIERS: ReadonlyArray<MatmulTier> = ["tiled64", "tiled64v4", "tiled128", "tiled128v4", "tiled128h"]

/** Converts between f32 and f16 storage (round to nearest even), n elements. */
export interface Cast {
  readonly kind: "cast"
  readonly x: Tensor
  readonly y: Tensor
  readonly n: number
}

export interface Matmul {
  readonly kind: "matmul"
  readonly tier: MatmulTier
  readonly a: Tensor
  readonly b: Tensor
  readonly c: Tensor
  readonly bias: Tensor | undefined
  readonly m: number
  readonly n: number
  readonly k: number
  readonly transA: boolean
  readonly transB: boolean
  readonly alpha: number
  readonly beta: number
  /** Element offsets into a, b, c (views such as a chunk of rows). */
  readonly aOffset: number
  readonly bOffset: number
  readonly cOffset: number
  /** For the "subgroupMatrix" tier: the adapter configuration to generate for (from `Matmul.chooseTier`). */
  readonly subgroupMatrix: SubgroupMatrixShape | undefined
  /** Row strides (elements) of A, B, C as stored: by default their contiguous dims (k or m, n or k, n). */
  readonly lda: number
  readonly ldb: number
  readonly ldc: number
  /** Element offset into bias (a column block's share of it). */
  readonly biasOffset: number
}
export interface Embedding {
  readonly kind: "embedding"
  readonly table: Tensor
  readonly ids: Tensor
  readonly out: Tensor
  readonly tokens: number
  readonly dim: number
  /** The table holds rows [rowOffset, rowOffset + rows) of the vocabulary (a row block; 0 for a whole table). */
  readonly rowOffset: number
  /** Tokens whose id is outside the table get zeros (true), or are left as they are (false: a later block's). */
  readonly zeroOthers: boolean
}
export interface EmbeddingBackward {
  readonly kind: "embeddingBackward"
  readonly ids: Tensor
  readonly dOut: Tensor
  readonly dTable: Tensor
  readonly tokens: number
  readonly dim: number
  /** As for {@link Embedding}: dTable holds rows [rowOffset, rowOffset + rows). */
  readonly rowOffset: number
}
export interface RmsNorm {
  readonly kind: "rmsNorm"
  readonly x: Tensor
  readonly weight: Tensor
  readonly y: Tensor
  readonly rstd: Tensor
  readonly rows: number
  readonly dim: number
  readonly eps: number
}
export interface RmsNormBackward {
  readonly kind: "rmsNormBackward"
  readonly x: Tensor
  readonly weight: Tensor
  readonly rstd: Tensor
  readonly dy: Tensor
  readonly dx: Tensor
  readonly dWeight: Tensor
  readonly rows: number
  readonly dim: number
  /** dx += (residual stream) instead of dx =. */
  readonly accumulate: boolean
}
export interface Rope {
  readonly kind: "rope"
  readonly x: Tensor
  readonly positions: Tensor
  readonly tokens: number
  readonly heads: number
  readonly headDim: number
  readonly theta: number
  readonly inverse: boolean
}
export interface Attention {
  readonly kind: "attention"
  readonly q: Tensor
  readonly k: Tensor
  readonly v: Tensor
  readonly o: Tensor
  readonly lse: Tensor
  readonly shape: AttentionShape
  /** Packed sequences: u32 positions [batch·seq] counting from 0 in each sequence (keys before i − pos[i] are masked). */
  readonly positions: Tensor | undefined
  /**
   * "tiled" (default where headDim % 4 = 0 and headDim ≤ 128): 16×16 query/key tiles in workgroup memory;
   * "rows": one invocation per (token, head) walking its keys (any headDim).
   */
  readonly kernel: "tiled" | "rows"
}
export interface AttentionBackward {
  readonly kind: "attentionBackward"
  readonly q: Tensor
  readonly k: Tensor
  readonly v: Tensor
  readonly o: Tensor
  readonly lse: Tensor
  readonly dO: Tensor
  /** Scratch [tokens·heads]. */
  readonly delta: Tensor
  readonly dq: Tensor
  readonly dk: Tensor
  readonly dv: Tensor
  readonly shape: AttentionShape
  readonly positions: Tensor | undefined
  /** As for {@link Attention}: "tiled" (default where possible) or "rows". */
  readonly kernel: "tiled" | "rows"
}
export interface Swiglu {
  readonly kind: "swiglu"
  readonly gate: Tensor
  readonly up: Tensor
  readonly out: Tensor
}
export interface SwigluBackward {
  readonly kind: "swigluBackward"
  readonly gate: Tensor
  readonly up: Tensor
  readonly dOut: Tensor
  readonly dGate: Tensor
  readonly dUp: Tensor
}
export interface TokenLogprobs {
  readonly kind: "tokenLogprobs"
  /** A chunk of logits [rows, vocab] (row r is token rowOffset + r). */
  readonly logits: Tensor
  readonly targets: Tensor
  readonly logp: Tensor
  readonly entropy: Tensor
  readonly lse: Tensor
  readonly rows: number
  readonly vocab: number
  readonly rowOffset: number
  readonly invTemperature: number
}
export interface TokenLogprobsBackward {
  readonly kind: "tokenLogprobsBackward"
  /** Overwritten in place with dLogits. */
  readonly logits: Tensor
  readonly targets: Tensor
  readonly lse: Tensor
  readonly entropy: Tensor
  readonly dLogp: Tensor
  readonly dEntropy: Tensor | undefined
  readonly rows: number
  readonly vocab: number
  readonly rowOffset: number
  readonly invTemperature: number
}
export interface MaskedMean {
  readonly kind: "maskedMean"
  readonly x: Tensor
  readonly mask: Tensor
  readonly out: Tensor
  readonly outIndex: number
  readonly rows: number
  readonly cols: number
  readonly scale: number
  readonly accumulate: boolean
  /** When set, also writes the gradient of gradScale·out w.r.t. x. */
  readonly dx: Tensor | undefined
  readonly gradScale: number
}
/** Global L2 norm of the "grad" group and the clip scale, into step.results. */
export interface GradNorm {
  readonly kind: "gradNorm"
}
/** Fused AdamW over the whole "param" group (per shard), reading step.scalars and the clip scale. */
export interface AdamW {
  readonly kind: "adamw"
}

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

const need = (cond: boolean, message: string) => {
  if (!cond) throw new RangeError(message)
}
const atLeast = (t: Tensor, n: number, what: string) =>
  need(t.size >= n, `${what}: tensor "${t.name}" has ${t.size} elements, needs at least ${n}`)
const isU32 = (t: Tensor, what: string) => need(t.dtype === "u32", `${what}: "${t.name}" must be u32`)

export const fill = (out: Tensor, value = 0): Fill => ({ kind: "fill", out, value })

/** y = x converted between f32 and f16 (one side must be each); e.g. f16 weight copies for f16-input matmuls. */
export const cast = (o: { x: Tensor; y: Tensor; n?: number }): Cast => {
  const n = o.n ?? o.x.size
  need(
    (o.x.dtype === "f32" && o.y.dtype === "f16") || (o.x.dtype === "f16" && o.y.dtype === "f32"),
    `cast: "${o.x.name}" (${o.x.dtype}) → "${o.y.name}" (${o.y.dtype}) must be f32 → f16 or f16 → f32`
  )
  atLeast(o.x, n, "cast")
  atLeast(o.y, n, "cast")
  return { kind: "cast", x: o.x, y: o.y, n }
}

export const axpy = (o: { x: Tensor; y: Tensor; alpha?: number; beta?: number; n?: number }): Axpy => {
  const n = o.n ?? o.y.size
  atLeast(o.x, n, "axpy")
  atLeast(o.y, n, "axpy")
  return { kind: "axpy", x: o.x, y: o.y, n, alpha: o.alpha ?? 1, beta: o.beta ?? 1 }
}

/** C = alpha·op(A)·op(B) + beta·C + bias. transA: A is [K, M]; transB: B is [N, K]. */
export const matmul = (o: {
  a: Tensor
  b: Tensor
  c: Tensor
  m: number
  n: number
  k: number
  bias?: Tensor
  transA?: boolean
  transB?: boolean
  alpha?: number
  beta?: number
  aOffset?: number
  bOffset?: number
  cOffset?: number
  tier?: MatmulTier
  subgroupMatrix?: SubgroupMatrixShape | undefined
  lda?: number
  ldb?: number
  ldc?: number
  biasOffset?: number
}): Matmul => {
  const op: Matmul = {
    kind: "matmul",
    tier: o.tier ?? "tiled64",
    a: o.a,
    b: o.b,
    c: o.c,
    bias: o.bias,
    m: o.m,
    n: o.n,
    k: o.k,
    transA: o.transA ?? false,
    transB: o.transB ?? false,
    alpha: o.alpha ?? 1,
    beta: o.beta ?? 0,
    aOffset: o.aOffset ?? 0,
    bOffset: o.bOffset ?? 0,
    cOffset: o.cOffset ?? 0,
    subgroupMatrix: o.subgroupMatrix,
    lda: o.lda ?? ((o.transA ?? false) ? o.m : o.k),
    ldb: o.ldb ?? ((o.transB ?? false) ? o.k : o.n),
    ldc: o.ldc ?? o.n,
    biasOffset: o.biasOffset ?? 0
  }
  need(
    op.tier !== "subgroupMatrix" || op.subgroupMatrix !== undefined,
    "matmul: the subgroupMatrix tier needs the adapter configuration (use Matmul.chooseTier)"
  )
  // The last element each operand reaches, through its row stride.
  const [ar, ac] = op.transA ? [op.k, op.m] : [op.m, op.k]
  const [br, bc] = op.transB ? [op.n, op.k] : [op.k, op.n]
  need(op.lda >= ac && op.ldb >= bc && op.ldc >= op.n, "matmul: a row stride is shorter than its row")
  atLeast(op.a, op.aOffset + (ar - 1) * op.lda + ac, "matmul A")
  atLeast(op.b, op.bOffset + (br - 1) * op.ldb + bc, "matmul B")
  atLeast(op.c, op.cOffset + (op.m - 1) * op.ldc + op.n, "matmul C")
  if (op.bias !== undefined) atLeast(op.bias, op.biasOffset + op.n, "matmul bias")
  need(op.c.dtype === "f32", `matmul: C "${op.c.name}" must be f32`)
  // f16 operands are read as packed pairs along their contiguous dim: pairs must not straddle rows.
  if (op.a.dtype === "f16") {
    need(
      ac % 2 === 0 && op.lda % 2 === 0 && op.aOffset % 2 === 0,
      `matmul: f16 A "${op.a.name}" needs an even ${op.transA ? "m" : "k"}, row stride and offset`
    )
  }
  if (op.b.dtype === "f16") {
    need(
      bc % 2 === 0 && op.ldb % 2 === 0 && op.bOffset % 2 === 0,
      `matmul: f16 B "${op.b.name}" needs an even ${op.transB ? "k" : "n"}, row stride and offset`
    )
  }
  need(op.a !== op.c && op.b !== op.c, "matmul: C must not alias A or B")
  return op
}

/** out[t] = table[ids[t]]; a table split into row blocks runs one dispatch per block. */
export const embedding = (
  o: { table: Tensor; ids: Tensor; out: Tensor; tokens?: number; rowOffset?: number; zeroOthers?: boolean }
): Embedding => {
  const dim = o.table.shape[o.table.shape.length - 1]
  const tokens = o.tokens ?? o.ids.size
  isU32(o.ids, "embedding ids")
  atLeast(o.out, tokens * dim, "embedding out")
  return {
    kind: "embedding",
    table: o.table,
    ids: o.ids,
    out: o.out,
    tokens,
    dim,
    rowOffset: o.rowOffset ?? 0,
    zeroOthers: o.zeroOthers ?? true
  }
}

/** dTable[ids[t]] += dOut[t], deterministic; a dTable split into row blocks runs one dispatch per block. */
export const embeddingBackward = (
  o: { ids: Tensor; dOut: Tensor; dTable: Tensor; tokens?: number; rowOffset?: number }
): EmbeddingBackward => {
  const dim = o.dTable.shape[o.dTable.shape.length - 1]
  const tokens = o.tokens ?? o.ids.size
  isU32(o.ids, "embeddingBackward ids")
  atLeast(o.dOut, tokens * dim, "embeddingBackward dOut")
  return {
    kind: "embeddingBackward",
    ids: o.ids,
    dOut: o.dOut,
    dTable: o.dTable,
    tokens,
    dim,
    rowOffset: o.rowOffset ?? 0
  }
}

/** RMSNorm over the last `dim` (= weight.size) of x; per-head q/k norm is the same op with rows = tokens·heads. */
export const rmsNorm = (o: { x: Tensor; weight: Tensor; y: Tensor; rstd: Tensor; eps: number }): RmsNorm => {
  const dim = o.weight.size
  need(o.x.size % dim === 0, `rmsNorm: "${o.x.name}" (${o.x.size}) is not rows of ${dim}`)
  const rows = o.x.size / dim
  atLeast(o.y, o.x.size, "rmsNorm y")
  atLeast(o.rstd, rows, "rmsNorm rstd")
  return { kind: "rmsNorm", x: o.x, weight: o.weight, y: o.y, rstd: o.rstd, rows, dim, eps: o.eps }
}

export const rmsNormBackward = (
  o: { x: Tensor; weight: Tensor; rstd: Tensor; dy: Tensor; dx: Tensor; dWeight: Tensor; accumulate?: boolean }
): RmsNormBackward => {
  const dim = o.weight.size
  const rows = o.x.size / dim
  atLeast(o.dx, o.x.size, "rmsNormBackward dx")
  atLeast(o.dy, o.x.size, "rmsNormBackward dy")
  atLeast(o.dWeight, dim, "rmsNormBackward dWeight")
  need(o.dx !== o.dy && o.dx !== o.x, "rmsNormBackward: dx must not alias dy or x")
  return { ...o, kind: "rmsNormBackward", rows, dim, accumulate: o.accumulate ?? false }
}

/** In-place RoPE over x[tokens, heads, headDim] (HF rotate_half); `inverse` is its backward. */
export const rope = (
  o: { x: Tensor; positions: Tensor; heads: number; headDim: number; theta: number; inverse?: boolean }
): Rope => {
  need(o.headDim % 2 === 0, "rope: headDim must be even")
  const tokens = o.x.size / (o.heads * o.headDim)
  need(Number.isInteger(tokens), `rope: "${o.x.name}" is not [tokens, ${o.heads}, ${o.headDim}]`)
  isU32(o.positions, "rope positions")
  atLeast(o.positions, tokens, "rope positions")
  return { ...o, kind: "rope", tokens, inverse: o.inverse ?? false }
}

const checkAttention = (s: AttentionShape, q: Tensor, k: Tensor, v: Tensor) => {
  need(s.heads % s.kvHeads === 0, "attention: heads must be a multiple of kvHeads")
  const tokens = s.batch * s.seq
  atLeast(q, tokens * s.heads * s.headDim, "attention q")
  atLeast(k, tokens * s.kvHeads * s.headDim, "attention k")
  atLeast(v, tokens * s.kvHeads * s.headDim, "attention v")
}

const checkPositions = (s: AttentionShape, positions: Tensor | undefined) => {
  if (positions === undefined) return
  isU32(positions, "attention positions")
  atLeast(positions, s.batch * s.seq, "attention positions")
}

/** Causal GQA attention forward (saves lse); with `positions`, packed sequences do not see each other. */
export const attention = (
  o: {
    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor
    lse: Tensor
    shape: AttentionShape
    positions?: Tensor
    kernel?: "tiled" | "rows"
  }
): Attention => {
  checkAttention(o.shape, o.q, o.k, o.v)
  checkPositions(o.shape, o.positions)
  atLeast(o.lse, o.shape.batch * o.shape.seq * o.shape.heads, "attention lse")
  const tileable = o.shape.headDim % 4 === 0 && o.shape.headDim <= 128
  const kernel = o.kernel ?? (tileable ? "tiled" : "rows")
  need(kernel === "rows" || tileable, "attention: the tiled kernel needs headDim % 4 = 0 and headDim ≤ 128")
  return { ...o, kind: "attention", positions: o.positions, kernel }
}

export const attentionBackward = (
  o: Omit<AttentionBackward, "kind" | "positions" | "kernel"> & {
    readonly positions?: Tensor
    readonly kernel?: "tiled" | "rows"
  }
): AttentionBackward => {
  checkAttention(o.shape, o.q, o.k, o.v)
  checkPositions(o.shape, o.positions)
  atLeast(o.delta, o.shape.batch * o.shape.seq * o.shape.heads, "attentionBackward delta")
  const tileable = o.shape.headDim % 4 === 0 && o.shape.headDim <= 128
  const kernel = o.kernel ?? (tileable ? "tiled" : "rows")
  need(kernel === "rows" || tileable, "attentionBackward: the tiled kernels need headDim % 4 = 0 and headDim ≤ 128")
  return { ...o, kind: "attentionBackward", positions: o.positions, kernel }
}

export const swiglu = (o: { gate: Tensor; up: Tensor; out: Tensor }): Swiglu => {
  atLeast(o.up, o.gate.size, "swiglu up")
  atLeast(o.out, o.gate.size, "swiglu out")
  return { ...o, kind: "swiglu" }
}

export const swigluBackward = (o: Omit<SwigluBackward, "kind">): SwigluBackward => ({ ...o, kind: "swigluBackward" })

export const tokenLogprobs = (o: {
  logits: Tensor
  targets: Tensor
  logp: Tensor
  entropy: Tensor
  lse: Tensor
  rows: number
  vocab: number
  rowOffset?: number
  temperature?: number
}): TokenLogprobs => {
  const rowOffset = o.rowOffset ?? 0
  atLeast(o.logits, o.rows * o.vocab, "tokenLogprobs logits")
  isU32(o.targets, "tokenLogprobs targets")
  for (const t of [o.targets, o.logp, o.entropy, o.lse]) atLeast(t, rowOffset + o.rows, "tokenLogprobs")
  return {
    kind: "tokenLogprobs",
    logits: o.logits,
    targets: o.targets,
    logp: o.logp,
    entropy: o.entropy,
    lse: o.lse,
    rows: o.rows,
    vocab: o.vocab,
    rowOffset,
    invTemperature: 1 / (o.temperature ?? 1)
  }
}

export const tokenLogprobsBackward = (o: {
  logits: Tensor
  targets: Tensor
  lse: Tensor
  entropy: Tensor
  dLogp: Tensor
  dEntropy?: Tensor
  rows: number
  vocab: number
  rowOffset?: number
  temperature?: number
}): TokenLogprobsBackward => ({
  kind: "tokenLogprobsBackward",
  logits: o.logits,
  targets: o.targets,
  lse: o.lse,
  entropy: o.entropy,
  dLogp: o.dLogp,
  dEntropy: o.dEntropy,
  rows: o.rows,
  vocab: o.vocab,
  rowOffset: o.rowOffset ?? 0,
  invTemperature: 1 / (o.temperature ?? 1)
})

/** Per row of x[rows, cols]: out[outIndex + r] = scale·Σ mask·x / max(Σ mask, 1), optionally seeding dx. */
export const maskedMean = (o: {
  x: Tensor
  mask: Tensor
  out: Tensor
  outIndex?: number
  rows?: number
  scale?: number
  accumulate?: boolean
  dx?: Tensor
  gradScale?: number
}): MaskedMean => {
  const rows = o.rows ?? 1
  need(o.x.size % rows === 0, `maskedMean: "${o.x.name}" is not ${rows} rows`)
  const cols = o.x.size / rows
  atLeast(o.mask, o.x.size, "maskedMean mask")
  atLeast(o.out, (o.outIndex ?? 0) + rows, "maskedMean out")
  return {
    kind: "maskedMean",
    x: o.x,
    mask: o.mask,
    out: o.out,
    outIndex: o.outIndex ?? 0,
    rows,
    cols,
    scale: o.scale ?? 1,
    accumulate: o.accumulate ?? false,
    dx: o.dx,
    gradScale: o.gradScale ?? 1
  }
}

export const gradNorm: GradNorm = { kind: "gradNorm" }
export const adamw: AdamW = { kind: "adamw" }

/** A custom kernel as an op (see {@link Custom}). */
export const custom = (o: Omit<Custom, "kind" | "flops" | "bytes"> & { flops?: number; bytes?: number }): Custom => ({
  ...o,
  kind: "custom",
  flops: o.flops ?? 0,
  bytes: o.bytes ?? 0
})
