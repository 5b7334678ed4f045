import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as DynamicSampling from "../src/internal/dynamicSampling.js"
import * as Reward from "../src/Reward.js"
import * as Trainer from "../src/Trainer.js"
import * as F from "./fixtures.js"

const table = (rewards: ReadonlyArray<number>): Reward.RewardTable => ({
  names: ["r"],
  weights: [1],
  episodes: rewards.length,
  values: Float64Array.from(rewards),
  rewards: Float64Array.from(rewards),
  unscoreable: rewards.map((r) => (Number.isNaN(r) ? "lost" : undefined))
})

/** 1 when at least 5 of the completion's 6 tokens have even ids: rare for a random model, so groups are often flat. */
const rare = Reward.perEpisode<F.ParityState>("mostly_even", (e) => {
  const ids = e.completionIds
  return ids.filter((id) => id % 2 === 0).length >= 5 ? 1 : 0
})

describe("dynamic sampling", () => {
  it("flat groups: every group whose scoreable rewards agree; failed: only those at the batch's lowest reward", () => {
    // Groups of 2: [0,0] flat low, [1,1] flat high, [0,1] varies, [NaN,0] one scoreable (flat), [NaN,NaN] none.
    const t = table([0, 0, 1, 1, 0, 1, NaN, 0, NaN, NaN])
    assert.deepStrictEqual(DynamicSampling.flatGroups(t, 2, "flat"), [0, 1, 3, 4])
    assert.deepStrictEqual(DynamicSampling.flatGroups(t, 2, "failed"), [0, 3, 4])
  })

  it.effect("a re-roll that varies replaces its group (records and rewards); one still flat is retried, then kept", () =>
    Effect.gen(function*() {
      const records = ["a0", "a1", "b0", "b1", "c0", "c1"] as unknown as ReadonlyArray<never>
      const calls: Array<{ groups: ReadonlyArray<number>; round: number }> = []
      const rerolls: Record<number, { records: Array<string>; rewards: Array<number> }> = {
        // Round 1 re-rolls groups 0 and 2: group 0's varies, group 2's does not.
        1: { records: ["a0'", "a1'", "c0'", "c1'"], rewards: [1, 0, 0, 0] },
        // Round 2 re-rolls group 2 alone: still flat.
        2: { records: ["c0''", "c1''"], rewards: [0, 0] }
      }
      const out = yield* DynamicSampling.resample({
        mode: "failed",
        rounds: 2,
        numGenerations: 2,
        records,
        table: table([0, 0, 0, 1, 0, 0]),
        reroll: (groups, round) => {
          calls.push({ groups, round })
          return Effect.succeed({
            records: rerolls[round].records as unknown as ReadonlyArray<never>,
            table: table(rerolls[round].rewards)
          })
        }
      })
      assert.deepStrictEqual(calls, [{ groups: [0, 2], round: 1 }, { groups: [2], round: 2 }])
      assert.deepStrictEqual(out.records as unknown, ["a0'", "a1'", "b0", "b1", "c0", "c1"])
      assert.deepStrictEqual(Array.from(out.table.rewards), [1, 0, 0, 1, 0, 0])
      assert.deepStrictEqual(out.metrics, {
        "dynamic_sampling/flat_groups": 2,
        "dynamic_sampling/replaced_groups": 1,
        "dynamic_sampling/flat_groups_left": 1,
        "dynamic_sampling/extra_episodes": 6
      })
    }))

  // The first batch is the same with and without dynamic sampling (round 0 keeps the step's seeds), so the run
  // without it tells how many groups were flat, and the run with it must have re-rolled exactly those.
  it.scoped("in the trainer: the batch's flat groups are re-rolled and fewer stay flat", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const run = (extra: Record<string, unknown>) =>
        Effect.gen(function*() {
          const dir = yield* fs.makeTempDirectoryScoped()
          return yield* Trainer.train({
            config: yield* F.config({ maxSteps: 1, outputDir: dir, perDeviceTrainBatchSize: 16, ...extra }),
            model: yield* F.tinyModel(3),
            dataset: F.dataset(0, 64),
            open: F.open,
            rewardFunctions: [rare],
            progress: false
          })
        })
      const off = (yield* run({})).steps[0].values
      const on = (yield* run({ dynamicSampling: "flat", dynamicSamplingRounds: 3 })).steps[0].values
      const groups = 4
      assert.isFalse("dynamic_sampling/flat_groups" in off)
      const flatBefore = Math.round(off["frac_reward_zero_std"] * groups)
      assert.isTrue(
        flatBefore > 0,
        `the test needs a flat group in the first batch (frac ${off["frac_reward_zero_std"]})`
      )
      assert.strictEqual(on["dynamic_sampling/flat_groups"], flatBefore)
      assert.isTrue(on["dynamic_sampling/replaced_groups"] > 0, JSON.stringify(on))
      assert.strictEqual(
        Math.round(on["frac_reward_zero_std"] * groups),
        on["dynamic_sampling/flat_groups_left"]
      )
      assert.isTrue(on["dynamic_sampling/extra_episodes"] >= 4 * flatBefore)
    }).pipe(Effect.provide(NodeContext.layer)), 120_000)
})
