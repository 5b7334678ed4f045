import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as Dataset from "../src/Dataset.js"

const data = Dataset.fromSeeds({
  prompt: [{ role: "user", content: "hi" }],
  seeds: Dataset.range(0, 10),
  columns: { env: "catch" }
})
const options = { promptsPerBatch: 3, seed: 42, shuffle: true }

describe("Dataset", () => {
  it.effect("draws seeded batches, drops the partial one, wraps into a reshuffled epoch, resumes from a position", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      let position = Dataset.start
      for (let i = 0; i < 3; i++) {
        const b = yield* Dataset.batchAt(data, position, options)
        seen.push(...b.indices)
        position = b.next
      }
      assert.deepStrictEqual(position, { epoch: 1, batch: 0 })
      assert.strictEqual(new Set(seen).size, 9) // 3 batches of 3 distinct rows; one row left out this epoch
      const again = yield* Dataset.batchAt(data, { epoch: 0, batch: 1 }, options)
      assert.deepStrictEqual(again.indices, seen.slice(3, 6))
      const epoch1 = yield* Dataset.batchAt(data, position, options)
      assert.notDeepEqual([...epoch1.indices], seen.slice(0, 3))
      assert.strictEqual(epoch1.rows[0].env, "catch")
      const ordered = yield* Dataset.batchAt(data, Dataset.start, { ...options, shuffle: false })
      assert.deepStrictEqual(ordered.indices, [0, 1, 2])
      assert.closeTo(Dataset.epochOf(data, { epoch: 1, batch: 1 }, 3), 1 + 1 / 3, 1e-12)
    }))

  it.effect("refuses a dataset smaller than one batch, saying what to change", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Dataset.batchAt(data, Dataset.start, { ...options, promptsPerBatch: 11 }))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.include(String(exit.cause), "cannot fill one generation batch of 11 prompts")
    }))

  it.scoped("reads JSONL rows with string or message prompts and extra columns", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = path.join(dir, "rows.jsonl")
      yield* fs.writeFileString(
        file,
        `{"prompt": "Play", "env": "catch", "seed": 3}\n\n{"messages": [{"role": "user", "content": "Guess"}], "env": "wordle"}\n{}\n`
      )
      const ds = yield* Dataset.fromJsonl(file)
      assert.deepStrictEqual(ds.rows, [
        { prompt: [{ role: "user", content: "Play" }], env: "catch", seed: 3 },
        { prompt: [{ role: "user", content: "Guess" }], env: "wordle" },
        { prompt: [{ role: "user", content: "" }] }
      ])
      yield* fs.writeFileString(file, `{"prompt": [{"role": "robot", "content": "x"}]}\n`)
      const exit = yield* Effect.exit(Dataset.fromJsonl(file))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.include(String(exit.cause), "line 1")
      // Both forms on one row: refused, not one of them dropped.
      yield* fs.writeFileString(
        file,
        `{"prompt": "a"}\n{"prompt": "b", "messages": [{"role": "user", "content": "c"}]}\n`
      )
      const both = yield* Effect.flip(Dataset.fromJsonl(file))
      assert.include(both.message, "line 2 has both \"prompt\" and \"messages\": keep one of them")
    }).pipe(Effect.provide(NodeContext.layer)))
})
