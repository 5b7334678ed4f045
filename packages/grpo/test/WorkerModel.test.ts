import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint } from "@envtrain/gpu"
import type { GenerateRequest } from "@envtrain/rollout/Policy"
import { Cause, Deferred, Effect, Exit, Fiber } from "effect"
import * as CommandFile from "../src/CommandFile.js"
import * as Config from "../src/Config.js"
import { type MicroBatch, trainMicroBatch } from "../src/internal/generation.js"
import { batchOf, optimizerStep, type TrainableModel } from "../src/internal/model.js"
import * as WorkerModel from "../src/internal/workerModel.js"
import * as Loss from "../src/Loss.js"
import * as Metrics from "../src/Metrics.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

/** Whether two f32 tensor maps hold the same names, shapes and bits. */
const sameBits = (a: ReadonlyMap<string, { shape: ReadonlyArray<number>; data: Float32Array }>, b: typeof a) =>
  a.size === b.size &&
  [...a].every(([name, t]) => {
    const u = b.get(name)
    return u !== undefined && t.shape.join() === u.shape.join() &&
      Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).equals(
        Buffer.from(u.data.buffer, u.data.byteOffset, u.data.byteLength)
      )
  })

const sameFloats = (a: ArrayLike<number>, b: ArrayLike<number>) =>
  a.length === b.length && Array.from(a).every((x, i) => Object.is(x, b[i]))

const requests = (step: number): Array<GenerateRequest> =>
  [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]].map((promptIds, i) => ({
    promptIds,
    sampling: { temperature: 1, maxTokens: 6, seed: 100 * step + i }
  }))

/** The error a worker-model call died with (the trainer's interface has no error channel). */
const defectOf = <A, E>(exit: Exit.Exit<A, E>) => {
  assert.isTrue(Exit.isFailure(exit), "the call should have failed")
  return Cause.squash((exit as Exit.Failure<A, E>).cause)
}

describe("Trainer.workerModel", () => {
  it.scoped(
    "equals the in-thread CPU model bit for bit: generation, losses, gradients, weights, moments",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const local = Trainer.referenceModel(checkpoint)
        const remote = yield* Trainer.workerModel(checkpoint)
        assert.isDefined(remote.accumulateLoss)
        const config = yield* Config.resolve(yield* F.config({ beta: 0.04, numIterations: 2 }))
        const lossOptions = Loss.optionsFromConfig(config)
        const localRef = yield* local.frozenCopy
        const remoteRef = yield* remote.frozenCopy

        for (let step = 0; step < 2; step++) {
          // Generation (the KV-cache pool of the previous step's weights must be dropped in both).
          const [a, b] = [yield* local.generate(requests(step)), yield* remote.generate(requests(step))]
          assert.deepStrictEqual(b, a)
          const prompts = requests(step).map((r) => r.promptIds)
          const batch = batchOf(prompts, a.map((c) => c.tokenIds))
          const refLogprobs = yield* localRef.score(batch, 1)
          assert.isTrue(sameFloats((yield* remoteRef.score(batch, 1)).logprobs, refLogprobs.logprobs))

          // The GRPO micro-batch: the in-thread model computes the loss on the host, the worker in its thread.
          const micro: MicroBatch = {
            rows: a.map((c, i) => ({
              prompt: prompts[i],
              completion: c.tokenIds,
              mask: c.tokenIds.map(() => 1),
              advantage: [1, -0.5, 0.25, -0.75][i],
              sampler: c.logprobs!,
              // Old logprobs away from the current ones, so the clipped ratio is not trivially 1.
              old: c.logprobs!.map((l, t) => l + 0.05 * ((t % 3) - 1)),
              ref: Array.from(refLogprobs.logprobs.subarray(i * batch.length, i * batch.length + c.tokenIds.length))
            })),
            numItemsInBatch: a.reduce((s, c) => s + c.tokenIds.length, 0)
          }
          const [la, lb] = [
            yield* trainMicroBatch(local, micro, lossOptions, 1),
            yield* trainMicroBatch(remote, micro, lossOptions, 1)
          ]
          assert.isFalse(lb.deferred)
          assert.isTrue(Object.is(lb.loss, la.loss), `loss ${lb.loss} vs ${la.loss}`)
          assert.deepStrictEqual(lb.metrics, la.metrics)

          // The SFT path: weights chosen on the host from the worker's logprobs.
          const sft = batchOf(prompts, prompts.map((p) => p.map((t) => (t * 7) % 50)))
          const weightsFor = (scores: { readonly logprobs: Float64Array }) => scores.logprobs.map((l) => -1 - l / 100)
          const [sa, sb] = [yield* local.accumulate(sft, 1, weightsFor), yield* remote.accumulate(sft, 1, weightsFor)]
          assert.isTrue(sameFloats(sb.logprobs, sa.logprobs) && sameFloats(sb.entropies, sa.entropies))

          const [ga, gb] = [
            yield* local.step(optimizerStep(config, 1e-2)),
            yield* remote.step(optimizerStep(config, 1e-2))
          ]
          assert.isTrue(Object.is(gb.gradNorm, ga.gradNorm), `grad norm ${gb.gradNorm} vs ${ga.gradNorm}`)
          const [wa, wb] = [yield* local.exportState, yield* remote.exportState]
          assert.strictEqual(wb.optimizerStep, step + 1)
          assert.strictEqual(wb.optimizerStep, wa.optimizerStep)
          assert.isTrue(sameBits(wa.weights, wb.weights), "updated weights differ")
          assert.isFalse(sameBits(checkpoint.tensors, wb.weights), "the step changed nothing")
          assert.isTrue(
            sameBits((yield* local.exportOptimizerState!).moments, (yield* remote.exportOptimizerState!).moments)
          )
          const [pa, pb] = [yield* local.score(batch, 0.7), yield* remote.score(batch, 0.7)]
          assert.isTrue(sameFloats(pb.logprobs, pa.logprobs) && sameFloats(pb.entropies, pa.entropies))
        }

        // State round trip: importing the start weights (moments restart) gives the start's logprobs again.
        const start = { weights: checkpoint.tensors, optimizerStep: 0 }
        yield* local.importState(start)
        yield* remote.importState(start)
        const batch = batchOf([[1, 2, 3]], [[4, 5, 6, 7]])
        assert.isTrue(sameFloats((yield* remote.score(batch, 1)).logprobs, (yield* local.score(batch, 1)).logprobs))
        // Optimizer state that does not fit fails as the in-thread model's does.
        const bad = yield* Effect.flip(remote.importOptimizerState!({ moments: new Map() }))
        assert.strictEqual(bad._tag, "OptimizerStateMismatch")
        assert.match(bad.message, /lacks "exp_avg\./)
      }),
    { timeout: 120_000 }
  )

  // Live: the sleep and the call's time limit need the real clock.
  it.scopedLive(
    "a killed worker fails the waiting call and every later one with an error naming it",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const { model, worker } = yield* WorkerModel.start(checkpoint)
        assert.match(worker.name, /^envtrain-cpu-model \(thread \d+\)$/)
        // A long generation in flight when the thread is killed: 8 sequences of ~2000 tokens (no stop tokens given,
        // so none ends early) take seconds even on a fast, idle machine.
        const long = yield* Effect.fork(Effect.exit(model.generate(Array.from({ length: 8 }, (_, i) => ({
          promptIds: [1, 2, 3 + i],
          sampling: { temperature: 1, maxTokens: 4000, seed: i }
        })))))
        yield* Effect.sleep("200 millis")
        yield* worker.terminate
        const inFlight = defectOf(yield* Fiber.join(long))
        assert.instanceOf(inFlight, WorkerModel.WorkerModelError)
        assert.match((inFlight as Error).message, /^CPU model worker envtrain-cpu-model \(thread \d+\): it exited/)
        assert.match((inFlight as Error).message, /\[call: Generate\]$/)
        const later = defectOf(
          yield* Effect.exit(model.step(optimizerStep(yield* Config.resolve(yield* F.config({})), 1)))
        )
        // The same cause, named with the call that met it.
        assert.instanceOf(later, WorkerModel.WorkerModelError)
        assert.strictEqual(
          (later as Error).message,
          (inFlight as Error).message.replace("[call: Generate]", "[call: Step]")
        )
      }),
    { timeout: 60_000 }
  )

  it.scopedLive("a call past callTimeout stops the worker and says so", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
      const model = yield* Trainer.workerModel(checkpoint, { callTimeout: "20 millis" })
      const error = defectOf(
        yield* Effect.exit(model.generate([{ promptIds: [1], sampling: { temperature: 1, maxTokens: 4000, seed: 1 } }]))
      )
      assert.instanceOf(error, Trainer.WorkerModelError)
      assert.match(
        (error as Error).message,
        /did not answer Generate within 20ms \(callTimeout\)/,
        (error as Error).message
      )
      // Later calls fail with the same cause, named with their own call.
      assert.strictEqual(
        (defectOf(yield* Effect.exit(model.exportState)) as Error).message,
        (error as Error).message.replace("[call: Generate]", "[call: ExportState]")
      )
    }), { timeout: 60_000 })
})

// Async GRPO with CPU training in the worker: with maxStaleness 0 the run equals the synchronous, in-thread one.
const timing = /time|per_second|^async\/|^buffer_qsize$/
const trained = (model: TrainableModel, config: Record<string, unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* Trainer.train({
      config: yield* F.config({ maxSteps: 3, ...config, outputDir: dir }),
      model,
      dataset: F.dataset(0, 64),
      open: F.open,
      rewardFunctions: [F.parityReward],
      progress: false
    })
    const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, Metrics.files.metrics))
    return {
      metrics: metrics.map((m) => Object.fromEntries(Object.entries(m).filter(([k]) => !timing.test(k)))),
      completions: yield* Metrics.read<Record<string, unknown>>(path.join(dir, Metrics.files.completions))
    }
  })

describe("async GRPO on the worker model", () => {
  it.scoped("maxStaleness 0 equals synchronous GRPO on the in-thread model exactly", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
      const sync = yield* trained(Trainer.referenceModel(checkpoint), {})
      const run = yield* trained(yield* Trainer.workerModel(checkpoint), { async: true, maxStaleness: 0 })
      assert.strictEqual(sync.metrics.length, 3)
      assert.deepStrictEqual(run.metrics, sync.metrics)
      assert.deepStrictEqual(run.completions, sync.completions)
    }).pipe(Effect.provide(NodeContext.layer)), { timeout: 180_000 })

  it.scoped(
    "envtrain train with async on the CPU backend (the worker model) equals the sync run",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const model = path.join(dir, "model")
        yield* Checkpoint.initModel({ preset: "tiny", out: model, seed: 3 })
        const run = (name: string, extra: ReadonlyArray<string>) =>
          Effect.gen(function*() {
            const file = path.join(dir, `${name}.yaml`)
            const out = path.join(dir, name)
            yield* fs.writeFileString(
              file,
              [
                `model: ${model}`,
                "backend: cpu",
                "recipe: catch",
                "toolsInPrompt: false",
                "dataset: { seeds: [0, 8] }",
                `output_dir: ${out}`,
                "num_generations: 2",
                "perDeviceTrainBatchSize: 4",
                "maxCompletionLength: 12",
                "maxSteps: 2",
                "loggingSteps: 1",
                ...extra
              ].join("\n") + "\n"
            )
            yield* CommandFile.train(file, [])
            const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(out, Metrics.files.metrics))
            return metrics.map((m) => Object.fromEntries(Object.entries(m).filter(([k]) => !timing.test(k))))
          })
        const sync = yield* run("sync", [])
        const async = yield* run("async", ["async: true", "maxStaleness: 0"])
        assert.deepStrictEqual(sync.map((m) => m.step), [1, 2])
        assert.deepStrictEqual(async, sync)
      }).pipe(Effect.provide(NodeContext.layer)),
    { timeout: 180_000 }
  )

  it.scoped(
    "interrupted while the worker applies a step: that step is committed, and the resume equals a whole run",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const options = {
          dataset: F.dataset(0, 64),
          open: F.open,
          rewardFunctions: [F.parityReward],
          progress: false as const
        }
        const base = { maxSteps: 3, saveSteps: 100 }
        const fingerprint = (s: Trainer.StepResult) => [s.step, s.loss, s.values["grad_norm"], s.values["reward"]]
        const a = yield* Trainer.train({
          ...options,
          config: yield* F.config({ ...base, outputDir: yield* fs.makeTempDirectoryScoped() }),
          model: Trainer.referenceModel(checkpoint)
        })

        // The interrupt arrives while the trainer awaits the worker's second optimizer step.
        const dir = yield* fs.makeTempDirectoryScoped()
        const config = yield* F.config({ ...base, outputDir: dir })
        const worker = yield* Trainer.workerModel(checkpoint)
        const inStep = yield* Deferred.make<void>()
        let steps = 0
        const fiber = yield* Effect.fork(Trainer.train({
          ...options,
          config,
          model: {
            ...worker,
            step: (o) =>
              Effect.zipRight(
                ++steps === 2 ? Deferred.succeed(inStep, undefined) : Effect.void,
                worker.step(o)
              )
          }
        }))
        yield* Deferred.await(inStep)
        yield* Fiber.interrupt(fiber)
        const saved = yield* TrainerState.latest(dir)
        assert.isTrue(saved._tag === "Some" && saved.value.endsWith("checkpoint-2"), `checkpoint: ${String(saved)}`)

        const b = yield* Trainer.train({
          ...options,
          config,
          model: yield* Trainer.workerModel(yield* Checkpoint.makeModel("tiny", 7)),
          resume: true
        })
        assert.deepStrictEqual(b.steps.map(fingerprint), a.steps.slice(2).map(fingerprint))
      }).pipe(Effect.provide(NodeContext.layer)),
    { timeout: 180_000 }
  )
})
