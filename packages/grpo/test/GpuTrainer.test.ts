import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gpu, LoraAdapter, type LoraConfig } from "@envtrain/gpu"
import { Effect } from "effect"
import type * as Config from "../src/Config.js"
import * as SftTrainer from "../src/SftTrainer.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

/** Three GRPO steps of each model (same config, own output dirs); the GPU's must equal the reference's. */
const trainBoth = (
  models: ReadonlyArray<Trainer.TrainableModel>,
  dirs: ReadonlyArray<string>,
  o: Partial<Config.GRPOConfig>
) =>
  Effect.gen(function*() {
    const runs = yield* Effect.forEach(models, (model, i) =>
      Effect.gen(function*() {
        const config = yield* F.config({ maxSteps: 3, evalSteps: 100, outputDir: dirs[i], ...o })
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
      assert.isAbove(a["grad_norm"], 0)
      assert.closeTo(a["grad_norm"], b["grad_norm"], 1e-4 * b["grad_norm"])
      assert.closeTo(a["entropy"], b["entropy"], 1e-4)
    }
  })

const tempDirs = Effect.flatMap(
  FileSystem.FileSystem,
  (fs) => Effect.all([fs.makeTempDirectoryScoped(), fs.makeTempDirectoryScoped()])
)

describe("Trainer with the GPU model", () => {
  it.scoped(
    "three GRPO steps (KL to a frozen copy) on the GPU equal the CPU reference model's (samples, loss, grad norm)",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const gpu = yield* Trainer.gpuModel(checkpoint, {
          batch: 8,
          seq: 32,
          temperature: 1,
          slots: 8,
          reference: true
        })
        // beta > 0: the GPU's KL reference is a frozen copy of the starting weights, as the reference model's.
        yield* trainBoth([gpu, Trainer.referenceModel(checkpoint)], yield* tempDirs, { beta: 0.05 })
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    180_000
  )

  // No dropout: the reference model draws its masks per sequence, the GPU per packed micro-batch (both the spec's
  // mask for their layout), so only dropout-free runs can be compared number for number.
  const lora: LoraConfig.LoraConfig = {
    r: 4,
    alpha: 8,
    dropout: 0,
    targetModules: ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
    useRsLora: false
  }

  it.scoped(
    "three LoRA GRPO steps (KL to the base) on the GPU equal the reference model's; only the adapter moves, saved as PEFT's",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const options = { config: lora, seed: 5 }
        const gpu = yield* Trainer.gpuModel(checkpoint, {
          batch: 8,
          seq: 32,
          temperature: 1,
          slots: 8,
          lora: options,
          reference: true
        })
        const initial = yield* gpu.exportState
        const dirs = yield* tempDirs
        // beta > 0: the KL reference is the base with the adapter off (the GPU scores it on the same model).
        yield* trainBoth([gpu, Trainer.referenceModel(checkpoint, { lora: options })], dirs, {
          saveSteps: 3,
          learningRate: 0.02,
          beta: 0.05,
          lora
        })
        // The trained state is the adapter (every tensor of it, moved from PEFT's init), equal to the reference's.
        const after = yield* gpu.exportState
        assert.deepStrictEqual(after.lora, lora)
        assert.deepStrictEqual([...after.weights.keys()].sort(), [...initial.weights.keys()].sort())
        const saved = yield* LoraAdapter.load(`${dirs[0]}/checkpoint-3`, checkpoint.config)
        for (const [name, t] of after.weights) {
          assert.deepStrictEqual(saved.tensors.get(name)!.data, t.data, name)
          if (name.includes("lora_B")) {
            assert.isAbove(F.maxRel(t.data, initial.weights.get(name)!.data), 0, name)
          }
        }
        const cpuSaved = yield* LoraAdapter.load(`${dirs[1]}/checkpoint-3`, checkpoint.config)
        for (const [name, t] of after.weights) {
          assert.isBelow(F.maxRel(t.data, cpuSaved.tensors.get(name)!.data), 1e-3, name)
        }
        // A fresh GPU model resumed from the checkpoint has the adapter and AdamW moments back.
        const fresh = yield* Trainer.gpuModel(checkpoint, {
          batch: 8,
          seq: 32,
          temperature: 1,
          slots: 8,
          lora: options
        })
        yield* TrainerState.load(`${dirs[0]}/checkpoint-3`, fresh)
        assert.deepStrictEqual((yield* fresh.exportState).weights, after.weights)
        assert.deepStrictEqual((yield* fresh.exportOptimizerState!).moments, (yield* gpu.exportOptimizerState!).moments)
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "LoRA with dropout on the GPU: GRPO steps get gradients through the masks and move only the adapter",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const withDropout = { ...lora, dropout: 0.1 }
        const gpu = yield* Trainer.gpuModel(checkpoint, {
          batch: 8,
          seq: 32,
          temperature: 1,
          slots: 8,
          lora: { config: withDropout, seed: 9 }
        })
        const initial = yield* gpu.exportState
        const config = yield* F.config({
          maxSteps: 2,
          evalSteps: 100,
          learningRate: 0.02,
          outputDir: (yield* tempDirs)[0],
          lora: withDropout
        })
        const run = yield* Trainer.train({
          config,
          model: gpu,
          dataset: F.dataset(0, 64),
          open: F.open,
          rewardFunctions: [F.parityReward],
          progress: false
        })
        for (const s of run.steps) assert.isAbove(s.values["grad_norm"], 0)
        const after = yield* gpu.exportState
        assert.deepStrictEqual([...after.weights.keys()].sort(), [...initial.weights.keys()].sort())
        const moved = [...after.weights].filter(([n, t]) => F.maxRel(t.data, initial.weights.get(n)!.data) > 0)
        assert.strictEqual(moved.length, after.weights.size, "every adapter tensor moved")
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped("SFT with LoRA on the GPU: the same losses as the reference model's", () =>
    Effect.gen(function*() {
      const transcripts = F.sayTranscripts()
      const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
      const options = { config: { ...lora, targetModules: ["k_proj", "up_proj"] as const }, seed: 2 }
      const config = yield* F.config({
        outputDir: "/tmp/envtrain-gpu-lora-sft-unused",
        perDeviceTrainBatchSize: 2,
        gradientAccumulationSteps: 2,
        maxSteps: 4,
        learningRate: 0.01,
        saveSteps: 1000,
        lora: options.config
      })
      const gpu = yield* Trainer.gpuModel(checkpoint, { batch: 2, seq: 64, temperature: 1, slots: 2, lora: options })
      const onGpu = yield* SftTrainer.train({ config, model: gpu, transcripts, progress: false })
      const onCpu = yield* SftTrainer.train({
        config,
        model: Trainer.referenceModel(checkpoint, { lora: options }),
        transcripts,
        progress: false
      })
      assert.strictEqual(onGpu.losses.length, 4)
      onGpu.losses.forEach((l, i) =>
        assert.closeTo(l.loss, onCpu.losses[i].loss, 1e-4 * Math.abs(onCpu.losses[i].loss))
      )
      assert.isBelow(onGpu.losses[3].loss, onGpu.losses[0].loss)
    }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)), 180_000)
})
