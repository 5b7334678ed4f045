/**
 * The Qwen3 model as arena tensors and op lists: parameters under their Hugging Face names, the training
 * forward (packed rows, per-layer activations kept), the per-token loss and the hand-written backward, and the
 * generation programs (prefill into the KV cache, decode step with the GPU sampler).
 */
import type { LoraConfig } from "../../formats/LoraConfig.js"
import {
  type Config,
  decays,
  EMBED_TOKENS,
  expectedTensors,
  FINAL_NORM,
  layerTensorNames,
  LM_HEAD
} from "../../formats/ModelConfig.js"
import * as Matmul from "../../Matmul.js"
import { grid } from "../../ops/Lowering.js"
import type { Op } from "../../ops/Ops.js"
import * as Ops from "../../ops/Ops.js"
import * as Arena from "../../runtime/Arena.js"
import type { Tensor } from "../../runtime/Arena.js"
import * as K from "./qwen3Kernels.js"
import * as L from "./qwen3Lora.js"
import * as S from "./samplingKernel.js"

/** Shape of the packed training / scoring batch: `batch` rows of `seq` tokens. */
export interface TrainShape {
  readonly batch: number
  readonly seq: number
  /** Logit rows materialised at once (default min(tokens, 256)). */
  readonly chunk: number
  /** Logprobs are of softmax(logits / temperature) (TRL's GRPO uses the sampling temperature). */
  readonly temperature: number
  /**
   * Mixed precision: the forward's linear layers and LM head read f16 copies of their weights (`w16.<name>`,
   * cast from the f32 masters at the start of every forward, so they follow each AdamW update) with this matmul
   * tier; activations, gradients, master weights and AdamW stay f32. Absent: f32 weights everywhere.
   */
  readonly half?: HalfWeights
  /** LoRA adapters on a frozen base (see `qwen3Lora.ts`); absent: every weight trains. */
  readonly lora?: LoraConfig
}

/** The matmul tier for f16 weight copies (`Matmul.chooseTier(adapter, "f16")`, minus its reason). */
export interface HalfWeights {
  readonly tier: Ops.MatmulTier
  readonly subgroupMatrix?: Ops.SubgroupMatrixShape
}

/** The f16-copy tier for this adapter: shader-f16 where offered (subgroup matrices where those are), else packed pairs. */
export const halfTier = (adapter: Matmul.TierInputs): HalfWeights => {
  const { reason: _, ...choice } = Matmul.chooseTier(adapter, "f16")
  return choice
}

/** Rows of f32 logits (the training chunk) that fit one storage binding of the adapter (or of `maxBytes`). */
export const logitRowsPerBinding = (
  c: Config,
  adapter: { readonly limits: Readonly<Record<string, number>> },
  maxBytes?: number
) => {
  const binding = Math.min(adapter.limits.maxStorageBufferBindingSize ?? 128 * 1024 * 1024, maxBytes ?? Infinity)
  return Math.max(1, Math.floor(binding / (4 * c.vocab_size)))
}

/** Prefix of the f16 weight copies. */
export const HALF = "w16"

/** The weights the forward reads through f16 copies: every linear layer and the LM head (tied or not). */
export const halfWeightNames = (c: Config): Array<string> => {
  const out: Array<string> = []
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const w = layerTensorNames(l)
    out.push(w.q, w.k, w.v, w.o, w.gate, w.up, w.down)
  }
  out.push(headName(c))
  return out
}

/** Shape of the generation state. */
export interface GenShape {
  /** Sequences decoded together (continuous-batching slots). */
  readonly slots: number
  /** KV-cache length per slot (prompt + generated tokens). */
  readonly capacity: number
  /** Prompt tokens run per prefill dispatch list. */
  readonly prefillChunk: number
  /** Decode steps encoded per submit (and rows of the token ring read back). */
  readonly stepsPerSubmit: number
  /** LoRA adapters decoded with (no dropout: generation is evaluation). */
  readonly lora?: LoraConfig
}

type Word = readonly ["u" | "f", number]
const u = (x: number): Word => ["u", x]
const f = (x: number): Word => ["f", x]
const over = (n: number, wg: number) => grid(Math.ceil(n / wg))

const dims = (c: Config) => ({
  h: c.hidden_size,
  q: c.num_attention_heads * c.head_dim,
  kv: c.num_key_value_heads * c.head_dim,
  ffn: c.intermediate_size,
  V: c.vocab_size,
  H: c.num_attention_heads,
  KV: c.num_key_value_heads,
  D: c.head_dim
})

/** Parameter specs (with gradients and AdamW state when trainable); with LoRA the adapter trains on a frozen base. */
export const parameterSpecs = (c: Config, trainable: boolean, lora?: LoraConfig): Record<string, Arena.TensorSpec> => {
  if (lora !== undefined) return L.parameterSpecs(c, lora, trainable)
  const params: Record<string, { shape: ReadonlyArray<number>; decay: boolean }> = {}
  for (const t of expectedTensors(c)) params[t.name] = { shape: t.shape, decay: decays(t.name) }
  if (trainable) return Arena.parameters(params)
  const out: Record<string, Arena.TensorSpec> = {}
  for (const [name, p] of Object.entries(params)) {
    out[`${Arena.PARAM}.${name}`] = { shape: p.shape, group: Arena.PARAM, decay: p.decay }
  }
  return out
}

/**
 * The attention block's activations of `n` rows, as training and generation both name them: raw and normed
 * projections (q, k after their per-head RMSNorm and RoPE), the per-head rstd and the attention output.
 */
const attentionActs = (c: Config, n: number): Record<string, Array<number>> => {
  const { H, KV, kv, q } = dims(c)
  return { qr: [n, q], kr: [n, kv], v: [n, kv], q: [n, q], k: [n, kv], qrs: [n * H], krs: [n * KV], att: [n, q] }
}

/** The MLP's activations of `n` rows: gate and up projections and their SwiGLU. */
const mlpActs = (c: Config, n: number): Record<string, Array<number>> => {
  const { ffn } = dims(c)
  return { gt: [n, ffn], up: [n, ffn], sw: [n, ffn] }
}

// Key order is arena layout order: the spreads keep each list in its place.
const LAYER_ACTS = (c: Config, n: number): Record<string, Array<number>> => {
  const { h, H } = dims(c)
  return {
    x: [n, h],
    n1: [n, h],
    r1: [n],
    ...attentionActs(c, n),
    lse: [n * H],
    x1: [n, h],
    n2: [n, h],
    r2: [n],
    ...mlpActs(c, n)
  }
}

/** Tensors of the training / scoring graph (prefix `t.`). */
export const trainSpecs = (c: Config, s: TrainShape, backward: boolean): Record<string, Arena.TensorSpec> => {
  const n = s.batch * s.seq
  const { ffn, h, H, kv, q, V } = dims(c)
  const out: Record<string, Arena.TensorSpec> = {}
  for (const name of ["ids", "targets", "positions"]) out[`t.${name}`] = { shape: [n], dtype: "u32" }
  for (let l = 0; l < c.num_hidden_layers; l++) {
    for (const [name, shape] of Object.entries(LAYER_ACTS(c, n))) out[`t.l${l}.${name}`] = { shape }
  }
  const rest: Record<string, Array<number>> = {
    xf: [n, h],
    n3: [n, h],
    r3: [n],
    logits: [Math.min(s.chunk, n), V],
    logp: [n],
    entropy: [n],
    tokenLse: [n]
  }
  if (backward) {
    Object.assign(rest, {
      coef: [n],
      dlogp: [n],
      dn3: [n, h],
      dres0: [n, h],
      dres1: [n, h],
      dsw: [n, ffn],
      dgt: [n, ffn],
      dup: [n, ffn],
      dn2: [n, h],
      dx1: [n, h],
      datt: [n, q],
      delta: [n * H],
      dq: [n, q],
      dk: [n, kv],
      dv: [n, kv],
      dqr: [n, q],
      dkr: [n, kv],
      dn1: [n, h]
    })
  }
  for (const [name, shape] of Object.entries(rest)) out[`t.${name}`] = { shape }
  if (s.lora !== undefined) Object.assign(out, L.trainSpecs(c, s.lora, n, backward))
  if (s.half !== undefined) {
    const shapes = new Map(expectedTensors(c).map((t) => [t.name, t.shape] as const))
    // Grouped (sharded) and split into row blocks exactly like their masters, so the casts pair block by block.
    for (const name of halfWeightNames(c)) {
      out[`${HALF}.${name}`] = {
        shape: shapes.get(name)!,
        dtype: "f16",
        group: HALF,
        blockLike: `${Arena.PARAM}.${name}`
      }
    }
  }
  return out
}

/** Tensors of generation (prefix `g.`): KV caches, sampler state, prefill and decode scratch. */
export const genSpecs = (c: Config, g: GenShape): Record<string, Arena.TensorSpec> => {
  const { D, h, KV, V } = dims(c)
  const out: Record<string, Arena.TensorSpec> = {}
  for (let l = 0; l < c.num_hidden_layers; l++) {
    out[`g.kc.l${l}`] = { shape: [g.slots, KV, g.capacity, D] }
    out[`g.vc.l${l}`] = { shape: [g.slots, KV, g.capacity, D] }
  }
  for (const [prefix, rows] of [["g.d", g.slots], ["g.p", g.prefillChunk]] as const) {
    for (const name of ["ids", "pos", "slot"]) out[`${prefix}.${name}`] = { shape: [rows], dtype: "u32" }
    const acts: Record<string, Array<number>> = {
      xa: [rows, h],
      xb: [rows, h],
      n: [rows, h],
      r: [rows],
      ...attentionActs(c, rows),
      ...mlpActs(c, rows)
    }
    for (const [name, shape] of Object.entries(acts)) out[`${prefix}.${name}`] = { shape }
  }
  out["g.logits"] = { shape: [g.slots, V] }
  out["g.w"] = { shape: [g.slots, V] }
  out["g.seen"] = { shape: [g.slots, V], dtype: "u32" }
  out["g.su"] = { shape: [g.slots, S.SLOT_U], dtype: "u32" }
  out["g.sf"] = { shape: [g.slots, S.SLOT_F] }
  out["g.outTok"] = { shape: [g.slots, g.stepsPerSubmit], dtype: "u32" }
  out["g.outLp"] = { shape: [g.slots, g.stepsPerSubmit, 2] }
  out["g.outTop"] = { shape: [g.slots, g.stepsPerSubmit, S.MAX_TOP, 2] }
  out["g.ctl"] = { shape: [4], dtype: "u32" }
  if (g.lora !== undefined) Object.assign(out, L.genSpecs(g.lora, g.slots, g.prefillChunk))
  return out
}

type Lookup = (name: string) => Tensor

const lookups = (plan: Arena.ArenaPlan) => {
  const t: Lookup = (name) => Arena.tensorOf(plan, name)
  const p: Lookup = (name) => t(`${Arena.PARAM}.${name}`)
  const g: Lookup = (name) => t(`${Arena.GRAD}.${name}`)
  return { t, p, g }
}

/** y[rows, out] (+)= x · Wᵀ */
const linear = (x: Tensor, w: Tensor, y: Tensor, rows: number, out: number, inp: number, beta = 0) =>
  Ops.matmul({ a: x, b: w, c: y, m: rows, n: out, k: inp, transB: true, beta })

/** Causal GQA over the packed batch; `t.positions` (0 at each sequence start) keeps packed sequences apart. */
const attnShape = (c: Config, s: { batch: number; seq: number }): Ops.AttentionShape => ({
  batch: s.batch,
  seq: s.seq,
  heads: c.num_attention_heads,
  kvHeads: c.num_key_value_heads,
  headDim: c.head_dim,
  scale: 1 / Math.sqrt(c.head_dim)
})

/** The weight a forward matmul reads: the f16 copy (with its tier) in mixed precision, else the f32 master. */
const forwardWeight = (plan: Arena.ArenaPlan, s: TrainShape, name: string) =>
  s.half === undefined
    ? { b: Arena.tensorOf(plan, `${Arena.PARAM}.${name}`) }
    : { b: Arena.tensorOf(plan, `${HALF}.${name}`), ...s.half }

/** Forward of the packed batch up to per-token logprobs (chunked LM head). */
export const forwardOps = (plan: Arena.ArenaPlan, c: Config, s: TrainShape): Array<Op> => {
  const { p, t } = lookups(plan)
  const { D, ffn, h, H, KV, kv, q, V } = dims(c)
  const n = s.batch * s.seq
  const eps = c.rms_norm_eps
  const ops: Array<Op> = s.half === undefined
    ? []
    : halfWeightNames(c).map((name) => Ops.cast({ x: p(name), y: t(`${HALF}.${name}`) }))
  ops.push(Ops.embedding({ table: p(EMBED_TOKENS), ids: t("t.ids"), out: t("t.l0.x") }))
  const lg = s.lora === undefined ? undefined : L.graph(c, s.lora)
  /** y[rows, out] (+)= x · Wᵀ (W through its f16 copy in mixed precision), plus W's adapter's product. */
  const linear = (x: Tensor, w: string, y: Tensor, rows: number, out: number, inp: number, beta = 0) => [
    Ops.matmul({ a: x, ...forwardWeight(plan, s, w), c: y, m: rows, n: out, k: inp, transB: true, beta }),
    ...L.forwardOps(plan, lg, w, x, y, rows)
  ]
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const w = layerTensorNames(l)
    const a = (name: string) => t(`t.l${l}.${name}`)
    const out = l + 1 < c.num_hidden_layers ? t(`t.l${l + 1}.x`) : t("t.xf")
    ops.push(
      Ops.rmsNorm({ x: a("x"), weight: p(w.inputLayernorm), y: a("n1"), rstd: a("r1"), eps }),
      ...linear(a("n1"), w.q, a("qr"), n, q, h),
      ...linear(a("n1"), w.k, a("kr"), n, kv, h),
      ...linear(a("n1"), w.v, a("v"), n, kv, h),
      Ops.rmsNorm({ x: a("qr"), weight: p(w.qNorm), y: a("q"), rstd: a("qrs"), eps }),
      Ops.rmsNorm({ x: a("kr"), weight: p(w.kNorm), y: a("k"), rstd: a("krs"), eps }),
      Ops.rope({ x: a("q"), positions: t("t.positions"), heads: H, headDim: D, theta: c.rope_theta }),
      Ops.rope({ x: a("k"), positions: t("t.positions"), heads: KV, headDim: D, theta: c.rope_theta }),
      Ops.attention({
        q: a("q"),
        k: a("k"),
        v: a("v"),
        o: a("att"),
        lse: a("lse"),
        shape: attnShape(c, s),
        positions: t("t.positions")
      }),
      Ops.axpy({ x: a("x"), y: a("x1"), beta: 0 }),
      ...linear(a("att"), w.o, a("x1"), n, h, q, 1),
      Ops.rmsNorm({ x: a("x1"), weight: p(w.postAttentionLayernorm), y: a("n2"), rstd: a("r2"), eps }),
      ...linear(a("n2"), w.gate, a("gt"), n, ffn, h),
      ...linear(a("n2"), w.up, a("up"), n, ffn, h),
      Ops.swiglu({ gate: a("gt"), up: a("up"), out: a("sw") }),
      Ops.axpy({ x: a("x1"), y: out, beta: 0 }),
      ...linear(a("sw"), w.down, out, n, h, ffn, 1)
    )
  }
  ops.push(Ops.rmsNorm({ x: t("t.xf"), weight: p(FINAL_NORM), y: t("t.n3"), rstd: t("t.r3"), eps }))
  for (const ch of chunks(n, s.chunk)) {
    ops.push(logitsOp(plan, c, s, ch), Ops.tokenLogprobs({ ...lpArgs(plan, c, s, ch), logp: t("t.logp") }))
  }
  void V
  return ops
}

const chunks = (n: number, chunk: number) => {
  const out: Array<{ row: number; rows: number }> = []
  for (let row = 0; row < n; row += chunk) out.push({ row, rows: Math.min(chunk, n - row) })
  return out
}

const headName = (c: Config) => (c.tie_word_embeddings ? EMBED_TOKENS : LM_HEAD)

const logitsOp = (plan: Arena.ArenaPlan, c: Config, s: TrainShape, ch: { row: number; rows: number }) => {
  const { t } = lookups(plan)
  return Ops.matmul({
    a: t("t.n3"),
    ...forwardWeight(plan, s, headName(c)),
    c: t("t.logits"),
    m: ch.rows,
    n: c.vocab_size,
    k: c.hidden_size,
    transB: true,
    aOffset: ch.row * c.hidden_size
  })
}

const lpArgs = (plan: Arena.ArenaPlan, c: Config, s: TrainShape, ch: { row: number; rows: number }) => {
  const { t } = lookups(plan)
  return {
    logits: t("t.logits"),
    targets: t("t.targets"),
    lse: t("t.tokenLse"),
    entropy: t("t.entropy"),
    rows: ch.rows,
    vocab: c.vocab_size,
    rowOffset: ch.row,
    temperature: s.temperature
  }
}

/** The per-token loss (mode and hyper-parameters from step.scalars) seeding dlogp. */
export const lossOps = (plan: Arena.ArenaPlan, s: TrainShape): Array<Op> => {
  const { t } = lookups(plan)
  return [
    Ops.custom({
      label: "token_loss",
      code: K.tokenLoss,
      bindings: [
        t("t.logp"),
        t("t.coef"),
        t("t.dlogp"),
        t(Arena.STEP_RESULTS)
      ],
      params: [u(s.batch * s.seq)],
      groups: [1, 1, 1]
    })
  ]
}

/** Hand-written backward of the whole model, accumulating into the grad group. */
export const backwardOps = (plan: Arena.ArenaPlan, c: Config, s: TrainShape): Array<Op> => {
  const { p, t } = lookups(plan)
  const { D, ffn, h, H, KV, kv, q, V } = dims(c)
  const n = s.batch * s.seq
  const head = headName(c)
  const lg = s.lora === undefined ? undefined : L.graph(c, s.lora)
  // With LoRA the base is frozen: its norm weights' gradient terms fall into a sink, its matrices get none.
  const g: Lookup = lg === undefined ? lookups(plan).g : () => t("t.lora.sink")
  const ops: Array<Op> = []
  chunks(n, s.chunk).reverse().forEach((ch, i) => {
    if (i > 0) ops.push(logitsOp(plan, c, s, ch))
    ops.push(Ops.tokenLogprobsBackward({ ...lpArgs(plan, c, s, ch), dLogp: t("t.dlogp") }))
    if (lg === undefined) {
      ops.push(Ops.matmul({
        a: t("t.logits"),
        b: t("t.n3"),
        c: g(head),
        m: V,
        n: h,
        k: ch.rows,
        transA: true,
        beta: 1,
        bOffset: ch.row * h
      }))
    }
    ops.push(
      Ops.matmul({ a: t("t.logits"), b: p(head), c: t("t.dn3"), m: ch.rows, n: h, k: V, cOffset: ch.row * h })
    )
  })
  const dres = (i: number) => t(`t.dres${i % 2}`)
  ops.push(Ops.rmsNormBackward({
    x: t("t.xf"),
    weight: p(FINAL_NORM),
    rstd: t("t.r3"),
    dy: t("t.dn3"),
    dx: dres(0),
    dWeight: g(FINAL_NORM)
  }))
  /** dx (+)= dy · W ; dW += dyᵀ · x, or with LoRA (W frozen) the adapter's gradients and its share of dx. */
  const linearBack = (x: Tensor, w: string, dy: Tensor, dx: Tensor, out: number, inp: number, beta = 0) => [
    Ops.matmul({ a: dy, b: p(w), c: dx, m: n, n: inp, k: out, beta }),
    ...(lg === undefined
      ? [Ops.matmul({ a: dy, b: x, c: g(w), m: out, n: inp, k: n, transA: true, beta: 1 })]
      : L.backwardOps(plan, lg, w, x, dy, dx, n))
  ]
  const d = (name: string) => t(`t.${name}`)
  for (let l = c.num_hidden_layers - 1; l >= 0; l--) {
    const w = layerTensorNames(l)
    const a = (name: string) => t(`t.l${l}.${name}`)
    const dOut = dres(c.num_hidden_layers - 1 - l)
    const dIn = dres(c.num_hidden_layers - l)
    const shape = attnShape(c, s)
    ops.push(
      ...linearBack(a("sw"), w.down, dOut, d("dsw"), h, ffn),
      Ops.swigluBackward({ gate: a("gt"), up: a("up"), dOut: d("dsw"), dGate: d("dgt"), dUp: d("dup") }),
      ...linearBack(a("n2"), w.gate, d("dgt"), d("dn2"), ffn, h),
      ...linearBack(a("n2"), w.up, d("dup"), d("dn2"), ffn, h, 1),
      Ops.axpy({ x: dOut, y: d("dx1"), beta: 0 }),
      Ops.rmsNormBackward({
        x: a("x1"),
        weight: p(w.postAttentionLayernorm),
        rstd: a("r2"),
        dy: d("dn2"),
        dx: d("dx1"),
        dWeight: g(w.postAttentionLayernorm),
        accumulate: true
      }),
      ...linearBack(a("att"), w.o, d("dx1"), d("datt"), h, q),
      Ops.axpy({ x: d("dx1"), y: dIn, beta: 0 }),
      Ops.attentionBackward({
        q: a("q"),
        k: a("k"),
        v: a("v"),
        o: a("att"),
        lse: a("lse"),
        dO: d("datt"),
        delta: d("delta"),
        dq: d("dq"),
        dk: d("dk"),
        dv: d("dv"),
        shape,
        positions: t("t.positions")
      }),
      Ops.rope({
        x: d("dq"),
        positions: t("t.positions"),
        heads: H,
        headDim: D,
        theta: c.rope_theta,
        inverse: true
      }),
      Ops.rope({
        x: d("dk"),
        positions: t("t.positions"),
        heads: KV,
        headDim: D,
        theta: c.rope_theta,
        inverse: true
      }),
      Ops.rmsNormBackward({
        x: a("qr"),
        weight: p(w.qNorm),
        rstd: a("qrs"),
        dy: d("dq"),
        dx: d("dqr"),
        dWeight: g(w.qNorm)
      }),
      Ops.rmsNormBackward({
        x: a("kr"),
        weight: p(w.kNorm),
        rstd: a("krs"),
        dy: d("dk"),
        dx: d("dkr"),
        dWeight: g(w.kNorm)
      }),
      ...linearBack(a("n1"), w.q, d("dqr"), d("dn1"), q, h),
      ...linearBack(a("n1"), w.k, d("dkr"), d("dn1"), kv, h, 1),
      ...linearBack(a("n1"), w.v, d("dv"), d("dn1"), kv, h, 1),
      Ops.rmsNormBackward({
        x: a("x"),
        weight: p(w.inputLayernorm),
        rstd: a("r1"),
        dy: d("dn1"),
        dx: dIn,
        dWeight: g(w.inputLayernorm),
        accumulate: true
      })
    )
  }
  if (lg === undefined) {
    ops.push(Ops.embeddingBackward({ ids: t("t.ids"), dOut: dres(c.num_hidden_layers), dTable: g(EMBED_TOKENS) }))
  }
  return ops
}

/**
 * The decoder stack over generation rows (`g.d` decode rows or `g.p` prefill rows): each layer appends its k/v to
 * the rows' slots in the cache and attends to the cache. With `kvOnly`, the last layer stops after its cache
 * write (a prefill needs no hidden state out). Leaves the last hidden state in `${prefix}.xa`.
 */
const genStack = (plan: Arena.ArenaPlan, c: Config, gs: GenShape, prefix: "g.d" | "g.p", kvOnly: boolean) => {
  const { p, t } = lookups(plan)
  const { D, ffn, h, H, KV, kv, q } = dims(c)
  const rows = prefix === "g.d" ? gs.slots : gs.prefillChunk
  const eps = c.rms_norm_eps
  const a = (name: string) => t(`${prefix}.${name}`)
  const lg = gs.lora === undefined ? undefined : L.graph(c, gs.lora)
  /** y (+)= x · Wᵀ plus W's adapter's product (x·Aᵀ in the rows' scratch). */
  const proj = (x: Tensor, w: string, y: Tensor, out: number, inp: number, beta = 0) => [
    linear(x, p(w), y, rows, out, inp, beta),
    ...(lg === undefined ? [] : L.forwardOps(plan, lg, w, x, y, rows, a("lu")))
  ]
  const ops: Array<Op> = [Ops.embedding({ table: p(EMBED_TOKENS), ids: a("ids"), out: a("xa") })]
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const w = layerTensorNames(l)
    ops.push(
      Ops.rmsNorm({ x: a("xa"), weight: p(w.inputLayernorm), y: a("n"), rstd: a("r"), eps }),
      ...proj(a("n"), w.k, a("kr"), kv, h),
      ...proj(a("n"), w.v, a("v"), kv, h),
      Ops.rmsNorm({ x: a("kr"), weight: p(w.kNorm), y: a("k"), rstd: a("krs"), eps }),
      Ops.rope({ x: a("k"), positions: a("pos"), heads: KV, headDim: D, theta: c.rope_theta }),
      Ops.custom({
        label: "kv_write",
        code: K.kvWrite,
        bindings: [a("k"), a("v"), a("slot"), a("pos"), t(`g.kc.l${l}`), t(`g.vc.l${l}`)],
        params: [u(rows), u(KV), u(gs.capacity), u(D)],
        groups: over(rows * kv, 256)
      })
    )
    if (kvOnly && l === c.num_hidden_layers - 1) break
    ops.push(
      ...proj(a("n"), w.q, a("qr"), q, h),
      Ops.rmsNorm({ x: a("qr"), weight: p(w.qNorm), y: a("q"), rstd: a("qrs"), eps }),
      Ops.rope({ x: a("q"), positions: a("pos"), heads: H, headDim: D, theta: c.rope_theta }),
      Ops.custom({
        label: `cache_attention_hd${D}`,
        code: K.cacheAttention(D),
        bindings: [a("q"), t(`g.kc.l${l}`), t(`g.vc.l${l}`), a("slot"), a("pos"), a("att")],
        params: [u(rows), u(H), u(KV), u(gs.capacity), f(1 / Math.sqrt(D))],
        groups: over(rows * H, 64)
      }),
      Ops.axpy({ x: a("xa"), y: a("xb"), beta: 0 }),
      ...proj(a("att"), w.o, a("xb"), h, q, 1),
      Ops.rmsNorm({ x: a("xb"), weight: p(w.postAttentionLayernorm), y: a("n"), rstd: a("r"), eps }),
      ...proj(a("n"), w.gate, a("gt"), ffn, h),
      ...proj(a("n"), w.up, a("up"), ffn, h),
      Ops.swiglu({ gate: a("gt"), up: a("up"), out: a("sw") }),
      Ops.axpy({ x: a("xb"), y: a("xa"), beta: 0 }),
      ...proj(a("sw"), w.down, a("xa"), h, ffn, 1)
    )
  }
  return ops
}

/** Prefill: run `g.p` rows (prompt tokens at their slots and positions) through the stack into the caches. */
export const prefillOps = (plan: Arena.ArenaPlan, c: Config, gs: GenShape): Array<Op> =>
  genStack(plan, c, gs, "g.p", true)

/** One decode step of every slot: stack, final norm, logits, GPU sampler, ring advance. */
export const decodeOps = (plan: Arena.ArenaPlan, c: Config, gs: GenShape): Array<Op> => {
  const { p, t } = lookups(plan)
  return [
    ...genStack(plan, c, gs, "g.d", false),
    Ops.rmsNorm({ x: t("g.d.xa"), weight: p(FINAL_NORM), y: t("g.d.n"), rstd: t("g.d.r"), eps: c.rms_norm_eps }),
    linear(t("g.d.n"), p(headName(c)), t("g.logits"), gs.slots, c.vocab_size, c.hidden_size),
    Ops.custom({
      label: "sampler",
      code: S.sampler,
      bindings: [
        t("g.logits"),
        t("g.su"),
        t("g.sf"),
        t("g.seen"),
        t("g.w"),
        t("g.d.ids"),
        t("g.d.pos"),
        t("g.outTok"),
        t("g.outLp"),
        t("g.outTop"),
        t("g.ctl")
      ],
      params: [u(gs.slots), u(c.vocab_size), u(gs.stepsPerSubmit)],
      groups: [gs.slots, 1, 1]
    }),
    Ops.custom({
      label: "ring_advance",
      code: K.ringAdvance,
      bindings: [t("g.ctl")],
      params: [u(0)],
      groups: [1, 1, 1]
    })
  ]
}
