/**
 * Argument checks and the K = 0 case shared by every sgemm route, so a route gets the same clear error for the
 * same bad call (an FFI or WebAssembly route would otherwise read or write past an array's end).
 *
 * @internal
 */

const dim = (name: string, v: number) => {
  if (!Number.isInteger(v) || v < 0) {
    throw new RangeError(`sgemm: ${name} = ${v} must be a whole number ≥ 0 (the matrix's size in elements)`)
  }
}

const operand = (name: string, x: Float32Array, rows: number, cols: number, ld: number, ldName: string) => {
  if (!Number.isInteger(ld) || ld < Math.max(1, cols)) {
    throw new RangeError(
      `sgemm: ${ldName} = ${ld} is less than the ${cols} columns ${name} has as stored; pass its row stride ` +
        `(≥ ${Math.max(1, cols)})`
    )
  }
  const need = rows === 0 || cols === 0 ? 0 : (rows - 1) * ld + cols
  if (x.length < need) {
    throw new RangeError(
      `sgemm: ${name} has ${x.length} elements but ${rows} rows × ${cols} columns at stride ${ld} need ${need}; ` +
        `pass a larger array or smaller sizes`
    )
  }
}

/** Throws a RangeError naming the argument when the call would read or write outside its arrays. */
export const checkArgs = (
  transA: boolean,
  transB: boolean,
  M: number,
  N: number,
  K: number,
  A: Float32Array,
  lda: number,
  B: Float32Array,
  ldb: number,
  C: Float32Array,
  ldc: number
) => {
  dim("M", M)
  dim("N", N)
  dim("K", K)
  // As stored: op(A) is M×K, so A is K×M when transposed; op(B) is K×N, so B is N×K when transposed.
  operand(transA ? "A (transposed, K×M)" : "A (M×K)", A, transA ? K : M, transA ? M : K, lda, "lda")
  operand(transB ? "B (transposed, N×K)" : "B (K×N)", B, transB ? N : K, transB ? K : N, ldb, "ldb")
  operand("C (M×N)", C, M, N, ldc, "ldc")
}

/** K = 0: op(A)·op(B) is all zeros, so C = beta·C (and beta = 0 sets zeros without reading C, as BLAS does). */
export const scaleOnly = (M: number, N: number, beta: number, C: Float32Array, ldc: number) => {
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) C[m * ldc + n] = beta === 0 ? 0 : beta * C[m * ldc + n]
  }
}
