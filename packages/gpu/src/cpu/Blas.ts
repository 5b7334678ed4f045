/**
 * The platform BLAS route of the CPU device's matmul ({@link Gemm}): `cblas_sgemm` called through the koffi FFI
 * (a prebuilt npm package; nothing is compiled), from Debian's OpenBLAS (`libopenblas0-pthread`) on Linux or
 * Apple's Accelerate on macOS, loaded at run time. Several times faster than the WebAssembly routes where present
 * (bench/results/cpu-matmul.md); about 0.2 µs of FFI overhead per call.
 *
 * Loading never falls back silently: {@link load} returns the loaded route or a {@link BlasUnavailable} with the
 * reason and the fix, and the caller ({@link Gemm.select}) decides and says which route it uses.
 *
 * Arrays are passed as they are (koffi passes a typed array's own memory, byte offset included), so `alloc`
 * returns plain arrays. The thread count is OpenBLAS's process-wide setting; each call sets it when it differs, so
 * two routes with different counts used at the same moment from two threads can run one call on the other's count
 * (the result is the same; only the speed differs). OpenBLAS's result can differ in the last bits between CPUs (it picks its kernels for
 * the CPU it runs on) and between thread counts.
 *
 * @since 0.0.0
 */
import { Data, Either } from "effect"
import type * as KoffiModule from "koffi"
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import type { Gemm } from "./Gemm.js"
import { checkArgs, scaleOnly } from "./internal/gemmArgs.js"

/** The platform BLAS is not usable here, with the reason and what to do. */
export class BlasUnavailable extends Data.TaggedError("BlasUnavailable")<{
  readonly route: "openblas" | "accelerate"
  readonly reason: string
  readonly fix: string
}> {}

/** A loaded BLAS route: {@link Gemm} plus what was loaded. */
export interface BlasGemm extends Gemm {
  readonly route: "openblas" | "accelerate"
  /** The file loaded. */
  readonly library: string
  /** e.g. "OpenBLAS 0.3.21 (libopenblas0-pthread, SkylakeX kernels)" or "Accelerate". */
  readonly version: string
}

const INSTALL_FIX = "install libopenblas0-pthread (as root: apt-get install -y libopenblas0-pthread; npm start does it)"

/** Where Debian (and most Linux distributions) put OpenBLAS; the pthread build first, as the one we ask for. */
const linuxCandidates = (): Array<string> => {
  const triplet = process.arch === "arm64" ? "aarch64-linux-gnu" : "x86_64-linux-gnu"
  return [
    `/usr/lib/${triplet}/openblas-pthread/libopenblas.so.0`,
    `/usr/lib/${triplet}/libopenblas.so.0`,
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0"
  ]
}

const ACCELERATE = "/System/Library/Frameworks/Accelerate.framework/Accelerate"

// CBLAS enum values (cblas.h).
const RowMajor = 101
const NoTrans = 111
const Trans = 112

type Koffi = typeof KoffiModule

const requireKoffi = (route: "openblas" | "accelerate"): Either.Either<Koffi, BlasUnavailable> => {
  try {
    // Loaded lazily: koffi's native module is prebuilt per platform, and a platform without one must get a reason,
    // not an import error.
    return Either.right(createRequire(import.meta.url)("koffi") as Koffi)
  } catch (e) {
    return Either.left(
      new BlasUnavailable({
        route,
        reason: `the koffi FFI does not load on ${process.platform}-${process.arch} (${String(e)})`,
        fix: "run `npm ci` on this machine (koffi ships its native module per platform)"
      })
    )
  }
}

const packageOf = (path: string) =>
  path.includes("openblas-pthread")
    ? "libopenblas0-pthread"
    : path.includes("openblas-openmp")
    ? "libopenblas0-openmp"
    : path.includes("openblas-serial")
    ? "libopenblas0-serial"
    : undefined

/**
 * Loads the platform's BLAS: OpenBLAS on Linux, Accelerate on macOS, and nothing elsewhere. `threads` (default:
 * every core) is the threads one call uses.
 *
 * @since 0.0.0
 */
export const load = (options: { readonly threads?: number } = {}): Either.Either<BlasGemm, BlasUnavailable> => {
  const threads = options.threads ?? os.availableParallelism()
  const route = process.platform === "darwin" ? "accelerate" : "openblas"
  if (!Number.isInteger(threads) || threads < 1) {
    return Either.left(
      new BlasUnavailable({ route, reason: `threads = ${threads} is not a count`, fix: "pass threads ≥ 1" })
    )
  }
  if (process.platform !== "linux" && process.platform !== "darwin") {
    return Either.left(
      new BlasUnavailable({
        route,
        reason: `no platform BLAS is looked for on ${process.platform}`,
        fix: "use a WebAssembly route"
      })
    )
  }
  const paths = route === "accelerate" ? [ACCELERATE] : linuxCandidates()
  const path = paths.find((p) => existsSync(p))
  if (path === undefined) {
    return Either.left(
      new BlasUnavailable({
        route,
        reason: route === "openblas" ? `OpenBLAS not found (looked in ${paths.join(", ")})` : "Accelerate not found",
        fix: route === "openblas" ? INSTALL_FIX : "run on macOS with the Accelerate framework"
      })
    )
  }
  return Either.flatMap(requireKoffi(route), (koffi) => {
    let lib: KoffiModule.LibraryHandle
    try {
      lib = koffi.load(path)
    } catch (e) {
      return Either.left(
        new BlasUnavailable({
          route,
          reason: `${path} does not load (${String(e)})`,
          fix: route === "openblas" ? `reinstall it: ${INSTALL_FIX}` : "check the Accelerate framework"
        })
      )
    }
    const sgemm = lib.func(
      "void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int)"
    )
    const sgemv = lib.func(
      "void cblas_sgemv(int, int, int, int, float, const float *, int, const float *, int, float, float *, int)"
    )
    let version = "Accelerate"
    let setThreads = (_n: number) => {}
    if (route === "openblas") {
      const config = lib.func("const char *openblas_get_config(void)")() as string
      const core = lib.func("const char *openblas_get_corename(void)")() as string
      const setNum = lib.func("void openblas_set_num_threads(int)")
      const pkg = packageOf(path)
      // config reads like "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
      const name = config.split(" ").slice(0, 2).join(" ")
      version = `${name} (${pkg !== undefined ? `${pkg}, ` : ""}${core} kernels)`
      const getNum = lib.func("int openblas_get_num_threads(void)")
      // Asked of OpenBLAS each call (~0.05 µs), not remembered here: the count is process-wide, and a route in
      // another worker thread may have changed it.
      setThreads = (n) => {
        if (getNum() !== n) setNum(n)
      }
    } else {
      // macOS 15+: BLASSetThreading(BLAS_THREADING_SINGLE_THREADED = 1 | MULTI_THREADED = 0). Untested here (Linux).
      try {
        const setThreading = lib.func("int BLASSetThreading(int)")
        setThreads = (n) => {
          setThreading(n === 1 ? 1 : 0)
        }
      } catch {
        // Older macOS: Accelerate decides its own threads.
      }
    }
    const gemm: BlasGemm = {
      route,
      threads,
      library: path,
      version,
      alloc: (n) => new Float32Array(n),
      sgemm: (transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) => {
        checkArgs(transA, transB, M, N, K, A, lda, B, ldb, C, ldc)
        if (M === 0 || N === 0) return
        // cblas rejects K = 0 with lda < 1 on some builds; the answer is C = beta·C anyway.
        if (K === 0) return scaleOnly(M, N, beta, C, ldc)
        setThreads(threads)
        const opA = transA ? Trans : NoTrans, opB = transB ? Trans : NoTrans
        if (M === 1) {
          // One row (decoding at batch 1): OpenBLAS 0.3.21's sgemm packs all of B first, several times slower than
          // gemv, which streams it once. C's row = op(B)ᵀ·a, with a = A's row (or column, at stride lda).
          const incA = transA ? lda : 1
          if (transB) sgemv(RowMajor, NoTrans, N, K, alpha, B, ldb, A, incA, beta, C, 1)
          else sgemv(RowMajor, Trans, K, N, alpha, B, ldb, A, incA, beta, C, 1)
          return
        }
        sgemm(RowMajor, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
      }
    }
    return Either.right(gemm)
  })
}
