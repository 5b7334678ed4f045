/**
 * A one-block Qwen3-style language model assembled from `Ops`: embedding, RMSNorm, q/k/v projections with
 * per-head q/k RMSNorm and RoPE, causal GQA attention, output projection with residual, RMSNorm, SwiGLU MLP
 * with residual, final norm, chunked LM head with token logprobs, and a masked-mean NLL loss — then the
 * hand-written backward of each of those in reverse. It is the worked example of how a model is assembled
 * and recorded into a `StepProgram` (the Qwen3 model repeats the block per layer), and the small stack the
 * tests and benchmarks train.
 *
 * Weights use the HF layout ([out, in], y = x·Wᵀ), so forward projections are NT matmuls, input gradients NN
 * (dx = dy·W) and weight gradients TN (dW += dyᵀ·x). Logits exist for at most `chunk` rows at a time.
 *
 * @example
 * ```ts
 * const cfg = TinyTransformer.config({ vocab: 64, dim: 32, batch: 2, seq: 8 })
 * const plan = Arena.plan(TinyTransformer.specs(cfg))
 * const arena = yield* Arena.allocate(plan)
 * const h = Arena.host(plan)
 * TinyTransformer.init(h, cfg, 1)
 * arena.upload(h)
 * const program = yield* StepProgram.make(arena, { microBatch: TinyTransformer.ops(plan, cfg) })
 * ```
 *
 * @since 0.0.0
 */
import type { Op } from "../ops/Ops.js"
import * as Ops from "../ops/Ops.js"
import * as Arena from "../runtime/Arena.js"

/** The tiny transformer's sizes. */
export interface TinyTransformerConfig {
  readonly vocab: number
  readonly dim: number
  readonly heads: number
  readonly kvHeads: number
  readonly headDim: number
  readonly ffn: number
  readonly batch: number
  readonly seq: number
  /** Logit rows materialised at once. */
  readonly chunk: number
  readonly eps: number
  readonly theta: number
  readonly temperature: number
  /** Share the embedding matrix with the LM head (Qwen3-0.6B does). */
  readonly tie: boolean
  /** Micro-batches per step (the loss gradient is divided by it). */
  readonly microBatches: number
}

/** Fills in defaults: 4 heads, 2 kv heads, headDim = dim/heads, ffn = 2·dim, one chunk of every token. */
export const config = (
  c: Partial<TinyTransformerConfig> & Pick<TinyTransformerConfig, "vocab" | "dim" | "batch" | "seq">
): TinyTransformerConfig => {
  const heads = c.heads ?? 4
  return {
    heads,
    kvHeads: c.kvHeads ?? 2,
    headDim: c.headDim ?? c.dim / heads,
    ffn: c.ffn ?? 2 * c.dim,
    chunk: c.chunk ?? c.batch * c.seq,
    eps: c.eps ?? 1e-6,
    theta: c.theta ?? 10000,
    temperature: c.temperature ?? 1,
    tie: c.tie ?? false,
    microBatches: c.microBatches ?? 1,
    ...c
  }
}

/** Parameter shapes (HF layout). */
export const parameterShapes = (c: TinyTransformerConfig) => {
  const q = c.heads * c.headDim
  const kv = c.kvHeads * c.headDim
  const shapes: Record<string, { shape: Array<number>; decay: boolean }> = {
    embed: { shape: [c.vocab, c.dim], decay: false },
    attnNorm: { shape: [c.dim], decay: false },
    wq: { shape: [q, c.dim], decay: true },
    wk: { shape: [kv, c.dim], decay: true },
    wv: { shape: [kv, c.dim], decay: true },
    qNorm: { shape: [c.headDim], decay: false },
    kNorm: { shape: [c.headDim], decay: false },
    wo: { shape: [c.dim, q], decay: true },
    mlpNorm: { shape: [c.dim], decay: false },
    wg: { shape: [c.ffn, c.dim], decay: true },
    wu: { shape: [c.ffn, c.dim], decay: true },
    wd: { shape: [c.dim, c.ffn], decay: true },
    finalNorm: { shape: [c.dim], decay: false }
  }
  if (!c.tie) shapes.lmHead = { shape: [c.vocab, c.dim], decay: true }
  return shapes
}

/** Every tensor: parameters with gradients and Adam state, inputs, activations, activation gradients. */
export const specs = (c: TinyTransformerConfig): Record<string, Arena.TensorSpec> => {
  const n = c.batch * c.seq
  const q = c.heads * c.headDim
  const kv = c.kvHeads * c.headDim
  const act: Record<string, Array<number>> = {
    x0: [n, c.dim],
    n1: [n, c.dim],
    r1: [n],
    qr: [n, q],
    kr: [n, kv],
    v: [n, kv],
    q: [n, q],
    qrs: [n * c.heads],
    k: [n, kv],
    krs: [n * c.kvHeads],
    att: [n, q],
    lse: [n * c.heads],
    x1: [n, c.dim],
    n2: [n, c.dim],
    r2: [n],
    gt: [n, c.ffn],
    up: [n, c.ffn],
    sw: [n, c.ffn],
    x2: [n, c.dim],
    n3: [n, c.dim],
    r3: [n],
    logits: [Math.min(c.chunk, n), c.vocab],
    logp: [n],
    entropy: [n],
    tokenLse: [n],
    mask: [n],
    dlogp: [n],
    dn3: [n, c.dim],
    dx2: [n, c.dim],
    dsw: [n, c.ffn],
    dgt: [n, c.ffn],
    dup: [n, c.ffn],
    dn2: [n, c.dim],
    dx1: [n, c.dim],
    datt: [n, q],
    delta: [n * c.heads],
    dq: [n, q],
    dk: [n, kv],
    dv: [n, kv],
    dqr: [n, q],
    dkr: [n, kv],
    dn1: [n, c.dim],
    dx0: [n, c.dim]
  }
  const out: Record<string, Arena.TensorSpec> = { ...Arena.parameters(parameterShapes(c)) }
  for (const name of ["ids", "targets", "positions"]) out[name] = { shape: [n], dtype: "u32" }
  for (const [name, shape] of Object.entries(act)) out[name] = { shape }
  return out
}

/** Random weights uniform in ±1/sqrt(fan-in) (the embedding too, so tied logits start near zero), unit norms. */
export const init = (h: Arena.HostArena, c: TinyTransformerConfig, seed: number) => {
  let s = seed >>> 0 || 1
  const rand = () => {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    return ((s >>> 0) / 0xffffffff) * 2 - 1
  }
  for (const [name, p] of Object.entries(parameterShapes(c))) {
    const t = h.f32(`param.${name}`)
    if (p.shape.length === 1) t.fill(1)
    else for (let i = 0; i < t.length; i++) t[i] = rand() / Math.sqrt(p.shape[1])
  }
}

/** Forward, loss (→ step.results[0]) and backward of one micro-batch, in dispatch order. */
export const ops = (plan: Arena.ArenaPlan, c: TinyTransformerConfig): ReadonlyArray<Op> => {
  const t = (name: string) => Arena.tensorOf(plan, name)
  const p = (name: string) => t(`param.${name}`)
  const g = (name: string) => t(`grad.${name}`)
  const lmHead = c.tie ? "embed" : "lmHead"
  const n = c.batch * c.seq
  const q = c.heads * c.headDim
  const kv = c.kvHeads * c.headDim
  const shape = {
    batch: c.batch,
    seq: c.seq,
    heads: c.heads,
    kvHeads: c.kvHeads,
    headDim: c.headDim,
    scale: 1 / Math.sqrt(c.headDim)
  }
  /** y[n, out] = x · Wᵀ */
  const linear = (x: string, w: string, y: string, out: number, inp: number, beta = 0) =>
    Ops.matmul({ a: t(x), b: p(w), c: t(y), m: n, n: out, k: inp, transB: true, beta })
  /** dx (+)= dy · W ; dW += dyᵀ · x */
  const linearBack = (x: string, w: string, dy: string, dx: string, out: number, inp: number, beta = 0) => [
    Ops.matmul({ a: t(dy), b: p(w), c: t(dx), m: n, n: inp, k: out, beta }),
    Ops.matmul({ a: t(dy), b: t(x), c: g(w), m: out, n: inp, k: n, transA: true, beta: 1 })
  ]
  const chunks: Array<{ row: number; rows: number }> = []
  for (let row = 0; row < n; row += c.chunk) chunks.push({ row, rows: Math.min(c.chunk, n - row) })
  const lp = (ch: { row: number; rows: number }) => ({
    logits: t("logits"),
    targets: t("targets"),
    lse: t("tokenLse"),
    entropy: t("entropy"),
    rows: ch.rows,
    vocab: c.vocab,
    rowOffset: ch.row,
    temperature: c.temperature
  })
  const logits = (ch: { row: number; rows: number }) =>
    Ops.matmul({
      a: t("n3"),
      b: p(lmHead),
      c: t("logits"),
      m: ch.rows,
      n: c.vocab,
      k: c.dim,
      transB: true,
      aOffset: ch.row * c.dim
    })

  const forward: Array<Op> = [
    Ops.embedding({ table: p("embed"), ids: t("ids"), out: t("x0") }),
    Ops.rmsNorm({ x: t("x0"), weight: p("attnNorm"), y: t("n1"), rstd: t("r1"), eps: c.eps }),
    linear("n1", "wq", "qr", q, c.dim),
    linear("n1", "wk", "kr", kv, c.dim),
    linear("n1", "wv", "v", kv, c.dim),
    Ops.rmsNorm({ x: t("qr"), weight: p("qNorm"), y: t("q"), rstd: t("qrs"), eps: c.eps }),
    Ops.rmsNorm({ x: t("kr"), weight: p("kNorm"), y: t("k"), rstd: t("krs"), eps: c.eps }),
    Ops.rope({ x: t("q"), positions: t("positions"), heads: c.heads, headDim: c.headDim, theta: c.theta }),
    Ops.rope({ x: t("k"), positions: t("positions"), heads: c.kvHeads, headDim: c.headDim, theta: c.theta }),
    Ops.attention({ q: t("q"), k: t("k"), v: t("v"), o: t("att"), lse: t("lse"), shape, positions: t("positions") }),
    Ops.axpy({ x: t("x0"), y: t("x1"), beta: 0 }),
    linear("att", "wo", "x1", c.dim, q, 1),
    Ops.rmsNorm({ x: t("x1"), weight: p("mlpNorm"), y: t("n2"), rstd: t("r2"), eps: c.eps }),
    linear("n2", "wg", "gt", c.ffn, c.dim),
    linear("n2", "wu", "up", c.ffn, c.dim),
    Ops.swiglu({ gate: t("gt"), up: t("up"), out: t("sw") }),
    Ops.axpy({ x: t("x1"), y: t("x2"), beta: 0 }),
    linear("sw", "wd", "x2", c.dim, c.ffn, 1),
    Ops.rmsNorm({ x: t("x2"), weight: p("finalNorm"), y: t("n3"), rstd: t("r3"), eps: c.eps }),
    ...chunks.flatMap((ch) => [logits(ch), Ops.tokenLogprobs({ ...lp(ch), logp: t("logp") })]),
    // loss = −Σ mask·logp / Σ mask; its gradient seeds dlogp (divided over micro-batches).
    Ops.maskedMean({
      x: t("logp"),
      mask: t("mask"),
      out: t(Arena.STEP_RESULTS),
      outIndex: Arena.Result.loss,
      scale: -1 / c.microBatches,
      accumulate: true,
      dx: t("dlogp")
    })
  ]
  const backward: Array<Op> = [
    // Chunks in reverse: the last chunk's logits are still in place, earlier ones are recomputed.
    ...chunks.slice().reverse().flatMap((ch, i) => [
      ...(i === 0 ? [] : [logits(ch)]),
      Ops.tokenLogprobsBackward({ ...lp(ch), dLogp: t("dlogp") }),
      Ops.matmul({
        a: t("logits"),
        b: t("n3"),
        c: g(lmHead),
        m: c.vocab,
        n: c.dim,
        k: ch.rows,
        transA: true,
        beta: 1,
        bOffset: ch.row * c.dim
      }),
      Ops.matmul({
        a: t("logits"),
        b: p(lmHead),
        c: t("dn3"),
        m: ch.rows,
        n: c.dim,
        k: c.vocab,
        cOffset: ch.row * c.dim
      })
    ]),
    Ops.rmsNormBackward({
      x: t("x2"),
      weight: p("finalNorm"),
      rstd: t("r3"),
      dy: t("dn3"),
      dx: t("dx2"),
      dWeight: g("finalNorm")
    }),
    ...linearBack("sw", "wd", "dx2", "dsw", c.dim, c.ffn),
    Ops.swigluBackward({ gate: t("gt"), up: t("up"), dOut: t("dsw"), dGate: t("dgt"), dUp: t("dup") }),
    ...linearBack("n2", "wg", "dgt", "dn2", c.ffn, c.dim),
    ...linearBack("n2", "wu", "dup", "dn2", c.ffn, c.dim, 1),
    Ops.axpy({ x: t("dx2"), y: t("dx1"), beta: 0 }),
    Ops.rmsNormBackward({
      x: t("x1"),
      weight: p("mlpNorm"),
      rstd: t("r2"),
      dy: t("dn2"),
      dx: t("dx1"),
      dWeight: g("mlpNorm"),
      accumulate: true
    }),
    ...linearBack("att", "wo", "dx1", "datt", c.dim, q),
    Ops.axpy({ x: t("dx1"), y: t("dx0"), beta: 0 }),
    Ops.attentionBackward({
      q: t("q"),
      k: t("k"),
      v: t("v"),
      o: t("att"),
      lse: t("lse"),
      dO: t("datt"),
      delta: t("delta"),
      dq: t("dq"),
      dk: t("dk"),
      dv: t("dv"),
      shape,
      positions: t("positions")
    }),
    Ops.rope({
      x: t("dq"),
      positions: t("positions"),
      heads: c.heads,
      headDim: c.headDim,
      theta: c.theta,
      inverse: true
    }),
    Ops.rope({
      x: t("dk"),
      positions: t("positions"),
      heads: c.kvHeads,
      headDim: c.headDim,
      theta: c.theta,
      inverse: true
    }),
    Ops.rmsNormBackward({
      x: t("qr"),
      weight: p("qNorm"),
      rstd: t("qrs"),
      dy: t("dq"),
      dx: t("dqr"),
      dWeight: g("qNorm")
    }),
    Ops.rmsNormBackward({
      x: t("kr"),
      weight: p("kNorm"),
      rstd: t("krs"),
      dy: t("dk"),
      dx: t("dkr"),
      dWeight: g("kNorm")
    }),
    ...linearBack("n1", "wq", "dqr", "dn1", q, c.dim),
    ...linearBack("n1", "wk", "dkr", "dn1", kv, c.dim, 1),
    ...linearBack("n1", "wv", "dv", "dn1", kv, c.dim, 1),
    Ops.rmsNormBackward({
      x: t("x0"),
      weight: p("attnNorm"),
      rstd: t("r1"),
      dy: t("dn1"),
      dx: t("dx0"),
      dWeight: g("attnNorm"),
      accumulate: true
    }),
    Ops.embeddingBackward({ ids: t("ids"), dOut: t("dx0"), dTable: g("embed") })
  ]
  return [...forward, ...backward]
}

/**
 * One micro-batch of next-token prediction over rows of `tokens` (batch·seq): targets are the next id in the
 * row, the last position of each row is masked out, positions count from 0 in each row.
 */
export const batch = (
  c: TinyTransformerConfig,
  tokens: ArrayLike<number>
): Array<readonly [string, Uint32Array | Float32Array]> => {
  const n = c.batch * c.seq
  const ids = new Uint32Array(n)
  const targets = new Uint32Array(n)
  const positions = new Uint32Array(n)
  const mask = new Float32Array(n)
  for (let b = 0; b < c.batch; b++) {
    for (let i = 0; i < c.seq; i++) {
      const at = b * c.seq + i
      ids[at] = tokens[at]
      positions[at] = i
      if (i + 1 < c.seq) {
        targets[at] = tokens[at + 1]
        mask[at] = 1
      }
    }
  }
  return [["ids", ids], ["targets", targets], ["positions", positions], ["mask", mask]]
}
