import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Exit } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Gemm from "../src/cpu/Gemm.js"
import { buildInto, committedDir, variants, wasmFileName } from "../src/cpu/internal/sgemmBuild.js"
import * as WasmGemm from "../src/cpu/WasmGemm.js"

// The routes this machine must have: the WebAssembly ones wherever Node 20+ runs, and the platform BLAS where
// scripts/bootstrap.sh installs it (Linux: Debian's libopenblas0-pthread) or the OS ships it (macOS: Accelerate).
// A missing one fails here with its fix; none is skipped.
const blasRoute: Gemm.GemmRoute = process.platform === "darwin" ? "accelerate" : "openblas"
const routes: ReadonlyArray<Gemm.GemmRoute> = [blasRoute, "wasm-relaxed-simd", "wasm-simd"]

// Scoped: a multi-threaded route's helper threads end with the test.
const get = (route: Gemm.GemmRoute, threads = 2) =>
  Gemm.selectScoped({ route, threads }).pipe(
    Effect.map((s) => s.gemm),
    Effect.mapError((e) => new Error(`${e.message}`))
  )

// A fixed-seed generator, so a failure repeats.
const rng = (seed: number) => {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 31 - 1
  }
}
const GUARD = 12345.5

interface Case {
  readonly ta: boolean
  readonly tb: boolean
  readonly M: number
  readonly N: number
  readonly K: number
  readonly alpha: number
  readonly beta: number
}

/** The operands of a case, each placed at an offset inside a larger array of guard values (so views with a byte
 * offset are used, and writes outside C's M×N elements show), with row strides larger than the rows. */
const operands = (c: Case, seed: number, integers = false) => {
  const next = rng(seed)
  const value = () => (integers ? Math.round(next() * 8) : next())
  const lda = (c.ta ? c.M : c.K) + 3
  const ldb = (c.tb ? c.K : c.N) + 1
  const ldc = c.N + 2
  const place = (rows: number, ld: number, cols: number, offset: number) => {
    const whole = new Float32Array(offset + rows * ld + 5).fill(GUARD)
    const view = whole.subarray(offset, offset + rows * ld)
    for (let r = 0; r < rows; r++) for (let k = 0; k < cols; k++) view[r * ld + k] = value()
    return { whole, view }
  }
  const A = place(c.ta ? c.K : c.M, lda, c.ta ? c.M : c.K, 3)
  const B = place(c.tb ? c.N : c.K, ldb, c.tb ? c.K : c.N, 1)
  const C = place(c.M, ldc, c.N, 7)
  return { A, B, C, lda, ldb, ldc }
}

const tolerance = (c: Case, ops: ReturnType<typeof operands>, Cin: Float32Array) => {
  // |C − spec| ≤ 1e-6·√K·(|alpha|·Σ|a·b| + |beta·c|): f32 sums err by about √K·2⁻²⁴·Σ|a·b| (random rounding), so
  // this leaves a margin of ~16 while an indexing mistake is off by O(Σ|a·b|).
  const absA = ops.A.view.map(Math.abs)
  const absB = ops.B.view.map(Math.abs)
  const mag = new Float32Array(Cin.length)
  Gemm.spec.sgemm(c.ta, c.tb, c.M, c.N, c.K, 1, absA, ops.lda, absB, ops.ldb, 0, mag, ops.ldc)
  return (i: number) => 1e-6 * Math.sqrt(Math.max(1, c.K)) * (Math.abs(c.alpha) * mag[i] + Math.abs(c.beta * Cin[i]))
}

const shapes: ReadonlyArray<readonly [number, number, number]> = [
  [1, 1, 1],
  [3, 5, 7],
  [5, 9, 1],
  [1, 33, 40],
  [29, 1, 17],
  [13, 17, 300], // K crosses the 256-deep block
  [67, 70, 33], // M crosses the 64-row block, N the 8-column panels
  [6, 2059, 9] // N crosses the 2048-column block
]
const scalars: ReadonlyArray<readonly [number, number]> = [[1, 0], [0.5, 0.25], [-1.5, 1]]
const transposes: ReadonlyArray<readonly [boolean, boolean]> = [[false, false], [false, true], [true, false], [
  true,
  true
]]

const label = (c: Case) => `${c.ta ? "T" : "N"}${c.tb ? "T" : "N"} ${c.M}×${c.N}×${c.K} α=${c.alpha} β=${c.beta}`

/** Runs every case on `gemm` (arrays from its alloc when `inRouteMemory`), checking against the spec. */
const checkAll = (gemm: Gemm.Gemm, inRouteMemory: boolean) => {
  let checked = 0
  for (const [ta, tb] of transposes) {
    for (const [M, N, K] of shapes) {
      for (const [alpha, beta] of scalars) {
        const c: Case = { ta, tb, M, N, K, alpha, beta }
        const ops = operands(c, M * 7919 + N * 31 + K)
        const Cin = ops.C.view.slice()
        const want = ops.C.view.slice()
        Gemm.spec.sgemm(ta, tb, M, N, K, alpha, ops.A.view, ops.lda, ops.B.view, ops.ldb, beta, want, ops.ldc)
        const tol = tolerance(c, ops, Cin)
        let A: Float32Array = ops.A.view, B: Float32Array = ops.B.view, C: Float32Array = ops.C.view
        if (inRouteMemory) {
          A = gemm.alloc(A.length + 1).subarray(1)
          A.set(ops.A.view)
          B = gemm.alloc(B.length)
          B.set(ops.B.view)
          C = gemm.alloc(C.length + 3).subarray(3)
          C.set(ops.C.view)
        }
        gemm.sgemm(ta, tb, M, N, K, alpha, A, ops.lda, B, ops.ldb, beta, C, ops.ldc)
        for (let m = 0; m < M; m++) {
          for (let n = 0; n < ops.ldc; n++) {
            const i = m * ops.ldc + n
            if (n >= N) {
              // The gap between C's rows is not C's: untouched.
              assert.strictEqual(C[i], Cin[i], `${gemm.route} ${label(c)}: wrote C's row gap at [${m}, ${n}]`)
            } else if (!(Math.abs(C[i] - want[i]) <= tol(i))) {
              assert.fail(`${gemm.route} ${label(c)}: C[${m}, ${n}] = ${C[i]}, spec ${want[i]} (tolerance ${tol(i)})`)
            }
          }
        }
        if (!inRouteMemory) {
          for (const [name, o] of [["A", ops.A], ["B", ops.B], ["C", ops.C]] as const) {
            const before = o.view.byteOffset / 4
            for (let i = 0; i < before; i++) assert.strictEqual(o.whole[i], GUARD, `${name} guard before its view`)
            for (let i = before + o.view.length; i < o.whole.length; i++) {
              assert.strictEqual(o.whole[i], GUARD, `${gemm.route} ${label(c)}: ${name} guard after its view`)
            }
          }
        }
        checked++
      }
    }
  }
  assert.strictEqual(checked, transposes.length * shapes.length * scalars.length)
}

describe("Gemm routes against Gemm.spec", () => {
  for (const route of routes) {
    it.scoped(`${route}: every transpose × odd shapes × strides × alpha/beta, arrays with a byte offset`, () =>
      Effect.map(get(route), (gemm) => {
        assert.strictEqual(gemm.route, route)
        checkAll(gemm, false)
      }))

    it.scoped(`${route}: the same, on arrays from the route's own alloc`, () =>
      Effect.map(get(route), (gemm) => checkAll(gemm, true)))

    it.scoped(`${route}: small integers multiply exactly (no rounding anywhere), beta = 0 ignores NaN in C`, () =>
      Effect.map(get(route), (gemm) => {
        // M = 1 and 6: the BLAS route's gemv path and the WebAssembly few-rows path.
        for (const [[ta, tb], M] of transposes.flatMap((t) => [[t, 37], [t, 1], [t, 6]] as const)) {
          const c: Case = { ta, tb, M, N: 45, K: 70, alpha: 1, beta: 0 }
          const ops = operands(c, 5, true)
          const want = ops.C.view.slice()
          Gemm.spec.sgemm(ta, tb, c.M, c.N, c.K, 1, ops.A.view, ops.lda, ops.B.view, ops.ldb, 0, want, ops.ldc)
          for (let m = 0; m < c.M; m++) for (let n = 0; n < c.N; n++) ops.C.view[m * ops.ldc + n] = NaN
          gemm.sgemm(ta, tb, c.M, c.N, c.K, 1, ops.A.view, ops.lda, ops.B.view, ops.ldb, 0, ops.C.view, ops.ldc)
          assert.deepStrictEqual(Array.from(ops.C.view), Array.from(want), label(c))
        }
      }))

    it.scoped(`${route}: K = 0 scales C by beta; M = 0 or N = 0 touches nothing`, () =>
      Effect.map(get(route), (gemm) => {
        const C = new Float32Array([1, 2, 3, 4, 5, 6])
        gemm.sgemm(false, false, 2, 2, 0, 1, new Float32Array(0), 1, new Float32Array(0), 2, 0.5, C, 3)
        assert.deepStrictEqual(Array.from(C), [0.5, 1, 3, 2, 2.5, 6])
        gemm.sgemm(false, false, 0, 2, 3, 1, new Float32Array(0), 3, new Float32Array(6), 2, 0, C, 3)
        gemm.sgemm(false, false, 2, 0, 3, 1, new Float32Array(6), 3, new Float32Array(0), 1, 0, C, 3)
        assert.deepStrictEqual(Array.from(C), [0.5, 1, 3, 2, 2.5, 6])
      }))

    it.scoped(`${route}: a stride shorter than a row, or an array too short, is refused by name`, () =>
      Effect.map(get(route), (gemm) => {
        const A = new Float32Array(12), B = new Float32Array(12), C = new Float32Array(9)
        assert.throws(() => gemm.sgemm(false, false, 3, 3, 4, 1, A, 3, B, 3, 0, C, 3), /lda = 3 .* pass its row stride/)
        assert.throws(() => gemm.sgemm(false, true, 3, 3, 4, 1, A, 4, B, 4, 0, C.subarray(1), 3), /C \(M×N\) has 8/)
        assert.throws(() => gemm.sgemm(false, false, 3, 3, 4.5, 1, A, 5, B, 3, 0, C, 3), /K = 4.5/)
      }))
  }

  it.scoped(`${blasRoute}: results on 1 and 2 threads agree within tolerance (and 1 thread repeats exactly)`, () =>
    Effect.gen(function*() {
      const one = yield* get(blasRoute, 1)
      const two = yield* get(blasRoute, 2)
      assert.strictEqual(one.threads, 1)
      assert.strictEqual(two.threads, 2)
      const c: Case = { ta: false, tb: true, M: 300, N: 260, K: 520, alpha: 1, beta: 0 }
      const ops = operands(c, 11)
      const tol = tolerance(c, ops, ops.C.view)
      const run = (g: Gemm.Gemm) => {
        const C = ops.C.view.slice()
        g.sgemm(c.ta, c.tb, c.M, c.N, c.K, 1, ops.A.view, ops.lda, ops.B.view, ops.ldb, 0, C, ops.ldc)
        return C
      }
      const a = run(one), b = run(two), a2 = run(one)
      assert.deepStrictEqual(a2, a)
      for (let i = 0; i < a.length; i++) {
        if (!(Math.abs(a[i] - b[i]) <= tol(i))) assert.fail(`C[${i}]: 1 thread ${a[i]}, 2 threads ${b[i]}`)
      }
    }))
})

describe("WebAssembly routes", () => {
  it("the committed .wasm files are what the source builds (npm run build:wasm rebuilds them)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "envtrain-wasm-"))
    try {
      await buildInto(dir)
      for (const variant of variants) {
        const built = readFileSync(join(dir, wasmFileName(variant)))
        const committed = readFileSync(join(committedDir, wasmFileName(variant)))
        assert.isTrue(
          built.equals(committed),
          `${wasmFileName(variant)} differs from its source (packages/gpu/src/cpu/internal/sgemmWat.ts): ` +
            "run `npm run build:wasm` and commit the result"
        )
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("views from alloc stay valid and are multiplied in place after the memory grows", () => {
    const gemm = Either.getOrThrow(WasmGemm.make("relaxed-simd"))
    const before = gemm.memory.buffer.byteLength
    const A = gemm.alloc(4), B = gemm.alloc(4), C = gemm.alloc(4)
    A.set([1, 2, 3, 4])
    B.set([1, 0, 0, 1])
    gemm.alloc(40 << 20) // 160 MiB: the memory must grow
    assert.isAbove(gemm.memory.buffer.byteLength, before + (160 << 20) - 1)
    gemm.sgemm(false, false, 2, 2, 2, 1, A, 2, B, 2, 0, C, 2)
    assert.deepStrictEqual(Array.from(C), [1, 2, 3, 4])
    assert.strictEqual(C.buffer, A.buffer) // C is a view of the route's memory, written there
  })

  for (const variant of variants) {
    it(`${variant}: 2 and 3 threads give the 1-thread result bit for bit, split by rows and by columns`, () => {
      const routes = [1, 2, 3].map((threads) => Either.getOrThrow(WasmGemm.make(variant, { threads })))
      try {
        // Rows (M ≥ N) and columns (N > M), with edges that are not whole bands; all above the split threshold.
        for (
          const c of [
            { ta: false, tb: true, M: 403, N: 70, K: 130, alpha: 0.5, beta: 0.25 },
            { ta: true, tb: false, M: 45, N: 301, K: 270, alpha: 1, beta: 0 },
            { ta: true, tb: true, M: 150, N: 149, K: 99, alpha: -1, beta: 1 },
            { ta: false, tb: true, M: 8, N: 1500, K: 301, alpha: 1, beta: 0.5 } // the few-rows dot-product path
          ]
        ) {
          const ops = operands(c, 3)
          const want = ops.C.view.slice()
          Gemm.spec.sgemm(
            c.ta,
            c.tb,
            c.M,
            c.N,
            c.K,
            c.alpha,
            ops.A.view,
            ops.lda,
            ops.B.view,
            ops.ldb,
            c.beta,
            want,
            ops.ldc
          )
          const tol = tolerance(c, ops, ops.C.view)
          const results = routes.map((g) => {
            const C = ops.C.view.slice()
            g.sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, ops.A.view, ops.lda, ops.B.view, ops.ldb, c.beta, C, ops.ldc)
            return C
          })
          for (let i = 0; i < want.length; i++) {
            if (!(Math.abs(results[0][i] - want[i]) <= tol(i))) assert.fail(`${label(c)}: C[${i}] ≠ spec`)
          }
          assert.deepStrictEqual(results[1], results[0], `${label(c)}: 2 threads`)
          assert.deepStrictEqual(results[2], results[0], `${label(c)}: 3 threads`)
        }
      } finally {
        for (const g of routes) g.close()
      }
    })
  }

  it("a closed multi-threaded route refuses further calls", () => {
    const gemm = Either.getOrThrow(WasmGemm.make("simd", { threads: 2 }))
    const A = gemm.alloc(256 * 256), C = gemm.alloc(256 * 256)
    gemm.sgemm(false, false, 256, 256, 256, 1, A, 256, A, 256, 0, C, 256)
    gemm.close()
    assert.throws(() => gemm.sgemm(false, false, 256, 256, 256, 1, A, 256, A, 256, 0, C, 256), /after close/)
  })

  it("alloc refuses a size that is not a count", () => {
    const gemm = Either.getOrThrow(WasmGemm.make("simd"))
    assert.throws(() => gemm.alloc(-1), /alloc\(-1\)/)
  })
})

describe("Gemm.select", () => {
  it.effect("picks the platform BLAS when present and says which and on how many threads", () =>
    Effect.gen(function*() {
      const s = yield* Gemm.select({ threads: 2 })
      assert.strictEqual(s.gemm.route, blasRoute)
      assert.strictEqual(s.gemm.threads, 2)
      if (blasRoute === "openblas") assert.match(s.description, /^OpenBLAS \d+\.\d+\.\d+ \(.*\) on 2 threads$/)
    }))

  it.effect("deterministic mode runs one thread", () =>
    Effect.gen(function*() {
      const s = yield* Gemm.select({ threads: 2, deterministic: true })
      assert.strictEqual(s.gemm.threads, 1)
      assert.match(s.description, / 1 thread/)
    }))

  it.scoped("names the WebAssembly route and its threads when asked for it", () =>
    Effect.gen(function*() {
      const s = yield* Gemm.selectScoped({ route: "wasm-simd", threads: 2 })
      assert.strictEqual(s.gemm.route, "wasm-simd")
      assert.strictEqual(s.gemm.threads, 2)
      assert.strictEqual(s.description, "WebAssembly SIMD128 on 2 threads")
    }))

  it.effect("a route this platform cannot have fails with the fix, never a substitute", () =>
    Effect.gen(function*() {
      const other: Gemm.GemmRoute = blasRoute === "openblas" ? "accelerate" : "openblas"
      const exit = yield* Effect.exit(Gemm.select({ route: other }))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(Gemm.select({ route: other }))
      assert.strictEqual(error._tag, "GemmRouteUnavailable")
      assert.strictEqual(error.route, other)
      assert.match(error.message, new RegExp(`Fix: ask for ${blasRoute}`))
    }))

  it.effect("a thread count that is not a count fails by name", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Gemm.select({ threads: 0 }))
      assert.match(error.message, /threads = 0 .* whole number ≥ 1/)
    }))
})
