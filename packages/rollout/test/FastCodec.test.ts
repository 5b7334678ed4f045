import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import * as FastCodec from "../src/internal/fastCodec.js"
import { tinyModel } from "./fixtures.js"

const ADDED = [
  "<|im_start|>",
  "<|im_end|>",
  "<|endoftext|>",
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "<think>"
]
const piece = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.constantFrom(...ADDED),
  fc.constantFrom("\n", " \n", "é", "😀", "  ")
)
const text = fc.array(piece, { maxLength: 12 }).map((p) => p.join(""))

describe("fast codec", () => {
  it.effect.prop(
    "encodes and decodes exactly as the tokenizer, after the verified warm-up too",
    [fc.array(text, { minLength: 60, maxLength: 60 })],
    ([texts]) =>
      Effect.gen(function*() {
        const { tokenizer } = yield* tinyModel
        const codec = FastCodec.make(tokenizer)
        for (const t of texts) {
          const ids = tokenizer.encode(t)
          assert.deepStrictEqual(codec.encode(t), ids)
          assert.strictEqual(codec.decode(ids), tokenizer.decode(ids))
          // A prefix of the ids can end inside a multi-byte character.
          assert.strictEqual(codec.decode(ids.slice(0, -1)), tokenizer.decode(ids.slice(0, -1)))
        }
        assert.deepStrictEqual(codec.status(), { encode: true, decode: true })
        return true
      }),
    { fastCheck: { numRuns: 8 } }
  )
})
