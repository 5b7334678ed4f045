import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Advantage from "../src/Advantage.js"
import * as Progress from "../src/Progress.js"

// Made-up per-step metrics: steps 2, 3 and 5 flat (every group zero variance), 4 without a scoreable group (NaN).
const perStep = [0.5, 1, 1, NaN, 1, 0, 0.75].map((frac, i) => ({ step: i + 1, frac_reward_zero_std: frac }))

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

  it("counts flat steps: every group zero variance, or none scoreable (NaN counts: it is not learning)", () => {
    assert.deepStrictEqual(Advantage.flatSteps(perStep), { steps: 7, flat: [2, 3, 4, 5], unscoreable: [4] })
    // Nearly all groups flat is still a step that learnt something; no records, no steps.
    assert.deepStrictEqual(Advantage.flatSteps([{ step: 1, frac_reward_zero_std: 0.999 }]).flat, [])
    assert.deepStrictEqual(Advantage.flatSteps([]), { steps: 0, flat: [], unscoreable: [] })
    // metrics.jsonl writes NaN as null; a record without the metric covers its steps without counting them.
    assert.deepStrictEqual(
      Advantage.flatSteps([{ step: 1, frac_reward_zero_std: null }, { step: 2 }, { step: 3, frac_reward_zero_std: 1 }]),
      { steps: 3, flat: [1, 3], unscoreable: [1] }
    )
  })

  it("counts a step flat when every advantage was 0 (frac_zero_advantage), whatever TRL's zero-std metric says", () => {
    // Step 1: one group with zero variance, one with a single scoreable member (NaN std): TRL's metric says 0.5, but
    // nothing was learnt. Step 2: nothing scoreable. Step 3: a signal.
    assert.deepStrictEqual(
      Advantage.flatSteps([
        { step: 1, frac_zero_advantage: 1, frac_reward_zero_std: 0.5, unscoreable_frac: 0.375 },
        { step: 2, frac_zero_advantage: 1, frac_reward_zero_std: 0, unscoreable_frac: 1 },
        { step: 3, frac_zero_advantage: 0.25, frac_reward_zero_std: 0.25, unscoreable_frac: 0 }
      ]),
      { steps: 3, flat: [1, 2], unscoreable: [2] }
    )
  })

  it("counts a resumed run from where it starts, and logged windows only when all their steps were flat", () => {
    // Resumed at step 4: this run's steps are 5..7; step 5 is flat.
    assert.deepStrictEqual(Advantage.flatSteps(perStep.slice(4), { start: 4 }), {
      steps: 3,
      flat: [5],
      unscoreable: []
    })
    // loggingSteps 2: a record is the mean over the two steps it covers.
    assert.deepStrictEqual(
      Advantage.flatSteps([
        { step: 2, frac_reward_zero_std: 1 },
        { step: 4, frac_reward_zero_std: 0.5 },
        { step: 6, frac_reward_zero_std: 1 }
      ]),
      { steps: 6, flat: [1, 2, 5, 6], unscoreable: [] }
    )
  })

  it("shows the running count of flat steps on the line", () => {
    const line = Progress.format(
      {
        step: 7,
        reward: 0.5,
        flat: { flat: Advantage.flatSteps(perStep).flat.length, steps: 7 },
        elapsedSeconds: 7
      },
      { total: 10 }
    )
    assert.include(line, "step 7/10 | reward 0.500 | flat 4/7 | loss -")
    assert.notInclude(Progress.format({ step: 1, elapsedSeconds: 1 }, { total: 2 }), "flat")
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
