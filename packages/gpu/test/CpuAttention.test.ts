import { assert, describe, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import wabt from "wabt"
import * as CpuAttention from "../src/cpu/attention.js"
import { assembleAttention, attentionWasmFile } from "../src/cpu/internal/attentionWat.js"
import { type AttentionShape, cpuAttention, cpuAttentionBackward, segmentStarts } from "../src/ops/attention.js"
import { numerics } from "../src/ops/Numerics.js"
import { maxRelError, random } from "./helpers.js"

// The CPU device's tiled attention against the specification (ops/attention.ts) in f32 numerics, at the tolerance
// Kernels.test.ts gives the GPU attention kernels (1e-4, max error relative to 1 + |want|): the tiled kernel
// sums in another order and keeps f32 partial results, the spec sums in f64.
const TOL = 1e-4

const shapeOf = (batch: number, seq: number, heads: number, kvHeads: number, headDim: number): AttentionShape => ({
  batch,
  seq,
  heads,
  kvHeads,
  headDim,
  scale: 1 / Math.sqrt(headDim)
})

/** Positions (0 at each sequence start) of batch rows packed with sequences of the given lengths. */
const packedPositions = (rows: ReadonlyArray<ReadonlyArray<number>>) =>
  rows.flatMap((lengths) => lengths.flatMap((n) => Array.from({ length: n }, (_, i) => i)))

/** Random inputs; q is scaled up so the softmax is peaked and the online rescaling matters. */
const inputs = (s: AttentionShape, seed: number, qScale = 3) => {
  const N = s.batch * s.seq
  return {
    q: random(N * s.heads * s.headDim, seed, qScale),
    k: random(N * s.kvHeads * s.headDim, seed + 1),
    v: random(N * s.kvHeads * s.headDim, seed + 2),
    dOut: random(N * s.heads * s.headDim, seed + 3)
  }
}

// One WebAssembly route (its own memory) for the whole file; the js route takes any arrays.
const wasm = CpuAttention.wasmSimd()
/** The routes that can run head_dim D (wasm-simd needs D % 4 = 0). */
const routesFor = (D: number): ReadonlyArray<CpuAttention.Route> =>
  D % 4 === 0 ? [CpuAttention.js, wasm] : [CpuAttention.js]
/**
 * An array for `route` (for wasm-simd: in the memory of `wasm`, which every wasm-simd route here shares), holding
 * `from` when given, else filled with `fill`.
 */
const arrayFor = (route: CpuAttention.Route, n: number, from?: Float32Array, fill = 0) => {
  const a = route.name === "wasm-simd" ? wasm.alloc(n) : new Float32Array(n)
  if (from !== undefined) a.set(from)
  else a.fill(fill)
  return a
}

/** Runs the tiled forward and backward (all units in one call each) on `route`. */
const run = (
  s: AttentionShape,
  inp: ReturnType<typeof inputs>,
  segmentStart: Int32Array,
  tile: CpuAttention.Tile = CpuAttention.defaultTile,
  route: CpuAttention.Route = CpuAttention.js
) => {
  const N = s.batch * s.seq
  const x = {
    q: arrayFor(route, inp.q.length, inp.q),
    k: arrayFor(route, inp.k.length, inp.k),
    v: arrayFor(route, inp.v.length, inp.v),
    dOut: arrayFor(route, inp.dOut.length, inp.dOut)
  }
  const out = arrayFor(route, N * s.heads * s.headDim)
  const lse = new Float32Array(N * s.heads)
  const scratch = arrayFor(route, CpuAttention.scratchSize(s, tile))
  CpuAttention.forward({ shape: s, q: x.q, k: x.k, v: x.v, segmentStart, out, lse, scratch, tile, route })
  // Written, not accumulated: prior contents are ignored.
  const dq = arrayFor(route, x.q.length, undefined, Number.NaN)
  const dk = arrayFor(route, x.k.length, undefined, Number.NaN)
  const dv = arrayFor(route, x.v.length, undefined, Number.NaN)
  CpuAttention.backward({ shape: s, ...x, segmentStart, out, lse, dq, dk, dv, scratch, tile, route })
  return { out, lse, dq, dk, dv }
}

/** The specification in f32 numerics: o, lse, and dq, dk, dv (f64 sums from the f32 probabilities). */
const spec = (s: AttentionShape, x: ReturnType<typeof inputs>, segmentStart: Int32Array) => {
  const f = cpuAttention(x.q, x.k, x.v, segmentStart, s, numerics("f32"))
  const dq = new Float64Array(x.q.length)
  const dk = new Float64Array(x.k.length)
  const dv = new Float64Array(x.v.length)
  cpuAttentionBackward(x.dOut, x.q, x.k, x.v, f.probs, segmentStart, s, dq, dk, dv)
  return { out: f.o, lse: f.lse, dq, dk, dv }
}

const assertClose = (got: ReturnType<typeof run>, want: ReturnType<typeof spec>, what: string, tol = TOL) => {
  for (const name of ["out", "lse", "dq", "dk", "dv"] as const) {
    const e = maxRelError(got[name], want[name])
    assert.isBelow(e, tol, `${what}: ${name} max relative error ${e}`)
  }
}

describe("CPU tiled attention", () => {
  const cases: ReadonlyArray<{
    readonly name: string
    readonly shape: AttentionShape
    readonly lengths?: ReadonlyArray<ReadonlyArray<number>>
    readonly tiles: ReadonlyArray<CpuAttention.Tile>
  }> = [
    { name: "T=1, GQA 2", shape: shapeOf(3, 1, 2, 1, 8), tiles: [CpuAttention.defaultTile, { query: 1, key: 1 }] },
    {
      name: "T=3, GQA 1, odd head_dim, two segments in row 0",
      shape: shapeOf(2, 3, 2, 2, 5),
      lengths: [[1, 2], [3]],
      tiles: [CpuAttention.defaultTile, { query: 2, key: 1 }]
    },
    {
      name: "T=65, GQA 2, three segments in row 0 (one starting inside a tile)",
      shape: shapeOf(2, 65, 4, 2, 16),
      lengths: [[20, 30, 15], [65]],
      tiles: [CpuAttention.defaultTile, { query: 16, key: 24 }, { query: 7, key: 5 }, { query: 64, key: 64 }]
    },
    {
      name: "T=200, GQA 4, two segments",
      shape: shapeOf(1, 200, 8, 2, 32),
      lengths: [[120, 80]],
      tiles: [CpuAttention.defaultTile, { query: 48, key: 40 }]
    },
    {
      name: "T=65, GQA 8, many short segments in row 1",
      shape: shapeOf(2, 65, 8, 1, 16),
      lengths: [[65], [3, 1, 9, 40, 12]],
      tiles: [CpuAttention.defaultTile, { query: 33, key: 17 }]
    }
  ]
  for (const c of cases) {
    it(`forward and backward match the specification: ${c.name}`, () => {
      const s = c.shape
      const starts = segmentStarts(c.lengths === undefined ? undefined : packedPositions(c.lengths), s)
      const x = inputs(s, 11)
      const want = spec(s, x, starts)
      for (const route of routesFor(s.headDim)) {
        for (const tile of c.tiles) {
          assertClose(run(s, x, starts, tile, route), want, `${route.name}, tile ${tile.query}×${tile.key}`)
        }
      }
    })
  }

  it("matches the specification where scores differ by hundreds (exps underflow to 0)", () => {
    const s = shapeOf(2, 70, 4, 2, 16)
    const starts = segmentStarts(packedPositions([[70], [30, 40]]), s)
    const x = inputs(s, 8, 300)
    const want = spec(s, x, starts)
    // Visible (query, key) pairs whose probability underflows f32 to 0 in the spec.
    const { probs } = cpuAttention(x.q, x.k, x.v, starts, s, numerics("f32"))
    let underflows = 0
    for (let b = 0; b < s.batch; b++) {
      for (let h = 0; h < s.heads; h++) {
        for (let t = 0; t < s.seq; t++) {
          for (let j = starts[b * s.seq + t]; j <= t; j++) {
            underflows += probs[((b * s.heads + h) * s.seq + t) * s.seq + j] === 0 ? 1 : 0
          }
        }
      }
    }
    assert.isAbove(underflows, 1000, "the scores must span past f32 exp's underflow")
    for (const route of routesFor(s.headDim)) assertClose(run(s, x, starts, undefined, route), want, route.name)
  })

  it("handles a 4096-token row (two packed sequences) against the specification", () => {
    const s = shapeOf(1, 4096, 2, 1, 8)
    const starts = segmentStarts(packedPositions([[3000, 1096]]), s)
    const x = inputs(s, 5)
    const want = spec(s, x, starts)
    for (const route of routesFor(s.headDim)) assertClose(run(s, x, starts, undefined, route), want, route.name)
  })

  it("gives the same bits however the units are split (disjoint outputs, one scratch per worker)", () => {
    const s = shapeOf(2, 65, 4, 2, 16)
    const starts = segmentStarts(packedPositions([[20, 45], [65]]), s)
    const inp = inputs(s, 3)
    const U = CpuAttention.units(s)
    assert.strictEqual(U, 4)
    for (const route of routesFor(s.headDim)) {
      const whole = run(s, inp, starts, undefined, route)
      const x = {
        q: arrayFor(route, inp.q.length, inp.q),
        k: arrayFor(route, inp.k.length, inp.k),
        v: arrayFor(route, inp.v.length, inp.v),
        dOut: arrayFor(route, inp.dOut.length, inp.dOut)
      }
      const out = arrayFor(route, x.q.length)
      const lse = new Float32Array(s.batch * s.seq * s.heads)
      const dq = arrayFor(route, x.q.length)
      const dk = arrayFor(route, x.k.length)
      const dv = arrayFor(route, x.v.length)
      const scratch = arrayFor(route, CpuAttention.scratchSize(s))
      const fwd = { shape: s, q: x.q, k: x.k, v: x.v, segmentStart: starts, out, lse, scratch, route }
      const bwd = { ...fwd, dOut: x.dOut, dq, dk, dv }
      for (const [from, to] of [[3, 4], [0, 1], [1, 3]]) CpuAttention.forward(fwd, from, to)
      for (const [from, to] of [[2, 4], [0, 2]]) CpuAttention.backward(bwd, from, to)
      assert.deepStrictEqual(
        [out, lse, dq, dk, dv].map((a) => Array.from(a)),
        [whole.out, whole.lse, whole.dq, whole.dk, whole.dv].map((a) => Array.from(a)),
        route.name
      )
    }
  })

  it("runs on a second wasm-simd instance over the same memory (a worker's) with the same bits", () => {
    const s = shapeOf(1, 40, 4, 2, 16)
    const starts = segmentStarts(packedPositions([[25, 15]]), s)
    const x = inputs(s, 17)
    const own = run(s, x, starts, undefined, wasm)
    const worker = CpuAttention.wasmSimd(wasm.memory, wasm.holds)
    const again = run(s, x, starts, undefined, worker)
    for (const name of ["out", "lse", "dq", "dk", "dv"] as const) {
      assert.deepStrictEqual(Array.from(again[name]), Array.from(own[name]), name)
    }
    // By default a route over a memory takes views of its current buffer only: one made before a grow is refused.
    const before = wasm.alloc(16)
    wasm.alloc(2 ** 20) // 4 MiB: grows the memory
    const current = CpuAttention.wasmSimd(wasm.memory)
    assert.isFalse(current.holds(before))
    assert.isTrue(current.holds(new Float32Array(wasm.memory.buffer, before.byteOffset, 16)))
  })

  it("the committed attention-simd.wasm is what its source (attentionWat.ts) builds", async () => {
    const built = assembleAttention(await wabt())
    const committed = readFileSync(new URL(`../src/cpu/internal/${attentionWasmFile}`, import.meta.url))
    assert.isTrue(
      Buffer.from(built).equals(committed),
      `${attentionWasmFile} differs from its source (packages/gpu/src/cpu/internal/attentionWat.ts): ` +
        "run `npm run build:wasm` and commit the result"
    )
  })

  it("agrees with central finite differences of Σ w·out (the f32 kernel itself)", () => {
    // f32 outputs carry ~1e-7 absolute noise, so the step is 1e-2: the loss noise over 2h stays near 1e-5 and the
    // O(h²) truncation error alike (measured: 5e-6 at most).
    const s = shapeOf(1, 6, 2, 1, 4)
    const starts = segmentStarts(packedPositions([[4, 2]]), s)
    const x = inputs(s, 21)
    x.q = random(x.q.length, 21) // unscaled: a smooth softmax keeps the third derivative (truncation error) small
    const w = random(x.q.length, 99)
    const scratch = new Float32Array(CpuAttention.scratchSize(s))
    const out = new Float32Array(x.q.length)
    const lse = new Float32Array(s.seq * s.heads)
    const loss = () => {
      CpuAttention.forward({ shape: s, q: x.q, k: x.k, v: x.v, segmentStart: starts, out, lse, scratch })
      let sum = 0
      for (let i = 0; i < out.length; i++) sum += w[i] * out[i]
      return sum
    }
    const grads = run(s, { ...x, dOut: w }, starts)
    const h = 1e-2
    for (const [name, input, grad] of [["q", x.q, grads.dq], ["k", x.k, grads.dk], ["v", x.v, grads.dv]] as const) {
      let worst = 0
      let largest = 0
      for (let i = 0; i < input.length; i++) {
        const keep = input[i]
        input[i] = keep + h
        const up = loss()
        input[i] = keep - h
        const down = loss()
        input[i] = keep
        const fd = (up - down) / (2 * h)
        worst = Math.max(worst, Math.abs(fd - grad[i]))
        largest = Math.max(largest, Math.abs(fd))
      }
      assert.isAbove(largest, 0.05, `d${name}: the check needs gradients well above its noise`)
      assert.isBelow(worst, 5e-5, `d${name}: max |finite difference − gradient| ${worst}`)
    }
  })

  it("decode and extend over a KV cache match the no-cache forward (two sequences in one pool, GQA 1/2/8)", () => {
    const cases = [
      { s: shapeOf(1, 70, 4, 2, 16), tile: { query: 16, key: 24 } },
      { s: shapeOf(1, 70, 8, 1, 16), tile: { query: 3, key: 5 } },
      { s: shapeOf(1, 70, 2, 2, 8), tile: CpuAttention.defaultTile }
    ]
    for (const { s, tile } of cases) decodeCase(s, tile)
  })

  const decodeCase = (s: AttentionShape, tile: CpuAttention.Tile) => {
    const D = s.headDim
    const KV = s.kvHeads
    const capacity = 80
    const starts = segmentStarts(undefined, s)
    const seqs = [inputs(s, 31), inputs(s, 41)]
    const wants = seqs.map((x) => run(s, x, starts).out)
    for (const route of routesFor(D)) {
      // One pool of two sequences' caches, [2, KV, capacity, D]; the second at cacheBase = KV·capacity·D.
      const keys = arrayFor(route, 2 * KV * capacity * D)
      const values = arrayFor(route, 2 * KV * capacity * D)
      const qs = seqs.map((x) => arrayFor(route, x.q.length, x.q))
      const outs = seqs.map((x) => arrayFor(route, x.q.length))
      const scratch = arrayFor(route, CpuAttention.scratchSize({ seq: 0 }, tile))
      // Prefill 40 tokens, extend by 3, then decode one token at a time, both sequences interleaved.
      const chunks = [[0, 40], [40, 3], ...Array.from({ length: 27 }, (_, i) => [43 + i, 1])]
      for (const [start, rows] of chunks) {
        seqs.forEach((x, i) => {
          const layer = { shape: s, q: qs[i], keys, values, capacity, out: outs[i], scratch, tile, route }
          const cacheBase = i * KV * capacity * D
          CpuAttention.storeCache(layer, x.k, x.v, start, rows, start, cacheBase)
          CpuAttention.decode(layer, start, rows, start, cacheBase)
        })
      }
      seqs.forEach((_, i) => {
        const e = maxRelError(outs[i], wants[i])
        const what = `H=${s.heads} KV=${KV}, ${route.name}, sequence ${i}`
        assert.isBelow(e, 1e-5, `${what}: decode against forward, max relative error ${e}`)
      })
    }
  }

  it("rejects bad input with an error naming the problem", () => {
    const s = shapeOf(1, 4, 2, 1, 8)
    const x = inputs(s, 1)
    const starts = segmentStarts(undefined, s)
    const good = {
      shape: s,
      q: x.q,
      k: x.k,
      v: x.v,
      segmentStart: starts,
      out: new Float32Array(x.q.length),
      lse: new Float32Array(8),
      scratch: new Float32Array(CpuAttention.scratchSize(s))
    }
    CpuAttention.forward(good)
    assert.throws(
      () => CpuAttention.forward({ ...good, k: x.k.subarray(1) }),
      /k holds 31 elements; \[N=4, KV=1, D=8\]/
    )
    assert.throws(() => CpuAttention.forward({ ...good, shape: { ...s, kvHeads: 3 } }), /multiple of kvHeads/)
    assert.throws(() => CpuAttention.forward({ ...good, segmentStart: Int32Array.of(0, 2, 0, 0) }), /segmentStart\[1\]/)
    assert.throws(() => CpuAttention.forward({ ...good, scratch: new Float32Array(10) }), /scratch holds 10/)
    assert.throws(() => CpuAttention.forward(good, 0, 2), /unit range \[0, 2\)/)
    const layer = {
      shape: s,
      q: x.q,
      keys: new Float32Array(64),
      values: new Float32Array(64),
      capacity: 8,
      out: new Float32Array(x.q.length),
      scratch: good.scratch
    }
    CpuAttention.decode(layer, 0, 4, 4)
    assert.throws(() => CpuAttention.decode(layer, 0, 4, 5), /do not fit a cache of capacity 8/)
    assert.throws(() => CpuAttention.decode(layer, 1, 4, 0), /q holds 64 elements; rows 1\+4/)
    const inWasm = { ...good, route: wasm, q: arrayFor(wasm, x.q.length, x.q), out: arrayFor(wasm, x.q.length) }
    assert.throws(() => CpuAttention.forward(inWasm), /k is not in the wasm-simd route's memory/)
    const odd = shapeOf(1, 4, 2, 1, 6)
    assert.throws(
      () => CpuAttention.forward({ ...inWasm, shape: odd, k: arrayFor(wasm, 24), v: arrayFor(wasm, 24) }),
      /wasm-simd route needs headDim % 4 = 0, got 6/
    )
  })
})
