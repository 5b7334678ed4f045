import { assert, describe, it } from "@effect/vitest"
import * as LrSchedule from "../src/LrSchedule.js"

const close = (a: number, b: number) => assert.isBelow(Math.abs(a - b), 1e-15, `${a} vs ${b}`)

describe("LrSchedule", () => {
  const base = { learningRate: 1e-3, warmupSteps: 2, warmupRatio: 0 }
  it("linear: warmup from 0, then linear decay to 0 at the last step", () => {
    const lr = LrSchedule.fromConfig({ ...base, lrSchedulerType: "linear" }, 10)
    close(lr(0), 0)
    close(lr(1), 0.5e-3)
    close(lr(2), 1e-3)
    close(lr(6), 1e-3 * 4 / 8)
    close(lr(10), 0)
    close(lr(12), 0)
  })

  it("cosine: half a cosine from the peak to 0 after warmup", () => {
    const lr = LrSchedule.fromConfig({ ...base, lrSchedulerType: "cosine" }, 10)
    close(lr(1), 0.5e-3)
    close(lr(2), 1e-3)
    close(lr(6), 0.5e-3) // progress ½
    close(lr(4), 1e-3 * 0.5 * (1 + Math.cos(Math.PI / 4)))
    close(lr(10), 0)
  })

  it("constant ignores warmup (as transformers); constant_with_warmup ramps", () => {
    const c = LrSchedule.fromConfig({ ...base, lrSchedulerType: "constant" }, 10)
    close(c(0), 1e-3)
    const w = LrSchedule.fromConfig({ ...base, lrSchedulerType: "constant_with_warmup" }, 10)
    close(w(0), 0)
    close(w(1), 0.5e-3)
    close(w(9), 1e-3)
  })

  it("warmup: steps, a ratio in (0, 1), or the legacy warmupRatio", () => {
    assert.strictEqual(LrSchedule.warmupSteps({ warmupSteps: 5, warmupRatio: 0.5 }, 100), 5)
    assert.strictEqual(LrSchedule.warmupSteps({ warmupSteps: 0.1, warmupRatio: 0 }, 95), 10)
    assert.strictEqual(LrSchedule.warmupSteps({ warmupSteps: 0, warmupRatio: 0.03 }, 100), 3)
    assert.strictEqual(LrSchedule.warmupSteps({ warmupSteps: 0, warmupRatio: 0 }, 100), 0)
    const lr = LrSchedule.fromConfig({ learningRate: 1, warmupSteps: 0, warmupRatio: 0, lrSchedulerType: "linear" }, 4)
    close(lr(0), 1)
    close(lr(3), 0.25)
  })
})
