import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Environment, Wordle } from "@envtrain/env"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Episode, Policy, Recording, Rollout } from "../src/index.js"
import { renderer, tinyModel, toolResponses } from "./fixtures.js"

const WORDS = ["crane", "slate", "pious", "zzzzz", "mound", "tight", "bloke"]
// A fixed guess sequence, with an invalid word and a malformed call mixed in so every outcome kind is recorded.
const wordleScript = ({ text }: Policy.ScriptContext) => {
  const n = toolResponses(text)
  if (n === 2) return "<tool_call>\n{\"name\": \"guess\", \"arguments\": {\"guess\": }\n</tool_call>"
  return `<tool_call>\n{"name": "guess", "arguments": {"guess": "[${WORDS[n % WORDS.length]}]"}}\n</tool_call>`
}

const Live = Layer.mergeAll(
  renderer(false),
  Layer.unwrapEffect(Effect.map(tinyModel, ({ tokenizer }) => Policy.scripted(tokenizer, wordleScript))),
  NodeFileSystem.layer
)

const openWordle = (row: Environment.Row) =>
  Effect.map(Environment.episode(Wordle.environment, row), Episode.fromEnvironment)

const rows = Stream.fromIterable([0, 1].map((i) => ({ prompt: [{ role: "user" as const, content: `Wordle ${i}.` }] })))

describe("Recording", () => {
  it.scoped("records episodes as JSONL, reads them back unchanged, and replays every observation", () =>
    Effect.gen(function*() {
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "rollout-rec-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
      const file = Path.join(dir, "episodes.jsonl")
      const out = yield* Recording.writer(file)
      const groups = yield* Rollout.groups(rows, {
        groupSize: 3,
        concurrency: 6,
        baseSeed: 11,
        config: { maxCompletionLength: 4096, maxToolCallingIterations: 8, sampling: { temperature: 1 } },
        open: openWordle
      }).pipe(
        Stream.tap((g) => Effect.forEach(g.episodes, out.write)),
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      const written = groups.flatMap((g) => g.episodes)
      const read = yield* Recording.read(file).pipe(Stream.runCollect, Effect.map(Chunk.toArray))
      assert.strictEqual(read.length, 6)
      const key = (r: Episode.EpisodeRecord<unknown>) => `${r.promptIndex}/${r.generation}`
      for (const r of read) {
        const original = written.find((w) => key(w) === key(r))!
        const json = (u: unknown) => JSON.parse(JSON.stringify(u)) as unknown
        assert.deepStrictEqual(json(r), json(original))
        assert.deepStrictEqual(r.completionIds, original.completionIds)
        assert.deepStrictEqual(r.mask, original.mask)
        assert.deepStrictEqual(r.logprobs, original.logprobs)
        assert.strictEqual(r.envSeed, original.envSeed)
        assert.isTrue(r.toolCalls.some((c) => c.status === "parse_failure" && c.arguments === undefined))
        const report = yield* Recording.replay(r, openWordle)
        assert.deepStrictEqual(report.mismatches, [])
        assert.isTrue(report.identical)
        assert.strictEqual(report.replayed, r.toolCalls.filter((c) => c.status !== "parse_failure").length)
      }
      // Different seeds within a group: the secrets differ, and so do the recorded observations.
      assert.isAbove(new Set(written.map((w) => JSON.stringify(w.state))).size, 1)
    }).pipe(Effect.provide(Live)))

  it.scoped("replay reports every observation that differs", () =>
    Effect.gen(function*() {
      const [g] = yield* Rollout.groups(Stream.take(rows, 1), {
        groupSize: 1,
        concurrency: 1,
        config: { maxCompletionLength: 4096, maxToolCallingIterations: 3, sampling: {} },
        open: openWordle
      }).pipe(Stream.runCollect, Effect.map(Chunk.toArray))
      const record = yield* Recording.decode(Recording.encode(g.episodes[0]))
      const tampered = { ...record, toolCalls: record.toolCalls.map((c, i) => i === 0 ? { ...c, text: "forged" } : c) }
      const report = yield* Recording.replay(tampered, openWordle)
      assert.isFalse(report.identical)
      assert.deepStrictEqual(report.mismatches.map((m) => [m.index, m.expected]), [[0, "forged"]])
      // Another seed is another secret word: the final state no longer matches.
      const other = yield* Recording.replay(
        { ...record, row: { ...record.row, seed: Number(record.row.seed) + 1 } },
        openWordle
      )
      assert.isFalse(other.identical)
    }).pipe(Effect.provide(Live)))

  it.effect("a corrupt line fails with its line number", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Recording.decode("{\"v\": 1, \"promptIndex\": \"x\"}", 7))
      assert.strictEqual(e._tag, "RecordingError")
      assert.include(e.message, "line 7")
    }))
})
