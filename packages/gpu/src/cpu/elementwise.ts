/**
 * The CPU device's element-wise and row kernels on WebAssembly SIMD128 (`internal/elementwise-simd.wasm`, built from
 * `internal/elementwiseWat.ts`): the same functions, arguments and results as the plain-TypeScript kernels
 * (`internal/kernels.ts`, their specification), over arrays that live in one shared WebAssembly memory.
 *
 * Numerics differ from the spec within f32 tolerance: f32 lanes (the spec computes in f64 registers and stores f32),
 * exp as a polynomial within 2 ulp of f32's, √ and ÷ in f32; sums of squares and softmax sums add f64 lanes, the
 * other sums (RMSNorm backward's row dot product) f32 lanes combined in f64. Results are deterministic: one thread,
 * fixed order. RoPE's position ids and tables may live anywhere (they are copied in when they do not).
 *
 * @since 0.0.0
 */
import { elementwiseWasmFile } from "./internal/elementwiseWat.js"
import type * as Js from "./internal/kernels.js"
import { compileKernelFile, ownMemory, Wasm, type WasmMemory } from "./internal/wasmApi.js"

export type { WasmMemory }

/** The kernels' functions (internal/kernels.ts' signatures). */
export type Kernels = typeof Js

/** A wasm-simd route: its kernels, the memory their arrays must live in, and the allocator of that memory. */
export interface WasmRoute {
  readonly name: "wasm-simd"
  readonly memory: WasmMemory
  /** A zeroed f32 array in the route's memory (64-byte aligned). */
  readonly alloc: (n: number) => Float32Array
  /** Whether `a` is a view of the route's memory made by {@link WasmRoute.alloc}. */
  readonly holds: (a: ArrayBufferView) => boolean
  readonly kernels: Kernels
}

type I = number
type F = number
interface Exports {
  readonly add: (a: I, b: I, n: I, out: I) => void
  readonly swiglu: (g: I, u: I, n: I, act: I) => void
  readonly swigluBackward: (dAct: I, g: I, u: I, n: I, dGate: I, dUp: I) => void
  readonly adamW: (
    p: I,
    g: I,
    m: I,
    v: I,
    n: I,
    clip: F,
    b1: F,
    c1: F,
    b2: F,
    c2: F,
    eps: F,
    decay: F,
    stepSize: F,
    ibc2: F
  ) => void
  readonly sumSquares: (a: I, n: I) => number
  readonly rmsNorm: (x: I, rows: I, dim: I, w: I, eps: F, y: I, rstd: I) => void
  readonly rmsNormBackward: (dy: I, x: I, rstd: I, rows: I, dim: I, w: I, dW: I, dx: I, accumulate: I) => void
  readonly rowMax: (x: I, n: I) => number
  readonly scaleMax: (x: I, n: I, z: I, T: F) => number
  readonly expSums: (z: I, n: I, max: F, e: I, stats: I) => void
  readonly rowGrad: (z: I, e: I, n: I, out: I, inv: F, shift: F, w: F, ew: F, invT: F) => void
  readonly rope: (x: I, rows: I, heads: I, half: I, pos: I, cos: I, sin: I, sign: F, y: I) => void
}

/**
 * The route. Without arguments it makes its own shared memory; given a memory and that memory's allocator (a
 * WebAssembly matmul route's, so its tensors stay in place for the matmuls) it runs over that, recording the arrays
 * `alloc` hands out. A kernel given an array that is not the route's, or too short for the call, throws naming it.
 */
export const wasmSimd = (memory?: WasmMemory, allocIn?: (n: number) => Float32Array): WasmRoute => {
  let mem: WasmMemory
  let alloc: (n: number) => Float32Array
  let holds: (a: ArrayBufferView) => boolean
  if (memory === undefined || allocIn === undefined) {
    const own = ownMemory(
      "cpu elementwise: wasm-simd",
      "run fewer tokens per pass, or the js kernels (CpuModel option elementwise: \"js\")"
    )
    mem = own.memory
    alloc = own.alloc
    holds = own.holds
  } else {
    // Each view's own buffer object is recorded as it is made (see ownMemory: memory.buffer can change object).
    const buffers = new WeakSet<ArrayBufferLike>()
    mem = memory
    alloc = (n) => {
      const a = allocIn(n)
      buffers.add(a.buffer)
      return a
    }
    holds = (a) => buffers.has(a.buffer)
  }
  const ex = new Wasm.Instance(compileKernelFile(elementwiseWasmFile, "cpu elementwise"), { env: { memory: mem } })
    .exports as unknown as Exports

  /** The address of a[at], after checking a is in the memory and holds n values from `at`. */
  const addr = (op: string, name: string, a: Float32Array, n: number, at = 0) => {
    if (!holds(a)) {
      throw new Error(
        `cpu elementwise ${op}: ${name} is not in the wasm-simd route's memory; allocate it with the route's alloc ` +
          `(or run the js kernels)`
      )
    }
    if (at + n > a.length) {
      throw new Error(`cpu elementwise ${op}: ${name} holds ${a.length} values; the call reads ${at + n}`)
    }
    return a.byteOffset + 4 * at
  }

  // tokenLogprobs' scratch: the scaled row z and its exponentials e (f32, grown to the vocabulary), and two f64
  // sums written by expSums.
  let z: Float32Array = new Float32Array(0)
  let e: Float32Array = new Float32Array(0)
  const statsArea = alloc(4)
  const stats = new Float64Array(statsArea.buffer, statsArea.byteOffset, 2)
  const rowScratch = (vocab: number) => {
    if (z.length < vocab) {
      z = alloc(vocab)
      e = alloc(vocab)
    }
  }

  // RoPE's inputs from outside the memory (position ids, the tables' rows in use) are copied into these per call.
  let posScratch: Int32Array = new Int32Array(0)
  let cosScratch: Float32Array = new Float32Array(0)
  let sinScratch: Float32Array = new Float32Array(0)
  const staged = (a: Float32Array, n: number, scratch: Float32Array) => {
    if (holds(a)) return { at: a, scratch }
    const s = scratch.length >= n ? scratch : alloc(Math.max(n, 2 * scratch.length))
    s.set(a.subarray(0, n))
    return { at: s, scratch: s }
  }

  const kernels: Kernels = {
    rope: (x, rows, heads, headDim, positions, cos, sin, sign, y) => {
      const half = headDim / 2
      if (!Number.isInteger(half)) throw new Error(`cpu elementwise rope: headDim ${headDim} must be even`)
      const n = rows * heads * headDim
      const xAt = addr("rope", "x", x, n), yAt = addr("rope", "y", y, n)
      if (positions.length < rows) {
        throw new Error(`cpu elementwise rope: positions holds ${positions.length} ids; rows is ${rows}`)
      }
      let top = 0
      for (let r = 0; r < rows; r++) {
        const p = positions[r]
        if (!(p >= 0)) throw new Error(`cpu elementwise rope: positions[${r}] = ${p} is negative`)
        if (p > top) top = p
      }
      const span = (top + 1) * half
      if (cos.length < span || sin.length < span) {
        throw new Error(
          `cpu elementwise rope: the cos/sin tables hold ${cos.length / half} positions; position ${top} is asked for`
        )
      }
      if (!holds(positions)) {
        if (posScratch.length < rows) {
          const a = alloc(Math.max(rows, 2 * posScratch.length))
          posScratch = new Int32Array(a.buffer, a.byteOffset, a.length)
        }
        posScratch.set(positions.subarray(0, rows))
      }
      const pos = holds(positions) ? positions : posScratch
      const c = staged(cos, span, cosScratch)
      cosScratch = c.scratch
      const s = staged(sin, span, sinScratch)
      sinScratch = s.scratch
      ex.rope(xAt, rows, heads, half, pos.byteOffset, c.at.byteOffset, s.at.byteOffset, sign, yAt)
    },
    add: (a, b, n, out) => ex.add(addr("add", "a", a, n), addr("add", "b", b, n), n, addr("add", "out", out, n)),
    swiglu: (gate, up, n, act) =>
      ex.swiglu(addr("swiglu", "gate", gate, n), addr("swiglu", "up", up, n), n, addr("swiglu", "act", act, n)),
    swigluBackward: (dAct, gate, up, n, dGate, dUp) =>
      ex.swigluBackward(
        addr("swigluBackward", "dAct", dAct, n),
        addr("swigluBackward", "gate", gate, n),
        addr("swigluBackward", "up", up, n),
        n,
        addr("swigluBackward", "dGate", dGate, n),
        addr("swigluBackward", "dUp", dUp, n)
      ),
    adamW: (p, g, m, v, clip, b1, b2, eps, decay, stepSize, bc2Sqrt) => {
      const n = p.length
      ex.adamW(
        addr("adamW", "p", p, n),
        addr("adamW", "g", g, n),
        addr("adamW", "m", m, n),
        addr("adamW", "v", v, n),
        n,
        clip,
        b1,
        1 - b1,
        b2,
        1 - b2,
        eps,
        decay,
        stepSize,
        1 / bc2Sqrt
      )
    },
    sumSquares: (arrays) => {
      let ss = 0
      arrays.forEach((a, i) => ss += ex.sumSquares(addr("sumSquares", `arrays[${i}]`, a, a.length), a.length))
      return ss
    },
    rmsNorm: (x, rows, dim, w, eps, y, rstd) =>
      ex.rmsNorm(
        addr("rmsNorm", "x", x, rows * dim),
        rows,
        dim,
        addr("rmsNorm", "w", w, dim),
        eps,
        addr("rmsNorm", "y", y, rows * dim),
        addr("rmsNorm", "rstd", rstd, rows)
      ),
    rmsNormBackward: (dy, x, rstd, rows, dim, w, dW, dx, accumulate) =>
      ex.rmsNormBackward(
        addr("rmsNormBackward", "dy", dy, rows * dim),
        addr("rmsNormBackward", "x", x, rows * dim),
        addr("rmsNormBackward", "rstd", rstd, rows),
        rows,
        dim,
        addr("rmsNormBackward", "w", w, dim),
        addr("rmsNormBackward", "dW", dW, dim),
        addr("rmsNormBackward", "dx", dx, rows * dim),
        accumulate ? 1 : 0
      ),
    // The spec's z and e scratch (f64) are not used: this route keeps f32 rows of its own in its memory.
    tokenLogprobs: (logits, rows, vocab, targets, temperature, logprobs, entropy, _z, _e, dLogp, dEntropy) => {
      const base = addr("tokenLogprobs", "logits", logits, rows * vocab)
      rowScratch(vocab)
      const zAt = z.byteOffset, eAt = e.byteOffset, statsAt = stats.byteOffset
      let loss = 0
      for (let n = 0; n < rows; n++) {
        const o = n * vocab
        const x = base + 4 * o
        const max = temperature === 1 ? ex.rowMax(x, vocab) : ex.scaleMax(x, vocab, zAt, temperature)
        const rowZ = temperature === 1 ? x : zAt
        ex.expSums(rowZ, vocab, max, eAt, statsAt)
        const sum = stats[0]
        const lse = max + Math.log(sum)
        const h = lse - stats[1] / sum
        const target = targets[n]
        const lp = target < 0 ? 0 : (temperature === 1 ? logits[o + target] : z[target]) - lse
        logprobs[n] = lp
        entropy[n] = h
        if (dLogp === undefined) continue
        const w = target < 0 ? 0 : dLogp[n]
        const ew = dEntropy === undefined ? 0 : dEntropy[n]
        if (w === 0 && ew === 0) {
          logits.fill(0, o, o + vocab)
          continue
        }
        loss += w * lp + ew * h
        // d logprob/dz = onehot − p; d entropy/dz = −p·(z − lse + H); d/dlogits = d/dz / T.
        ex.rowGrad(rowZ, eAt, vocab, x, 1 / sum, h - lse, w, ew, 1 / temperature)
        if (target >= 0) logits[o + target] += w / temperature
      }
      return loss
    }
  }
  return { name: "wasm-simd", memory: mem, alloc, holds, kernels }
}
