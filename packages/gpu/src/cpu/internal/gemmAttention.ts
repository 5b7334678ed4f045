/**
 * Causal GQA attention of a packed batch with its products on the device's matmul route: per batch row, query head
 * and block of query rows, S = scale·Q·Kᵀ over the keys the block can see, a masked softmax, O = P·V; the backward
 * recomputes P from the saved logsumexp and runs dP = dO·Vᵀ, dQ = dS·K, dK += dSᵀ·Q, dV += Pᵀ·dO as matmuls.
 * Memory is two blocks of [rows × keys] scratch (bounded by the block size times the row's length, never T×T per
 * head). The arithmetic is `ops/attention.ts`' cpuAttention's; the products' summation order is the route's.
 *
 * Layouts and argument records as `../attention.ts` (its `Forward` / `Backward`; `tile` and `route` are not read):
 * q, out, dOut, dq [N, H, D]; k, v, dk, dv [N, KV, D]; lse [N, H]; segmentStart [N].
 */
import type * as Attn from "../attention.js"
import type { Gemm } from "../Gemm.js"

/** Query rows per block. */
export const BLOCK = 128

/** Scratch values one call needs for rows of T tokens (two blocks of scores). */
export const scratchSize = (T: number) => 2 * Math.min(BLOCK, T) * T

// The first key a block of query rows t0…t1−1 can see (the earliest segment start among them).
const firstKey = (segmentStart: Int32Array, n0: number, rows: number) => {
  let lo = segmentStart[n0]
  for (let r = 1; r < rows; r++) if (segmentStart[n0 + r] < lo) lo = segmentStart[n0 + r]
  return lo
}

// S[r, c] (keys kLo + c) ← exp(S − m) masked to the row's visible keys, normalised or not; returns nothing.
// With `lse`, P = exp(S − lse) (the backward's recomputation); else a softmax whose logsumexp is written.
const softmaxRows = (
  S: Float32Array,
  ld: number,
  rows: number,
  t0: number,
  kLo: number,
  segmentStart: Int32Array,
  n0: number,
  lse: Float32Array,
  l0: number,
  lStride: number,
  recompute: boolean
) => {
  for (let r = 0; r < rows; r++) {
    const o = r * ld
    const lo = segmentStart[n0 + r] - kLo
    const hi = t0 + r - kLo
    for (let c = 0; c < lo; c++) S[o + c] = 0
    for (let c = hi + 1; c < ld; c++) S[o + c] = 0
    if (recompute) {
      const l = lse[l0 + r * lStride]
      for (let c = lo; c <= hi; c++) S[o + c] = Math.exp(Math.fround(S[o + c]) - l)
      continue
    }
    let max = -Infinity
    for (let c = lo; c <= hi; c++) if (S[o + c] > max) max = S[o + c]
    let sum = 0
    for (let c = lo; c <= hi; c++) {
      const e = Math.exp(S[o + c] - max)
      S[o + c] = e
      sum += e
    }
    const inv = 1 / sum
    for (let c = lo; c <= hi; c++) S[o + c] *= inv
    lse[l0 + r * lStride] = max + Math.log(sum)
  }
}

/** One block of query rows of one (batch row, query head): where its rows, keys and outputs are. */
interface Block {
  readonly h: number
  readonly t0: number
  readonly rows: number
  /** Packed index of the block's first row. */
  readonly n0: number
  /** The first key the block can see, and how many keys from it. */
  readonly kLo: number
  readonly keys: number
  /** Offsets of the block's first q row ([N, H, D]) and first key row ([N, KV, D]). */
  readonly qo: number
  readonly ko: number
}

// Visits every block of query rows of every batch row and query head, in order.
const eachBlock = (a: Attn.Forward, visit: (block: Block) => void) => {
  const { batch: B, headDim: D, heads: H, kvHeads: KV, seq: T } = a.shape
  const G = H / KV
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = (h / G) | 0
      for (let t0 = 0; t0 < T; t0 += BLOCK) {
        const rows = Math.min(BLOCK, T - t0)
        const n0 = b * T + t0
        const kLo = firstKey(a.segmentStart, n0, rows)
        visit({ h, t0, rows, n0, kLo, keys: t0 + rows - kLo, qo: (n0 * H + h) * D, ko: ((b * T + kLo) * KV + g) * D })
      }
    }
  }
}

/** Writes out [N, H, D] and lse [N, H]; `a.scratch` holds {@link scratchSize} values. */
export const forward = (gemm: Gemm, a: Attn.Forward): void => {
  const { headDim: D, heads: H, kvHeads: KV, scale } = a.shape
  eachBlock(a, ({ h, kLo, keys, ko, n0, qo, rows, t0 }) => {
    const S = a.scratch
    gemm.sgemm(false, true, rows, keys, D, scale, a.q.subarray(qo), H * D, a.k.subarray(ko), KV * D, 0, S, keys)
    softmaxRows(S, keys, rows, t0, kLo, a.segmentStart, n0, a.lse, n0 * H + h, H, false)
    gemm.sgemm(false, false, rows, D, keys, 1, S, keys, a.v.subarray(ko), KV * D, 0, a.out.subarray(qo), H * D)
  })
}

/** Writes dq [N, H, D], dk and dv [N, KV, D] from dOut and the forward's q, k, v, out, lse. */
export const backward = (gemm: Gemm, a: Attn.Backward): void => {
  const { batch: B, headDim: D, heads: H, kvHeads: KV, scale, seq: T } = a.shape
  a.dk.fill(0, 0, B * T * KV * D)
  a.dv.fill(0, 0, B * T * KV * D)
  eachBlock(a, ({ h, kLo, keys, ko, n0, qo, rows, t0 }) => {
    const P = a.scratch
    const dS = a.scratch.subarray(rows * keys)
    const qa = a.q.subarray(qo)
    const ka = a.k.subarray(ko)
    const dOa = a.dOut.subarray(qo)
    gemm.sgemm(false, true, rows, keys, D, scale, qa, H * D, ka, KV * D, 0, P, keys)
    softmaxRows(P, keys, rows, t0, kLo, a.segmentStart, n0, a.lse, n0 * H + h, H, true)
    gemm.sgemm(false, true, rows, keys, D, 1, dOa, H * D, a.v.subarray(ko), KV * D, 0, dS, keys)
    for (let r = 0; r < rows; r++) {
      const o = qo + r * H * D
      let delta = 0
      for (let d = 0; d < D; d++) delta += a.dOut[o + d] * a.out[o + d]
      const base = r * keys
      for (let c = 0; c < keys; c++) dS[base + c] = P[base + c] * (dS[base + c] - delta) * scale
    }
    gemm.sgemm(false, false, rows, D, keys, 1, dS, keys, ka, KV * D, 0, a.dq.subarray(qo), H * D)
    gemm.sgemm(true, false, keys, D, rows, 1, dS, keys, qa, H * D, 1, a.dk.subarray(ko), KV * D)
    gemm.sgemm(true, false, keys, D, rows, 1, P, keys, dOa, H * D, 1, a.dv.subarray(ko), KV * D)
  })
}
