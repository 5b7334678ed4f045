import { assert, describe, it } from "@effect/vitest"
import { traceRows, type TraceTurnTokens } from "../src/internal/traceRows.js"

const turn = (
  node: string,
  prompt: ReadonlyArray<number>,
  completion: ReadonlyArray<number>,
  options: { readonly mask?: ReadonlyArray<number>; readonly finish?: string } = {}
): TraceTurnTokens => ({
  node_id: node,
  prompt_token_ids: prompt,
  completion_token_ids: completion,
  per_token_logps: completion.map((_, i) => -(i + 1) / 10),
  loss_mask: [...prompt.map(() => 0), ...(options.mask ?? completion.map(() => 1))],
  ...(options.finish === undefined ? {} : { response: { choices: [{ finish_reason: options.finish }] } })
})

describe("trace → training rows", () => {
  it("turns that extend one another by exact token prefix are one row; the tokens between are mask 0", () => {
    const rows = traceRows([
      turn("0", [1, 2, 3], [10, 11]),
      // The agent's next request: the first turn's context, a tool result (20, 21), then the model again.
      turn("1", [1, 2, 3, 10, 11, 20, 21], [12, 13, 14])
    ])
    assert.strictEqual(rows.length, 1)
    assert.deepStrictEqual(rows[0].promptIds, [1, 2, 3])
    assert.deepStrictEqual(rows[0].completionIds, [10, 11, 20, 21, 12, 13, 14])
    assert.deepStrictEqual(rows[0].mask, [1, 1, 0, 0, 1, 1, 1])
    assert.deepStrictEqual(rows[0].logprobs, [-0.1, -0.2, 0, 0, -0.1, -0.2, -0.3])
    assert.isFalse(rows[0].truncated)
  })

  it("a rewritten history starts a new row; a side call with mask 0 is left out", () => {
    const rows = traceRows([
      turn("0", [1, 2, 3], [10, 11]),
      // Title generation: its own prompt, captured for context, never trained.
      turn("title", [7, 8], [30], { mask: [0] }),
      // The agent compacted its history: the prompt no longer starts with the first turn's context.
      turn("1", [1, 2, 99], [12], { finish: "length" })
    ])
    assert.deepStrictEqual(rows.map((r) => r.promptIds), [[1, 2, 3], [1, 2, 99]])
    assert.deepStrictEqual(rows[1].completionIds, [12])
    assert.isTrue(rows[1].truncated)
  })

  it("a retried call (same prompt, new sample) after its first try was continued becomes a row of its own", () => {
    const rows = traceRows([
      turn("0", [1], [10]),
      turn("1", [1, 10, 20], [11]),
      // The agent retried turn 1: its prompt no longer extends the row's context [1, 10, 20, 11].
      turn("1b", [1, 10, 20], [13]),
      // ... and went on from the retry: this extends the retry's row only.
      turn("2", [1, 10, 20, 13, 21], [14])
    ])
    assert.deepStrictEqual(rows.map((r) => r.promptIds), [[1], [1, 10, 20]])
    assert.deepStrictEqual(rows[0].completionIds, [10, 20, 11])
    assert.deepStrictEqual(rows[0].mask, [1, 0, 1])
    assert.deepStrictEqual(rows[1].completionIds, [13, 21, 14])
    assert.deepStrictEqual(rows[1].mask, [1, 0, 1])
  })

  it("completion tokens the capture masked out keep mask 0 and logprob 0", () => {
    const rows = traceRows([turn("0", [1, 2], [10, 11, 12], { mask: [1, 0, 1] })])
    assert.deepStrictEqual(rows[0].mask, [1, 0, 1])
    assert.deepStrictEqual(rows[0].logprobs, [-0.1, 0, -0.3])
  })
})
