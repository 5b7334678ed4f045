/**
 * The CPU device's matrix multiply: one contract, several routes (the platform BLAS through an FFI, WebAssembly
 * SIMD, and the plain-TypeScript specification that both are tested against).
 *
 * Row-major, as the model stores its tensors: C[M×N] = alpha·op(A)·op(B) + beta·C, where op(X) is X or Xᵀ.
 * `lda`, `ldb`, `ldc` are the row strides (in elements) of A, B and C as stored. Arrays are views; a route may
 * need them to live in its own memory (see {@link Gemm.alloc}) and copies otherwise.
 *
 * @since 0.0.0
 */

/** Which implementation a {@link Gemm} is. */
export type GemmRoute = "openblas" | "accelerate" | "wasm-relaxed-simd" | "wasm-simd" | "spec"

/** @since 0.0.0 */
export interface Gemm {
  readonly route: GemmRoute
  /** Threads the route uses for one call (1 in deterministic mode). */
  readonly threads: number
  /** A zeroed f32 array in the route's memory (a route that needs no memory of its own returns a plain array). */
  readonly alloc: (n: number) => Float32Array
  readonly sgemm: (
    transA: boolean,
    transB: boolean,
    M: number,
    N: number,
    K: number,
    alpha: number,
    A: Float32Array,
    lda: number,
    B: Float32Array,
    ldb: number,
    beta: number,
    C: Float32Array,
    ldc: number
  ) => void
}

/**
 * The specification: the plain triple loop with an f64 sum in k order, stored as f32. Slow; every other route is
 * tested against it (and it runs anywhere).
 */
export const spec: Gemm = {
  route: "spec",
  threads: 1,
  alloc: (n) => new Float32Array(n),
  sgemm: (transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) => {
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        let s = 0
        for (let k = 0; k < K; k++) {
          const a = transA ? A[k * lda + m] : A[m * lda + k]
          const b = transB ? B[n * ldb + k] : B[k * ldb + n]
          s += a * b
        }
        const i = m * ldc + n
        C[i] = beta === 0 ? alpha * s : alpha * s + beta * C[i]
      }
    }
  }
}
