import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as GrpoLoss from "../src/ops/GrpoLoss.js"
import { Gpu } from "../src/runtime/Gpu.js"

// Hand-computed cases on a 2 × 4 packed batch (row 0: 3 loss tokens, row 1: 2); the exhaustive parity with the
// CPU specification (`Loss.compute`, every loss type, random tensors) is in the grpo package.
const shape = { batch: 2, seq: 4 }
const mask = [1, 1, 1, 0, 0, 1, 1, 0]
const logprobs = [-1, -2, -0.5, -3, -1, -0.25, -4, -2]
const advantages = [0.5, -1]
const rowOf = (j: number) => Math.floor(j / shape.seq)
const close = (got: ArrayLike<number>, want: ArrayLike<number>, what: string) => {
  for (let j = 0; j < want.length; j++) {
    assert.closeTo(got[j], want[j], 1e-5 + 1e-5 * Math.abs(want[j]), `${what}[${j}]`)
  }
}

layer(Gpu.layer())("GrpoLoss kernel", (it) => {
  it.scoped("on-policy dapo: d loss / d l = −A·m / N, loss 0 at ratio 1 minus Σ A·m / N", () =>
    Effect.gen(function*() {
      const kernel = yield* GrpoLoss.make(shape)
      const N = 10
      const r = yield* kernel.evaluate(
        GrpoLoss.defaults,
        { rows: 2, mask, advantages, numItemsInBatch: N },
        logprobs,
        [1, 2, 3, 4, 5, 6, 7, 8]
      )
      close(r.gradient, mask.map((m, j) => -advantages[rowOf(j)] * m / N), "gradient")
      assert.closeTo(r.loss, -(3 * 0.5 - 2) / N, 1e-6)
      assert.closeTo(r.metrics["entropy"], (1 + 2 + 3 + 6 + 7) / 5, 1e-5)
      assert.strictEqual(r.metrics["clip_ratio/region_mean"], 0)
    }))

  it.scoped("grpo with old logprobs: clipped tokens get no gradient; β·k3 adds β(1 − e^(ref − l))", () =>
    Effect.gen(function*() {
      const kernel = yield* GrpoLoss.make(shape)
      // Ratios e^(l − old): row 0 (A > 0) 1.5 (clipped high), 0.6 (unclipped), 1; row 1 (A < 0) 0.5 (clipped low), 1.1.
      const old = logprobs.map((l, j) => l - Math.log([1.5, 0.6, 1, 1, 1, 0.5, 1.1, 1][j]))
      const ref = logprobs.map((l) => l + 0.3)
      const beta = 0.04
      // the plain k3 term (no importance weight on the KL), which the formula below spells out
      const settings: GrpoLoss.Settings = { ...GrpoLoss.defaults, lossType: "grpo", beta, useBiasCorrectionKl: false }
      const r = yield* kernel.evaluate(settings, { rows: 2, mask, advantages, old, ref }, logprobs)
      const w = [1.5, 0.6, 1, 1, 1, 0.5, 1.1, 1]
      const unclipped = [false, true, true, false, false, false, true, false]
      const count = [3, 2]
      const k3 = Math.exp(0.3) - 0.3 - 1
      const want = mask.map((m, j) => {
        const c = m / count[rowOf(j)] / 2
        const A = advantages[rowOf(j)]
        return c * ((unclipped[j] ? -A * w[j] : 0) + beta * (1 - Math.exp(0.3)))
      })
      close(r.gradient, want, "gradient")
      const policy = mask.map((m, j) => {
        const A = advantages[rowOf(j)]
        return m * -Math.min(w[j] * A, Math.min(Math.max(w[j], 0.8), 1.2) * A) / count[rowOf(j)] / 2
      })
      assert.closeTo(r.loss, policy.reduce((a, b) => a + b, 0) + beta * k3 * (1 / 2 + 1 / 2), 1e-5)
      assert.closeTo(r.metrics["kl"], k3, 1e-5)
      assert.closeTo(r.metrics["clip_ratio/high_mean"], 1 / 5, 1e-6)
      assert.closeTo(r.metrics["clip_ratio/low_mean"], 1 / 5, 1e-6)
      assert.closeTo(r.metrics["clip_ratio/low_min"], 0, 1e-6)
      assert.closeTo(r.metrics["clip_ratio/high_max"], 1 / 3, 1e-6)
    }))

  it.scoped("sequence_mask sampler correction drops a row whose product ratio exceeds the cap", () =>
    Effect.gen(function*() {
      const kernel = yield* GrpoLoss.make(shape)
      const old = logprobs
      // Row 0: Σ (old − samp) = 3·0.5 → ρ = e^1.5 ≈ 4.48 > 3 (dropped); row 1: Σ = 2·0.1 → ρ = e^0.2 kept.
      const sampler = logprobs.map((l, j) => l - (rowOf(j) === 0 ? 0.5 : 0.1))
      const settings: GrpoLoss.Settings = {
        ...GrpoLoss.defaults,
        samplerCorrection: { mode: "sequence_mask", clipMin: null, clipMax: 3 }
      }
      const r = yield* kernel.evaluate(
        settings,
        { rows: 2, mask, advantages, old, sampler, numItemsInBatch: 5 },
        logprobs
      )
      close(r.gradient, mask.map((m, j) => (rowOf(j) === 0 ? 0 : -advantages[1] * m * Math.exp(0.2) / 5)), "gradient")
    }))

  it.scoped("sapo and cispo at ratio 1", () =>
    Effect.gen(function*() {
      const kernel = yield* GrpoLoss.make(shape)
      const sapo = yield* kernel.evaluate(
        { ...GrpoLoss.defaults, lossType: "sapo" },
        { rows: 2, mask, advantages },
        logprobs
      )
      // σ'(0)·4 = 1: the gradient is −A per token, averaged per row then over rows.
      close(sapo.gradient, mask.map((m, j) => -advantages[rowOf(j)] * m / [3, 2][rowOf(j)] / 2), "sapo")
      const cispo = yield* kernel.evaluate(
        { ...GrpoLoss.defaults, lossType: "cispo", epsilonHigh: 0.5 },
        { rows: 2, mask, advantages, numItemsInBatch: 5 },
        logprobs
      )
      // The weight min(w, ε_hi) = 0.5 is detached: d/dl (−0.5·A·l) = −0.5·A.
      close(cispo.gradient, mask.map((m, j) => -0.5 * advantages[rowOf(j)] * m / 5), "cispo")
      const loss = mask.reduce((s, m, j) => s - 0.5 * advantages[rowOf(j)] * logprobs[j] * m / 5, 0)
      assert.closeTo(cispo.loss, loss, 1e-5)
      assert.closeTo(cispo.metrics["cispo_clip_ratio"], 3 / 5, 1e-6)
    }))

  it.scoped("refuses inputs that do not fit, naming the fix", () =>
    Effect.gen(function*() {
      const kernel = yield* GrpoLoss.make(shape)
      const e = yield* Effect.flip(kernel.evaluate(GrpoLoss.defaults, { rows: 2, mask, advantages }, logprobs))
      assert.include(e.message, "numItemsInBatch")
      const k = yield* Effect.flip(
        kernel.evaluate(
          { ...GrpoLoss.defaults, beta: 0.1 },
          { rows: 2, mask, advantages, numItemsInBatch: 5 },
          logprobs
        )
      )
      assert.include(k.message, "ref")
    }))
})
