// Frozen copy of packages/gpu/src/internal/qwen3refOps.ts at commit 0feb089 (before the speed-up), kept so
// bench/model/cpu-reference.ts can time the old and new implementations side by side in one process.
/**
 * The per-operation pieces of the plain-TypeScript Qwen3 reference: forward and hand-written backward of each op.
 * Every dot product and reduction accumulates in f64; results are stored in the run's array type, so a
 * Float32Array run rounds once per stored value (the GPU's f32 tensors) and a Float64Array run does not round at
 * all (used by the finite-difference gradient checks).
 *
 * Layouts are row-major. A "row" is one token of the packed batch (index b·T + t).
 */

export type FloatArray = Float32Array | Float64Array

/** How a reference run stores its tensors: `f32` is the GPU specification, `f64` is for finite differences. */
export type Precision = "f32" | "f64"

export interface Numerics {
  readonly precision: Precision
  readonly alloc: (n: number) => FloatArray
  /** Rounds an intermediate scalar the way the stored type would (f32: Math.fround, f64: identity). */
  readonly round: (x: number) => number
}

const identity = (x: number) => x

export const numerics = (precision: Precision): Numerics =>
  precision === "f32"
    ? { precision, alloc: (n) => new Float32Array(n), round: Math.fround }
    : { precision, alloc: (n) => new Float64Array(n), round: identity }

/** y[n,o] = Σ_i x[n,i]·w[o,i] — torch's Linear without bias, weight [out, in]. */
export const linear = (
  x: ArrayLike<number>,
  rows: number,
  inF: number,
  w: ArrayLike<number>,
  outF: number,
  nm: Numerics
): FloatArray => {
  const y = nm.alloc(rows * outF)
  for (let n = 0; n < rows; n++) {
    const xo = n * inF
    for (let o = 0; o < outF; o++) {
      const wo = o * inF
      let acc = 0
      for (let i = 0; i < inF; i++) acc += x[xo + i] * w[wo + i]
      y[n * outF + o] = acc
    }
  }
  return y
}

/** Backward of {@link linear}: returns dx = dy·W and adds dW += dyᵀ·x into `dW` (f64). */
export const linearBackward = (
  dy: ArrayLike<number>,
  x: ArrayLike<number>,
  rows: number,
  inF: number,
  w: ArrayLike<number>,
  outF: number,
  dW: Float64Array,
  nm: Numerics
): FloatArray => {
  const dx = nm.alloc(rows * inF)
  for (let n = 0; n < rows; n++) {
    for (let i = 0; i < inF; i++) {
      let acc = 0
      for (let o = 0; o < outF; o++) acc += dy[n * outF + o] * w[o * inF + i]
      dx[n * inF + i] = acc
    }
  }
  for (let o = 0; o < outF; o++) {
    for (let i = 0; i < inF; i++) {
      let acc = 0
      for (let n = 0; n < rows; n++) acc += dy[n * outF + o] * x[n * inF + i]
      dW[o * inF + i] += acc
    }
  }
  return dx
}

/**
 * RMSNorm as Hugging Face's Qwen3RMSNorm: y = weight · (x · rsqrt(mean(x²) + eps)), each product rounded to the
 * stored type. Returns the per-row reciprocal std (needed by the backward).
 */
export const rmsNorm = (
  x: ArrayLike<number>,
  rows: number,
  dim: number,
  w: ArrayLike<number>,
  eps: number,
  nm: Numerics
): { readonly y: FloatArray; readonly rstd: FloatArray } => {
  const y = nm.alloc(rows * dim)
  const rstd = nm.alloc(rows)
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    let ss = 0
    for (let i = 0; i < dim; i++) ss += x[o + i] * x[o + i]
    const r = nm.round(1 / Math.sqrt(nm.round(ss / dim) + eps))
    rstd[n] = r
    for (let i = 0; i < dim; i++) y[o + i] = w[i] * nm.round(x[o + i] * r)
  }
  return { y, rstd }
}

/**
 * Backward of {@link rmsNorm} with g = w ⊙ dy:
 * dx = r·g − x·r³·(g·x)/dim, dw += dy ⊙ x·r (summed over rows, into `dW`).
 */
export const rmsNormBackward = (
  dy: ArrayLike<number>,
  x: ArrayLike<number>,
  rstd: ArrayLike<number>,
  rows: number,
  dim: number,
  w: ArrayLike<number>,
  dW: Float64Array,
  nm: Numerics
): FloatArray => {
  const dx = nm.alloc(rows * dim)
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    const r = rstd[n]
    let dot = 0
    for (let i = 0; i < dim; i++) dot += w[i] * dy[o + i] * x[o + i]
    const c = (r * r * r * dot) / dim
    for (let i = 0; i < dim; i++) {
      dx[o + i] = r * w[i] * dy[o + i] - x[o + i] * c
      dW[i] += dy[o + i] * x[o + i] * r
    }
  }
  return dx
}

/**
 * RoPE tables as transformers computes them in f32: inv_freq[i] = 1 / theta^(2i/d), angle = pos · inv_freq[i],
 * cos/sin of the f32 angle. Returns [rows, d/2] tables for the given positions.
 */
export const ropeTables = (
  positions: ArrayLike<number>,
  headDim: number,
  theta: number
): { readonly cos: Float32Array; readonly sin: Float32Array } => {
  const half = headDim / 2
  const invFreq = new Float64Array(half)
  for (let i = 0; i < half; i++) {
    invFreq[i] = Math.fround(1 / Math.fround(Math.pow(theta, Math.fround((2 * i) / headDim))))
  }
  const cos = new Float32Array(positions.length * half)
  const sin = new Float32Array(positions.length * half)
  for (let n = 0; n < positions.length; n++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(positions[n] * invFreq[i])
      cos[n * half + i] = Math.cos(angle)
      sin[n * half + i] = Math.sin(angle)
    }
  }
  return { cos, sin }
}

/**
 * Rotary embedding in transformers' rotate_half layout, on x [rows, heads, d] with per-row tables:
 * out[i] = x[i]·cos − x[i+d/2]·sin, out[i+d/2] = x[i+d/2]·cos + x[i]·sin (i < d/2).
 */
export const rope = (
  x: ArrayLike<number>,
  rows: number,
  heads: number,
  headDim: number,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  nm: Numerics
): FloatArray => {
  const half = headDim / 2
  const out = nm.alloc(rows * heads * headDim)
  for (let n = 0; n < rows; n++) {
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const c = cos[n * half + i]
        const s = sin[n * half + i]
        const a = x[o + i]
        const b = x[o + i + half]
        out[o + i] = nm.round(a * c) - nm.round(b * s)
        out[o + i + half] = nm.round(b * c) + nm.round(a * s)
      }
    }
  }
  return out
}

/** Backward of {@link rope}: the transpose of each 2×2 rotation. */
export const ropeBackward = (
  dy: ArrayLike<number>,
  rows: number,
  heads: number,
  headDim: number,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  nm: Numerics
): FloatArray => {
  const half = headDim / 2
  const dx = nm.alloc(rows * heads * headDim)
  for (let n = 0; n < rows; n++) {
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const c = cos[n * half + i]
        const s = sin[n * half + i]
        const da = dy[o + i]
        const db = dy[o + i + half]
        dx[o + i] = da * c + db * s
        dx[o + i + half] = db * c - da * s
      }
    }
  }
  return dx
}

/**
 * One query row of softmax attention against keys j = j0..j1 (inclusive) stored at `kBase + j·stride` in K and V:
 * p = softmax(scale · q·k_j), out = Σ_j p_j v_j. Writes p_j to `probs[probsBase + j]` when given. Both the
 * no-cache forward and the KV-cache path call this, so they do the same arithmetic.
 */
export const attendRow = (
  q: ArrayLike<number>,
  qOff: number,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  kBase: number,
  stride: number,
  j0: number,
  j1: number,
  headDim: number,
  scale: number,
  out: FloatArray,
  outOff: number,
  probs: FloatArray | undefined,
  probsBase: number,
  nm: Numerics
): void => {
  const count = j1 - j0 + 1
  const scores = new Float64Array(count)
  let max = -Infinity
  for (let j = j0; j <= j1; j++) {
    const ko = kBase + j * stride
    let dot = 0
    for (let d = 0; d < headDim; d++) dot += q[qOff + d] * k[ko + d]
    const s = nm.round(nm.round(dot) * scale)
    scores[j - j0] = s
    if (s > max) max = s
  }
  let sum = 0
  for (let c = 0; c < count; c++) {
    const e = Math.exp(scores[c] - max)
    scores[c] = e
    sum += e
  }
  for (let c = 0; c < count; c++) scores[c] = nm.round(scores[c] / sum)
  if (probs !== undefined) { for (let c = 0; c < count; c++) probs[probsBase + j0 + c] = scores[c] }
  for (let d = 0; d < headDim; d++) {
    let acc = 0
    for (let j = j0; j <= j1; j++) acc += scores[j - j0] * v[kBase + j * stride + d]
    out[outOff + d] = acc
  }
}

/** silu(g) = g·σ(g). */
export const silu = (g: number) => g / (1 + Math.exp(-g))

/** d silu / dg = σ(g)·(1 + g·(1 − σ(g))). */
export const siluGrad = (g: number) => {
  const s = 1 / (1 + Math.exp(-g))
  return s * (1 + g * (1 - s))
}

/** a + b elementwise into a new array. */
export const add = (a: ArrayLike<number>, b: ArrayLike<number>, nm: Numerics): FloatArray => {
  const out = nm.alloc(a.length)
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i]
  return out
}
