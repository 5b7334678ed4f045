import { assert, describe, it } from "@effect/vitest"
import * as Q from "../src/model/internal/qwen3refFast.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import * as R from "../src/ops/Reference.js"
import { random } from "./helpers.js"

// The reference model's blocked paths claim the arithmetic of the op specifications (the plain loops), in the same
// order: compared here bit for bit, in f32 and f64 storage, at shapes that leave remainders in every blocking.
const bits = (a: ArrayLike<number>) => Array.from(a, (x) => Object.is(x, -0) ? "-0" : String(x))
const same = (got: ArrayLike<number>, want: ArrayLike<number>, what: string) =>
  assert.deepStrictEqual(bits(got), bits(want), what)
const array = (precision: R.Precision, n: number, seed: number) =>
  precision === "f32" ? Float32Array.from(random(n, seed)) : Float64Array.from(random(n, seed))

describe("the reference model's fast paths equal the op specifications bit for bit", () => {
  it("linear and its backward (blocked matmulNT, zero rows skipped) against gemm", () => {
    for (const precision of ["f32", "f64"] as const) {
      const nm = R.numerics(precision)
      for (const [rows, inF, outF] of [[1, 1, 1], [5, 7, 9], [6, 12, 8], [3, 9, 17]] as const) {
        const x = array(precision, rows * inF, rows + inF)
        const w = array(precision, outF * inF, outF)
        const want = nm.alloc(rows * outF)
        want.set(R.gemm(x, w, { m: rows, n: outF, k: inF, transB: true }))
        same(Q.linear(x, rows, inF, w, outF, nm), want, `linear ${rows}×${inF}→${outF} ${precision}`)
        const dy = array(precision, rows * outF, 7 * rows)
        dy.fill(0, 0, outF) // a row without a loss term
        const dW = Float64Array.from(random(outF * inF, 3))
        const wantDw = R.gemm(dy, x, { m: outF, n: inF, k: rows, transA: true })
        for (let i = 0; i < wantDw.length; i++) wantDw[i] += dW[i]
        const wantDx = nm.alloc(rows * inF)
        wantDx.set(R.gemm(dy, w, { m: rows, n: inF, k: outF }))
        same(Q.linearBackward(dy, x, rows, inF, w, outF, dW, nm), wantDx, `dx ${precision}`)
        same(dW, wantDw, `dW ${precision}`)
      }
    }
  })

  it("attention of the forward (paired and single query heads, packed rows) against cpuAttention", () => {
    for (const precision of ["f32", "f64"] as const) {
      for (const [heads, kvHeads] of [[4, 2], [3, 1], [2, 2]] as const) {
        const config = {
          vocab_size: 31,
          hidden_size: 16,
          intermediate_size: 24,
          num_hidden_layers: 1,
          num_attention_heads: heads,
          num_key_value_heads: kvHeads,
          head_dim: 8,
          rms_norm_eps: 1e-6,
          rope_theta: 10000,
          tie_word_embeddings: true
        }
        const weights = Ref.randomWeights(config, { seed: heads, precision })
        const tokens = Array.from({ length: 2 * 9 }, (_, i) => (i * 7 + 3) % 31)
        const positions = [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 0, 1, 2, 3, 4]
        const fwd = Ref.forward(config, weights, { tokens, batch: 2, seqLen: 9, positions }, { precision })
        const shape = { batch: 2, seq: 9, heads, kvHeads, headDim: 8, scale: 1 / Math.sqrt(8) }
        const a = fwd.layers[0]
        const spec = R.attention(a.q, a.k, a.v, fwd.segmentStart, shape, R.numerics(precision))
        same(a.attnOut, spec.o, `o ${heads}/${kvHeads} ${precision}`)
        same(a.probs, spec.probs, `p ${heads}/${kvHeads} ${precision}`)
        const dOut = array(precision, a.attnOut.length, 11)
        const fast = [new Float64Array(a.q.length), new Float64Array(a.k.length), new Float64Array(a.v.length)] as const
        Q.attentionBackward(
          dOut,
          a.q,
          a.k,
          a.v,
          a.probs,
          fwd.segmentStart,
          2,
          9,
          heads,
          kvHeads,
          8,
          shape.scale,
          ...fast
        )
        const want = [new Float64Array(a.q.length), new Float64Array(a.k.length), new Float64Array(a.v.length)] as const
        R.attentionBackward(dOut, a.q, a.k, a.v, a.probs, fwd.segmentStart, shape, ...want)
        for (let i = 0; i < 3; i++) same(fast[i], want[i], `d${"qkv"[i]} ${heads}/${kvHeads} ${precision}`)
      }
    }
  })
})
