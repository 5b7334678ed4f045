import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import * as Progress from "../src/Progress.js"
import * as SftTrainer from "../src/SftTrainer.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

const transcripts: ReadonlyArray<SftTrainer.Transcript> = Array.from({ length: 4 }, (_, i) => ({
  messages: [{ role: "user", content: `Say ${i}` }, { role: "assistant", content: `ok ${i}` }]
}))

// The loop GRPO and SFT share (internal/runLoop.ts), seen through both trainers.
describe("run loop", () => {
  it.scoped(
    "an output directory that cannot be created fails GRPO and SFT alike, naming it",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const blocker = path.join(dir, "a-file")
        yield* fs.writeFileString(blocker, "")
        const outputDir = path.join(blocker, "out")
        const config = yield* F.config({ maxSteps: 1, perDeviceTrainBatchSize: 4, outputDir })
        const grpo = yield* Effect.flip(Trainer.train({
          config,
          model: yield* F.tinyModel(),
          dataset: F.dataset(0, 8),
          open: F.open,
          rewardFunctions: [F.parityReward],
          progress: false
        }))
        const sft = yield* Effect.flip(
          SftTrainer.train({ config, model: yield* F.tinyModel(), transcripts, progress: false })
        )
        for (const error of [grpo, sft]) {
          assert.strictEqual(error._tag, "CheckpointStateError")
          assert.include(error.message, `Checkpoint ${outputDir}: cannot create`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped(
    "SFT interrupted keeps the last step in a checkpoint and says where, as GRPO does",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const config = yield* F.config({ maxSteps: 4, perDeviceTrainBatchSize: 2, outputDir: dir })
        const lines: Array<string> = []
        const reached = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(SftTrainer.train({
          config,
          model: yield* F.tinyModel(),
          transcripts,
          progress: Progress.make({ total: 4, stream: { write: (t) => lines.push(t) } }),
          onStep: (s) =>
            s.step === 1 ? Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Effect.never)) : Effect.void
        }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const saved = yield* TrainerState.latest(dir)
        assert.isTrue(saved._tag === "Some" && saved.value.endsWith("checkpoint-1"), `checkpoint: ${String(saved)}`)
        assert.include(lines.at(-1) ?? "", `interrupted: checkpoint written to ${path.join(dir, "checkpoint-1")}`)
        assert.include(yield* fs.readFileString(path.join(dir, "report.html")), "interrupted at step 1")

        const resumed: Array<string> = []
        yield* SftTrainer.train({
          config,
          model: yield* F.tinyModel(),
          transcripts,
          resume: true,
          progress: Progress.make({ total: 4, stream: { write: (t) => resumed.push(t) } })
        })
        assert.include(resumed[0], `resumed from ${path.join(dir, "checkpoint-1")} at step 1`)
        assert.include(resumed.at(-1) ?? "", "sft: 4/4 steps")
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
