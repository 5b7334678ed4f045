import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import { Effect } from "effect"
import * as Trainer from "../src/Trainer.js"
import * as F from "./fixtures.js"

describe("Trainer with the GPU model", () => {
  it.scoped(
    "three GRPO steps on the GPU equal the CPU reference model's (same samples, loss, gradient norm)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const gpu = yield* Trainer.gpuModel(checkpoint, { batch: 8, seq: 32, temperature: 1, slots: 8 })
        const runs = yield* Effect.forEach([gpu, Trainer.referenceModel(checkpoint)], (model, i) =>
          Effect.gen(function*() {
            const config = yield* F.config({
              maxSteps: 3,
              evalSteps: 100,
              outputDir: `${yield* fs.makeTempDirectoryScoped()}/run-${i}`
            })
            return yield* Trainer.train({
              config,
              model,
              dataset: F.dataset(0, 64),
              open: F.open,
              rewardFunctions: [F.parityReward],
              progress: false
            })
          }))
        const [onGpu, onCpu] = runs
        for (let s = 0; s < 3; s++) {
          const a = onGpu.steps[s].values
          const b = onCpu.steps[s].values
          assert.strictEqual(a["reward"], b["reward"], `step ${s + 1}: the GPU sampled other tokens`)
          assert.strictEqual(a["completions/mean_length"], b["completions/mean_length"])
          assert.closeTo(onGpu.steps[s].loss, onCpu.steps[s].loss, 1e-5)
          assert.closeTo(a["grad_norm"], b["grad_norm"], 1e-4 * b["grad_norm"])
          assert.closeTo(a["entropy"], b["entropy"], 1e-4)
        }
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    180_000
  )
})
