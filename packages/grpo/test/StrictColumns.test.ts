import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CommandFile from "../src/CommandFile.js"

// strictColumns in a command file: a column the environment does not declare is the file's error, before any model
// is loaded (the model path here does not exist, so reaching it would fail differently).
describe("strictColumns", () => {
  it.scoped("names the dataset's undeclared columns before the run; without it the run goes on", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const echo = path.resolve(__dirname, "../../../examples/src/environments/echo.ts")
      const file = path.join(dir, "strict.yaml")
      const write = (strict: boolean) =>
        fs.writeFileString(
          file,
          [
            `model: ${path.join(dir, "no-model")}`,
            "backend: cpu",
            `environment: ${echo}`,
            "evalDataset: { seeds: [0, 2], prompt: \"Say something.\", columns: { answer: 42, hint: x } }",
            `strictColumns: ${strict}`
          ].join("\n")
        )
      yield* write(true)
      const refused = yield* Effect.flip(CommandFile.evaluate(file, []))
      assert.strictEqual(
        refused.message,
        `${file}: strictColumns: the evalDataset's columns answer, hint are not in environment 'echo-defined''s ` +
          "columns Schema: declare them in its columns, or remove them from the evalDataset"
      )
      // Not strict: the columns pass this check, and the run stops only where the model is read.
      yield* write(false)
      const later = yield* Effect.flip(CommandFile.evaluate(file, []))
      assert.include(later.message, "no-model")
    }).pipe(Effect.provide(NodeContext.layer)))
})
