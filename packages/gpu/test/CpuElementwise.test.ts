import { assert, describe, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import wabt from "wabt"
import * as Elementwise from "../src/cpu/elementwise.js"
import { assembleElementwise, elementwiseWasmFile } from "../src/cpu/internal/elementwiseWat.js"
import * as Js from "../src/cpu/internal/kernels.js"
import { ropeTables } from "../src/ops/rope.js"
import { maxRelError, random } from "./helpers.js"

// The WebAssembly SIMD128 element-wise kernels against their specification (internal/kernels.ts) at f32 tolerance,
// on lengths that are not multiples of 4 (every kernel's tail loop runs) and on whole vectors.
const route = Elementwise.wasmSimd()
const W = route.kernels
/** A copy of `a` in the route's memory. */
const inMem = (a: ArrayLike<number>) => {
  const out = route.alloc(a.length)
  out.set(a)
  return out
}
const lengths = [1, 3, 13, 64, 1027]

describe("cpu elementwise wasm-simd", () => {
  it("add, swiglu and swigluBackward match the spec (gates up to ±120: σ saturates, never NaN)", () => {
    for (const n of lengths) {
      const a = random(n, n + 1, 3), b = random(n, n + 2, 3), g = random(n, n + 3, 120), u = random(n, n + 4)
      const d = random(n, n + 5)
      const want = new Float32Array(n), got = inMem(new Float32Array(n))
      Js.add(a, b, n, want)
      W.add(inMem(a), inMem(b), n, got)
      assert.isBelow(maxRelError(got, want), 1e-6, `add ${n}`)
      for (const gate of [a, g]) {
        Js.swiglu(gate, u, n, want)
        W.swiglu(inMem(gate), inMem(u), n, got)
        assert.isBelow(maxRelError(got, want), 1e-5, `swiglu ${n}`)
        const wantG = new Float32Array(n), wantU = new Float32Array(n)
        const gotG = route.alloc(n), gotU = route.alloc(n)
        Js.swigluBackward(d, gate, u, n, wantG, wantU)
        W.swigluBackward(inMem(d), inMem(gate), inMem(u), n, gotG, gotU)
        assert.isBelow(maxRelError(gotG, wantG), 1e-5, `swigluBackward dGate ${n}`)
        assert.isBelow(maxRelError(gotU, wantU), 1e-5, `swigluBackward dUp ${n}`)
      }
      // In place (out = a), as the model adds residuals.
      const ia = inMem(a)
      W.add(ia, inMem(b), n, ia)
      Js.add(a, b, n, want)
      assert.isBelow(maxRelError(ia, want), 1e-6, `add in place ${n}`)
    }
  })

  it("adamW over two steps and sumSquares match the spec", () => {
    for (const n of lengths) {
      const p = random(n, 7 * n, 0.5), g = random(n, 7 * n + 1, 2)
      const js = { p: Float32Array.from(p), m: new Float32Array(n), v: new Float32Array(n) }
      const wa = { p: inMem(p), m: route.alloc(n), v: route.alloc(n) }
      const lr = 1e-2, b1 = 0.9, b2 = 0.999
      for (let step = 1; step <= 2; step++) {
        const args = [0.7, b1, b2, 1e-8, 1 - lr * 0.1, lr / (1 - b1 ** step), Math.sqrt(1 - b2 ** step)] as const
        Js.adamW(js.p, g, js.m, js.v, ...args)
        W.adamW(wa.p, inMem(g), wa.m, wa.v, ...args)
      }
      assert.isBelow(maxRelError(wa.p, js.p), 1e-5, `adamW p ${n}`)
      assert.isBelow(maxRelError(wa.m, js.m), 1e-6, `adamW m ${n}`)
      assert.isBelow(maxRelError(wa.v, js.v), 1e-6, `adamW v ${n}`)
      const arrays = [g, p, random(n + 2, n, 10)]
      const want = Js.sumSquares(arrays)
      assert.isBelow(Math.abs(W.sumSquares(arrays.map(inMem)) - want) / want, 1e-12, `sumSquares ${n}`)
    }
  })

  it("rmsNorm and rmsNormBackward (written and accumulated) match the spec on odd and even widths", () => {
    for (const [rows, dim] of [[3, 13], [5, 64], [2, 1027], [4, 1]]) {
      const x = random(rows * dim, dim, 2), w = random(dim, dim + 1), dy = random(rows * dim, dim + 2)
      const y = new Float32Array(rows * dim), rstd = new Float32Array(rows)
      const gy = route.alloc(rows * dim), grstd = route.alloc(rows)
      Js.rmsNorm(x, rows, dim, w, 1e-6, y, rstd)
      W.rmsNorm(inMem(x), rows, dim, inMem(w), 1e-6, gy, grstd)
      assert.isBelow(maxRelError(gy, y), 1e-5, `rmsNorm y ${rows}×${dim}`)
      assert.isBelow(maxRelError(grstd, rstd), 1e-5, `rmsNorm rstd ${rows}×${dim}`)
      for (const accumulate of [false, true]) {
        const dW = random(dim, 3), dx = random(rows * dim, 4)
        const gdW = inMem(dW), gdx = inMem(dx)
        Js.rmsNormBackward(dy, x, rstd, rows, dim, w, dW, dx, accumulate)
        W.rmsNormBackward(inMem(dy), inMem(x), inMem(rstd), rows, dim, inMem(w), gdW, gdx, accumulate)
        assert.isBelow(maxRelError(gdx, dx), 1e-5, `rmsNormBackward dx ${rows}×${dim} accumulate ${accumulate}`)
        assert.isBelow(maxRelError(gdW, dW), 1e-5, `rmsNormBackward dW ${rows}×${dim} accumulate ${accumulate}`)
      }
    }
  })

  it("tokenLogprobs: logprobs, entropy, loss and the gradient overwrite, with temperature, target < 0 and unweighted rows", () => {
    for (const [rows, vocab] of [[6, 37], [4, 1024], [3, 5]]) {
      const logits = random(rows * vocab, vocab, 8)
      const targets = Array.from({ length: rows }, (_, n) => (n === 1 ? -1 : (n * 17 + 3) % vocab))
      // Row 2 has both weights 0 (zeroed); row 1 has target −1 (entropy only).
      const dLogp = Array.from({ length: rows }, (_, n) => (n === 2 ? 0 : -0.5 + 0.3 * n))
      const dEnt = Array.from({ length: rows }, (_, n) => (n === 2 ? 0 : 0.01 * (n + 1)))
      for (const T of [1, 0.7]) {
        for (const grad of [false, true]) {
          const want = {
            lp: new Float64Array(rows),
            h: new Float64Array(rows),
            logits: Float32Array.from(logits)
          }
          const got = { lp: new Float64Array(rows), h: new Float64Array(rows), logits: inMem(logits) }
          const z = new Float64Array(vocab), e = new Float64Array(vocab)
          const a = grad ? [dLogp, dEnt] as const : [] as const
          const wantLoss = Js.tokenLogprobs(want.logits, rows, vocab, targets, T, want.lp, want.h, z, e, ...a)
          const gotLoss = W.tokenLogprobs(got.logits, rows, vocab, targets, T, got.lp, got.h, z, e, ...a)
          const what = `${rows}×${vocab} T ${T} grad ${grad}`
          assert.isBelow(maxRelError(got.lp, want.lp), 1e-5, `logprobs ${what}`)
          assert.isBelow(maxRelError(got.h, want.h), 1e-5, `entropy ${what}`)
          assert.strictEqual(got.lp[1], 0)
          assert.isBelow(Math.abs(gotLoss - wantLoss) / (1 + Math.abs(wantLoss)), 1e-5, `loss ${what}`)
          assert.isBelow(maxRelError(got.logits, want.logits), 1e-6, `logits/gradient ${what}`)
          if (grad) assert.isTrue(got.logits.subarray(2 * vocab, 3 * vocab).every((v) => v === 0), what)
          else assert.deepStrictEqual(Array.from(got.logits), Array.from(logits), what)
        }
      }
    }
  })

  it("rope (forward and inverse, in place) matches the spec, its ids and tables in the memory or not", () => {
    for (const [rows, heads, D] of [[5, 3, 6], [4, 2, 64], [3, 1, 2]]) {
      const P = 9
      const { cos, sin } = ropeTables(Int32Array.from({ length: P }, (_, i) => i), D, 10000)
      const positions = Int32Array.from({ length: rows }, (_, n) => (n * 5 + 2) % P)
      const x = random(rows * heads * D, D + rows)
      for (const sign of [1, -1] as const) {
        const want = new Float32Array(x.length)
        Js.rope(x, rows, heads, D, positions, cos, sin, sign, want)
        const outside = route.alloc(x.length)
        W.rope(inMem(x), rows, heads, D, positions, cos, sin, sign, outside)
        assert.isBelow(maxRelError(outside, want), 1e-6, `rope ${rows}×${heads}×${D} sign ${sign}`)
        const held = inMem(x)
        const pos = route.alloc(rows)
        const ids = new Int32Array(pos.buffer, pos.byteOffset, rows)
        ids.set(positions)
        W.rope(held, rows, heads, D, ids, inMem(cos), inMem(sin), sign, held)
        assert.isBelow(maxRelError(held, want), 1e-6, `rope in place ${rows}×${heads}×${D} sign ${sign}`)
      }
    }
    const x = route.alloc(8)
    const t = ropeTables(Int32Array.from([0, 1]), 4, 10000)
    assert.throws(
      () => W.rope(x, 2, 1, 4, Int32Array.from([0, 2]), t.cos, t.sin, 1, x),
      /tables hold 2 positions; position 2/
    )
  })

  it("refuses an array outside its memory or too short for the call, naming it", () => {
    const a = route.alloc(8)
    assert.throws(() => W.add(a, new Float32Array(8), 8, a), /add: b is not in the wasm-simd route's memory/)
    assert.throws(() => W.add(a, a, 9, a), /add: a holds 8 values; the call reads 9/)
    assert.throws(
      () => W.sumSquares([a, new Float32Array(3)]),
      /sumSquares: arrays\[1\] is not in the wasm-simd route's memory/
    )
    // Arrays from another route's memory are not this one's.
    assert.throws(() => W.swiglu(a, Elementwise.wasmSimd().alloc(8), 8, a), /swiglu: up is not in/)
  })

  it("keeps recognising every array it handed out after the memory grows", () => {
    const first = route.alloc(5)
    first.set([1, 2, 3, 4, 5])
    route.alloc(2 ** 22) // 16 MiB: grows the memory (memory.buffer becomes a new object)
    const out = route.alloc(5)
    W.add(first, first, 5, out)
    assert.deepStrictEqual(Array.from(out), [2, 4, 6, 8, 10])
  })

  it("the committed elementwise-simd.wasm is what its source (elementwiseWat.ts) builds", async () => {
    const built = assembleElementwise(await wabt())
    const committed = readFileSync(new URL(`../src/cpu/internal/${elementwiseWasmFile}`, import.meta.url))
    assert.isTrue(
      Buffer.from(built).equals(committed),
      `${elementwiseWasmFile} differs from its source (packages/gpu/src/cpu/internal/elementwiseWat.ts): ` +
        "run `npm run build:wasm` and commit the result"
    )
  })
})
