import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as Metrics from "../src/Metrics.js"

describe("Metrics", () => {
  it("averages per-step values NaN-aware and writes null where nothing was measured", () => {
    const acc = Metrics.accumulator()
    acc.add({ reward: 0.5, loss: 0.1, kl: NaN })
    acc.add({ reward: 0.7, loss: NaN, kl: NaN })
    assert.strictEqual(acc.size(), 2)
    const record = acc.flush({ step: 2, epoch: 0.5 })
    assert.deepStrictEqual(record, { step: 2, epoch: 0.5, reward: 0.6, loss: 0.1, kl: null })
    assert.strictEqual(acc.size(), 0)
    assert.deepStrictEqual(acc.flush({ step: 3, epoch: 1 }), { step: 3, epoch: 1 })
  })

  it("writes JSON without NaN or Infinity", () => {
    assert.strictEqual(Metrics.toJsonLine({ a: NaN, b: Infinity, c: 1 }), `{"a":null,"b":null,"c":1}`)
  })

  it.scoped("appends, reads back and truncates after a step", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = path.join(dir, Metrics.files.metrics)
      assert.deepStrictEqual(yield* Metrics.read(file), [])
      yield* Metrics.append(file, [{ step: 1, epoch: 0, reward: 0.1 }, { step: 2, epoch: 0, reward: NaN }])
      yield* Metrics.append(file, [{ step: 3, epoch: 0, reward: 0.3 }])
      const all = yield* Metrics.read<Metrics.MetricsRecord>(file)
      assert.deepStrictEqual(all.map((r) => r.reward), [0.1, null, 0.3])
      yield* Metrics.truncateAfter(file, 2)
      assert.deepStrictEqual((yield* Metrics.read<Metrics.MetricsRecord>(file)).map((r) => r.step), [1, 2])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("names the line that is not JSON", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Metrics.parseJsonl("{\"a\":1}\n\nnot json\n", "m.jsonl"))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.include(String(exit.cause), "line 3 is not JSON")
    }))

  it("formats sample completions as a table, limited", () => {
    const sample = (i: number): Metrics.CompletionSample => ({
      step: 4,
      prompt: `prompt ${i}`,
      completion: "a\nb",
      rewards: { catch: i === 0 ? null : 1 },
      advantage: 0.5
    })
    const text = Metrics.formatCompletions([sample(0), sample(1), sample(2)], 2)
    const lines = text.split("\n")
    assert.strictEqual(lines.length, 2)
    assert.include(lines[0], "catch=-")
    assert.include(lines[1], "catch=1.000")
    assert.include(lines[1], "a b")
  })
})
