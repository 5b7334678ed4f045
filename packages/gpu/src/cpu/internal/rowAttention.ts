/**
 * One query row of causal attention against keys/values j0…j1 (inclusive) of a strided store, in f32 with f64
 * sums: the arithmetic of `ops/attention.ts`' cpuAttention for one (row, head). Shared by the packed forward, the
 * KV-cache decode and the backward's recomputation. `scores` is caller-owned scratch of ≥ j1 + 1 values.
 */

/** out[oOff…+D) = Σ_j softmax(q·k_j·scale)·v_j; returns the row's logsumexp. */
export const attendRow = (
  q: Float32Array,
  qOff: number,
  k: Float32Array,
  v: Float32Array,
  kBase: number,
  stride: number,
  j0: number,
  j1: number,
  D: number,
  scale: number,
  out: Float32Array,
  oOff: number,
  scores: Float64Array
): number => {
  let max = -Infinity
  for (let j = j0; j <= j1; j++) {
    const ko = kBase + j * stride
    let dot = 0
    for (let d = 0; d < D; d++) dot += q[qOff + d] * k[ko + d]
    const s = Math.fround(Math.fround(dot) * scale)
    scores[j] = s
    if (s > max) max = s
  }
  let sum = 0
  for (let j = j0; j <= j1; j++) {
    const e = Math.exp(scores[j] - max)
    scores[j] = e
    sum += e
  }
  for (let d = 0; d < D; d++) out[oOff + d] = 0
  for (let j = j0; j <= j1; j++) {
    const p = Math.fround(scores[j] / sum)
    const vo = kBase + j * stride
    for (let d = 0; d < D; d++) out[oOff + d] += p * v[vo + d]
  }
  return max + Math.log(sum)
}

/**
 * Backward of {@link attendRow} for one row, recomputing its probabilities from the logsumexp: adds to dq[qOff…],
 * dk_j and dv_j. delta = dOut·out.
 */
export const attendRowBackward = (
  dOut: Float32Array,
  q: Float32Array,
  qOff: number,
  k: Float32Array,
  v: Float32Array,
  kBase: number,
  stride: number,
  j0: number,
  j1: number,
  D: number,
  scale: number,
  out: Float32Array,
  lse: number,
  dq: Float32Array,
  dk: Float32Array,
  dv: Float32Array
): void => {
  let delta = 0
  for (let d = 0; d < D; d++) delta += dOut[qOff + d] * out[qOff + d]
  for (let j = j0; j <= j1; j++) {
    const ko = kBase + j * stride
    let dot = 0
    let dp = 0
    for (let d = 0; d < D; d++) {
      dot += q[qOff + d] * k[ko + d]
      dp += dOut[qOff + d] * v[ko + d]
    }
    const p = Math.exp(Math.fround(Math.fround(dot) * scale) - lse)
    const ds = p * (dp - delta) * scale
    for (let d = 0; d < D; d++) {
      dq[qOff + d] += ds * k[ko + d]
      dk[ko + d] += ds * q[qOff + d]
      dv[ko + d] += p * dOut[qOff + d]
    }
  }
}
