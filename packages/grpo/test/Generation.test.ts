import { assert, describe, it } from "@effect/vitest"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import * as Config from "../src/Config.js"
import { prepare, trainMicroBatch } from "../src/internal/generation.js"
import type { TrainableModel } from "../src/internal/model.js"
import * as Loss from "../src/Loss.js"
import * as Reward from "../src/Reward.js"

interface Game {
  readonly env: "catch" | "wordle"
  readonly score: number
}

const record = (
  promptIndex: number,
  generation: number,
  env: Game["env"],
  score: number,
  options: { readonly unscoreable?: boolean; readonly toolCalls?: number; readonly failures?: number } = {}
): EpisodeRecord<Game> => ({
  promptIndex,
  generation,
  environment: env,
  row: { env, seed: promptIndex },
  envSeed: promptIndex,
  promptIds: [1, 2, 3],
  // Two model tokens, two tool-result tokens, one model token.
  completionIds: [10, 11, 20, 21, 12],
  mask: [1, 1, 0, 0, 1],
  logprobs: [-1, -1, 0, 0, -1],
  messages: [{ role: "user", content: "p" }, { role: "assistant", content: "a" }],
  promptMessageCount: 1,
  toolCalls: [],
  toolStats: {},
  toolCallCount: options.toolCalls ?? 1,
  toolFailureCount: options.failures ?? 0,
  turns: 2,
  truncated: false,
  finishReason: "stop",
  stopReason: "no_tool_call",
  wallTimeMs: 1,
  state: { env, score },
  ...(options.unscoreable === true ? { unscoreable: { reason: "session lost", tag: "SessionLostError" } } : {})
})

// Scores every completion token at logprob -1 (the sampler's), entropy 0.5; records the weights it is given.
const fakeModel = (weights: Array<ArrayLike<number>>): TrainableModel => {
  const score = (batch: { prompts: ReadonlyArray<unknown>; length: number }) => ({
    logprobs: new Float64Array(batch.prompts.length * batch.length).fill(-1),
    entropies: new Float64Array(batch.prompts.length * batch.length).fill(0.5)
  })
  return {
    score: (batch) => Effect.succeed(score(batch)),
    accumulate: (batch, _t, weightsFor) =>
      Effect.sync(() => {
        const s = score(batch)
        weights.push(weightsFor(s))
        return s
      })
  } as Partial<TrainableModel> as TrainableModel
}

const perEnv = (env: Game["env"]) =>
  Reward.perEpisode<Game>(env, (e) => (e.environment.env === env ? e.environment.score : null))

describe("generation batch → micro-batches", () => {
  it.effect("multi-environment rewards, unscoreable episodes out of the loss, per-environment metrics", () =>
    Effect.gen(function*() {
      const config = yield* Effect.flatMap(
        Config.fromSources({ numGenerations: 2, perDeviceTrainBatchSize: 2, gradientAccumulationSteps: 2 }),
        (c) => Config.resolve(c)
      )
      const records = [
        record(0, 0, "catch", 1, { toolCalls: 2, failures: 1 }),
        record(0, 1, "catch", 0),
        record(1, 0, "wordle", 0.5),
        record(1, 1, "wordle", 0, { unscoreable: true })
      ]
      const weights: Array<ArrayLike<number>> = []
      const model = fakeModel(weights)
      const out = yield* prepare({
        config,
        records,
        rewardFunctions: [perEnv("catch"), perEnv("wordle")],
        trainerState: { globalStep: 0, maxSteps: 1, epoch: 0 },
        model,
        reference: undefined,
        step: 0,
        decode: (ids) => ids.join(",")
      })
      assert.strictEqual(out.microBatches.length, 2)
      const rows = out.microBatches.flatMap((m) => m.rows)
      const byReward = (adv: number) => rows.filter((r) => r.advantage === adv).length
      // catch group: +/-; wordle group: its one scoreable member has advantage 0 (no std), the lost one 0 too.
      assert.strictEqual(rows.filter((r) => r.advantage > 0).length, 1)
      assert.strictEqual(rows.filter((r) => r.advantage < 0).length, 1)
      assert.strictEqual(byReward(0), 2)
      // Tool tokens and the unscoreable episode carry no loss; the normaliser counts the rest (3 rows × 3 tokens).
      assert.strictEqual(out.microBatches[0].numItemsInBatch, 9)
      const lost = rows.filter((r) => Loss.countTokens(r.mask) === 0)
      assert.strictEqual(lost.length, 1)
      for (const r of rows.filter((r) => Loss.countTokens(r.mask) > 0)) assert.deepStrictEqual(r.mask, [1, 1, 0, 0, 1])
      assert.strictEqual(out.metrics["rewards/catch/mean"], 0.5)
      assert.strictEqual(out.metrics["rewards/wordle/mean"], 0.5)
      assert.strictEqual(out.metrics["env/catch/reward"], 0.5)
      assert.strictEqual(out.metrics["env/wordle/reward"], 0.5)
      assert.strictEqual(out.metrics["env/catch/tools/failure_frequency"], 1 / 3)
      assert.strictEqual(out.metrics["tools/call_frequency"], 5 / 4)
      assert.strictEqual(out.metrics["completions/mean_length"], 3)
      assert.strictEqual(out.metrics["unscoreable_frac"], 0.25)
      assert.strictEqual(out.samples.length, 4)
      assert.strictEqual(out.samples[3].extra?.["unscoreable"], "session lost")
      assert.deepStrictEqual(out.samples[0].rewards, { catch: 1, wordle: null })

      // The per-token weights fed to the model are Loss.compute's gradient: dapo, on-policy, ratio 1:
      // d loss / d l = −A·m / N for every loss token.
      let total = 0
      for (const micro of out.microBatches) {
        const result = yield* trainMicroBatch(model, micro, Loss.optionsFromConfig(config), 1)
        total += result.loss
      }
      const T = 5
      out.microBatches.forEach((micro, k) =>
        micro.rows.forEach((r, i) => {
          for (let t = 0; t < T; t++) {
            assert.closeTo(weights[k][i * T + t], -r.advantage * r.mask[t] / 9, 1e-12)
          }
        })
      )
      assert.closeTo(total, 0, 1e-12) // on-policy GRPO: advantages of a group sum to zero
    }))

  // A black-box agent's episode can be several token sequences (a rewritten history starts a new one): each segment
  // is its own row with its own mask and sampler logprobs, and every segment shares the episode's advantage.
  it.effect("an episode's segments are rows of their own sharing its advantage", () =>
    Effect.gen(function*() {
      const config = yield* Effect.flatMap(
        Config.fromSources({ numGenerations: 2, perDeviceTrainBatchSize: 2, gradientAccumulationSteps: 2 }),
        (c) => Config.resolve(c)
      )
      const segmented: EpisodeRecord<Game> = {
        ...record(0, 0, "catch", 1),
        segments: [
          { promptIds: [1, 2], completionIds: [30, 31], mask: [1, 1], logprobs: [-0.5, -0.5], truncated: false },
          { promptIds: [5], completionIds: [40, 41, 42], mask: [1, 0, 1], logprobs: [-1, 0, -1], truncated: false }
        ]
      }
      const records = [segmented, record(0, 1, "catch", 0)]
      const out = yield* prepare({
        config,
        records,
        rewardFunctions: [perEnv("catch")],
        trainerState: { globalStep: 0, maxSteps: 1, epoch: 0 },
        model: fakeModel([]),
        reference: undefined,
        step: 0,
        decode: (ids) => ids.join(",")
      })
      const rows = out.microBatches.flatMap((m) => m.rows)
      assert.strictEqual(rows.length, 3)
      const first = rows.find((r) => r.completion[0] === 30)!
      const second = rows.find((r) => r.completion[0] === 40)!
      const other = rows.find((r) => r.completion[0] === 10)!
      assert.deepStrictEqual([first.prompt, second.prompt], [[1, 2], [5]])
      assert.deepStrictEqual(second.mask, [1, 0, 1])
      assert.deepStrictEqual(second.sampler, [-1, 0, -1])
      assert.isTrue(first.advantage > 0 && first.advantage === second.advantage && other.advantage < 0)
      // The normaliser counts every segment's loss tokens: 2 + 2 + the other episode's 3.
      assert.strictEqual(out.microBatches[0].numItemsInBatch, 7)
    }))
})
