import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import { Deferred, Effect, Fiber } from "effect"
import * as Config from "../src/Config.js"
import { behaviorAsOld } from "../src/internal/rolloutQueue.js"
import * as Metrics from "../src/Metrics.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

/** Trains the tiny model on the parity environment in `dir` (a new temporary directory when absent). */
const trainTiny = (
  config: Record<string, unknown>,
  options: Partial<Omit<Trainer.TrainOptions<F.ParityState, never, never>, "config">> & {
    readonly dir?: string
  } = {}
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const { dir: given, ...rest } = options
    const dir = given ?? (yield* fs.makeTempDirectoryScoped())
    const result = yield* Trainer.train({
      config: yield* F.config({ ...config, outputDir: dir }),
      model: yield* F.tinyModel(1),
      dataset: F.dataset(0, 64),
      open: F.open,
      rewardFunctions: [F.parityReward],
      progress: false,
      ...rest
    })
    return { dir, result }
  })

/** What must match between runs: every logged number but wall-clock timings and the queue's own metrics. */
const timing = /time|per_second|^async\/|^buffer_qsize$/
const logged = (dir: string) =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, Metrics.files.metrics))
    const completions = yield* Metrics.read<Record<string, unknown>>(path.join(dir, Metrics.files.completions))
    return {
      metrics: metrics.map((m) => Object.fromEntries(Object.entries(m).filter(([k]) => !timing.test(k)))),
      completions
    }
  })

// One batch per step; a batch spanning two steps (its slot held across them); two batches per step.
const shapes: ReadonlyArray<Record<string, unknown>> = [
  { maxSteps: 3 },
  { maxSteps: 4, perDeviceTrainBatchSize: 4, generationBatchSize: 8 },
  { maxSteps: 2, perDeviceTrainBatchSize: 4, gradientAccumulationSteps: 2, stepsPerGeneration: 1 }
]

describe("Async GRPO", () => {
  it.effect("config: TRL's async keys; off by default; an in-flight budget below one step is refused", () =>
    Effect.gen(function*() {
      const off = yield* Config.resolve(yield* F.config({}))
      assert.deepStrictEqual([off.async, off.maxInflightTasks, off.maxStaleness], [false, -1, 4])
      const on = yield* Config.resolve(yield* F.config({ async: true, max_staleness: 2, max_inflight_tasks: 24 }))
      assert.deepStrictEqual([on.async, on.maxInflightTasks, on.maxStaleness], [true, 24, 2])
      assert.strictEqual(Config.asyncBatchesInFlight(on), 3)
      assert.strictEqual(Config.asyncBatchesInFlight({ ...on, maxInflightTasks: -1 }), 3)
      const small = yield* Effect.flip(Config.resolve(yield* F.config({ async: true, maxInflightTasks: 4 })))
      assert.match(small.message, /maxInflightTasks \(4\) is less than one optimizer step's episodes \(8/)
    }))

  for (const shape of shapes) {
    it.scoped(
      `maxStaleness 0 equals synchronous GRPO exactly (${JSON.stringify(shape)})`,
      () =>
        Effect.gen(function*() {
          const sync = yield* trainTiny(shape)
          const events: Array<Trainer.QueueEvent> = []
          const run = yield* trainTiny({ ...shape, async: true, maxStaleness: 0 }, {
            onQueue: (e) => Effect.sync(() => events.push(e))
          })
          const a = yield* logged(sync.dir)
          const b = yield* logged(run.dir)
          assert.deepStrictEqual(b.metrics, a.metrics)
          assert.deepStrictEqual(b.completions, a.completions)
          assert.isTrue(a.completions.length > 0)
          assert.deepStrictEqual(run.result.steps.map((s) => s.loss), sync.result.steps.map((s) => s.loss))
          assert.isFalse(events.some((e) => e._tag === "Dropped"))
          for (const s of run.result.steps) {
            assert.strictEqual(s.values["async/dropped_samples_total"], 0)
            if (s.values["async/staleness/max"] !== undefined) assert.strictEqual(s.values["async/staleness/max"], 0)
          }
        }).pipe(Effect.provide(NodeContext.layer)),
      300_000
    )
  }

  it("a stale batch trains against its behavior logprobs: old = the sampler's, the sampler correction dropped", () => {
    const row = { prompt: [1], completion: [2, 3], mask: [1, 1], advantage: 0.5, sampler: [-0.1, -0.2] }
    const result = {
      microBatches: [{
        rows: [{ ...row, old: [-0.3, -0.4], ratio: [1.2, 1.2] }, row],
        numItemsInBatch: 4,
        ratioLevel: "sequence" as const
      }],
      metrics: {},
      tokens: 4,
      samples: []
    }
    assert.deepStrictEqual(behaviorAsOld(result).microBatches, [{
      rows: [{ ...row, old: [-0.1, -0.2] }, { ...row, old: [-0.1, -0.2] }],
      numItemsInBatch: 4
    }])
  })

  it.scoped(
    "a producer far ahead: samples staler than maxStaleness are dropped and counted, never trained on",
    () =>
      Effect.gen(function*() {
        const events: Array<Trainer.QueueEvent> = []
        const filled = yield* Deferred.make<void>()
        // Four batches (of 8 episodes) may be in flight; after the first step the trainer waits until the producer has
        // filled them all at versions 0 and 1, so by step 3 (version 3) the queue holds batches older than 1 version.
        const { dir, result } = yield* trainTiny({ maxSteps: 5, async: true, maxStaleness: 1, maxInflightTasks: 32 }, {
          onQueue: (e) =>
            Effect.suspend(() => {
              events.push(e)
              return events.filter((x) => x._tag === "Produced").length >= 5
                ? Deferred.succeed(filled, undefined)
                : Effect.void
            }),
          onStep: (s) => s.step === 1 ? Deferred.await(filled) : Effect.void
        })
        const dropped = events.filter((e) => e._tag === "Dropped")
        const taken = events.filter((e) => e._tag === "Taken")
        assert.isAtLeast(dropped.length, 2)
        for (const e of dropped) if (e._tag === "Dropped") assert.isAbove(e.staleness, 1)
        for (const e of taken) if (e._tag === "Taken") assert.isAtMost(e.staleness, 1)
        const droppedIds = new Set(dropped.map((e) => e.batch))
        assert.isFalse(taken.some((e) => droppedIds.has(e.batch)))
        assert.strictEqual(taken.length, 5)
        const path = yield* Path.Path
        const lines = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, Metrics.files.metrics))
        assert.strictEqual(lines.length, 5)
        const perStep = lines.reduce((s, m) => s + (m["async/dropped_samples"] ?? 0), 0)
        assert.strictEqual(perStep, dropped.length * 8)
        assert.strictEqual(lines.at(-1)!["async/dropped_samples_total"], dropped.length * 8)
        for (const m of lines) assert.isAtMost(m["async/staleness/max"] ?? 0, 1)
        assert.strictEqual(result.globalStep, 5)
        const fs = yield* FileSystem.FileSystem
        assert.include(yield* fs.readFileString(result.report), `id="async"`)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scoped(
    "a resumed async run (checkpoint mid-batch) continues as the uninterrupted one",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        // A batch serves two steps; the checkpoint after step 3 holds the untrained half of the second batch.
        const shape = { maxSteps: 6, perDeviceTrainBatchSize: 4, generationBatchSize: 8, async: true, maxStaleness: 0 }
        const whole = yield* trainTiny(shape)
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* trainTiny(shape, { dir, stopAfter: 3 })
        const resumed = yield* trainTiny(shape, { dir, resume: true })
        assert.strictEqual(resumed.result.globalStep, 6)
        const a = yield* logged(whole.dir)
        const b = yield* logged(dir)
        assert.deepStrictEqual(b.metrics, a.metrics)
        // As in a synchronous resume, sample completions are not checkpointed: step 4 trains the resumed half
        // batch, whose completions step 3 logged, so it logs none.
        assert.deepStrictEqual(b.completions, a.completions.filter((c) => c["step"] !== 4))
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
  it.scoped(
    "interrupted while the producer runs ahead, an async run keeps its last step and resumes exactly",
    () =>
      Effect.gen(function*() {
        const shape = { maxSteps: 4, async: true, maxStaleness: 0, saveSteps: 100 }
        const whole = yield* trainTiny(shape)
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        const reached = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(trainTiny(shape, {
          dir,
          // After step 2 the producer is generating the next batch; the trainer waits here until interrupted.
          onStep: (r) =>
            r.step === 2 ? Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Effect.never)) : Effect.void
        }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const saved = yield* TrainerState.latest(dir)
        assert.isTrue(saved._tag === "Some" && saved.value.endsWith("checkpoint-2"), `checkpoint: ${String(saved)}`)
        const resumed = yield* trainTiny(shape, { dir, resume: true })
        assert.strictEqual(resumed.result.globalStep, 4)
        const a = yield* logged(whole.dir)
        const b = yield* logged(dir)
        assert.deepStrictEqual(b.metrics, a.metrics)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
})

describe("Async GRPO on the GPU model", () => {
  it.scoped(
    "maxStaleness 0 equals sync; stale batches train through accumulateLoss with behavior logprobs",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const gpu = () => Trainer.gpuModel(checkpoint, { batch: 8, seq: 32, temperature: 1, slots: 8 })
        const shape = { maxSteps: 3 }
        const sync = yield* trainTiny(shape, { model: yield* gpu() })
        const run = yield* trainTiny({ ...shape, async: true, maxStaleness: 0 }, { model: yield* gpu() })
        assert.deepStrictEqual((yield* logged(run.dir)).metrics, (yield* logged(sync.dir)).metrics)
        // After step 1 the trainer waits for batches 1–3 (made at versions 0 and 1; the producer may start batch 3 of
        // the run's 4): step 2 trains batch 2 at staleness 1 or 2.
        const events: Array<Trainer.QueueEvent> = []
        const filled = yield* Deferred.make<void>()
        const stale = yield* trainTiny({ maxSteps: 4, async: true, maxStaleness: 2 }, {
          model: yield* gpu(),
          onQueue: (e) =>
            Effect.suspend(() => {
              events.push(e)
              return events.filter((x) => x._tag === "Produced").length >= 4
                ? Deferred.succeed(filled, undefined)
                : Effect.void
            }),
          onStep: (r) => r.step === 1 ? Deferred.await(filled) : Effect.void
        })
        assert.strictEqual(stale.result.globalStep, 4)
        for (const s of stale.result.steps) {
          assert.isTrue(Number.isFinite(s.loss) && Number.isFinite(s.values["grad_norm"]))
        }
        assert.isTrue(events.some((e) => e._tag === "Taken" && e.staleness > 0), "no stale batch was trained")
      }).pipe(Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer)),
    300_000
  )
})
