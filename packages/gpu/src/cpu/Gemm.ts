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
import { Data, Effect, Either } from "effect"
import * as os from "node:os"
import * as Blas from "./Blas.js"
import * as WasmGemm from "./WasmGemm.js"

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

/** The route asked for cannot run here; `fix` says what would make it run. */
export class GemmRouteUnavailable extends Data.TaggedError("GemmRouteUnavailable")<{
  readonly route: GemmRoute
  readonly reason: string
  readonly fix: string
}> {
  override get message() {
    return `the ${this.route} matmul route is not available: ${this.reason}. Fix: ${this.fix}`
  }
}

/** The route {@link select} chose, and one line saying which and why. */
export interface Selected {
  readonly gemm: Gemm
  readonly description: string
  /** Ends the route's helper threads (the multi-threaded WebAssembly route has some); a no-op for the others. */
  readonly close: () => void
}

/** Options of {@link select}: threads, determinism, or one route. */
export interface SelectOptions {
  /** Threads per call (default: every core). Small products run on one whatever the count. */
  readonly threads?: number
  /** One thread and a fixed summation order, so results repeat bit for bit on the same machine. */
  readonly deterministic?: boolean
  /** Exactly this route, or a {@link GemmRouteUnavailable} failure: never a substitute. */
  readonly route?: GemmRoute
}

const SPEC_DESCRIPTION = "the plain-TypeScript specification loop, 1 thread (slow)"

const plural = (n: number) => `${n} thread${n === 1 ? "" : "s"}`

const tryRoute = (route: GemmRoute, threads: number): Either.Either<Selected, GemmRouteUnavailable> => {
  const unavailable = (e: { readonly reason: string; readonly fix: string }) =>
    new GemmRouteUnavailable({ route, reason: e.reason, fix: e.fix })
  switch (route) {
    case "openblas":
    case "accelerate": {
      const platform = process.platform === "darwin" ? "accelerate" : "openblas"
      if (route !== platform) {
        return Either.left(
          new GemmRouteUnavailable({
            route,
            reason: `${route} is not this platform's BLAS (${process.platform})`,
            fix: `ask for ${platform} or a WebAssembly route`
          })
        )
      }
      return Either.mapBoth(Blas.load({ threads }), {
        onLeft: unavailable,
        onRight: (gemm) => ({ gemm, description: `${gemm.version} on ${plural(threads)}`, close: () => {} })
      })
    }
    case "wasm-relaxed-simd":
    case "wasm-simd":
      return Either.mapBoth(WasmGemm.make(route === "wasm-simd" ? "simd" : "relaxed-simd", { threads }), {
        onLeft: unavailable,
        onRight: (gemm) => ({
          gemm,
          description: `WebAssembly ${route === "wasm-simd" ? "SIMD128" : "relaxed SIMD"} on ${plural(threads)}`,
          close: gemm.close
        })
      })
    case "spec":
      return Either.right({ gemm: spec, description: SPEC_DESCRIPTION, close: () => {} })
  }
}

/**
 * {@link select} as a scoped resource: the route's helper threads end with the scope.
 *
 * @since 0.0.0
 */
export const selectScoped = (options: SelectOptions = {}) =>
  Effect.acquireRelease(select(options), (s) => Effect.sync(s.close))

/**
 * The fastest matmul route this machine has, or exactly `options.route`. Order: the platform BLAS (OpenBLAS on
 * Linux, Accelerate on macOS), WebAssembly relaxed SIMD, WebAssembly SIMD128; the description names why a faster
 * one was passed over, e.g. "WebAssembly relaxed SIMD, 1 thread: OpenBLAS not found (…); fix: install …".
 *
 * @since 0.0.0
 */
export const select = (options: SelectOptions = {}): Effect.Effect<Selected, GemmRouteUnavailable> =>
  Effect.suspend(() => {
    const asked = options.threads ?? os.availableParallelism()
    if (!Number.isInteger(asked) || asked < 1) {
      return Effect.fail(
        new GemmRouteUnavailable({
          route: options.route ?? "spec",
          reason: `threads = ${asked} is not a count of threads`,
          fix: "pass threads as a whole number ≥ 1 (or leave it out for every core)"
        })
      )
    }
    const threads = options.deterministic === true ? 1 : asked
    if (options.route !== undefined) return tryRoute(options.route, threads)
    const order: ReadonlyArray<GemmRoute> = [
      process.platform === "darwin" ? "accelerate" : "openblas",
      "wasm-relaxed-simd",
      "wasm-simd",
      "spec"
    ]
    const passed: Array<string> = []
    for (const route of order) {
      const got = tryRoute(route, threads)
      if (Either.isRight(got)) {
        const why = passed.length === 0 ? "" : `: ${passed.join("; ")}`
        return Effect.succeed({ ...got.right, description: got.right.description + why })
      }
      passed.push(`${route}: ${got.left.reason} (${got.left.fix})`)
    }
    // The spec route always succeeds, so the loop returns; this keeps the compiler's flow analysis happy.
    return Effect.succeed({ gemm: spec, description: SPEC_DESCRIPTION, close: () => {} })
  })
