/**
 * Sync vs async GRPO wall time, in process, on Catch-sized episodes: the tiny preset (untrained, so most episodes
 * are one turn that runs to the token budget) on the CPU reference model, Catch's environment, prompt and reward,
 * G = 4, 8 episodes per step. In process, generation and training share the machine's cores and the model (their
 * calls interleave under one lock), so overlapping them cannot buy much here; the gain needs the rollouts in
 * another process (a policy server). Runs sync, async (maxStaleness 1), then both again, and saves
 * bench/results/grpo/async-bench.json and .md.
 *
 *   npx tsx bench/grpo/async-bench.ts [steps] [maxCompletionLength]
 */
import { NodeContext } from "@effect/platform-node"
import { Environment, Registry } from "@envtrain/env"
import { Checkpoint } from "@envtrain/gpu"
import * as Episode from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import * as Config from "../../packages/grpo/src/Config.js"
import * as Dataset from "../../packages/grpo/src/Dataset.js"
import * as Recipe from "../../packages/grpo/src/Recipe.js"
import * as Trainer from "../../packages/grpo/src/Trainer.js"

const steps = Number(process.argv[2] ?? 8)
const completion = Number(process.argv[3] ?? 128)

const run = (name: string, overrides: Record<string, unknown>) =>
  Effect.gen(function*() {
    const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
    const config = yield* Config.fromSources({
      numGenerations: 4,
      perDeviceTrainBatchSize: 8,
      maxCompletionLength: completion,
      learningRate: 1e-4,
      lrSchedulerType: "constant",
      loggingSteps: 1,
      saveSteps: 10_000,
      maxSteps: steps,
      outputDir: `/tmp/envtrain-async-bench-${name}`,
      ...overrides
    })
    const started = Date.now()
    const result = yield* Trainer.train({
      config,
      model: Trainer.referenceModel(checkpoint),
      dataset: Dataset.fromSeeds({ prompt: Recipe.catchRecipe.prompt({}), seeds: Dataset.range(0, 1000) }),
      open: (row) => Effect.map(Environment.episode(Registry.builtins.catch.environment, row), Episode.fromEnvironment),
      rewardFunctions: Recipe.catchRecipe.rewardFunctions,
      progress: false
    })
    const seconds = (Date.now() - started) / 1000
    const mean = (k: string) => {
      const v = result.steps.map((s) => s.values[k]).filter((x) => x !== undefined && !Number.isNaN(x))
      return v.length === 0 ? null : v.reduce((a, b) => a + b, 0) / v.length
    }
    return {
      name,
      seconds,
      stepsPerHour: (steps * 3600) / seconds,
      meanStepSeconds: mean("step_time"),
      meanGenerationSeconds: mean("time/generation"),
      meanUpdateSeconds: mean("time/update"),
      meanQueueWaitSeconds: mean("queue_wait_time_s"),
      meanOverlap: mean("async/overlap"),
      meanStaleness: mean("async/staleness/mean"),
      droppedSamples: result.steps.at(-1)?.values["async/dropped_samples_total"] ?? null,
      meanCompletionLength: mean("completions/mean_length"),
      meanReward: mean("reward")
    }
  })

const program = Effect.gen(function*() {
  const runs = []
  for (const round of [1, 2]) {
    runs.push({ round, ...(yield* run("sync", {})) })
    runs.push({ round, ...(yield* run("async", { async: true, maxStaleness: 1 })) })
  }
  const results = { date: new Date().toISOString(), preset: "tiny", steps, completion, runs }
  mkdirSync("bench/results/grpo", { recursive: true })
  writeFileSync("bench/results/grpo/async-bench.json", JSON.stringify(results, null, 2) + "\n")
  const f = (x: number | null, d = 2) => x === null ? "–" : x.toFixed(d)
  const md = [
    `# Sync vs async GRPO, in process (tiny preset, CPU reference, Catch)`,
    "",
    `${new Date().toISOString().slice(0, 10)}; ${steps} steps, 8 episodes per step (G = 4), maxCompletionLength ` +
    `${completion}; async: maxStaleness 1, maxInflightTasks auto (2 steps of batches). Machine: 2 CPU cores shared ` +
    `with other work, so the runs alternate (sync, async, sync, async) and the numbers are noisy.`,
    "",
    "| round | mode | wall s | steps/hour | step s | generation s | update s | queue wait s | overlap | staleness | dropped |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...runs.map((r) =>
      `| ${r.round} | ${r.name} | ${f(r.seconds, 1)} | ${f(r.stepsPerHour, 0)} | ${f(r.meanStepSeconds)} | ` +
      `${f(r.meanGenerationSeconds)} | ${f(r.meanUpdateSeconds)} | ${f(r.meanQueueWaitSeconds)} | ` +
      `${f(r.meanOverlap)} | ${f(r.meanStaleness)} | ${r.droppedSamples ?? "–"} |`
    ),
    "",
    "In one Node process only one fiber computes at a time: generation and training (both synchronous CPU work on",
    "the same model, under one lock) take turns. The producer makes the next batches between updates, so the step",
    "finds them queued (queue wait ~0, step time = the update alone) but the run's wall time stays the sum of both,",
    "and `overlap` (the fraction of a step's wall time during which a generation batch and an update were both in",
    "progress) stays near 0. The gain of async GRPO needs the rollouts in another process: a policy server",
    "(`envtrain serve-policy`), where generation and training run in parallel.",
    "",
    "Reproduce: `npx tsx bench/grpo/async-bench.ts " + `${steps} ${completion}` + "`."
  ].join("\n")
  writeFileSync("bench/results/grpo/async-bench.md", md + "\n")
  console.log(md)
}).pipe(Effect.provide(NodeContext.layer))

// The recipes' reward functions carry `any` error and requirement channels; what is left needs nothing.
Effect.runPromise(program as Effect.Effect<void, unknown>).catch((e) => {
  console.error(e)
  process.exit(1)
})
