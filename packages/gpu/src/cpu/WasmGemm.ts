/**
 * The WebAssembly SIMD routes of the CPU device's matmul ({@link Gemm}): a register-blocked sgemm (4×8 block of C
 * in vector accumulators, B packed to panels) built from `internal/sgemmWat.ts` into the committed
 * `internal/sgemm-*.wasm`. Runs wherever Node runs. With `threads` > 1, helper threads share the memory and each
 * takes a band of C's rows or columns (products under ~1 M multiply-adds per thread stay on the calling thread);
 * the result is bit-identical for every thread count.
 *
 * - `wasm-simd`: SIMD128 multiply then add.
 * - `wasm-relaxed-simd`: relaxed SIMD's multiply-add, fused on CPUs with FMA (so its last bits can differ between
 *   CPUs). Node 20 ships it behind `--experimental-wasm-relaxed-simd`, which this module sets before compiling.
 *
 * Memory: each instance owns a shared, growable WebAssembly.Memory. {@link Gemm.alloc} hands out views into it, so
 * tensors allocated there are multiplied in place; arrays from anywhere else are copied in (and C back out) on
 * every call — correct, but slower. The memory is shared because growing a non-shared memory detaches every view
 * handed out before; a shared one keeps them valid.
 *
 * @since 0.0.0
 */
import { Data, Either } from "effect"
import { readFileSync } from "node:fs"
import * as v8 from "node:v8"
import type { Gemm } from "./Gemm.js"
import { checkArgs, scaleOnly } from "./internal/gemmArgs.js"
import type { WasmVariant } from "./internal/sgemmWat.js"
import { blocking, workBytes } from "./internal/sgemmWat.js"
import type { WasmMemory, WasmModule } from "./internal/wasmApi.js"
import { Wasm } from "./internal/wasmApi.js"
import * as Threads from "./internal/wasmThreads.js"

/** A WebAssembly route this Node cannot run, with the reason and what to do. */
export class WasmUnavailable extends Data.TaggedError("WasmUnavailable")<{
  readonly route: "wasm-simd" | "wasm-relaxed-simd"
  readonly reason: string
  readonly fix: string
}> {}

const PAGE = 65536
const MAX_PAGES = 65536
// 64-byte alignment: each allocation starts on its own cache line.
const ALIGN = 64

// Below this many multiply-adds per thread, waking a helper (tens of µs) costs more than it saves.
const MIN_PART = 1 << 20

const modules = new Map<WasmVariant, WasmModule>()

const compile = (variant: WasmVariant): Either.Either<WasmModule, WasmUnavailable> => {
  const cached = modules.get(variant)
  if (cached !== undefined) return Either.right(cached)
  const route = variant === "simd" ? "wasm-simd" : "wasm-relaxed-simd"
  let bytes: Uint8Array
  try {
    bytes = readFileSync(new URL(`./internal/sgemm-${variant}.wasm`, import.meta.url))
  } catch (e) {
    return Either.left(
      new WasmUnavailable({
        route,
        reason: `its kernel file is missing (${String(e)})`,
        fix: "run `npm run build:wasm` in the envtrain checkout"
      })
    )
  }
  // Node 20's V8 (11.3) compiles relaxed SIMD only behind this flag (checked: validate is false without it, true
  // with it), and the flag must be set before compiling. Newer Nodes have it on; they are not touched.
  if (variant === "relaxed-simd" && !Wasm.validate(bytes)) v8.setFlagsFromString("--experimental-wasm-relaxed-simd")
  if (!Wasm.validate(bytes)) {
    return Either.left(
      new WasmUnavailable({
        route,
        reason: `this Node (${process.version}, V8 ${process.versions.v8}) cannot compile ${
          variant === "simd" ? "WebAssembly SIMD128 with shared memory" : "WebAssembly relaxed SIMD"
        }`,
        fix: variant === "simd" ? "use Node 20 or newer" : "use Node 20 or newer, or the wasm-simd route"
      })
    )
  }
  const mod = new Wasm.Module(bytes)
  modules.set(variant, mod)
  return Either.right(mod)
}

/** A WebAssembly route whose memory holds its tensors: {@link Gemm} plus the memory, for workers to share. */
export interface WasmGemm extends Gemm {
  readonly route: "wasm-simd" | "wasm-relaxed-simd"
  readonly memory: WasmMemory
  /** Ends the helper threads (threads > 1); the route must not be called after. */
  readonly close: () => void
}

type Sgemm = (...args: Threads.SgemmArgs) => void

/**
 * Compiles (once per process) and instantiates a WebAssembly route with its own memory.
 *
 * @since 0.0.0
 */
export const make = (
  variant: WasmVariant,
  options: { readonly threads?: number } = {}
): Either.Either<WasmGemm, WasmUnavailable> =>
  Either.map(compile(variant), (mod) => {
    const threads = options.threads ?? 1
    if (!Number.isInteger(threads) || threads < 1) {
      throw new RangeError(`${variant} sgemm: threads = ${threads} must be a whole number ≥ 1`)
    }
    const memory = new Wasm.Memory({ initial: 1, maximum: MAX_PAGES, shared: true })
    const run = new Wasm.Instance(mod, { env: { memory } }).exports.sgemm as Sgemm
    // Every buffer a view of this memory was made on (each grow gives `memory.buffer` a new object; old views keep
    // theirs), so a view's buffer tells whether it lives here.
    const buffers = new WeakSet<ArrayBufferLike>()
    let top = ALIGN // address 0 stays unused
    const reserve = (bytes: number) => {
      const at = top
      const end = at + Math.ceil(bytes / ALIGN) * ALIGN
      if (end > MAX_PAGES * PAGE) {
        throw new RangeError(
          `${variant} sgemm: its WebAssembly memory would pass 4 GiB (${end} bytes); ` +
            `allocate fewer or smaller tensors, or use the OpenBLAS route (arrays of any size)`
        )
      }
      if (end > memory.buffer.byteLength) memory.grow(Math.ceil((end - memory.buffer.byteLength) / PAGE))
      top = end
      return at
    }
    const view = (at: number, n: number) => {
      const buffer = memory.buffer
      buffers.add(buffer)
      return new Float32Array(buffer, at, n)
    }
    // One packing area per thread.
    const works = Array.from({ length: threads }, () => reserve(workBytes()))
    const helpers = threads > 1 ? Threads.start(mod, memory, threads - 1, `${variant} sgemm`) : undefined
    // Staging areas for arrays that live elsewhere: reused, replaced by a larger one when too small.
    const staging: Array<{ at: number; n: number }> = [{ at: 0, n: 0 }, { at: 0, n: 0 }, { at: 0, n: 0 }]
    const address = (x: Float32Array, span: number, slot: number) => {
      if (buffers.has(x.buffer)) return { at: x.byteOffset, staged: undefined }
      const s = staging[slot]
      if (s.n < span) {
        s.at = reserve(span * 4)
        s.n = span
      }
      const staged = view(s.at, span)
      staged.set(x.subarray(0, span))
      return { at: s.at, staged }
    }
    const gemm: WasmGemm = {
      route: variant === "simd" ? "wasm-simd" : "wasm-relaxed-simd",
      threads,
      memory,
      close: () => helpers?.close(),
      alloc: (n) => {
        if (!Number.isInteger(n) || n < 0) {
          throw new RangeError(`${variant} sgemm: alloc(${n}) needs a whole number of elements ≥ 0`)
        }
        return view(reserve(n * 4), n)
      },
      sgemm: (transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) => {
        checkArgs(transA, transB, M, N, K, A, lda, B, ldb, C, ldc)
        if (M === 0 || N === 0) return
        if (K === 0) return scaleOnly(M, N, beta, C, ldc)
        const a = address(A, ((transA ? K : M) - 1) * lda + (transA ? M : K), 0)
        const b = address(B, ((transB ? N : K) - 1) * ldb + (transB ? K : N), 1)
        const spanC = (M - 1) * ldc + N
        // Copied in even when beta = 0: its gaps between rows (ldc > N) go back out unchanged.
        const c = address(C, spanC, 2)
        const ta = transA ? 1 : 0, tb = transB ? 1 : 0
        const parts = helpers === undefined ? 1 : Math.min(threads, Math.floor((M * N * K) / MIN_PART))
        if (parts <= 1) {
          run(ta, tb, M, N, K, alpha, a.at, lda, b.at, ldb, beta, c.at, ldc, works[0])
        } else {
          // Bands of C: rows when C is taller than wide (each part packs its own copy of B), else columns.
          const byRows = M >= N
          const unit = byRows ? blocking.MR : blocking.NR
          const extent = byRows ? M : N
          const band = Math.ceil(Math.ceil(extent / parts) / unit) * unit
          const list: Array<Threads.SgemmArgs> = []
          for (let p = 0, at = 0; at < extent; p++, at += band) {
            const size = Math.min(band, extent - at)
            const row = byRows ? at : 0, col = byRows ? 0 : at
            const aAt = a.at + 4 * (transA ? row : row * lda), bAt = b.at + 4 * (transB ? col * ldb : col)
            const m = byRows ? size : M, n = byRows ? N : size
            list.push([ta, tb, m, n, K, alpha, aAt, lda, bAt, ldb, beta, c.at + 4 * (row * ldc + col), ldc, works[p]])
          }
          helpers!.run(list, (args) => run(...args))
        }
        if (c.staged !== undefined) C.set(c.staged)
      }
    }
    return gemm
  })
