/**
 * Fixtures of the GRPO-on-policy-server tests (PolicyServers.test.ts, WeightStore.test.ts): the parity environment
 * (no tools, one answer judged on its token ids), a short run of it, a tiny model saved in a temporary directory,
 * and a server's `policy_version`.
 */
import { FileSystem, Path } from "@effect/platform"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as Config from "@envtrain/grpo/Config"
import * as Dataset from "@envtrain/grpo/Dataset"
import * as Metrics from "@envtrain/grpo/Metrics"
import * as Reward from "@envtrain/grpo/Reward"
import * as Trainer from "@envtrain/grpo/Trainer"
import type { Session } from "@envtrain/rollout/Episode"
import { Effect, Option } from "effect"

/** What a server's `/v1/models` says of its weights. */
export const modelsEntry = (url: string) =>
  Effect.promise(() =>
    fetch(`${url}/v1/models`).then((r) =>
      r.json() as Promise<{
        data: Array<{
          policy_version: number
          weight_store?: { directory: string; policy_version: number | null; error: string | null }
        }>
      }>
    )
  ).pipe(Effect.map((j) => j.data[0]))

export const policyVersion = (url: string) => Effect.map(modelsEntry(url), (e) => e.policy_version)

// The parity environment of grpo's tests: no tools, one answer judged on its token ids.
export const open = (row: Readonly<Record<string, unknown>>) =>
  Effect.succeed<Session<{ readonly seed: number }>>({
    environment: "parity",
    observation: Option.none(),
    toolDefinitions: [],
    call: () => Effect.die("no tools"),
    state: Effect.succeed({ seed: Number(row.seed ?? 0) })
  })
const parityReward = Reward.perEpisode<{ readonly seed: number }>("even_tokens", (e) => {
  const ids = e.completionIds
  return ids.length === 0 ? 0 : ids.filter((id) => id % 2 === 0).length / ids.length
})

/** `steps` GRPO steps of the parity task on `model`; its result and completions.jsonl. */
export const train = (
  model: Trainer.TrainableModel,
  steps: number,
  openEpisode: typeof open = open,
  extra: Readonly<Record<string, unknown>> = {}
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    const result = yield* Trainer.train({
      config: yield* Config.fromSources({
        outputDir: dir,
        numGenerations: 4,
        perDeviceTrainBatchSize: 8,
        maxCompletionLength: 6,
        learningRate: 0.05,
        lrSchedulerType: "constant",
        loggingSteps: 1,
        saveSteps: 1000,
        logCompletions: true,
        maxSteps: steps,
        ...extra
      }),
      model,
      dataset: Dataset.fromSeeds({ prompt: [{ role: "user", content: "Say a" }], seeds: Dataset.range(0, 64) }),
      open: openEpisode,
      rewardFunctions: [parityReward],
      progress: false
    })
    const completions = yield* fs.readFileString(path.join(dir, Metrics.files.completions))
    return { result, completions }
  })

/** Step metrics without the wall-clock ones. */
export const timeless = (values: Readonly<Record<string, number>>) =>
  Object.fromEntries(
    Object.entries(values).filter(([k]) => !/time|per_second/.test(k))
  )

/** completions.jsonl's rows without their timestamps. */
export const completionRows = (text: string) =>
  text.split("\n").filter((l) => l !== "").map((l) => timeless(JSON.parse(l)))

/** A tiny model (seed 1), saved in a scoped temporary directory. */
export const tinyDir = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const model = yield* Checkpoint.makeModel("tiny", 1)
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* Checkpoint.save(dir, model)
  return { model, dir }
})

/**
 * A two-step Catch run's command file for `model` (CPU device) in a scoped temporary directory, with `extra` lines;
 * its path.
 */
export const catchRunFile = (model: string, extra: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const out = yield* fs.makeTempDirectoryScoped()
    const file = path.join(out, "catch.yaml")
    yield* fs.writeFileString(
      file,
      [
        `model: ${model}`,
        "backend: cpu",
        "environment: catch",
        "dataset: { seeds: [0, 4], prompt: \"Catch the ball.\" }",
        `output_dir: ${path.join(out, "run")}`,
        "num_generations: 2",
        "perDeviceTrainBatchSize: 4",
        "maxCompletionLength: 8",
        "maxSteps: 2",
        ...extra
      ].join("\n") + "\n"
    )
    return file
  })
