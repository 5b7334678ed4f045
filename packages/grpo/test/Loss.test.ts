import { assert, describe, it } from "@effect/vitest"
import * as Loss from "../src/Loss.js"

const E = Math.exp

const closeTo = (got: number, want: number, tol = 1e-12, what = "") =>
  assert.isTrue(
    Math.abs(got - want) <= tol * (1 + Math.abs(want)),
    `${what} got ${got}, want ${want}`
  )

const allClose = (got: ArrayLike<number>, want: ArrayLike<number>, tol = 1e-12, what = "") => {
  assert.strictEqual(got.length, want.length)
  for (let j = 0; j < want.length; j++) closeTo(got[j], want[j], tol, `${what}[${j}]`)
}

const opts = (over: Partial<Loss.LossOptions>): Loss.LossOptions => ({ ...Loss.defaultOptions, ...over })

// Two rows × three tokens. Row 0 (A = 1) has two loss tokens, row 1 (A = −0.5) three.
const mask = [1, 1, 0, 1, 1, 1]
const advantages = [1, -0.5]
// log-ratios l − l^old chosen to land in every clipping region (ε = 0.2):
//   row 0: 0.5 (w = 1.65 > 1.2, A > 0: clipped high), −0.1 (w = 0.905, inside), padding
//   row 1: −0.5 (w = 0.607 < 0.8, A < 0: clipped low), 0.3 (w = 1.35, A < 0: unclipped side), 0 (w = 1)
const logRatio = [0.5, -0.1, 0, -0.5, 0.3, 0]
const logprobs = [-1.0, -2.0, -0.7, -0.4, -1.5, -0.9]
const oldLogprobs = logprobs.map((l, j) => l - logRatio[j])
const base = { rows: 2, length: 3, logprobs, mask, advantages, oldLogprobs }

describe("Loss.compute: hand-computed values", () => {
  it("on-policy (old = sg(l)): every clipped loss is −A per token, normalised per loss type", () => {
    const batch = { rows: 2, length: 3, logprobs, mask, advantages, numItemsInBatch: 5 }
    // dapo: Σ m·(−A) / N_gen = −(2·1 + 3·(−0.5)) / 5
    const dapo = Loss.compute(batch, opts({ lossType: "dapo" }))
    closeTo(dapo.loss, -0.1)
    allClose(dapo.gradient, [-0.2, -0.2, 0, 0.1, 0.1, 0.1])
    // grpo: mean over rows of the row's token mean, / GA = 2
    const grpo = Loss.compute(batch, opts({ lossType: "grpo", gradientAccumulationSteps: 2 }))
    closeTo(grpo.loss, (-1 + 0.5) / 2 / 2)
    allClose(grpo.gradient, [-1 / 2 / 2 / 2, -1 / 2 / 2 / 2, 0, 0.5 / 3 / 2 / 2, 0.5 / 3 / 2 / 2, 0.5 / 3 / 2 / 2])
    // bnpo: token mean over the micro-batch / GA
    const bnpo = Loss.compute(batch, opts({ lossType: "bnpo", gradientAccumulationSteps: 2 }))
    closeTo(bnpo.loss, -0.1 / 2)
    // dr_grpo: Σ / (B · maxCompletionLength) / GA
    const dr = Loss.compute(batch, opts({ lossType: "dr_grpo", maxCompletionLength: 4 }))
    closeTo(dr.loss, -0.5 / 8)
    allClose(dr.gradient, [-1 / 8, -1 / 8, 0, 0.5 / 8, 0.5 / 8, 0.5 / 8])
    // eval mode divides by 1, not GA
    closeTo(Loss.compute(batch, opts({ lossType: "bnpo", gradientAccumulationSteps: 2, mode: "eval" })).loss, -0.1)
  })

  it("clipped losses: value, gradient and clip metrics in every region", () => {
    const r = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({ lossType: "dapo" }))
    const w = logRatio.map(E)
    // per-token losses −min(wA, clip(w)A):
    const L = [-1.2, -w[1], 0, 0.8 * 0.5, w[4] * 0.5, 0.5]
    closeTo(r.loss, (L[0] + L[1] + L[3] + L[4] + L[5]) / 5)
    // gradients: clipped tokens 0; unclipped −A·w (w = 1 token: tie, full gradient)
    allClose(r.gradient, [0, -w[1] / 5, 0, 0, 0.5 * w[4] / 5, 0.5 / 5])
    closeTo(r.metrics["clip_ratio/high_mean"], 1 / 5)
    closeTo(r.metrics["clip_ratio/low_mean"], 1 / 5)
    closeTo(r.metrics["clip_ratio/region_mean"], 2 / 5)
    closeTo(r.metrics["clip_ratio/low_min"], 0) // row 0 has no low-clipped token
    closeTo(r.metrics["clip_ratio/high_max"], 1 / 2) // row 0: one of two tokens
    assert.isUndefined(r.metrics["kl"])
  })

  it("epsilonHigh widens only the upper range; delta caps the unclipped ratio", () => {
    const hi = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({ epsilonHigh: 0.28 }))
    closeTo(hi.gradient[0], 0) // 1.65 > 1.28 still clipped
    closeTo(hi.metrics["clip_ratio/high_mean"], 1 / 5)
    const wide = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({ epsilonHigh: 1 }))
    closeTo(wide.gradient[0], -E(0.5) / 5) // 1.65 < 2: unclipped
    // delta = 1.3: row 1's w = 1.35 (A < 0) becomes min(w, 1.3); its gradient dies (clamp outside)
    const d = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({ delta: 1.3 }))
    closeTo(d.gradient[4], 0)
    closeTo(d.loss, (-1.2 - E(-0.1) + 0.4 + 1.3 * 0.5 + 0.5) / 5)
  })

  it("cispo: −sg(min(w, ε_high))·A·l, normalised by N_gen", () => {
    const r = Loss.compute({ ...base, numItemsInBatch: 10 }, opts({ lossType: "cispo", epsilonHigh: 1.2 }))
    const w = logRatio.map(E)
    const cap = w.map((x) => Math.min(x, 1.2))
    let want = 0
    const grad = [0, 0, 0, 0, 0, 0]
    for (let j = 0; j < 6; j++) {
      const A = advantages[Math.floor(j / 3)]
      want += -cap[j] * A * logprobs[j] * mask[j] / 10
      grad[j] = -cap[j] * A * mask[j] / 10
    }
    closeTo(r.loss, want)
    allClose(r.gradient, grad)
    closeTo(r.metrics["cispo_clip_ratio"], 1 / 5) // w = 1.65 > 1.2 with A > 0
  })

  it("sapo: −(4/τ)σ(τ(w−1))A with τ by the advantage's sign, grpo aggregation", () => {
    const r = Loss.compute(base, opts({ lossType: "sapo" }))
    const sig = (x: number) => 1 / (1 + E(-x))
    const per = (j: number) => {
      const A = advantages[Math.floor(j / 3)]
      const tau = A > 0 ? 1 : 1.05
      return -(4 / tau) * sig(tau * (E(logRatio[j]) - 1)) * A
    }
    const want = ((per(0) + per(1)) / 2 + (per(3) + per(4) + per(5)) / 3) / 2
    closeTo(r.loss, want)
    // at w = 1 (row 1, token 2) the derivative is −4σ(0)(1−σ(0))·A·w = A·(−1)·1 = 0.5, times 1/3/2
    closeTo(r.gradient[5], 0.5 / 3 / 2)
  })

  it("vespo: detached gamma weight φ of the sequence ratio", () => {
    const r = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({ lossType: "vespo" }))
    const logW0 = 0.5 - 0.1
    const phi0 = E(3 + 2 * logW0 - 3 * E(logW0)) // A ≥ 0: k = 2, λ = 3
    const logW1 = -0.5 + 0.3
    const phi1 = E(2 + 3 * logW1 - 2 * E(logW1)) // A < 0: k = 3, λ = 2
    const want = (-phi0 * 1 * (logprobs[0] + logprobs[1]) - phi1 * -0.5 * (logprobs[3] + logprobs[4] + logprobs[5])) /
      5
    closeTo(r.loss, want)
    allClose(r.gradient, [-phi0 / 5, -phi0 / 5, 0, phi1 * 0.5 / 5, phi1 * 0.5 / 5, phi1 * 0.5 / 5])
    closeTo(r.metrics["vespo/phi_seq_mean"], (phi0 + phi1) / 2)
    // φ(1) = 1: on-policy VESPO is plain REINFORCE
    const on = Loss.compute({ ...base, oldLogprobs: undefined, numItemsInBatch: 5 }, opts({ lossType: "vespo" }))
    closeTo(on.gradient[0], -1 / 5)
  })

  it("luspo: (1/B) Σ_i L_i·|o_i| / GA with sequence-level ratios", () => {
    const r = Loss.compute(base, opts({ lossType: "luspo", importanceSamplingLevel: "sequence" }))
    const w0 = E((0.5 - 0.1) / 2) // 1.22 > 1.2, A > 0 → clipped at 1.2
    const w1 = E((-0.5 + 0.3 + 0) / 3) // 0.936, inside
    assert.isAbove(w0, 1.2)
    const L0 = -1.2
    const L1 = w1 * 0.5
    closeTo(r.loss, (L0 * 2 + L1 * 3) / 2)
    // row 1: d/dl_{1,s} = 3/2 · (−A·w1) · w1' where dw1/dl_s = w1/3 for loss tokens
    allClose(r.gradient, [0, 0, 0, 0.5 * w1 / 2, 0.5 * w1 / 2, 0.5 * w1 / 2])
  })

  it("KL (k3) without bias correction is added only when beta > 0, outside the IS weight, masked in aggregation", () => {
    const ref = [-1.1, -1.8, -3, -0.2, -1.5, -1.2]
    const k3 = (j: number) => E(ref[j] - logprobs[j]) - (ref[j] - logprobs[j]) - 1
    const without = Loss.compute({ ...base, numItemsInBatch: 5 }, opts({}))
    const r = Loss.compute(
      { ...base, refLogprobs: ref, numItemsInBatch: 5 },
      opts({ beta: 0.1, useBiasCorrectionKl: false })
    )
    const klSum = [0, 1, 3, 4, 5].reduce((s, j) => s + k3(j), 0)
    closeTo(r.loss, without.loss + 0.1 * klSum / 5)
    closeTo(r.metrics["kl"], klSum / 5)
    closeTo(r.gradient[2], 0) // padding
    closeTo(r.gradient[1], without.gradient[1] + 0.1 * (1 - E(ref[1] - logprobs[1])) / 5)
  })

  it("unscoreable rows (row mask 0) contribute nothing, even with KL", () => {
    const m = Loss.lossMask({ rows: 2, length: 3, completionMask: [1, 1, 1, 1, 1, 1], rowMask: [1, 0] })
    allClose(m, [1, 1, 1, 0, 0, 0])
    const r = Loss.compute(
      { ...base, mask: m, refLogprobs: logprobs.map((x) => x - 0.3), numItemsInBatch: 3 },
      opts({ beta: 0.04 })
    )
    allClose(r.gradient.subarray(3), [0, 0, 0])
  })
})

describe("Loss masks and sampler correction", () => {
  it("lossMask multiplies completion, tool and truncation masks", () => {
    const m = Loss.lossMask({
      rows: 2,
      length: 3,
      completionMask: [1, 1, 1, 1, 1, 0],
      toolMask: [1, 0, 1, 1, 1, 1],
      truncated: [false, true],
      maskTruncatedCompletions: true
    })
    allClose(m, [1, 0, 1, 0, 0, 0])
    const kept = Loss.lossMask({
      rows: 2,
      length: 3,
      completionMask: [1, 1, 1, 1, 1, 0],
      truncated: [false, true],
      maskTruncatedCompletions: false
    })
    allClose(kept, [1, 1, 1, 1, 1, 0])
    assert.strictEqual(Loss.countTokens(kept), 5)
  })

  it("token_truncate clamps per-token ratios; sequence_mask zeroes whole sequences above the cap", () => {
    const old = [-1, -1, -1, -2, -2, -2]
    const samp = [-1.5, -0.5, -9, -3, -2, -2] // d = 0.5, −0.5, (masked) | 1, 0, 0
    const mask2 = [1, 1, 0, 1, 1, 1]
    const tok = Loss.samplerCorrection({
      rows: 2,
      length: 3,
      oldLogprobs: old,
      samplerLogprobs: samp,
      mask: mask2,
      mode: "token_truncate",
      clipMin: 0.7,
      clipMax: 1.5
    })
    allClose(tok.ratio, [1.5, 0.7, 1, 1.5, 1, 1])
    closeTo(tok.metrics["sampling/importance_sampling_ratio/min"], 0.7)
    closeTo(tok.metrics["sampling/importance_sampling_ratio/mean"], (1.5 + 0.7 + 1.5 + 1 + 1) / 5)
    closeTo(tok.metrics["sampling/sampling_logp_difference/mean"], (0.5 + 0.5 + 1) / 5)
    closeTo(tok.metrics["sampling/sampling_logp_difference/max"], 1)
    const seq = Loss.samplerCorrection({
      rows: 2,
      length: 3,
      oldLogprobs: old,
      samplerLogprobs: samp,
      mask: mask2,
      mode: "sequence_mask",
      clipMin: null,
      clipMax: 2
    })
    // row 0: exp(0.5 − 0.5) = 1; row 1: exp(1) = 2.72 > 2 → 0
    allClose(seq.ratio, [1, 1, 1, 0, 0, 0])
    closeTo(seq.metrics["sampling/importance_sampling_ratio/max"], 1)
    closeTo(seq.metrics["sampling/importance_sampling_ratio/mean"], 0.5)
    // the loss multiplies the policy term by ρ: row 1 drops out
    const r = Loss.compute({ ...base, importanceSampling: seq, numItemsInBatch: 5 }, opts({}))
    allClose(r.gradient.subarray(3), [0, 0, 0])
  })

  it("top-entropy mask keeps tokens at or above the (1 − q) quantile of loss-token entropies", () => {
    const entropies = [0.1, 0.9, 5, 0.5, 0.3, 0.7]
    // loss-token entropies 0.1 0.9 0.5 0.3 0.7; quantile(0.5) = 0.5 → keep 0.9, 0.5, 0.7
    const r = Loss.compute(
      { rows: 2, length: 3, logprobs, mask, advantages, entropies, numItemsInBatch: 5 },
      opts({ topEntropyQuantile: 0.5 })
    )
    allClose(r.gradient, [0, -1 / 5, 0, 0.5 / 5, 0, 0.5 / 5])
    closeTo(r.metrics["entropy"], (0.1 + 0.9 + 0.5 + 0.3 + 0.7) / 5)
  })

  it("off-policy sequence mask drops negative-advantage rows that drifted more than δ", () => {
    const samplerLogprobs = logprobs.map((l, j) => (j >= 3 ? l + 0.2 : l + 5))
    const r = Loss.compute(
      { ...base, oldLogprobs: undefined, samplerLogprobs, numItemsInBatch: 5 },
      opts({ offPolicyMaskThreshold: 0.1 })
    )
    // row 0 has A > 0: kept despite drift 5; row 1: A < 0 and drift 0.2 > 0.1 → dropped
    allClose(r.gradient, [-0.2, -0.2, 0, 0, 0, 0])
  })
})

describe("Loss: dapo normalises by the whole generation batch", () => {
  it("dapo over two micro-batches sums to bnpo over the whole batch with GA = 1", () => {
    const whole = Loss.compute({ ...base }, opts({ lossType: "bnpo" }))
    const first = Loss.compute(
      {
        rows: 1,
        length: 3,
        logprobs: logprobs.slice(0, 3),
        mask: mask.slice(0, 3),
        advantages: [1],
        oldLogprobs: oldLogprobs.slice(0, 3),
        numItemsInBatch: 5
      },
      opts({ gradientAccumulationSteps: 2 })
    )
    const second = Loss.compute(
      {
        rows: 1,
        length: 3,
        logprobs: logprobs.slice(3),
        mask: mask.slice(3),
        advantages: [-0.5],
        oldLogprobs: oldLogprobs.slice(3),
        numItemsInBatch: 5
      },
      opts({ gradientAccumulationSteps: 2 })
    )
    closeTo(first.loss + second.loss, whole.loss)
    allClose([...first.gradient, ...second.gradient], whole.gradient)
  })
})

// -------------------------------------------------------------------------------------------------------------
// Finite differences
// -------------------------------------------------------------------------------------------------------------

const rng = (seed: number) => {
  let s = seed >>> 0 || 1
  return () => {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    return (s >>> 0) / 0xffffffff
  }
}

const randomBatch = (seed: number, scale: number) => {
  const r = rng(seed)
  const rows = 3
  const length = 4
  const n = rows * length
  const logprobs = Array.from({ length: n }, () => -0.2 - 3 * r())
  const oldLogprobs = logprobs.map((l) => l + scale * (r() * 2 - 1))
  const refLogprobs = logprobs.map((l) => l + 0.5 * (r() * 2 - 1))
  const mask = [1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 1] // row 1 padded; row 2 has a tool token
  const advantages = [0.8, -1.3, 0.4]
  const entropies = Array.from({ length: n }, () => 2 * r())
  return { rows, length, logprobs, oldLogprobs, refLogprobs, mask, advantages, entropies, numItemsInBatch: 9 }
}

const finiteDifference = (batch: Loss.LossBatch, options: Loss.LossOptions) => {
  const h = 1e-6
  const out = new Float64Array(batch.logprobs.length)
  for (let j = 0; j < out.length; j++) {
    const up = Array.from(batch.logprobs)
    const down = Array.from(batch.logprobs)
    up[j] += h
    down[j] -= h
    out[j] = (Loss.compute({ ...batch, logprobs: up }, options).loss -
      Loss.compute({ ...batch, logprobs: down }, options).loss) / (2 * h)
  }
  return out
}

describe("Loss.compute: analytic gradient = finite differences", () => {
  const cases: Array<[string, Partial<Loss.LossOptions>]> = [
    ["grpo", { lossType: "grpo" }],
    ["bnpo", { lossType: "bnpo", gradientAccumulationSteps: 3 }],
    ["dr_grpo", { lossType: "dr_grpo", maxCompletionLength: 6 }],
    ["dapo", { lossType: "dapo" }],
    ["dapo, epsilonHigh 0.28, delta 1.5", { lossType: "dapo", epsilonHigh: 0.28, delta: 1.5 }],
    ["cispo (cap below every ratio)", { lossType: "cispo", epsilonHigh: 0.2 }],
    ["sapo", { lossType: "sapo" }],
    ["luspo, sequence level", { lossType: "luspo", importanceSamplingLevel: "sequence" }],
    ["luspo, token level", { lossType: "luspo" }],
    ["grpo, sequence level (GSPO)", { lossType: "grpo", importanceSamplingLevel: "sequence" }],
    ["dapo + KL", { lossType: "dapo", beta: 0.2 }],
    ["grpo + KL with bias correction", { lossType: "grpo", beta: 0.2, useBiasCorrectionKl: true }],
    ["GSPO + KL with bias correction", {
      lossType: "grpo",
      beta: 0.2,
      useBiasCorrectionKl: true,
      importanceSamplingLevel: "sequence"
    }],
    ["sapo + KL + top entropy", { lossType: "sapo", beta: 0.1, topEntropyQuantile: 0.6 }],
    ["dapo + off-policy mask", { lossType: "dapo", offPolicyMaskThreshold: 0.05 }]
  ]
  for (const [name, over] of cases) {
    for (const [seed, scale] of [[7, 0.05], [11, 0.6]] as const) {
      it(`${name} (log-ratio scale ${scale})`, () => {
        const batch = randomBatch(seed, scale)
        const options = opts(over)
        const { gradient } = Loss.compute(batch, options)
        allClose(gradient, finiteDifference(batch, options), 1e-6, name)
      })
    }
  }

  it("with the sampler correction (token_truncate) applied", () => {
    const batch = randomBatch(5, 0.3)
    const importanceSampling = Loss.samplerCorrection({
      rows: 3,
      length: 4,
      oldLogprobs: batch.oldLogprobs,
      samplerLogprobs: batch.oldLogprobs.map((x, j) => x + 0.3 * Math.sin(j)),
      mask: batch.mask,
      mode: "token_truncate",
      clipMin: null,
      clipMax: 1.2
    })
    const b = { ...batch, importanceSampling }
    const options = opts({ lossType: "dapo", beta: 0.05 })
    allClose(Loss.compute(b, options).gradient, finiteDifference(b, options), 1e-6)
  })

  it("the gradient at masked positions is zero for every masked loss type", () => {
    const batch = randomBatch(3, 0.3)
    for (const lossType of ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo"] as const) {
      const { gradient } = Loss.compute(batch, opts({ lossType, beta: 0.1 }))
      for (let j = 0; j < gradient.length; j++) if (batch.mask[j] === 0) assert.strictEqual(gradient[j], 0, lossType)
    }
  })
})
