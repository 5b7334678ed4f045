import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gpu, Safetensors } from "@envtrain/gpu"
import { Deferred, Effect, Fiber } from "effect"
import * as Dataset from "../src/Dataset.js"
import * as Metrics from "../src/Metrics.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

const fingerprint = (s: Trainer.StepResult) => [s.step, s.loss, s.values["grad_norm"], s.values["reward"]]

describe("Trainer resume", () => {
  it.scoped(
    "GPU model: interrupted after step 1 then resumed, steps 2–4 equal an uninterrupted run's (moments restored)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const gpuModel = (seed: number) =>
          Effect.flatMap(
            Checkpoint.makeModel("tiny", seed),
            (m) => Trainer.gpuModel(m, { batch: 4, seq: 32, temperature: 1, slots: 8 })
          )
        // A generation batch spans two optimizer steps, so the checkpoint must carry the pending micro-batch.
        const base = { maxSteps: 4, perDeviceTrainBatchSize: 4, stepsPerGeneration: 2, saveSteps: 100 }
        const options = {
          dataset: F.dataset(0, 64),
          open: F.open,
          rewardFunctions: [F.parityReward],
          progress: false as const
        }
        const dirA = yield* fs.makeTempDirectoryScoped()
        const a = yield* Trainer.train({
          ...options,
          config: yield* F.config({ ...base, outputDir: dirA }),
          model: yield* gpuModel(1)
        })
        assert.strictEqual(a.steps.length, 4)

        const dirB = yield* fs.makeTempDirectoryScoped()
        const configB = yield* F.config({ ...base, outputDir: dirB })
        const reached = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(Trainer.train({
          ...options,
          config: configB,
          model: yield* gpuModel(1),
          onStep: (s) =>
            s.step === 1 ? Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Effect.never)) : Effect.void
        }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const saved = yield* TrainerState.latest(dirB)
        assert.isTrue(saved._tag === "Some" && saved.value.endsWith("checkpoint-1"), `checkpoint: ${String(saved)}`)
        const moments = yield* Safetensors.readFile(path.join(dirB, "checkpoint-1", TrainerState.files.optimizer))
        const v = moments.get("exp_avg_sq.model.norm.weight")
        assert.isTrue(v !== undefined && v.data.some((x) => x > 0), "the checkpoint holds the device's moments")

        // A different initial model: the checkpoint must overwrite its weights and moments.
        const b = yield* Trainer.train({ ...options, config: configB, model: yield* gpuModel(7), resume: true })
        assert.deepStrictEqual(b.steps.map(fingerprint), a.steps.slice(1).map(fingerprint))
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dirB, Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1, 2, 3, 4])
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped("optimizer moments that do not fit the model fail the resume, naming the moment and the file", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const model = yield* F.tinyModel()
      const state: TrainerState.State = {
        kind: "grpo",
        globalStep: 1,
        totalSteps: 2,
        position: Dataset.start,
        seed: 0,
        numTokens: 0,
        config: {}
      }
      const ckpt = yield* TrainerState.save(dir, model, state)
      const file = path.join(ckpt, TrainerState.files.optimizer)
      const moments = new Map(yield* Safetensors.readFile(file))
      assert.strictEqual(moments.size, 2 * (yield* model.exportState).weights.size)
      moments.delete("exp_avg.model.norm.weight")
      yield* Safetensors.writeFile(file, moments)
      const error = yield* Effect.flip(TrainerState.load(ckpt, yield* F.tinyModel(2)))
      assert.strictEqual(error._tag, "CheckpointStateError")
      assert.include(error.message, `lacks "exp_avg.model.norm.weight"`)
      assert.include(error.message, file)
    }).pipe(Effect.provide(NodeContext.layer)))
})
