/**
 * Test fixtures: a tiny Qwen3 model on the CPU reference, an in-process environment without tools, and configs.
 */
import { assert } from "@effect/vitest"
import { Checkpoint } from "@envtrain/gpu"
import type { Session } from "@envtrain/rollout/Episode"
import type { GenerateRequest } from "@envtrain/rollout/Policy"
import { Effect, Option } from "effect"
import * as Config from "../src/Config.js"
import * as Dataset from "../src/Dataset.js"
import * as Reward from "../src/Reward.js"
import * as Trainer from "../src/Trainer.js"

/** The environment's state: the parity the episode is asked for (even token ids). */
export interface ParityState {
  readonly seed: number
}

/** An in-process environment with no tools: the episode is one answer, judged on its token ids. */
export const open = (row: Readonly<Record<string, unknown>>) =>
  Effect.succeed<Session<ParityState>>({
    environment: "parity",
    observation: Option.none(),
    toolDefinitions: [],
    call: () => Effect.die("no tools"),
    state: Effect.succeed({ seed: Number(row.seed ?? 0) })
  })

/** Fraction of the completion's tokens with an even id: dense, and a random model scores about 0.5. */
export const parityReward = Reward.perEpisode<ParityState>("even_tokens", (e) => {
  const ids = e.completionIds
  return ids.length === 0 ? 0 : ids.filter((id) => id % 2 === 0).length / ids.length
})

/**
 * Fraction of the completion's tokens whose id is a multiple of 3. Greedy decoding of a new tiny model repeats one
 * token that is not (for the seeds the tests use), so a greedy evaluation starts at 0 and rises only if it learns.
 */
export const thirdsReward = Reward.perEpisode<ParityState>("thirds", (e) => {
  const ids = e.completionIds
  return ids.length === 0 ? 0 : ids.filter((id) => id % 3 === 0).length / ids.length
})

export const tinyModel = (seed = 1) => Effect.map(Checkpoint.makeModel("tiny", seed), (m) => Trainer.referenceModel(m))

export const dataset = (from: number, to: number) =>
  Dataset.fromSeeds({ prompt: [{ role: "user", content: "Say a" }], seeds: Dataset.range(from, to) })

/** Rows the training data never holds: other words to say (the reward is the same). */
export const heldOut = (from: number, to: number) =>
  Dataset.fromRows(
    Dataset.range(from, to).map((seed, i) => ({
      prompt: [{ role: "user", content: `Say ${"bcdefgh"[i % 7]}` }],
      seed
    })),
    "held-out"
  )

export const config = (overrides: Record<string, unknown>) =>
  Config.fromSources({
    numGenerations: 4,
    perDeviceTrainBatchSize: 8,
    maxCompletionLength: 6,
    learningRate: 0.05,
    lrSchedulerType: "constant",
    loggingSteps: 1,
    saveSteps: 1000,
    logCompletions: true,
    numCompletionsToPrint: 2,
    ...overrides
  })

/** The largest difference relative to 1 + |b| (models compared at f32 tolerance). */
export const maxRel = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  assert.strictEqual(a.length, b.length)
  let worst = 0
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / (1 + Math.abs(b[i])))
  return worst
}

/** Three generation requests of 3 to 5 prompt tokens, 8 new tokens each. */
export const requests = (temperature: number): Array<GenerateRequest> =>
  [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]].map((promptIds, i) => ({
    promptIds,
    sampling: { temperature, maxTokens: 8, seed: 7 + i }
  }))

/** Four SFT transcripts ("Say i" → "ok i ok"): a tiny model lowers its loss on them in a few steps. */
export const sayTranscripts = () =>
  Array.from({ length: 4 }, (_, i) => ({
    messages: [{ role: "user" as const, content: `Say ${i}` }, { role: "assistant" as const, content: `ok ${i} ok` }]
  }))
