import { Command } from "@effect/cli"
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint } from "@envtrain/gpu"
import { Metrics } from "@envtrain/grpo"
import { Effect, Exit } from "effect"
import * as Train from "../src/commands/Train.js"

// The command lines only; what a command file may hold is CommandFile's (packages/grpo/test/CommandFile.test.ts).
describe("Train commands", () => {
  it.scoped(
    "envtrain train / eval CONFIG run Catch on the CPU backend from one YAML file with overrides",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const model = path.join(dir, "model")
        yield* Checkpoint.initModel({ preset: "tiny", out: model, seed: 3 })
        const file = path.join(dir, "catch.yaml")
        yield* fs.writeFileString(
          file,
          [
            `model: ${model}`,
            "backend: cpu",
            "environment: catch",
            "dataset: { seeds: [0, 16], prompt: \"Catch the ball.\" }",
            "evalDataset: { seeds: [100, 102], prompt: \"Catch the ball.\" }",
            `output_dir: ${path.join(dir, "out")}`,
            "num_generations: 2",
            "perDeviceTrainBatchSize: 2",
            "maxCompletionLength: 8",
            "maxSteps: 5",
            "loggingSteps: 1"
          ].join("\n") + "\n"
        )
        const cli = Command.run(Command.make("envtrain").pipe(Command.withSubcommands([...Train.commands])), {
          name: "envtrain",
          version: "0.0.0"
        })
        yield* cli(["node", "envtrain", "train", file, "maxSteps=1"])
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1])
        assert.isTrue("rewards/catch/mean" in metrics[0])
        assert.isTrue("tools/failure_frequency" in metrics[0])
        assert.isTrue(yield* fs.exists(path.join(dir, "out", "checkpoint-1", "model.safetensors")))

        yield* cli(["node", "envtrain", "eval", file])
        const evaluation = JSON.parse(yield* fs.readFileString(path.join(dir, "out", "eval.json")))
        assert.strictEqual(evaluation.rows[0].environment, "catch")
        assert.strictEqual(evaluation.rows[0].episodes, 2)

        const bad = yield* Effect.exit(cli(["node", "envtrain", "train", file, "learning_rat=1"]))
        assert.isTrue(Exit.isFailure(bad))
        if (Exit.isFailure(bad)) assert.include(String(bad.cause), "learning_rate")
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
