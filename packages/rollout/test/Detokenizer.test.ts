// The incremental detokeniser against its definition: decoding every prefix of the ids (quadratic), on token
// sequences that split multi-byte characters, hold added tokens, or are random ids (invalid UTF-8 included).
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import { Detokenizer } from "../src/internal/policyServer/detokenizer.js"
import { ChoiceText } from "../src/internal/policyServer/stream.js"
import { tinyModel } from "./fixtures.js"

const piece = fc.oneof(
  fc.string({ maxLength: 8 }),
  fc.constantFrom("<|im_end|>", "<tool_call>", "<think>", "\n", "é", "😀", "中文", "  ")
)
const text = fc.array(piece, { maxLength: 10 }).map((p) => p.join(""))
const sequence = fc.oneof(
  text.map((t) => ({ text: t })),
  fc.array(fc.integer({ min: 0, max: 1023 }), { maxLength: 24 }).map((ids) => ({ ids }))
)

describe("Detokenizer", () => {
  it.effect.prop(
    "token k's text starts where the longest whole prefix before it ends; the text is the last whole prefix's",
    [fc.array(sequence, { minLength: 40, maxLength: 40 }), fc.boolean()],
    ([sequences, skip]) =>
      Effect.gen(function*() {
        const { tokenizer } = yield* tinyModel
        for (const s of sequences) {
          const ids = "ids" in s ? s.ids : tokenizer.encode(s.text)
          // The definition: every prefix decoded; a prefix ending inside a character (U+FFFD) is not whole.
          const prefixes = ids.map((_, k) => tokenizer.decode(ids.slice(0, k), { skipSpecialTokens: skip }))
          const whole: Array<string> = []
          let last = ""
          for (const p of prefixes) {
            if (!p.endsWith("\uFFFD")) last = p
            whole.push(last)
          }
          const detokenizer = new Detokenizer(tokenizer, skip)
          const starts: Array<number> = []
          detokenizer.readEach(ids, ids.length, (_, before) => starts.push(before))
          assert.deepStrictEqual(starts, whole.map((w) => w.length))
          const full = tokenizer.decode(ids, { skipSpecialTokens: skip })
          assert.strictEqual(detokenizer.text, full.endsWith("\uFFFD") ? last : full)
          // Offsets of a running sequence read in chunks (the gpu backend's steps), against the same definition.
          const stream = new ChoiceText(tokenizer, { stop: [], skipSpecialTokens: skip })
          const offsets: Array<number> = []
          for (let to = 3; to < ids.length + 3; to += 3) {
            stream.read(ids.slice(0, Math.min(ids.length, to)))
            offsets.push(...stream.offsets)
          }
          assert.deepStrictEqual(offsets, whole.map((w) => w.length))
        }
        return true
      }),
    { fastCheck: { numRuns: 10 } }
  )
})
