import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Progress from "../src/Progress.js"

describe("Progress", () => {
  it("formats step, reward, loss, tokens/s and an ETA from this run's pace", () => {
    const line = Progress.format(
      { step: 15, reward: 0.5, loss: 0.01234, tokensPerSecond: 321.26, elapsedSeconds: 50, startStep: 10 },
      { total: 20, label: "grpo", bar: true, width: 10 }
    )
    assert.strictEqual(
      line,
      "grpo [########--] step 15/20 | reward 0.500 | loss 0.0123 | 321.3 tok/s | elapsed 50s | ETA 50s"
    )
    assert.include(Progress.format({ step: 0, elapsedSeconds: 0 }, { total: 3 }), "reward - | loss - | - tok/s")
    assert.strictEqual(Progress.formatDuration(3725), "1h02m")
    assert.strictEqual(Progress.formatDuration(185), "3m05s")
  })

  it.effect("prints plain lines when not a TTY and redraws in place on a TTY", () =>
    Effect.gen(function*() {
      const plain: Array<string> = []
      const p = Progress.make({ total: 2, tty: false, stream: { write: (t) => plain.push(t) } })
      yield* p.update({ step: 1, elapsedSeconds: 1 })
      yield* p.log("sample")
      yield* p.update({ step: 2, elapsedSeconds: 2 })
      yield* p.done("finished")
      assert.strictEqual(plain.length, 4)
      assert.isTrue(plain.every((t) => t.endsWith("\n") && !t.includes("\r")))

      const tty: Array<string> = []
      const q = Progress.make({ total: 2, tty: true, stream: { write: (t) => tty.push(t) } })
      yield* q.update({ step: 1, elapsedSeconds: 1 })
      yield* q.update({ step: 2, elapsedSeconds: 2 })
      yield* q.done("finished")
      assert.isFalse(tty[0].endsWith("\n"))
      assert.isTrue(tty[1].startsWith("\r\x1b[2K"))
      assert.include(tty[1], "[########################]")
      assert.strictEqual(tty[2], "\nfinished\n")
    }))
})
