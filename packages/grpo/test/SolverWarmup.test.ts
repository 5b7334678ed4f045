import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CommandFile from "../src/CommandFile.js"
import type * as SftTrainer from "../src/SftTrainer.js"

// One's own environment warmed up as the built-in recipes are: its Definition's solver plays the seeds, and the
// transcripts are what `envtrain sft` trains on.
describe("sftData { seeds, errorRate } with a module environment's solver", () => {
  it.scoped("gives the solver's transcripts in the episode loop's format; refusals name the fix", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const shout = path.resolve(__dirname, "fixtures/shout.ts")
      const transcripts = (lines: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const file = path.join(dir, `c${Math.random().toString(36).slice(2)}.yaml`)
          yield* fs.writeFileString(file, ["model: unused", ...lines].join("\n"))
          const { spec } = yield* CommandFile.load(file, [])
          return yield* CommandFile.sftTranscripts(file, spec)
        })
      const made = yield* transcripts([
        `environment: ${shout}`,
        "dataset: { seeds: [0, 8], prompt: \"Say hello.\" }",
        "sft_data: { seeds: [0, 8], errorRate: 0.5 }"
      ])
      assert.strictEqual(made.length, 8)
      const words = new Set<string>()
      for (const t of made) {
        assert.deepStrictEqual((t as SftTrainer.Transcript).tools?.map((d) => (d.function as { name: string }).name), [
          "say"
        ])
        const [user, call, answer, closing] = t.messages
        assert.deepStrictEqual(user, { role: "user", content: "Say hello." })
        const word = String((call.tool_calls?.[0]?.function.arguments as { word: string }).word)
        words.add(word)
        assert.deepStrictEqual(answer, { role: "tool", name: "say", content: word.toUpperCase() })
        assert.deepStrictEqual(closing, { role: "assistant", content: "Done." })
      }
      // errorRate 0.5: the solver's right move and its mistakes both appear.
      assert.deepStrictEqual([...words].sort(), ["bye", "hello"])

      const problem = (lines: ReadonlyArray<string>) => Effect.map(Effect.flip(transcripts(lines)), (e) => e.message)
      assert.include(
        yield* problem([
          "environment: echo",
          "dataset: { seeds: [0, 8], prompt: hi }",
          "sftData: { seeds: [0, 8], errorRate: 0.1 }"
        ]),
        "environment 'echo' has no solver: give its Definition.make a solver"
      )
      // A misspelt run key is named with the run key meant (not "remove it", nor the nearest GRPO key).
      assert.include(yield* problem(["sftdata: a.jsonl"]), "unknown key \"sftdata\": did you mean \"sftData\"?")
      assert.include(yield* problem(["sft_dta: a.jsonl"]), "unknown key \"sft_dta\": did you mean \"sft_data\"?")
      assert.include(
        yield* problem([`environment: ${shout}`, "dataset: data.jsonl", "sftData: { seeds: [0, 8], errorRate: 0.1 }"]),
        "set dataset: { seeds: [a, b], prompt: \"…\" }"
      )
    }).pipe(Effect.provide(NodeContext.layer)))
})
