/**
 * LoRA on the WebGPU Qwen3 model: arena tensors and op lists for adapters on a frozen base. An adapted projection
 * adds `scaling · (dropout(x)·Aᵀ)·Bᵀ` to its base product (two skinny matmuls on the shared matmul kernels); its
 * backward forms dB, dA and the input's gradient through the adapter (three matmuls, plus the dropout mask). The
 * base weights stay under their `param.<name>` names but in the {@link FROZEN} group, so the gradient, AdamW and
 * gradient-norm sweeps (which run over the "param"/"grad"/"adam.*" groups) only ever see the adapter tensors.
 * Dropout masks are `Qwen3Reference.dropoutMask`'s (Philox4x32-10, key [seed, 0xd20f]), drawn on the device from
 * the micro-batch's seed in `t.lora.seed` ([on, seed]: off when scoring, as the reference without a seed).
 */
import { type AdaptedProjection, adaptedProjections, type LoraConfig, scaling } from "../../formats/LoraConfig.js"
import { type Config, decays, expectedTensors } from "../../formats/ModelConfig.js"
import { grid } from "../../ops/Lowering.js"
import type { Op } from "../../ops/Ops.js"
import * as Ops from "../../ops/Ops.js"
import { builtins, header, linear } from "../../ops/Wgsl.js"
import * as Arena from "../../runtime/Arena.js"
import type { Tensor } from "../../runtime/Arena.js"
import { PHILOX } from "./samplingKernel.js"

/** The group of the frozen base weights (no gradient, no optimizer moments, never written after loading). */
export const FROZEN = "frozen"
/** The micro-batch's dropout switch and seed: u32 [on, seed]. */
export const SEED = "t.lora.seed"

/** An adapted projection as the graph uses it: its position in `adaptedProjections` (the dropout stream) and dims. */
interface Adapted {
  readonly index: number
  readonly projection: AdaptedProjection
  readonly inDim: number
  readonly outDim: number
}

/** The adapted projections of a model, by the base tensor they adapt. */
export const adaptedByBase = (c: Config, lora: LoraConfig): ReadonlyMap<string, Adapted> =>
  new Map(
    adaptedProjections(c, lora).map((projection, index) => [projection.base, {
      index,
      projection,
      inDim: projection.a.shape[1],
      outDim: projection.b.shape[0]
    }])
  )

/**
 * Why a LoRA config cannot run (rank, dropout range, known targets), or undefined. The trainer decodes PEFT
 * configs already; this guards direct callers of the model.
 */
export const problemOf = (lora: LoraConfig): string | undefined => {
  if (!Number.isInteger(lora.r) || lora.r < 1) return `LoRA rank r = ${lora.r}: use a positive integer.`
  if (!(lora.dropout >= 0 && lora.dropout < 1)) return `LoRA dropout ${lora.dropout}: use a probability in [0, 1).`
  if (!Number.isFinite(lora.alpha)) return `LoRA alpha ${lora.alpha}: use a finite number.`
  if (lora.targetModules.length === 0) return "LoRA targets no module: name some of q_proj … down_proj."
  return undefined
}

/**
 * The parameters of a LoRA model: the base under `param.<name>` in the frozen group, and the adapter tensors as the
 * trained parameter group (with gradients and AdamW moments when trainable; weight decay as `decays` says).
 */
export const parameterSpecs = (c: Config, lora: LoraConfig, trainable: boolean): Record<string, Arena.TensorSpec> => {
  const out: Record<string, Arena.TensorSpec> = {}
  for (const t of expectedTensors(c)) out[`${Arena.PARAM}.${t.name}`] = { shape: t.shape, group: FROZEN }
  const adapters: Record<string, { shape: ReadonlyArray<number>; decay: boolean }> = {}
  for (const p of adaptedProjections(c, lora)) {
    for (const spec of [p.a, p.b]) adapters[spec.name] = { shape: spec.shape, decay: decays(spec.name) }
  }
  if (trainable) return { ...out, ...Arena.parameters(adapters) }
  for (const [name, p] of Object.entries(adapters)) {
    out[`${Arena.PARAM}.${name}`] = { shape: p.shape, group: Arena.PARAM, decay: p.decay }
  }
  return out
}

const uName = (a: Adapted) => `t.lora.${a.index}.u`
/** dropout(x) of the projection at hand, forward and backward (redrawn from the seed rather than kept per layer). */
const DROPPED = "t.lora.xd"

/**
 * The training graph's LoRA tensors: the seed, per adapted projection x·Aᵀ [n, r]; with dropout one scratch
 * [n, widest input] for the dropped-out input (and in the backward the input's gradient before the mask); for the
 * backward, du [n, r] and a sink for the frozen norm weights' gradient terms.
 */
export const trainSpecs = (
  c: Config,
  lora: LoraConfig,
  n: number,
  backward: boolean
): Record<string, Arena.TensorSpec> => {
  const out: Record<string, Arena.TensorSpec> = { [SEED]: { shape: [2], dtype: "u32" } }
  let widest = 1
  for (const a of adaptedByBase(c, lora).values()) {
    out[uName(a)] = { shape: [n, lora.r] }
    widest = Math.max(widest, a.inDim)
  }
  if (lora.dropout > 0) out[DROPPED] = { shape: [n, widest] }
  if (backward) {
    out["t.lora.du"] = { shape: [n, lora.r] }
    out["t.lora.sink"] = { shape: [Math.max(c.hidden_size, c.head_dim)] }
  }
  return out
}

/** Generation's LoRA scratch: x·Aᵀ of the decode and prefill rows. */
export const genSpecs = (lora: LoraConfig, slots: number, prefillRows: number): Record<string, Arena.TensorSpec> => ({
  "g.d.lu": { shape: [slots, lora.r] },
  "g.p.lu": { shape: [prefillRows, lora.r] }
})

/**
 * Inverted dropout with `Qwen3Reference.dropoutMask`'s mask, one thread per Philox block of 4 elements:
 * Y = mask·keep·X (acc = 0) or Y += mask·keep·X (acc = 1). With Seed[0] = 0 the mask is all ones and keep 1.
 */
const dropoutKernel = header("n: u32, index: u32, threshold: u32, keep: f32, acc: u32", [
  ["X", "read"],
  ["Y", "read_write"],
  ["Seed", "read", "u32"]
]) + `
${PHILOX}
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  let first = i * 4u;
  if (first >= p.n) { return; }
  let on = Seed[0] != 0u;
  var r = vec4u(0xffffffffu);
  if (on) { r = philox(vec4u(p.index, i, 0u, 0u), vec2u(Seed[1], 0xd20fu)); }
  for (var c = 0u; c < 4u; c++) {
    let j = first + c;
    if (j >= p.n) { break; }
    var v = X[j];
    if (on) { v = select(0.0, v * p.keep, r[c] >= p.threshold); }
    if (p.acc != 0u) { v += Y[j]; }
    Y[j] = v;
  }
}`

const dropoutOp = (
  plan: Arena.ArenaPlan,
  lora: LoraConfig,
  a: Adapted,
  x: Tensor,
  y: Tensor,
  n: number,
  acc: boolean
) =>
  Ops.custom({
    label: "lora_dropout",
    code: dropoutKernel,
    bindings: [x, y, Arena.tensorOf(plan, SEED)],
    params: [
      ["u", n],
      ["u", a.index],
      // u ≥ p·2³² (the reference's test on the real number) is u ≥ ⌈p·2³²⌉ for an integer u.
      ["u", Math.min(Math.ceil(lora.dropout * 4294967296), 0xffffffff)],
      ["f", Math.fround(1 / (1 - lora.dropout))],
      ["u", acc ? 1 : 0]
    ],
    groups: grid(Math.ceil(n / 4 / 256)),
    bytes: 12 * n
  })

/** What a graph needs to add adapters to its projections. */
export interface LoraGraph {
  readonly config: LoraConfig
  readonly scaling: number
  readonly byBase: ReadonlyMap<string, Adapted>
}

/** The graph view of a LoRA config on a model. */
export const graph = (c: Config, lora: LoraConfig): LoraGraph => ({
  config: lora,
  scaling: scaling(lora),
  byBase: adaptedByBase(c, lora)
})

const adapterTensors = (plan: Arena.ArenaPlan, a: Adapted) => ({
  A: Arena.tensorOf(plan, `${Arena.PARAM}.${a.projection.a.name}`),
  B: Arena.tensorOf(plan, `${Arena.PARAM}.${a.projection.b.name}`)
})

/**
 * After `y (+)= x·Wᵀ` of base tensor `base` over `rows` rows: `y += scaling·(dropout(x)·Aᵀ)·Bᵀ` (nothing when the
 * base is not adapted). `u` holds x·Aᵀ (per projection in training, kept for the backward; `scratchU` in
 * generation, which has no dropout).
 */
export const forwardOps = (
  plan: Arena.ArenaPlan,
  lg: LoraGraph | undefined,
  base: string,
  x: Tensor,
  y: Tensor,
  rows: number,
  scratchU?: Tensor
): Array<Op> => {
  const a = lg?.byBase.get(base)
  if (lg === undefined || a === undefined) return []
  const { A, B } = adapterTensors(plan, a)
  const r = lg.config.r
  const u = scratchU ?? Arena.tensorOf(plan, uName(a))
  const ops: Array<Op> = []
  let input = x
  if (scratchU === undefined && lg.config.dropout > 0) {
    input = Arena.tensorOf(plan, DROPPED)
    ops.push(dropoutOp(plan, lg.config, a, x, input, rows * a.inDim, false))
  }
  ops.push(
    Ops.matmul({ a: input, b: A, c: u, m: rows, n: r, k: a.inDim, transB: true }),
    Ops.matmul({ a: u, b: B, c: y, m: rows, n: a.outDim, k: r, transB: true, alpha: lg.scaling, beta: 1 })
  )
  return ops
}

/**
 * After the base's `dx (+)= dy·W` of an adapted projection: dB += s·dyᵀ·u, du = s·dy·B, dA += duᵀ·dropout(x), and
 * dx += dropout-mask(du·A). `x` is the projection's input as the forward saw it; with dropout, dropout(x) is drawn
 * again from the same seed (one elementwise pass instead of keeping [n, in] per projection).
 */
export const backwardOps = (
  plan: Arena.ArenaPlan,
  lg: LoraGraph | undefined,
  base: string,
  x: Tensor,
  dy: Tensor,
  dx: Tensor,
  rows: number
): Array<Op> => {
  const a = lg?.byBase.get(base)
  if (lg === undefined || a === undefined) return []
  const t = (name: string) => Arena.tensorOf(plan, name)
  const g = (name: string) => t(`${Arena.GRAD}.${name}`)
  const { A, B } = adapterTensors(plan, a)
  const r = lg.config.r
  const s = lg.scaling
  const du = t("t.lora.du")
  const dropout = lg.config.dropout > 0
  const input = dropout ? t(DROPPED) : x
  const ops: Array<Op> = [
    ...(dropout ? [dropoutOp(plan, lg.config, a, x, input, rows * a.inDim, false)] : []),
    Ops.matmul({
      a: dy,
      b: t(uName(a)),
      c: g(a.projection.b.name),
      m: a.outDim,
      n: r,
      k: rows,
      transA: true,
      alpha: s,
      beta: 1
    }),
    Ops.matmul({ a: dy, b: B, c: du, m: rows, n: r, k: a.outDim, alpha: s }),
    Ops.matmul({ a: du, b: input, c: g(a.projection.a.name), m: r, n: a.inDim, k: rows, transA: true, beta: 1 })
  ]
  if (!dropout) {
    ops.push(Ops.matmul({ a: du, b: A, c: dx, m: rows, n: a.inDim, k: r, beta: 1 }))
    return ops
  }
  // dA has read dropout(x): the scratch now takes du·A before its mask.
  const scratch = input
  ops.push(
    Ops.matmul({ a: du, b: A, c: scratch, m: rows, n: a.inDim, k: r }),
    dropoutOp(plan, lg.config, a, scratch, dx, rows * a.inDim, true)
  )
  return ops
}
