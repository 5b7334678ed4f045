// The inner loops of the CPU device's attention (see ../attention.ts): two small dense products over contiguous
// f32 rows, blocked so each load feeds several independent sums (V8 keeps them in registers; no allocation, no
// closures). Both take plain offsets and strides, so one pair of kernels serves the forward, the backward and the
// KV-cache path in every orientation.

/**
 * S[sAt + r·ldS + c] = scale · Σ_d A[a0 + r·aStride + d] · B[b0 + c·bStride + d] for rows r ∈ [0, rows) and columns
 * c ∈ [c0, c1), except the columns a row cannot see: row r sees columns up to diag + r·step (causal; step 1 for
 * consecutive positions, 0 for query heads at one position), and a block of rows stops where its last row does;
 * columns past that are left as they were.
 * Two rows × four columns per block: six loads feed eight sums.
 */
export const scores = (
  A: Float32Array,
  a0: number,
  aStride: number,
  B: Float32Array,
  b0: number,
  bStride: number,
  D: number,
  rows: number,
  c0: number,
  c1: number,
  diag: number,
  step: number,
  scale: number,
  S: Float32Array,
  sAt: number,
  ldS: number
): void => {
  let r = 0
  for (; r + 1 < rows; r += 2) {
    const x0 = a0 + r * aStride
    const x1 = x0 + aStride
    const s0 = sAt + r * ldS
    const s1 = s0 + ldS
    const end = Math.min(c1, diag + step * (r + 1) + 1)
    let c = c0
    for (; c + 3 < end; c += 4) {
      const y0 = b0 + c * bStride
      const y1 = y0 + bStride
      const y2 = y1 + bStride
      const y3 = y2 + bStride
      let p00 = 0, p01 = 0, p02 = 0, p03 = 0, p10 = 0, p11 = 0, p12 = 0, p13 = 0
      for (let d = 0; d < D; d++) {
        const u = A[x0 + d]
        const w = A[x1 + d]
        const k0 = B[y0 + d]
        const k1 = B[y1 + d]
        const k2 = B[y2 + d]
        const k3 = B[y3 + d]
        p00 += u * k0
        p01 += u * k1
        p02 += u * k2
        p03 += u * k3
        p10 += w * k0
        p11 += w * k1
        p12 += w * k2
        p13 += w * k3
      }
      S[s0 + c] = p00 * scale
      S[s0 + c + 1] = p01 * scale
      S[s0 + c + 2] = p02 * scale
      S[s0 + c + 3] = p03 * scale
      S[s1 + c] = p10 * scale
      S[s1 + c + 1] = p11 * scale
      S[s1 + c + 2] = p12 * scale
      S[s1 + c + 3] = p13 * scale
    }
    for (; c < end; c++) {
      const y0 = b0 + c * bStride
      let p0 = 0, p1 = 0
      for (let d = 0; d < D; d++) {
        const k0 = B[y0 + d]
        p0 += A[x0 + d] * k0
        p1 += A[x1 + d] * k0
      }
      S[s0 + c] = p0 * scale
      S[s1 + c] = p1 * scale
    }
  }
  if (r < rows) {
    const x0 = a0 + r * aStride
    const s0 = sAt + r * ldS
    const end = Math.min(c1, diag + step * r + 1)
    let c = c0
    for (; c + 3 < end; c += 4) {
      const y0 = b0 + c * bStride
      const y1 = y0 + bStride
      const y2 = y1 + bStride
      const y3 = y2 + bStride
      let p0 = 0, p1 = 0, p2 = 0, p3 = 0
      for (let d = 0; d < D; d++) {
        const u = A[x0 + d]
        p0 += u * B[y0 + d]
        p1 += u * B[y1 + d]
        p2 += u * B[y2 + d]
        p3 += u * B[y3 + d]
      }
      S[s0 + c] = p0 * scale
      S[s0 + c + 1] = p1 * scale
      S[s0 + c + 2] = p2 * scale
      S[s0 + c + 3] = p3 * scale
    }
    for (; c < end; c++) {
      const y0 = b0 + c * bStride
      let p0 = 0
      for (let d = 0; d < D; d++) p0 += A[x0 + d] * B[y0 + d]
      S[s0 + c] = p0 * scale
    }
  }
}

/**
 * C[c0 + r·cStride + d] += Σ_{k ∈ [k0, k1)} W[w0 + r·wRow + k·wCol] · X[x0 + k·xStride + d] for r ∈ [0, rows),
 * d ∈ [0, D). `wRow`/`wCol` let W be read transposed (dV += Pᵀ·dO, dK += dSᵀ·Q) or not (O += P·V, dQ += dS·K).
 * Two rows × four k per block (four loads of X feed eight products); blocks whose eight weights are all zero (masked
 * keys) are skipped.
 */
export const accumulate = (
  W: Float32Array,
  w0: number,
  wRow: number,
  wCol: number,
  X: Float32Array,
  x0: number,
  xStride: number,
  C: Float32Array,
  c0: number,
  cStride: number,
  D: number,
  rows: number,
  k0: number,
  k1: number
): void => {
  let r = 0
  for (; r + 1 < rows; r += 2) {
    const o0 = c0 + r * cStride
    const o1 = o0 + cStride
    const wa = w0 + r * wRow
    const wb = wa + wRow
    let k = k0
    for (; k + 3 < k1; k += 4) {
      const i0 = k * wCol
      const a0 = W[wa + i0]
      const a1 = W[wa + i0 + wCol]
      const a2 = W[wa + i0 + 2 * wCol]
      const a3 = W[wa + i0 + 3 * wCol]
      const b0 = W[wb + i0]
      const b1 = W[wb + i0 + wCol]
      const b2 = W[wb + i0 + 2 * wCol]
      const b3 = W[wb + i0 + 3 * wCol]
      if (a0 === 0 && a1 === 0 && a2 === 0 && a3 === 0 && b0 === 0 && b1 === 0 && b2 === 0 && b3 === 0) continue
      const y0 = x0 + k * xStride
      const y1 = y0 + xStride
      const y2 = y1 + xStride
      const y3 = y2 + xStride
      for (let d = 0; d < D; d++) {
        const v0 = X[y0 + d]
        const v1 = X[y1 + d]
        const v2 = X[y2 + d]
        const v3 = X[y3 + d]
        C[o0 + d] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3
        C[o1 + d] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3
      }
    }
    for (; k < k1; k++) {
      const a0 = W[wa + k * wCol]
      const b0 = W[wb + k * wCol]
      if (a0 === 0 && b0 === 0) continue
      const y0 = x0 + k * xStride
      for (let d = 0; d < D; d++) {
        const v0 = X[y0 + d]
        C[o0 + d] += a0 * v0
        C[o1 + d] += b0 * v0
      }
    }
  }
  if (r < rows) {
    const o0 = c0 + r * cStride
    const wa = w0 + r * wRow
    let k = k0
    for (; k + 3 < k1; k += 4) {
      const i0 = k * wCol
      const a0 = W[wa + i0]
      const a1 = W[wa + i0 + wCol]
      const a2 = W[wa + i0 + 2 * wCol]
      const a3 = W[wa + i0 + 3 * wCol]
      if (a0 === 0 && a1 === 0 && a2 === 0 && a3 === 0) continue
      const y0 = x0 + k * xStride
      const y1 = y0 + xStride
      const y2 = y1 + xStride
      const y3 = y2 + xStride
      for (let d = 0; d < D; d++) {
        C[o0 + d] += a0 * X[y0 + d] + a1 * X[y1 + d] + a2 * X[y2 + d] + a3 * X[y3 + d]
      }
    }
    for (; k < k1; k++) {
      const a0 = W[wa + k * wCol]
      if (a0 === 0) continue
      const y0 = x0 + k * xStride
      for (let d = 0; d < D; d++) C[o0 + d] += a0 * X[y0 + d]
    }
  }
}

/**
 * One query row's online-softmax step over its scores in a tile, S[s0 + c] for c ∈ [c0, c1), of which keys lo…hi
 * (inclusive; none when lo > hi) are visible: turns them into exp(s − m) and the rest into 0, where m is the new
 * running max (stats[mAt], −∞ before the first tile); updates the normaliser stats[lAt] and rescales the output
 * row O[o0 … o0 + D) by exp(mOld − m).
 */
export const softmaxRow = (
  S: Float32Array,
  s0: number,
  c0: number,
  lo: number,
  hi: number,
  c1: number,
  stats: Float32Array,
  mAt: number,
  lAt: number,
  O: Float32Array,
  o0: number,
  D: number
): void => {
  if (lo > hi) {
    for (let c = c0; c < c1; c++) S[s0 + c] = 0
    return
  }
  let mx = -Infinity
  for (let c = lo; c <= hi; c++) if (S[s0 + c] > mx) mx = S[s0 + c]
  const mOld = stats[mAt]
  const m = mOld > mx ? mOld : mx
  // exp(−∞) = 0: the first tile a row sees finds nothing to rescale.
  const corr = Math.exp(mOld - m)
  let sum = 0
  for (let c = c0; c < lo; c++) S[s0 + c] = 0
  for (let c = lo; c <= hi; c++) {
    const e = Math.exp(S[s0 + c] - m)
    S[s0 + c] = e
    sum += e
  }
  for (let c = hi + 1; c < c1; c++) S[s0 + c] = 0
  stats[lAt] = stats[lAt] * corr + sum
  stats[mAt] = m
  if (corr !== 1) { for (let d = 0; d < D; d++) O[o0 + d] *= corr }
}

/**
 * One query row of the backward over a tile: for keys lo…hi, P = exp(s − L) replaces the scores at S[p0 + c] and
 * dS = P·(dP − delta)·scale replaces dP at S[q0 + c]; both are 0 elsewhere in [c0, c1).
 */
export const gradRow = (
  S: Float32Array,
  p0: number,
  q0: number,
  c0: number,
  lo: number,
  hi: number,
  c1: number,
  L: number,
  delta: number,
  scale: number
): void => {
  for (let c = c0; c < c1; c++) {
    if (c < lo || c > hi) {
      S[p0 + c] = 0
      S[q0 + c] = 0
    } else {
      const p = Math.exp(S[p0 + c] - L)
      S[p0 + c] = p
      S[q0 + c] = p * (S[q0 + c] - delta) * scale
    }
  }
}

/** The kernels, as one route provides them (plain JS here; WebAssembly SIMD in attentionWasm.ts). */
export interface Kernels {
  readonly scores: typeof scores
  readonly accumulate: typeof accumulate
  readonly softmaxRow: typeof softmaxRow
  readonly gradRow: typeof gradRow
}

export const jsKernels: Kernels = { scores, accumulate, softmaxRow, gradRow }
