/**
 * GRPO step time on this machine: the tiny preset on the plain-TypeScript reference model (CPU) and on the GPU
 * model (WebGPU/Dawn; lavapipe here), same data and seeds, G = 4, 8 episodes per step, no tools.
 * Prints and saves bench/results/grpo/train-bench.json.
 *
 *   npx tsx bench/grpo/train-bench.ts [steps] [maxCompletionLength]
 */
import { NodeContext } from "@effect/platform-node"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import * as Trainer from "../../packages/grpo/src/Trainer.js"
import * as F from "../../packages/grpo/test/fixtures.js"

const steps = Number(process.argv[2] ?? 6)
const completion = Number(process.argv[3] ?? 32)

const program = Effect.gen(function*() {
  const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
  const madeAt = Date.now()
  const gpu = yield* Trainer.gpuModel(checkpoint, { batch: 8, seq: 32 + completion, temperature: 1, slots: 8 })
  const gpuSetup = (Date.now() - madeAt) / 1000
  const results: Record<string, unknown> = {
    date: new Date().toISOString(),
    preset: "tiny",
    steps,
    completion,
    gpuSetupSeconds: gpuSetup
  }
  for (const [name, model] of [["cpu-reference", Trainer.referenceModel(checkpoint)], ["gpu", gpu]] as const) {
    const config = yield* F.config({
      maxSteps: steps,
      maxCompletionLength: completion,
      evalSteps: 10_000,
      outputDir: `/tmp/envtrain-bench-${name}`
    })
    const started = Date.now()
    const run = yield* Trainer.train({
      config,
      model,
      dataset: F.dataset(0, 256),
      open: F.open,
      rewardFunctions: [F.parityReward],
      progress: false
    })
    const seconds = (Date.now() - started) / 1000
    // The first step includes pipeline compilation on the GPU; report the steady state separately.
    const steady = run.steps.slice(1)
    const mean = (k: string) => steady.reduce((s, r) => s + r.values[k], 0) / Math.max(1, steady.length)
    results[name] = {
      seconds,
      firstStepSeconds: run.steps[0].values["step_time"],
      steadyStepSeconds: mean("step_time"),
      steadyGenerationSeconds: mean("time/generation"),
      steadyUpdateSeconds: mean("time/update"),
      steadyTokensPerSecond: mean("tokens_per_second"),
      meanCompletionLength: mean("completions/mean_length"),
      rewards: run.steps.map((s) => s.values["reward"])
    }
  }
  mkdirSync("bench/results/grpo", { recursive: true })
  writeFileSync("bench/results/grpo/train-bench.json", JSON.stringify(results, null, 2) + "\n")
  console.log(JSON.stringify(results, null, 2))
}).pipe(Effect.scoped, Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0)).catch((e) => {
  console.error(e)
  process.exit(1)
})
