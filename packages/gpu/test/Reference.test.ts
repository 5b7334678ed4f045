import { assert, describe, it } from "@effect/vitest"
import * as R from "../src/ops/Reference.js"
import * as HalfFloat from "../src/runtime/HalfFloat.js"
import { dot, finiteDifference, weights } from "./helpers.js"

// Finite-difference checks of every backward twin: loss = Σ w·f(x) for a fixed random w, so dL/df = w.
const f64 = (n: number, seed: number, scale = 1) => weights(n, seed).map((x) => x * scale)
const TOL = 1e-5
const F64 = R.numerics("f64")
const attention = (q: Float64Array, k: Float64Array, v: Float64Array, s: R.AttentionShape, pos?: Array<number>) =>
  R.attention(q, k, v, R.segmentStarts(pos, s), s, F64)
const attentionBackward = (
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  dO: Float64Array,
  s: R.AttentionShape,
  pos?: Array<number>
) => {
  const start = R.segmentStarts(pos, s)
  const [dq, dk, dv] = [new Float64Array(q.length), new Float64Array(k.length), new Float64Array(v.length)]
  R.attentionBackward(dO, q, k, v, R.attention(q, k, v, start, s, F64).probs, start, s, dq, dk, dv)
  return { dq, dk, dv }
}

describe("Reference backward twins agree with finite differences", () => {
  it("gemm in all transpose forms (dA = dC·Bᵀ, dB = Aᵀ·dC)", () => {
    for (const [transA, transB] of [[false, false], [false, true], [true, false]] as const) {
      const s = { m: 3, n: 4, k: 5, transA, transB, alpha: 0.7 }
      const a = f64(15, 1)
      const b = f64(20, 2)
      const w = f64(12, 3)
      // dL/dop(A) = alpha · w · op(B)ᵀ; map back to A's storage.
      const dOpA = R.gemm(w, b, { m: 3, n: 5, k: 4, transB: !transB, alpha: 0.7 })
      const dA = transA ? Float64Array.from({ length: 15 }, (_, i) => dOpA[(i % 3) * 5 + Math.floor(i / 3)]) : dOpA
      assert.isBelow(finiteDifference(a, (x) => dot(w, R.gemm(x, b, s)), dA), TOL)
      const dOpB = R.gemm(a, w, { m: 5, n: 4, k: 3, transA: !transA, alpha: 0.7 })
      const dB = transB ? Float64Array.from({ length: 20 }, (_, i) => dOpB[(i % 5) * 4 + Math.floor(i / 5)]) : dOpB
      assert.isBelow(finiteDifference(b, (x) => dot(w, R.gemm(a, x, s)), dB), TOL)
    }
  })

  it("embedding (repeated ids accumulate)", () => {
    const ids = [2, 0, 2, 3]
    const table = f64(4 * 3, 4)
    const w = f64(4 * 3, 5)
    const grad = R.embeddingBackward(ids, w, 4, 3, 4)
    assert.isBelow(finiteDifference(table, (x) => dot(w, R.embedding(x, ids, 4, 3)), grad), TOL)
    assert.strictEqual(grad[3], 0) // row 1 is never used
  })

  it("rmsNorm, for x and for the weight (per-head shapes: rows = tokens·heads)", () => {
    const x = f64(6 * 4, 6)
    const g = f64(4, 7).map((v) => 1 + 0.5 * v)
    const w = f64(24, 8)
    const fwd = (xx: Float64Array, gg: Float64Array) => dot(w, R.rmsNorm(xx, 6, 4, gg, 1e-6, F64).y)
    const { rstd } = R.rmsNorm(x, 6, 4, g, 1e-6, F64)
    const dw = new Float64Array(4)
    const dx = R.rmsNormBackward(w, x, rstd, 6, 4, g, dw, F64)
    assert.isBelow(finiteDifference(x, (xx) => fwd(xx, g), dx), TOL)
    assert.isBelow(finiteDifference(g, (gg) => fwd(x, gg), dw), TOL)
  })

  it("rope: the inverse rotation is the backward, and it is orthogonal", () => {
    const pos = [0, 3, 7]
    const x = f64(3 * 2 * 8, 9)
    const w = f64(48, 10)
    const { cos, sin } = R.ropeTables(pos, 8, 10000)
    const rope = (xx: ArrayLike<number>) => R.rope(xx, 3, 2, 8, cos, sin, F64)
    const grad = R.ropeBackward(w, 3, 2, 8, cos, sin, F64)
    assert.isBelow(finiteDifference(x, (xx) => dot(w, rope(xx)), grad), TOL)
    const back = R.ropeBackward(rope(x), 3, 2, 8, cos, sin, F64)
    // cos/sin are f32 tables (as transformers'), so cos² + sin² is 1 to f32 precision only.
    for (let i = 0; i < x.length; i++) assert.closeTo(back[i], x[i], 1e-6)
    // Position 0 is the identity; rotate_half pairs (i, i + headDim/2).
    for (let i = 0; i < 16; i++) assert.closeTo(rope(x)[i], x[i], 1e-12)
  })

  it("causal grouped-query attention for q, k and v", () => {
    const s = { batch: 2, seq: 3, heads: 4, kvHeads: 2, headDim: 4, scale: 0.5 }
    const q = f64(2 * 3 * 4 * 4, 11)
    const k = f64(2 * 3 * 2 * 4, 12)
    const v = f64(2 * 3 * 2 * 4, 13)
    const w = f64(q.length, 14)
    const { o } = attention(q, k, v, s)
    const { dk, dq, dv } = attentionBackward(q, k, v, w, s)
    assert.isBelow(finiteDifference(q, (x) => dot(w, attention(x, k, v, s).o), dq), TOL)
    assert.isBelow(finiteDifference(k, (x) => dot(w, attention(q, x, v, s).o), dk), TOL)
    assert.isBelow(finiteDifference(v, (x) => dot(w, attention(q, k, x, s).o), dv), TOL)
    // Causality: the first query of each sequence sees only itself, so its output is its own v row.
    for (let d = 0; d < 4; d++) assert.closeTo(o[d], v[d], 1e-12)
  })

  it("packed attention: sequences sharing a row do not see each other, and the backward still holds", () => {
    const s = { batch: 1, seq: 5, heads: 2, kvHeads: 1, headDim: 4, scale: 0.5 }
    const pos = [0, 1, 2, 0, 1] // two sequences: tokens 0..2 and 3..4
    const q = f64(5 * 2 * 4, 31)
    const k = f64(5 * 4, 32)
    const v = f64(5 * 4, 33)
    const w = f64(q.length, 34)
    const { o } = attention(q, k, v, s, pos)
    const { dk, dq, dv } = attentionBackward(q, k, v, w, s, pos)
    assert.isBelow(finiteDifference(q, (x) => dot(w, attention(x, k, v, s, pos).o), dq), TOL)
    assert.isBelow(finiteDifference(k, (x) => dot(w, attention(q, x, v, s, pos).o), dk), TOL)
    assert.isBelow(finiteDifference(v, (x) => dot(w, attention(q, k, x, s, pos).o), dv), TOL)
    // Token 3 starts a new sequence: it sees only itself.
    for (let d = 0; d < 4; d++) assert.closeTo(o[3 * 8 + d], v[3 * 4 + d], 1e-12)
    // The second sequence alone gives the same outputs as inside the packed row.
    const alone = attention(q.slice(24), k.slice(12), v.slice(12), { ...s, seq: 2 })
    for (let i = 0; i < 16; i++) assert.closeTo(o[24 + i], alone.o[i], 1e-12)
  })

  it("swiglu for gate and up", () => {
    const g = f64(10, 15, 3)
    const u = f64(10, 16)
    const w = f64(10, 17)
    const { dGate, dUp } = R.swigluBackward(w, g, u, F64)
    assert.isBelow(finiteDifference(g, (x) => dot(w, R.swiglu(x, u, F64)), dGate), TOL)
    assert.isBelow(finiteDifference(u, (x) => dot(w, R.swiglu(g, x, F64)), dUp), TOL)
  })

  it("token logprobs and entropy at a temperature", () => {
    const logits = f64(3 * 7, 18, 2)
    const targets = [1, 6, 0]
    const wl = f64(3, 19)
    const we = f64(3, 20)
    const loss = (x: Float64Array) => {
      const r = R.tokenLogprobs(x, 7, targets, 0.7, F64)
      return dot(wl, r.logprobs) + dot(we, r.entropy)
    }
    const grad = R.tokenLogprobsBackward(logits, 7, targets, 0.7, wl, we, F64).dLogits
    assert.isBelow(finiteDifference(logits, loss, grad), TOL)
    // At temperature 1, logp is log-softmax.
    const r = R.tokenLogprobs([0, Math.log(3)], 2, [1], 1, F64)
    assert.closeTo(r.logprobs[0], Math.log(0.75), 1e-12)
    assert.closeTo(r.entropy[0], -(0.25 * Math.log(0.25) + 0.75 * Math.log(0.75)), 1e-12)
  })

  it("masked mean", () => {
    const x = f64(2 * 5, 21)
    const mask = [1, 1, 0, 1, 0, 0, 0, 0, 0, 0]
    const w = f64(2, 22)
    const grad = R.maskedMean(x, mask, 2, 5, -1).dx.map((d, i) => d * w[Math.floor(i / 5)])
    assert.isBelow(finiteDifference(x, (xx) => dot(w, R.maskedMean(xx, mask, 2, 5, -1).out), grad), TOL)
    assert.strictEqual(R.maskedMean(x, mask, 2, 5, 1).out[1], 0) // an empty row is 0, not NaN
  })

  it("gradient norm and clip; AdamW matches the PyTorch formula", () => {
    const { clip, norm, skipped } = R.gradNorm([[3], [4]], 1)
    assert.strictEqual(norm, 5)
    assert.closeTo(clip, 0.2, 1e-6)
    assert.isFalse(skipped)
    assert.isTrue(R.gradNorm([[NaN]], 1).skipped)
    const p = new Float64Array([1, 1])
    const m = new Float64Array(2)
    const v = new Float64Array(2)
    const h = {
      lr: 0.1,
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weightDecay: 0.5,
      biasCorrection1: 0.1,
      biasCorrection2: 0.001
    }
    R.adamw(p, [2, 2], m, v, (i) => i === 0, h, 0.5)
    // First step: mhat/sqrt(vhat) = sign(g) = 1.
    assert.closeTo(p[0], 1 * (1 - 0.05) - 0.1, 1e-6)
    assert.closeTo(p[1], 1 - 0.1, 1e-6)
  })
})

describe("HalfFloat", () => {
  it("converts every bf16 and f16 bit pattern exactly, and rounds back to the same bits", () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i)
    const fromBf16 = HalfFloat.bf16ToF32(all)
    const fromF16 = HalfFloat.f16ToF32(all)
    const bf = HalfFloat.f32ToBf16(fromBf16)
    const h = HalfFloat.f32ToF16(fromF16)
    const wrong: Array<number> = []
    const back = HalfFloat.f16ToF32(h)
    for (let i = 0; i < 65536; i++) {
      if (!Number.isNaN(fromBf16[i]) && bf[i] !== i) wrong.push(i)
      if (Number.isNaN(fromF16[i]) ? !Number.isNaN(back[i]) : h[i] !== i) wrong.push(i)
    }
    assert.deepStrictEqual(wrong, [])
    assert.strictEqual(HalfFloat.f16ToF32(new Uint16Array([0x0001]))[0], 2 ** -24) // smallest subnormal
    assert.strictEqual(HalfFloat.f16ToF32(new Uint16Array([0x7bff]))[0], 65504)
    assert.strictEqual(HalfFloat.bf16ToF32(new Uint16Array([0xc040]))[0], -3)
    // Round to nearest even: 1 + 2^-8 is exactly halfway between two bf16 values and goes to the even one (1).
    assert.strictEqual(HalfFloat.f32ToBf16(new Float32Array([1 + 2 ** -8]))[0], 0x3f80)
    assert.strictEqual(HalfFloat.f32ToF16(new Float32Array([70000]))[0], 0x7c00)
  })
})
