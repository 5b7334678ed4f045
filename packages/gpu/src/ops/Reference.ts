/**
 * Plain TypeScript twins of the GPU kernels. They are the specification: slow, obvious, f64 accumulation,
 * used by parity tests and finite-difference gradient checks, never on a hot path.
 *
 * @since 0.0.0
 */

/** C[M,N] = A[M,K] · B[K,N], all row-major. */
export const matmul = (
  a: Float32Array,
  b: Float32Array,
  m: number,
  n: number,
  k: number
): Float32Array => {
  const c = new Float32Array(m * n)
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let p = 0; p < k; p++) acc += a[i * k + p] * b[p * n + j]
      c[i * n + j] = acc
    }
  }
  return c
}

type Num = ArrayLike<number>

/** Shape and epilogue of a general multiply: C = alpha · op(A) · op(B) (+ beta · C) (+ bias). */
export interface GemmSpec {
  readonly m: number
  readonly n: number
  readonly k: number
  /** A is stored [K, M] (so op(A) = Aᵀ). */
  readonly transA?: boolean
  /** B is stored [N, K] (so op(B) = Bᵀ). */
  readonly transB?: boolean
  readonly alpha?: number
  readonly beta?: number
}

/** C = alpha · op(A)·op(B) + beta · C0 + bias (bias broadcast over rows). */
export const gemm = (a: Num, b: Num, s: GemmSpec, c0?: Num, bias?: Num): Float64Array => {
  const { k, m, n } = s
  const alpha = s.alpha ?? 1
  const beta = s.beta ?? 0
  const c = new Float64Array(m * n)
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let p = 0; p < k; p++) {
        const x = s.transA === true ? a[p * m + i] : a[i * k + p]
        const y = s.transB === true ? b[j * k + p] : b[p * n + j]
        acc += x * y
      }
      let v = alpha * acc
      if (beta !== 0 && c0 !== undefined) v += beta * c0[i * n + j]
      if (bias !== undefined) v += bias[j]
      c[i * n + j] = v
    }
  }
  return c
}

/** out[t] = table[ids[t]] (rows of width d); ids outside the table give zeros. */
export const embedding = (table: Num, ids: ArrayLike<number>, tokens: number, d: number): Float64Array => {
  const out = new Float64Array(tokens * d)
  const vocab = table.length / d
  for (let t = 0; t < tokens; t++) {
    if (ids[t] >= vocab) continue
    for (let j = 0; j < d; j++) out[t * d + j] = table[ids[t] * d + j]
  }
  return out
}

/** dTable = Σ_t onehot(ids[t]) ⊗ dOut[t], summed per row in increasing t (the GPU's order). */
export const embeddingBackward = (ids: ArrayLike<number>, dOut: Num, tokens: number, d: number, vocab: number) => {
  const dTable = new Float64Array(vocab * d)
  for (let t = 0; t < tokens; t++) {
    if (ids[t] >= vocab) continue
    for (let j = 0; j < d; j++) dTable[ids[t] * d + j] += dOut[t * d + j]
  }
  return dTable
}

/** y = x · rstd · w per row, rstd = 1/sqrt(mean(x²) + eps). Per-head norm: rows = tokens·heads, dim = headDim. */
export const rmsNorm = (x: Num, w: Num, rows: number, dim: number, eps: number) => {
  const y = new Float64Array(rows * dim)
  const rstd = new Float64Array(rows)
  for (let r = 0; r < rows; r++) {
    let ss = 0
    for (let c = 0; c < dim; c++) ss += x[r * dim + c] ** 2
    const s = 1 / Math.sqrt(ss / dim + eps)
    rstd[r] = s
    for (let c = 0; c < dim; c++) y[r * dim + c] = x[r * dim + c] * s * w[c]
  }
  return { y, rstd }
}

/** Gradients of {@link rmsNorm}: dx, and dw summed over rows. */
export const rmsNormBackward = (x: Num, w: Num, rstd: Num, dy: Num, rows: number, dim: number) => {
  const dx = new Float64Array(rows * dim)
  const dw = new Float64Array(dim)
  for (let r = 0; r < rows; r++) {
    const s = rstd[r]
    let dot = 0
    for (let c = 0; c < dim; c++) dot += dy[r * dim + c] * w[c] * x[r * dim + c]
    for (let c = 0; c < dim; c++) {
      const i = r * dim + c
      dx[i] = s * dy[i] * w[c] - x[i] * s * s * s * dot / dim
      dw[c] += dy[i] * x[i] * s
    }
  }
  return { dx, dw }
}

/** The RoPE angle of a position and pair, as HF computes it: pos · theta^(-2i/headDim). */
export const ropeAngle = (pos: number, i: number, headDim: number, theta: number) =>
  pos * Math.pow(theta, -(2 * i) / headDim)

/**
 * Rotary embedding in the HF "rotate_half" layout over x[tokens, heads, headDim]: pairs (i, i + headDim/2).
 * `inverse` rotates by the negative angle, which is exactly the backward pass.
 */
export const rope = (
  x: Num,
  positions: ArrayLike<number>,
  tokens: number,
  heads: number,
  headDim: number,
  theta: number,
  inverse = false
): Float64Array => {
  const out = Float64Array.from(x)
  const half = headDim / 2
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const a = ropeAngle(positions[t], i, headDim, theta)
        const c = Math.cos(a)
        const s = inverse ? -Math.sin(a) : Math.sin(a)
        const x1 = x[base + i]
        const x2 = x[base + i + half]
        out[base + i] = x1 * c - x2 * s
        out[base + i + half] = x2 * c + x1 * s
      }
    }
  }
  return out
}

/** Shape of causal grouped-query attention over packed sequences: q[batch·seq, heads, headDim], k/v[batch·seq, kvHeads, headDim]. */
export interface AttentionShape {
  readonly batch: number
  readonly seq: number
  readonly heads: number
  readonly kvHeads: number
  readonly headDim: number
  /** Usually 1/sqrt(headDim). */
  readonly scale: number
}

const score = (q: Num, k: Num, s: AttentionShape, b: number, i: number, j: number, h: number) => {
  const g = Math.floor(h / (s.heads / s.kvHeads))
  const qb = ((b * s.seq + i) * s.heads + h) * s.headDim
  const kb = ((b * s.seq + j) * s.kvHeads + g) * s.headDim
  let dot = 0
  for (let d = 0; d < s.headDim; d++) dot += q[qb + d] * k[kb + d]
  return dot * s.scale
}

/**
 * First key a query may see. Without positions: 0 (plain causal). With packed sequences, positions count up
 * by one from 0 within each sequence, so query i's sequence starts at i − pos[i].
 */
export const segmentStart = (positions: ArrayLike<number> | undefined, b: number, seq: number, i: number) =>
  positions === undefined ? 0 : Math.max(0, i - positions[b * seq + i])

/**
 * Causal GQA: o = softmax(q·kᵀ·scale, masked to start(i) ≤ j ≤ i) · v, and the logsumexp per (token, head).
 * `positions` ([batch·seq]) makes it packed-sequence aware (see {@link segmentStart}).
 */
export const attention = (q: Num, k: Num, v: Num, s: AttentionShape, positions?: ArrayLike<number>) => {
  const { batch, headDim: hd, heads, kvHeads, seq } = s
  const o = new Float64Array(batch * seq * heads * hd)
  const lse = new Float64Array(batch * seq * heads)
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < seq; i++) {
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / (heads / kvHeads))
        const j0 = segmentStart(positions, b, seq, i)
        const scores = Array.from({ length: i + 1 }, (_, j) => (j < j0 ? -Infinity : score(q, k, s, b, i, j, h)))
        const mx = Math.max(...scores)
        const sum = scores.reduce((a, x) => a + Math.exp(x - mx), 0)
        const l = mx + Math.log(sum)
        lse[(b * seq + i) * heads + h] = l
        const ob = ((b * seq + i) * heads + h) * hd
        for (let j = j0; j <= i; j++) {
          const p = Math.exp(scores[j] - l)
          const vb = ((b * seq + j) * kvHeads + g) * hd
          for (let d = 0; d < hd; d++) o[ob + d] += p * v[vb + d]
        }
      }
    }
  }
  return { o, lse }
}

/** Gradients of {@link attention} given dO (uses the saved logsumexp, like the GPU). */
export const attentionBackward = (
  q: Num,
  k: Num,
  v: Num,
  o: Num,
  lse: Num,
  dO: Num,
  s: AttentionShape,
  positions?: ArrayLike<number>
) => {
  const { batch, headDim: hd, heads, kvHeads, seq } = s
  const dq = new Float64Array(q.length)
  const dk = new Float64Array(k.length)
  const dv = new Float64Array(v.length)
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < seq; i++) {
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / (heads / kvHeads))
        const ob = ((b * seq + i) * heads + h) * hd
        let delta = 0
        for (let d = 0; d < hd; d++) delta += dO[ob + d] * o[ob + d]
        const l = lse[(b * seq + i) * heads + h]
        for (let j = segmentStart(positions, b, seq, i); j <= i; j++) {
          const p = Math.exp(score(q, k, s, b, i, j, h) - l)
          const kb = ((b * seq + j) * kvHeads + g) * hd
          let dp = 0
          for (let d = 0; d < hd; d++) dp += dO[ob + d] * v[kb + d]
          const ds = p * (dp - delta) * s.scale
          for (let d = 0; d < hd; d++) {
            dv[kb + d] += p * dO[ob + d]
            dq[ob + d] += ds * k[kb + d]
            dk[kb + d] += ds * q[ob + d]
          }
        }
      }
    }
  }
  return { dq, dk, dv }
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/** SwiGLU: out = silu(gate) · up. */
export const swiglu = (gate: Num, up: Num): Float64Array =>
  Float64Array.from({ length: gate.length }, (_, i) => gate[i] * sigmoid(gate[i]) * up[i])

/** Gradients of {@link swiglu}. */
export const swigluBackward = (gate: Num, up: Num, dOut: Num) => {
  const dGate = new Float64Array(gate.length)
  const dUp = new Float64Array(gate.length)
  for (let i = 0; i < gate.length; i++) {
    const sg = sigmoid(gate[i])
    dUp[i] = dOut[i] * gate[i] * sg
    dGate[i] = dOut[i] * up[i] * sg * (1 + gate[i] * (1 - sg))
  }
  return { dGate, dUp }
}

/**
 * Per row of logits[rows, vocab] at temperature T (z = logits / T): log p(target), entropy of p, logsumexp of z.
 */
export const tokenLogprobs = (
  logits: Num,
  targets: ArrayLike<number>,
  rows: number,
  vocab: number,
  invTemp: number
) => {
  const logp = new Float64Array(rows)
  const entropy = new Float64Array(rows)
  const lse = new Float64Array(rows)
  for (let r = 0; r < rows; r++) {
    let mx = -Infinity
    for (let j = 0; j < vocab; j++) mx = Math.max(mx, logits[r * vocab + j] * invTemp)
    let se = 0
    let sz = 0
    for (let j = 0; j < vocab; j++) {
      const z = logits[r * vocab + j] * invTemp
      const e = Math.exp(z - mx)
      se += e
      sz += e * z
    }
    lse[r] = mx + Math.log(se)
    logp[r] = logits[r * vocab + targets[r]] * invTemp - lse[r]
    entropy[r] = lse[r] - sz / se
  }
  return { logp, entropy, lse }
}

/** dLogits from upstream gradients of the chosen logprob (and optionally of the entropy). */
export const tokenLogprobsBackward = (
  logits: Num,
  targets: ArrayLike<number>,
  rows: number,
  vocab: number,
  invTemp: number,
  dLogp: Num,
  dEntropy?: Num
): Float64Array => {
  const { entropy, lse } = tokenLogprobs(logits, targets, rows, vocab, invTemp)
  const d = new Float64Array(rows * vocab)
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < vocab; j++) {
      const z = logits[r * vocab + j] * invTemp
      const p = Math.exp(z - lse[r])
      let g = dLogp[r] * ((j === targets[r] ? 1 : 0) - p)
      if (dEntropy !== undefined) g += dEntropy[r] * -p * (z - lse[r] + entropy[r])
      d[r * vocab + j] = g * invTemp
    }
  }
  return d
}

/** Per row: scale · Σ mask·x / max(Σ mask, 1) (weighted masked mean), and its gradient w.r.t. x. */
export const maskedMean = (x: Num, mask: Num, rows: number, cols: number, scale: number) => {
  const out = new Float64Array(rows)
  const dx = new Float64Array(rows * cols)
  for (let r = 0; r < rows; r++) {
    let s = 0
    let n = 0
    for (let c = 0; c < cols; c++) {
      s += mask[r * cols + c] * x[r * cols + c]
      n += mask[r * cols + c]
    }
    const cnt = Math.max(n, 1)
    out[r] = scale * s / cnt
    for (let c = 0; c < cols; c++) dx[r * cols + c] = scale * mask[r * cols + c] / cnt
  }
  return { out, dx }
}

/** Global L2 norm and the clip scale min(1, max/(norm + 1e-6)); max ≤ 0 disables clipping. */
export const gradNorm = (grads: ReadonlyArray<Num>, maxNorm: number) => {
  let ss = 0
  for (const g of grads) for (let i = 0; i < g.length; i++) ss += g[i] * g[i]
  const norm = Math.sqrt(ss)
  const finite = Number.isFinite(norm)
  const clip = !finite ? 0 : maxNorm > 0 ? Math.min(1, maxNorm / (norm + 1e-6)) : 1
  return { norm, clip, skipped: !finite }
}

/** AdamW hyper-parameters of one step (bias corrections are 1 − βᵗ). */
export interface AdamWStep {
  readonly lr: number
  readonly beta1: number
  readonly beta2: number
  readonly eps: number
  readonly weightDecay: number
  readonly biasCorrection1: number
  readonly biasCorrection2: number
}

/** One decoupled-weight-decay Adam update in place (PyTorch AdamW), gradient pre-multiplied by `clip`. */
export const adamw = (
  p: Float32Array | Float64Array,
  g: Num,
  m: Float32Array | Float64Array,
  v: Float32Array | Float64Array,
  decay: (i: number) => boolean,
  h: AdamWStep,
  clip: number
) => {
  for (let i = 0; i < p.length; i++) {
    const gi = g[i] * clip
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * gi
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * gi * gi
    const mhat = m[i] / h.biasCorrection1
    const vhat = v[i] / h.biasCorrection2
    const wd = decay(i) ? h.lr * h.weightDecay : 0
    p[i] = p[i] * (1 - wd) - h.lr * mhat / (Math.sqrt(vhat) + h.eps)
  }
}
