import { assert, describe, it } from "@effect/vitest"
import * as CompletionMetrics from "../src/CompletionMetrics.js"

describe("CompletionMetrics", () => {
  it("lengths over model tokens, terminated lengths, clipped ratio and tool frequencies", () => {
    const m = CompletionMetrics.compute({
      modelTokens: [10, 30, 20, 4],
      truncated: [false, true, false, true],
      promptTokens: [5, 5, 5, 5],
      toolCalls: [2, 0, 1, 1],
      toolFailures: [1, 0, 0, 1]
    })
    assert.strictEqual(m["completions/mean_length"], 16)
    assert.strictEqual(m["completions/min_length"], 4)
    assert.strictEqual(m["completions/max_length"], 30)
    assert.strictEqual(m["completions/clipped_ratio"], 0.5)
    assert.strictEqual(m["completions/mean_terminated_length"], 15)
    assert.strictEqual(m["completions/min_terminated_length"], 10)
    assert.strictEqual(m["completions/max_terminated_length"], 20)
    assert.strictEqual(m["tools/call_frequency"], 1)
    assert.strictEqual(m["tools/failure_frequency"], 0.5)
    assert.strictEqual(m["tokens"], 84)
  })

  it("no terminated episode gives 0 terminated lengths; no tool calls gives failure frequency 0", () => {
    const m = CompletionMetrics.compute({ modelTokens: [8, 8], truncated: [true, true], toolCalls: [0, 0] })
    assert.strictEqual(m["completions/mean_terminated_length"], 0)
    assert.strictEqual(m["completions/max_terminated_length"], 0)
    assert.strictEqual(m["tools/failure_frequency"], 0)
    assert.isUndefined(CompletionMetrics.compute({ modelTokens: [1], truncated: [false] })["tools/call_frequency"])
  })
})
