import { assert, describe, it } from "@effect/vitest"
import { FastCheck } from "effect"
import * as Advantage from "../src/Advantage.js"

const closeTo = (got: number, want: number, tol = 1e-12) =>
  assert.isTrue(Math.abs(got - want) <= tol * (1 + Math.abs(want)), `got ${got}, want ${want}`)

const single = (rewards: Array<number>, unscoreable?: Array<boolean>) => ({
  episodes: rewards.length,
  weights: [1],
  values: rewards,
  ...(unscoreable === undefined ? {} : { unscoreable })
})

describe("Advantage.compute", () => {
  it("group scaling: (r − mean) / (Bessel std + 1e-4) per group", () => {
    const a = Advantage.compute(single([1, 2, 3, 4, 0, 0, 0, 2]), { numGenerations: 4 })
    const s1 = Math.sqrt(5 / 3)
    const s2 = 1 // values 0,0,0,2: mean 0.5, Σ(x−m)² = 3, /3 = 1
    const want = [-1.5 / (s1 + 1e-4), -0.5 / (s1 + 1e-4), 0.5 / (s1 + 1e-4), 1.5 / (s1 + 1e-4)]
      .concat([-0.5 / (s2 + 1e-4), -0.5 / (s2 + 1e-4), -0.5 / (s2 + 1e-4), 1.5 / (s2 + 1e-4)])
    want.forEach((w, i) => closeTo(a.advantages[i], w))
    closeTo(a.metrics.frac_reward_zero_std, 0)
  })

  it("unscoreable episodes leave the group's statistics, get advantage 0 and row mask 0", () => {
    const a = Advantage.compute(single([1, 2, 3, 100], [false, false, false, true]), { numGenerations: 4 })
    closeTo(a.advantages[0], -1 / (1 + 1e-4))
    closeTo(a.advantages[1], 0)
    closeTo(a.advantages[2], 1 / (1 + 1e-4))
    assert.strictEqual(a.advantages[3], 0)
    assert.deepStrictEqual(Array.from(a.rowMask), [1, 1, 1, 0])
    assert.isTrue(Number.isNaN(a.rewards[3]))
  })

  it("a row every function declined (all null → NaN) is unscoreable, not 0", () => {
    const a = Advantage.compute(
      { episodes: 4, weights: [1, 2], values: [1, NaN, NaN, 1, NaN, NaN, 0, NaN] },
      { numGenerations: 4 }
    )
    // rewards: 1, 2, unscoreable, 0 → mean 1, std 1
    assert.deepStrictEqual(a.unscoreable, [false, false, true, false])
    closeTo(a.advantages[1], 1 / (1 + 1e-4))
    closeTo(a.advantages[3], -1 / (1 + 1e-4))
    assert.strictEqual(a.advantages[2], 0)
  })

  it("all-equal groups give zero advantages and count in frac_reward_zero_std", () => {
    const a = Advantage.compute(single([0.5, 0.5, 0.5, 0.5, 0, 1, 0, 1]), { numGenerations: 4 })
    for (let i = 0; i < 4; i++) assert.strictEqual(a.advantages[i], 0)
    closeTo(a.metrics.frac_reward_zero_std, 0.5)
  })

  it("a group with one scoreable member has NaN std → advantage 0 (group); scale none centres only", () => {
    const values = [3, 9, 9, 5]
    const flags = [false, true, true, false]
    const group = Advantage.compute(single(values, flags), { numGenerations: 2 })
    assert.deepStrictEqual(Array.from(group.advantages), [0, 0, 0, 0])
    const none = Advantage.compute(single([1, 4, 2, 2]), { numGenerations: 2, scaleRewards: "none" })
    assert.deepStrictEqual(Array.from(none.advantages), [-1.5, 1.5, 0, 0])
    closeTo(none.metrics.frac_reward_zero_std, 0.5) // group std still feeds the metric
    // TRL's metric does not count the NaN std of a group with one scoreable member; frac_zero_advantage does: this
    // generation batch has nothing to learn from.
    assert.strictEqual(group.metrics.frac_reward_zero_std, 0)
    assert.strictEqual(group.metrics.frac_zero_advantage, 1)
    const unscoreable = Advantage.compute(single([1, 2, 3, 4], [true, true, true, true]), { numGenerations: 2 })
    assert.deepStrictEqual([unscoreable.metrics.frac_reward_zero_std, unscoreable.metrics.frac_zero_advantage], [0, 1])
    // One group with a signal: its members' advantages are not zero (a member at the group mean would be).
    const mixed = Advantage.compute(single([0, 1, 5, 5]), { numGenerations: 2 })
    assert.strictEqual(mixed.metrics.frac_zero_advantage, 0.5)
  })

  it("batch scaling divides by the std over the whole batch", () => {
    const a = Advantage.compute(single([1, 3, 10, 14]), { numGenerations: 2, scaleRewards: "batch" })
    const mean = 7
    const std = Math.sqrt(((1 - mean) ** 2 + (3 - mean) ** 2 + (10 - mean) ** 2 + (14 - mean) ** 2) / 3)
    closeTo(a.advantages[0], -1 / (std + 1e-4))
    closeTo(a.advantages[3], 2 / (std + 1e-4))
  })

  it("weights and NaN entries: each episode is scored only by the functions that apply", () => {
    const a = Advantage.compute(
      { episodes: 2, weights: [2, 0.5], values: [1, NaN, NaN, 4] },
      { numGenerations: 2, scaleRewards: "none" }
    )
    // r = [2, 2] → 0, 0
    assert.deepStrictEqual(Array.from(a.rewards), [2, 2])
    assert.deepStrictEqual(Array.from(a.advantages), [0, 0])
  })

  it("normalize_then_sum (GDPO): per-function group z-scores, weighted sum, batch z-score", () => {
    const a = Advantage.compute(
      { episodes: 4, weights: [1, 1], values: [0, 1, 1, 1, 0, 0, 1, 0] },
      { numGenerations: 2, multiObjectiveAggregation: "normalize_then_sum" }
    )
    const z = 0.5 / (Math.SQRT1_2 + 1e-4) // |x − mean| / (std + 1e-4) for a pair {0, 1}, std = √½
    // group 1: f0 = −z,+z; f1 = 0,0 (equal) → r = −z, z; group 2: f0 = −z, z; f1 = 0,0 → −z, z
    const r = [-z, z, -z, z]
    r.forEach((v, i) => closeTo(a.rewards[i], v))
    const std = Math.sqrt((4 * z * z) / 3)
    closeTo(a.advantages[1], z / (std + 1e-4))
  })

  it("rejects a batch that is not whole groups", () => {
    assert.throws(() => Advantage.compute(single([1, 2, 3]), { numGenerations: 2 }), /whole groups/)
  })
})

// Groups of 4 with rewards in [-10, 10] and ~20% unscoreable episodes.
const batchArb = FastCheck.array(
  FastCheck.tuple(
    FastCheck.double({ min: -10, max: 10, noNaN: true }),
    FastCheck.boolean(),
    FastCheck.integer({ min: 0, max: 4 })
  ),
  { minLength: 4, maxLength: 4 * 6 }
).map((xs) => xs.slice(0, xs.length - (xs.length % 4)))

describe("Advantage properties", () => {
  it.prop("scaleRewards=group: advantages sum to zero per group over scoreable episodes", [batchArb], ([rows]) => {
    const a = Advantage.compute(
      single(rows.map(([r]) => r), rows.map(([, , u]) => u === 0)),
      { numGenerations: 4 }
    )
    for (let g = 0; g < rows.length; g += 4) {
      let sum = 0
      for (let i = g; i < g + 4; i++) if (!a.unscoreable[i]) sum += a.advantages[i]
      if (Math.abs(sum) > 1e-9) return false
    }
    return a.unscoreable.every((u, i) => !u || a.advantages[i] === 0)
  })

  it.prop(
    "advantages are invariant to shifting every reward by a constant",
    [
      batchArb,
      FastCheck.double({ min: -50, max: 50, noNaN: true }),
      FastCheck.constantFrom<"group" | "none">("group", "none")
    ],
    ([rows, shift, scaleRewards]) => {
      const flags = rows.map(([, , u]) => u === 0)
      const a = Advantage.compute(single(rows.map(([r]) => r), flags), { numGenerations: 4, scaleRewards })
      const b = Advantage.compute(single(rows.map(([r]) => r + shift), flags), { numGenerations: 4, scaleRewards })
      return Array.from(a.advantages).every((x, i) => Math.abs(x - b.advantages[i]) <= 1e-6 * (1 + Math.abs(x)))
    }
  )
})
