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
  it.prop(
    "cuts a stretch into lines where /[\\r\\n]+(?=[^\\s])/ does",
    [fc.array(fc.constantFrom("a", "Z", " ", "\t", "\n", "\r", "\u00a0", "\u2028", "é", "😀", "\ufeff"), {
      maxLength: 40
    })],
    ([chars]) => {
      const s = chars.join("")
      const expected: Array<number> = []
      const re = /[\r\n]+(?=[^\s])/g
      for (let m = re.exec(s); m !== null; m = re.exec(s)) expected.push(m.index + m[0].length)
      const cuts: Array<number> = []
      for (let c = FastCodec.nextLineCut(s, 0); c >= 0; c = FastCodec.nextLineCut(s, c)) cuts.push(c)
      assert.deepStrictEqual(cuts, expected)
    },
    { fastCheck: { numRuns: 500 } }
  )

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

  // Tool-result-like contents: environment feedback lines, arbitrary text, added tokens and fragments of them at
  // the edges (the straddling cases the framed path must detect).
  const fragment = fc.constantFrom("<tool_", "</tool_response", "<|im_", "|im_end|>", "_call>", "<", ">", "response>")
  const feedback = fc.tuple(fc.constantFrom("crane", "pious", "fuzzy"), fc.constantFrom("XXGYX", "GGGGG")).map(
    ([w, f]) => `\n[GAME] You submitted [${w}].\nFeedback:\n${[...w.toUpperCase()].join(" ")}\n${[...f].join(" ")}\n`
  )
  const content = fc.oneof(feedback, text, fc.tuple(fragment, text, fragment).map((p) => p.join("")))

  it.effect.prop(
    "framed encoding (fixed pieces as cached ids) gives the tokenizer's ids, past its verified warm-up",
    [fc.array(fc.array(content, { minLength: 1, maxLength: 2 }), { minLength: 60, maxLength: 60 })],
    ([batches]) =>
      Effect.gen(function*() {
        const { tokenizer } = yield* tinyModel
        const codec = FastCodec.make(tokenizer)
        // The Qwen3-style tool-suffix frames for one and two tool messages.
        const framed = [
          ["<|im_start|>user\n<tool_response>\n", "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"],
          [
            "<|im_start|>user\n<tool_response>\n",
            "\n</tool_response>\n<tool_response>\n",
            "\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
          ]
        ].map((pieces) => ({ pieces, codec: codec.framed(pieces) }))
        for (const contents of batches) {
          const { codec: f, pieces } = framed[contents.length - 1]
          let joined = pieces[0]
          contents.forEach((c, i) => joined += c + pieces[i + 1])
          assert.deepStrictEqual(f.encode(contents), tokenizer.encode(joined))
        }
        // Contents that would merge with the frame's added tokens are sent down the plain path, never mis-encoded,
        // and the fast path stays on (the checks found no difference).
        assert.isTrue(framed.every((f) => f.codec.active()))
        return true
      }),
    { fastCheck: { numRuns: 6 } }
  )
})
