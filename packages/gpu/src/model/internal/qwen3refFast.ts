/**
 * The blocked and batched paths of the plain-TypeScript Qwen3 reference: the contiguous matmul (`linear`, its
 * backward), one query row (or a GQA pair of rows) of attention for the forward and the KV cache, and the attention
 * backward. Each does exactly the arithmetic of its op's naive specification (`ops/matmul.ts`' gemm,
 * `ops/attention.ts`' cpuAttention and cpuAttentionBackward), in the same order, only faster; the tests compare
 * them bit for bit. Every dot product and reduction accumulates in f64; results are stored in the run's array
 * type (see `Numerics`).
 *
 * Layouts are row-major. A "row" is one token of the packed batch (index b·T + t).
 */
import type { FloatArray, Numerics } from "../../ops/Numerics.js"
/**
 * out[m·N + n] = Σ_k a[m·K + k]·b[n·K + k] (or += when `accumulate`): every product of A's rows with B's rows,
 * each an f64 sum in k order from 0 — the summation order of the plain triple loop, so results are bit-identical
 * to it. Speed comes from contiguous rows and a 2×4 block of independent sums (8 in flight), not from reordering.
 */
export const matmulNT = (
  a: FloatArray,
  M: number,
  b: FloatArray,
  N: number,
  K: number,
  out: FloatArray,
  accumulate: boolean
): void => {
  let m = 0
  for (; m + 1 < M; m += 2) {
    const a0 = m * K
    const a1 = a0 + K
    const o0 = m * N
    const o1 = o0 + N
    let n = 0
    for (; n + 3 < N; n += 4) {
      const b0 = n * K
      const b1 = b0 + K
      const b2 = b1 + K
      const b3 = b2 + K
      let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0
      // Two k per pass, each sum still adding its terms one after the other.
      let k = 0
      for (; k + 1 < K; k += 2) {
        const x0 = a[a0 + k]
        const x1 = a[a1 + k]
        const y0 = a[a0 + k + 1]
        const y1 = a[a1 + k + 1]
        const w0 = b[b0 + k]
        const w1 = b[b1 + k]
        const w2 = b[b2 + k]
        const w3 = b[b3 + k]
        const v0 = b[b0 + k + 1]
        const v1 = b[b1 + k + 1]
        const v2 = b[b2 + k + 1]
        const v3 = b[b3 + k + 1]
        s00 = s00 + x0 * w0 + y0 * v0
        s01 = s01 + x0 * w1 + y0 * v1
        s02 = s02 + x0 * w2 + y0 * v2
        s03 = s03 + x0 * w3 + y0 * v3
        s10 = s10 + x1 * w0 + y1 * v0
        s11 = s11 + x1 * w1 + y1 * v1
        s12 = s12 + x1 * w2 + y1 * v2
        s13 = s13 + x1 * w3 + y1 * v3
      }
      if (k < K) {
        const x0 = a[a0 + k]
        const x1 = a[a1 + k]
        const w0 = b[b0 + k]
        const w1 = b[b1 + k]
        const w2 = b[b2 + k]
        const w3 = b[b3 + k]
        s00 += x0 * w0
        s01 += x0 * w1
        s02 += x0 * w2
        s03 += x0 * w3
        s10 += x1 * w0
        s11 += x1 * w1
        s12 += x1 * w2
        s13 += x1 * w3
      }
      if (accumulate) {
        out[o0 + n] += s00
        out[o0 + n + 1] += s01
        out[o0 + n + 2] += s02
        out[o0 + n + 3] += s03
        out[o1 + n] += s10
        out[o1 + n + 1] += s11
        out[o1 + n + 2] += s12
        out[o1 + n + 3] += s13
      } else {
        out[o0 + n] = s00
        out[o0 + n + 1] = s01
        out[o0 + n + 2] = s02
        out[o0 + n + 3] = s03
        out[o1 + n] = s10
        out[o1 + n + 1] = s11
        out[o1 + n + 2] = s12
        out[o1 + n + 3] = s13
      }
    }
    for (; n < N; n++) {
      const b0 = n * K
      let s0 = 0, s1 = 0
      for (let k = 0; k < K; k++) {
        const w0 = b[b0 + k]
        s0 += a[a0 + k] * w0
        s1 += a[a1 + k] * w0
      }
      if (accumulate) {
        out[o0 + n] += s0
        out[o1 + n] += s1
      } else {
        out[o0 + n] = s0
        out[o1 + n] = s1
      }
    }
  }
  if (m < M) matmulRow(a, m * K, b, N, K, out, m * N, accumulate)
}

/** One row of {@link matmulNT}: eight sums at a time, sharing each load of the row. */
const matmulRow = (
  a: FloatArray,
  a0: number,
  b: FloatArray,
  N: number,
  K: number,
  out: FloatArray,
  o0: number,
  accumulate: boolean
): void => {
  let n = 0
  for (; n + 7 < N; n += 8) {
    const b0 = n * K
    const b1 = b0 + K
    const b2 = b1 + K
    const b3 = b2 + K
    const b4 = b3 + K
    const b5 = b4 + K
    const b6 = b5 + K
    const b7 = b6 + K
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0
    // Two k per pass, still added one after the other ((s + x·b) + y·b'): fewer loop and index instructions.
    let k = 0
    for (; k + 1 < K; k += 2) {
      const x = a[a0 + k]
      const y = a[a0 + k + 1]
      s0 = s0 + x * b[b0 + k] + y * b[b0 + k + 1]
      s1 = s1 + x * b[b1 + k] + y * b[b1 + k + 1]
      s2 = s2 + x * b[b2 + k] + y * b[b2 + k + 1]
      s3 = s3 + x * b[b3 + k] + y * b[b3 + k + 1]
      s4 = s4 + x * b[b4 + k] + y * b[b4 + k + 1]
      s5 = s5 + x * b[b5 + k] + y * b[b5 + k + 1]
      s6 = s6 + x * b[b6 + k] + y * b[b6 + k + 1]
      s7 = s7 + x * b[b7 + k] + y * b[b7 + k + 1]
    }
    if (k < K) {
      const x = a[a0 + k]
      s0 += x * b[b0 + k]
      s1 += x * b[b1 + k]
      s2 += x * b[b2 + k]
      s3 += x * b[b3 + k]
      s4 += x * b[b4 + k]
      s5 += x * b[b5 + k]
      s6 += x * b[b6 + k]
      s7 += x * b[b7 + k]
    }
    const o = o0 + n
    if (accumulate) {
      out[o] += s0
      out[o + 1] += s1
      out[o + 2] += s2
      out[o + 3] += s3
      out[o + 4] += s4
      out[o + 5] += s5
      out[o + 6] += s6
      out[o + 7] += s7
    } else {
      out[o] = s0
      out[o + 1] = s1
      out[o + 2] = s2
      out[o + 3] = s3
      out[o + 4] = s4
      out[o + 5] = s5
      out[o + 6] = s6
      out[o + 7] = s7
    }
  }
  for (; n < N; n++) {
    const b0 = n * K
    let s0 = 0
    for (let k = 0; k < K; k++) s0 += a[a0 + k] * b[b0 + k]
    if (accumulate) out[o0 + n] += s0
    else out[o0 + n] = s0
  }
}

const allocLike = (x: FloatArray, n: number): FloatArray =>
  x instanceof Float64Array ? new Float64Array(n) : new Float32Array(n)

/** [rows, cols] → [cols, rows] into a new array of the same element type (exact: no rounding). */
const transpose = (x: FloatArray, rows: number, cols: number): FloatArray => {
  const t = allocLike(x, rows * cols)
  for (let r = 0; r < rows; r++) {
    const o = r * cols
    for (let c = 0; c < cols; c++) t[c * rows + r] = x[o + c]
  }
  return t
}

/** y[n,o] = Σ_i x[n,i]·w[o,i] — torch's Linear without bias, weight [out, in]. */
export const linear = (
  x: FloatArray,
  rows: number,
  inF: number,
  w: FloatArray,
  outF: number,
  nm: Numerics
): FloatArray => {
  const y = nm.alloc(rows * outF)
  matmulNT(x, rows, w, outF, inF, y, false)
  return y
}

/**
 * Backward of {@link linear}: returns dx = dy·W and adds dW += dyᵀ·x into `dW` (f64; undefined for a frozen weight,
 * whose gradient is then never computed). Rows of dy that are all zero (tokens without a loss term) are skipped:
 * with finite activations they add exact zeros.
 */
export const linearBackward = (
  dy: FloatArray,
  x: FloatArray,
  rows: number,
  inF: number,
  w: FloatArray,
  outF: number,
  dW: Float64Array | undefined,
  nm: Numerics
): FloatArray => {
  const dx = nm.alloc(rows * inF)
  // Only rows with some non-zero upstream gradient contribute; gather them so both products skip the rest.
  const live: Array<number> = []
  for (let n = 0; n < rows; n++) {
    const o = n * outF
    for (let j = 0; j < outF; j++) {
      if (dy[o + j] !== 0) {
        live.push(n)
        break
      }
    }
  }
  if (live.length === 0) return dx
  const R = live.length
  const dyLive = live.length === rows ? dy : gatherRows(dy, live, outF)
  // dx[n,i] = Σ_o dy[n,o]·w[o,i]: contiguous once W is transposed to [in, out].
  const wT = transpose(w, outF, inF)
  if (R === rows) matmulNT(dyLive, R, wT, inF, outF, dx, false)
  else {
    const dxLive = nm.alloc(R * inF)
    matmulNT(dyLive, R, wT, inF, outF, dxLive, false)
    for (let r = 0; r < R; r++) dx.set(dxLive.subarray(r * inF, (r + 1) * inF), live[r] * inF)
  }
  if (dW === undefined) return dx
  // dW[o,i] += Σ_n dy[n,o]·x[n,i]: contiguous over n once both are transposed.
  const xLive = live.length === rows ? x : gatherRows(x, live, inF)
  matmulNT(transpose(dyLive, R, outF), outF, transpose(xLive, R, inF), inF, R, dW, true)
  return dx
}

const gatherRows = (x: FloatArray, rows: ReadonlyArray<number>, cols: number): FloatArray => {
  const out = allocLike(x, rows.length * cols)
  for (let r = 0; r < rows.length; r++) out.set(x.subarray(rows[r] * cols, (rows[r] + 1) * cols), r * cols)
  return out
}

/** Scratch for {@link attendRow}'s scores and output sums (single-threaded, grown on demand). */
let scoreScratch = new Float64Array(256)
const outScratch = new Float64Array(1024)

/**
 * One query row of softmax attention against keys j = j0..j1 (inclusive) stored at `kBase + j·stride` in K and V:
 * p = softmax(scale · q·k_j), out = Σ_j p_j v_j. Writes p_j to `probs[probsBase + j]` when given. Both the
 * no-cache forward and the KV-cache path call this, so they do the same arithmetic.
 */
export const attendRow = (
  q: FloatArray,
  qOff: number,
  k: FloatArray,
  v: FloatArray,
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
  if (scoreScratch.length < count) scoreScratch = new Float64Array(Math.max(count, 2 * scoreScratch.length))
  const scores = scoreScratch
  // Four keys at a time: four independent sums (each still in d order) instead of one dependent chain.
  let j = j0
  for (; j + 3 <= j1; j += 4) {
    const k0 = kBase + j * stride
    const k1 = k0 + stride
    const k2 = k1 + stride
    const k3 = k2 + stride
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0
    for (let d = 0; d < headDim; d++) {
      const x = q[qOff + d]
      s0 += x * k[k0 + d]
      s1 += x * k[k1 + d]
      s2 += x * k[k2 + d]
      s3 += x * k[k3 + d]
    }
    scores[j - j0] = s0
    scores[j - j0 + 1] = s1
    scores[j - j0 + 2] = s2
    scores[j - j0 + 3] = s3
  }
  for (; j <= j1; j++) {
    const ko = kBase + j * stride
    let dot = 0
    for (let d = 0; d < headDim; d++) dot += q[qOff + d] * k[ko + d]
    scores[j - j0] = dot
  }
  softmaxScores(scores, 0, count, scale, nm.round)
  if (probs !== undefined) { for (let c = 0; c < count; c++) probs[probsBase + j0 + c] = scores[c] }
  // out[d] = Σ_j p_j·v[j, d] in j order, accumulated row by row over contiguous v rows.
  const acc = headDim <= outScratch.length ? outScratch : new Float64Array(headDim)
  acc.fill(0, 0, headDim)
  // Four rows of v per pass; each acc[d] still adds its terms one by one in j order.
  let jj = j0
  for (; jj + 3 <= j1; jj += 4) {
    const p0 = scores[jj - j0]
    const p1 = scores[jj - j0 + 1]
    const p2 = scores[jj - j0 + 2]
    const p3 = scores[jj - j0 + 3]
    const v0 = kBase + jj * stride
    const v1 = v0 + stride
    const v2 = v1 + stride
    const v3 = v2 + stride
    for (let d = 0; d < headDim; d++) {
      acc[d] = acc[d] + p0 * v[v0 + d] + p1 * v[v1 + d] + p2 * v[v2 + d] + p3 * v[v3 + d]
    }
  }
  for (; jj <= j1; jj++) {
    const p = scores[jj - j0]
    const vo = kBase + jj * stride
    for (let d = 0; d < headDim; d++) acc[d] += p * v[vo + d]
  }
  for (let d = 0; d < headDim; d++) out[outOff + d] = acc[d]
}

let pairScratch = new Float64Array(512)

/**
 * {@link attendRow} for two query heads that share a KV head (GQA), each computed exactly as attendRow computes it,
 * with one pass over the keys and values for both (the KV-cache decode path's main memory traffic).
 */
export const attendPair = (
  q: FloatArray,
  qA: number,
  qB: number,
  k: FloatArray,
  v: FloatArray,
  kBase: number,
  stride: number,
  j0: number,
  j1: number,
  headDim: number,
  scale: number,
  out: FloatArray,
  probs: FloatArray | undefined,
  probsA: number,
  probsB: number,
  round: (x: number) => number
): void => {
  const count = j1 - j0 + 1
  if (pairScratch.length < 2 * count) pairScratch = new Float64Array(Math.max(2 * count, 2 * pairScratch.length))
  // Scores of head A at [0, count), of head B at [count, 2·count).
  const sc = pairScratch
  let j = j0
  for (; j + 3 <= j1; j += 4) {
    const k0 = kBase + j * stride
    const k1 = k0 + stride
    const k2 = k1 + stride
    const k3 = k2 + stride
    let a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0
    for (let d = 0; d < headDim; d++) {
      const x = q[qA + d]
      const y = q[qB + d]
      const w0 = k[k0 + d]
      const w1 = k[k1 + d]
      const w2 = k[k2 + d]
      const w3 = k[k3 + d]
      a0 += x * w0
      a1 += x * w1
      a2 += x * w2
      a3 += x * w3
      b0 += y * w0
      b1 += y * w1
      b2 += y * w2
      b3 += y * w3
    }
    const c = j - j0
    sc[c] = a0
    sc[c + 1] = a1
    sc[c + 2] = a2
    sc[c + 3] = a3
    sc[count + c] = b0
    sc[count + c + 1] = b1
    sc[count + c + 2] = b2
    sc[count + c + 3] = b3
  }
  for (; j <= j1; j++) {
    const ko = kBase + j * stride
    let a = 0
    let b = 0
    for (let d = 0; d < headDim; d++) {
      a += q[qA + d] * k[ko + d]
      b += q[qB + d] * k[ko + d]
    }
    sc[j - j0] = a
    sc[count + j - j0] = b
  }
  softmaxScores(sc, 0, count, scale, round)
  softmaxScores(sc, count, count, scale, round)
  if (probs !== undefined) {
    for (let c = 0; c < count; c++) {
      probs[probsA + j0 + c] = sc[c]
      probs[probsB + j0 + c] = sc[count + c]
    }
  }
  const accA = outScratch.length >= headDim ? outScratch : new Float64Array(headDim)
  const accB = pairAcc.length >= headDim ? pairAcc : new Float64Array(headDim)
  accA.fill(0, 0, headDim)
  accB.fill(0, 0, headDim)
  let jj = j0
  for (; jj + 3 <= j1; jj += 4) {
    const c = jj - j0
    const pa0 = sc[c]
    const pa1 = sc[c + 1]
    const pa2 = sc[c + 2]
    const pa3 = sc[c + 3]
    const pb0 = sc[count + c]
    const pb1 = sc[count + c + 1]
    const pb2 = sc[count + c + 2]
    const pb3 = sc[count + c + 3]
    const v0 = kBase + jj * stride
    const v1 = v0 + stride
    const v2 = v1 + stride
    const v3 = v2 + stride
    for (let d = 0; d < headDim; d++) {
      const x0 = v[v0 + d]
      const x1 = v[v1 + d]
      const x2 = v[v2 + d]
      const x3 = v[v3 + d]
      accA[d] = accA[d] + pa0 * x0 + pa1 * x1 + pa2 * x2 + pa3 * x3
      accB[d] = accB[d] + pb0 * x0 + pb1 * x1 + pb2 * x2 + pb3 * x3
    }
  }
  for (; jj <= j1; jj++) {
    const pa = sc[jj - j0]
    const pb = sc[count + jj - j0]
    const vo = kBase + jj * stride
    for (let d = 0; d < headDim; d++) {
      accA[d] += pa * v[vo + d]
      accB[d] += pb * v[vo + d]
    }
  }
  for (let d = 0; d < headDim; d++) {
    out[qA + d] = accA[d]
    out[qB + d] = accB[d]
  }
}

const pairAcc = new Float64Array(1024)

/** attendRow's and attendPair's softmax over raw dot products sc[o … o+count): scale, rounding and normalisation, in place. */
const softmaxScores = (
  sc: Float64Array,
  o: number,
  count: number,
  scale: number,
  round: (x: number) => number
): void => {
  let max = -Infinity
  for (let c = o; c < o + count; c++) {
    const s = round(round(sc[c]) * scale)
    sc[c] = s
    if (s > max) max = s
  }
  let sum = 0
  for (let c = o; c < o + count; c++) {
    const e = Math.exp(sc[c] - max)
    sc[c] = e
    sum += e
  }
  for (let c = o; c < o + count; c++) sc[c] = round(sc[c] / sum)
}

/**
 * Backward of causal (packed) attention for one layer: from dOut [N, heads·D] and the forward's probabilities
 * [batch, heads, T, T], adds into dq [N, heads·D], dk and dv [N, kvHeads·D] (f64). Row n = b·T + t attends to keys
 * segmentStart[n]..t of its batch row.
 */
export const attentionBackward = (
  dOut: FloatArray,
  q: FloatArray,
  k: FloatArray,
  v: FloatArray,
  probs: FloatArray,
  segmentStart: Int32Array,
  B: number,
  T: number,
  H: number,
  KV: number,
  D: number,
  scale: number,
  dq: Float64Array,
  dk: Float64Array,
  dv: Float64Array
): void => {
  const group = H / KV
  const dP = new Float64Array(T)
  const dS = new Float64Array(T)
  // dS of one head, transposed [key, query], for the key-major dk/dv pass.
  const dST = new Float64Array(T * T)
  const rowStride = KV * D
  for (let b = 0; b < B; b++) {
    for (let hh = 0; hh < H; hh++) {
      const kvh = Math.floor(hh / group)
      const kv0 = b * T * rowStride + kvh * D
      for (let t = 0; t < T; t++) {
        const n = b * T + t
        const qo = (n * H + hh) * D
        const pBase = ((b * H + hh) * T + t) * T
        const j0 = segmentStart[n]
        // dP_j = dOut·v_j, four keys at a time (independent sums, each in d order).
        let j = j0
        for (; j + 3 <= t; j += 4) {
          const v0 = kv0 + j * rowStride
          const v1 = v0 + rowStride
          const v2 = v1 + rowStride
          const v3 = v2 + rowStride
          let a0 = 0, a1 = 0, a2 = 0, a3 = 0
          for (let d = 0; d < D; d++) {
            const g = dOut[qo + d]
            a0 += g * v[v0 + d]
            a1 += g * v[v1 + d]
            a2 += g * v[v2 + d]
            a3 += g * v[v3 + d]
          }
          dP[j] = a0
          dP[j + 1] = a1
          dP[j + 2] = a2
          dP[j + 3] = a3
        }
        for (; j <= t; j++) {
          const vo = kv0 + j * rowStride
          let acc = 0
          for (let d = 0; d < D; d++) acc += dOut[qo + d] * v[vo + d]
          dP[j] = acc
        }
        let dot = 0
        for (let jj = j0; jj <= t; jj++) dot += probs[pBase + jj] * dP[jj]
        for (let jj = j0; jj <= t; jj++) dS[jj] = probs[pBase + jj] * (dP[jj] - dot) * scale
        // dq_t = Σ_j dS_j·k_j: four keys per pass, each dq[d] still adding its terms one by one in j order.
        j = j0
        for (; j + 3 <= t; j += 4) {
          const k0 = kv0 + j * rowStride
          const k1 = k0 + rowStride
          const k2 = k1 + rowStride
          const k3 = k2 + rowStride
          const s0 = dS[j]
          const s1 = dS[j + 1]
          const s2 = dS[j + 2]
          const s3 = dS[j + 3]
          for (let d = 0; d < D; d++) {
            dq[qo + d] = dq[qo + d] + s0 * k[k0 + d] + s1 * k[k1 + d] + s2 * k[k2 + d] + s3 * k[k3 + d]
          }
        }
        for (; j <= t; j++) {
          const ko = kv0 + j * rowStride
          const s0 = dS[j]
          for (let d = 0; d < D; d++) dq[qo + d] += s0 * k[ko + d]
        }
        for (let jj = j0; jj <= t; jj++) dST[jj * T + t] = dS[jj]
      }
      // dk_j += Σ_t dS[t, j]·q_t and dv_j += Σ_t p[t, j]·dOut_t over the queries t ≥ j of j's sequence, in t order
      // (the order a query-major loop adds them), four queries per pass so each dk/dv row is loaded once per four.
      const pHead = (b * H + hh) * T * T
      for (let j = 0; j < T; j++) {
        let t1 = j
        while (t1 + 1 < T && segmentStart[b * T + t1 + 1] <= j) t1++
        const ko = kv0 + j * rowStride
        let t = j
        for (; t + 3 <= t1; t += 4) {
          const q0 = ((b * T + t) * H + hh) * D
          const q1 = q0 + H * D
          const q2 = q1 + H * D
          const q3 = q2 + H * D
          const s0 = dST[j * T + t]
          const s1 = dST[j * T + t + 1]
          const s2 = dST[j * T + t + 2]
          const s3 = dST[j * T + t + 3]
          const p0 = probs[pHead + t * T + j]
          const p1 = probs[pHead + (t + 1) * T + j]
          const p2 = probs[pHead + (t + 2) * T + j]
          const p3 = probs[pHead + (t + 3) * T + j]
          for (let d = 0; d < D; d++) {
            dk[ko + d] = dk[ko + d] + s0 * q[q0 + d] + s1 * q[q1 + d] + s2 * q[q2 + d] + s3 * q[q3 + d]
            dv[ko + d] = dv[ko + d] + p0 * dOut[q0 + d] + p1 * dOut[q1 + d] + p2 * dOut[q2 + d] + p3 * dOut[q3 + d]
          }
        }
        for (; t <= t1; t++) {
          const q0 = ((b * T + t) * H + hh) * D
          const s0 = dST[j * T + t]
          const p0 = probs[pHead + t * T + j]
          for (let d = 0; d < D; d++) {
            dk[ko + d] += s0 * q[q0 + d]
            dv[ko + d] += p0 * dOut[q0 + d]
          }
        }
      }
    }
  }
}

/** a + b elementwise into a new array. */
export const add = (a: FloatArray, b: FloatArray, nm: Numerics): FloatArray => {
  const out = nm.alloc(a.length)
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i]
  return out
}
