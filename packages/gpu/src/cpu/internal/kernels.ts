/**
 * The CPU device's f32 element-wise and row kernels: the same arithmetic as the specification's ops
 * (`ops/rmsNorm.ts`, `ops/rope.ts`, `ops/swiglu.ts`, `ops/tokenLogprobs.ts`, `ops/attention.ts`), written over
 * preallocated Float32Arrays with offsets, so a step allocates nothing. Sums accumulate in JavaScript numbers
 * (f64 registers), results are stored as f32; the tests compare them with the specification at f32 tolerance.
 */

/** y = w ⊙ x·rstd per row; rstd = 1/√(mean(x²) + eps). */
export const rmsNorm = (
  x: Float32Array,
  rows: number,
  dim: number,
  w: Float32Array,
  eps: number,
  y: Float32Array,
  rstd: Float32Array
): void => {
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    let ss = 0
    for (let i = 0; i < dim; i++) ss += x[o + i] * x[o + i]
    const r = Math.fround(1 / Math.sqrt(Math.fround(ss / dim) + eps))
    rstd[n] = r
    for (let i = 0; i < dim; i++) y[o + i] = w[i] * Math.fround(x[o + i] * r)
  }
}

/**
 * Backward of {@link rmsNorm}: dx = r·w⊙dy − x·r³·(w⊙dy·x)/dim, written (`accumulate`: added) into dx; dW += dy⊙x·r.
 */
export const rmsNormBackward = (
  dy: Float32Array,
  x: Float32Array,
  rstd: Float32Array,
  rows: number,
  dim: number,
  w: Float32Array,
  dW: Float32Array,
  dx: Float32Array,
  accumulate: boolean
): void => {
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    const r = rstd[n]
    let dot = 0
    for (let i = 0; i < dim; i++) dot += w[i] * dy[o + i] * x[o + i]
    const c = (r * r * r * dot) / dim
    for (let i = 0; i < dim; i++) {
      const d = r * w[i] * dy[o + i] - x[o + i] * c
      dx[o + i] = accumulate ? dx[o + i] + d : d
      dW[i] += dy[o + i] * x[o + i] * r
    }
  }
}

/**
 * Rotary embedding (rotate_half) of x [rows, heads, d] into y, row n at table row `positions[n]` of cos/sin
 * [positions, d/2]; `sign` −1 is the inverse rotation (the backward). y may be x.
 */
export const rope = (
  x: Float32Array,
  rows: number,
  heads: number,
  headDim: number,
  positions: Int32Array,
  cos: Float32Array,
  sin: Float32Array,
  sign: 1 | -1,
  y: Float32Array
): void => {
  const half = headDim / 2
  for (let n = 0; n < rows; n++) {
    const t = positions[n] * half
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const c = cos[t + i]
        const s = sign * sin[t + i]
        const a = x[o + i]
        const b = x[o + i + half]
        y[o + i] = Math.fround(a * c) - Math.fround(b * s)
        y[o + i + half] = Math.fround(b * c) + Math.fround(a * s)
      }
    }
  }
}

/** act = silu(gate)·up over n values. */
export const swiglu = (gate: Float32Array, up: Float32Array, n: number, act: Float32Array): void => {
  for (let i = 0; i < n; i++) {
    const g = gate[i]
    act[i] = Math.fround(g / (1 + Math.exp(-g))) * up[i]
  }
}

/** dGate = dAct·up·silu'(gate), dUp = dAct·silu(gate). */
export const swigluBackward = (
  dAct: Float32Array,
  gate: Float32Array,
  up: Float32Array,
  n: number,
  dGate: Float32Array,
  dUp: Float32Array
): void => {
  for (let i = 0; i < n; i++) {
    const g = gate[i]
    const s = 1 / (1 + Math.exp(-g))
    dGate[i] = dAct[i] * up[i] * s * (1 + g * (1 - s))
    dUp[i] = dAct[i] * g * s
  }
}

/** out = a + b over n values (out may be a or b). */
export const add = (a: Float32Array, b: Float32Array, n: number, out: Float32Array): void => {
  for (let i = 0; i < n; i++) out[i] = a[i] + b[i]
}

/**
 * Per row of logits [rows, vocab]: log_softmax(logits/T)[target] (0 when target < 0) and the entropy, as
 * `cpuTokenLogprobs`. With `dLogp` (and optionally `dEntropy`), also overwrites the row's logits by
 * dL/dlogits of L = Σ w·logprob + Σ e·entropy and returns L (rows without a weight get zeros). `z` and `e` are
 * scratch rows of ≥ vocab values (one exp per logit: the row's scaled logits and their exponentials are kept).
 */
export const tokenLogprobs = (
  logits: Float32Array,
  rows: number,
  vocab: number,
  targets: ArrayLike<number>,
  temperature: number,
  logprobs: Float64Array,
  entropy: Float64Array,
  z: Float64Array,
  e: Float64Array,
  dLogp?: ArrayLike<number>,
  dEntropy?: ArrayLike<number>
): number => {
  let loss = 0
  for (let n = 0; n < rows; n++) {
    const o = n * vocab
    let max = -Infinity
    if (temperature === 1) {
      for (let v = 0; v < vocab; v++) {
        const x = logits[o + v]
        z[v] = x
        if (x > max) max = x
      }
    } else {
      for (let v = 0; v < vocab; v++) {
        const x = Math.fround(logits[o + v] / temperature)
        z[v] = x
        if (x > max) max = x
      }
    }
    let sum = 0
    let weighted = 0
    for (let v = 0; v < vocab; v++) {
      const x = Math.exp(z[v] - max)
      e[v] = x
      sum += x
      weighted += x * z[v]
    }
    const lse = max + Math.log(sum)
    const h = lse - weighted / sum
    const target = targets[n]
    const lp = target < 0 ? 0 : z[target] - lse
    logprobs[n] = lp
    entropy[n] = h
    if (dLogp === undefined) continue
    const w = target < 0 ? 0 : dLogp[n]
    const ew = dEntropy === undefined ? 0 : dEntropy[n]
    if (w === 0 && ew === 0) {
      logits.fill(0, o, o + vocab)
      continue
    }
    loss += w * lp + ew * h
    const inv = 1 / sum
    const shift = h - lse
    for (let v = 0; v < vocab; v++) {
      const p = e[v] * inv
      // d logprob/dz = onehot − p; d entropy/dz = −p·(z − lse + H); d/dlogits = d/dz / T.
      logits[o + v] = (-w * p - ew * p * (z[v] + shift)) / temperature
    }
    if (target >= 0) logits[o + target] += w / temperature
  }
  return loss
}

/** Σ g² over arrays (f64 sum). */
export const sumSquares = (arrays: ReadonlyArray<Float32Array>): number => {
  let ss = 0
  for (const g of arrays) for (let i = 0; i < g.length; i++) ss += g[i] * g[i]
  return ss
}

/** One AdamW update of p from g (torch's formula, as `Qwen3Reference.adamWStep`), after scaling g by `clip`. */
export const adamW = (
  p: Float32Array,
  g: Float32Array,
  m: Float32Array,
  v: Float32Array,
  clip: number,
  b1: number,
  b2: number,
  eps: number,
  decay: number,
  stepSize: number,
  bc2Sqrt: number
): void => {
  for (let i = 0; i < p.length; i++) {
    const gi = Math.fround(g[i] * clip)
    m[i] = b1 * m[i] + (1 - b1) * gi
    v[i] = b2 * v[i] + (1 - b2) * gi * gi
    p[i] = p[i] * decay - (stepSize * m[i]) / (Math.sqrt(v[i]) / bc2Sqrt + eps)
  }
}
