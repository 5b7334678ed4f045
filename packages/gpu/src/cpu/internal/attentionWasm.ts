/**
 * The WebAssembly SIMD128 build of the attention inner products (`attention-simd.wasm`, from attentionWat.ts),
 * instantiated over a given shared memory and wrapped in the same signature as the JS kernels: arrays are views of
 * that memory, so an offset becomes an address (byteOffset + 4·index).
 *
 * @internal
 */
import type { Kernels } from "./attentionKernels.js"
import { attentionWasmFile } from "./attentionWat.js"
import { compileKernelFile, Wasm, type WasmMemory } from "./wasmApi.js"

export { Wasm, type WasmMemory }

type ScoresAt = (
  a: number,
  as: number,
  b: number,
  bs: number,
  D: number,
  rows: number,
  c0: number,
  c1: number,
  diag: number,
  step: number,
  scale: number,
  s: number,
  ldS: number
) => void

type AccumulateAt = (
  w: number,
  wRow: number,
  wCol: number,
  x: number,
  xs: number,
  c: number,
  cs: number,
  D: number,
  rows: number,
  k0: number,
  k1: number
) => void

type SoftmaxRowAt = (
  s: number,
  c0: number,
  lo: number,
  hi: number,
  c1: number,
  m: number,
  l: number,
  o: number,
  D: number
) => void

type GradRowAt = (
  p: number,
  q: number,
  c0: number,
  lo: number,
  hi: number,
  c1: number,
  L: number,
  delta: number,
  scale: number
) => void

/** The kernels over `memory` (head_dim must be a multiple of 4; every array a view of that memory). */
export const wasmKernels = (memory: WasmMemory): Kernels => {
  const ex = new Wasm.Instance(compileKernelFile(attentionWasmFile, "cpu attention"), { env: { memory } }).exports
  const scoresAt = ex.scores as ScoresAt
  const accumulateAt = ex.accumulate as AccumulateAt
  const softmaxRowAt = ex.softmaxRow as SoftmaxRowAt
  const gradRowAt = ex.gradRow as GradRowAt
  return {
    softmaxRow: (S, s0, c0, lo, hi, c1, stats, mAt, lAt, O, o0, D) =>
      softmaxRowAt(
        S.byteOffset + 4 * s0,
        c0,
        lo,
        hi,
        c1,
        stats.byteOffset + 4 * mAt,
        stats.byteOffset + 4 * lAt,
        O.byteOffset + 4 * o0,
        D
      ),
    gradRow: (S, p0, q0, c0, lo, hi, c1, L, delta, scale) =>
      gradRowAt(S.byteOffset + 4 * p0, S.byteOffset + 4 * q0, c0, lo, hi, c1, L, delta, scale),
    scores: (A, a0, aStride, B, b0, bStride, D, rows, c0, c1, diag, step, scale, S, sAt, ldS) =>
      scoresAt(
        A.byteOffset + 4 * a0,
        4 * aStride,
        B.byteOffset + 4 * b0,
        4 * bStride,
        D,
        rows,
        c0,
        c1,
        diag,
        step,
        scale,
        S.byteOffset + 4 * sAt,
        4 * ldS
      ),
    accumulate: (W, w0, wRow, wCol, X, x0, xStride, C, c0, cStride, D, rows, k0, k1) =>
      accumulateAt(
        W.byteOffset + 4 * w0,
        4 * wRow,
        4 * wCol,
        X.byteOffset + 4 * x0,
        4 * xStride,
        C.byteOffset + 4 * c0,
        4 * cStride,
        D,
        rows,
        k0,
        k1
      )
  }
}
