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
