import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, FastCheck, Layer } from "effect"
import * as Tok from "../src/Tokenizer.js"

class Trained extends Context.Tag("test/Trained")<Trained, Tok.Tokenizer>() {}

const TrainedLive = Layer.effect(
  Trained,
  Effect.suspend(() => {
    const json = Tok.train({ vocabSize: 1024 })
    return Tok.Tokenizer.fromJson(json, Tok.qwen3TokenizerConfig(json, ""))
  })
)

layer(TrainedLive)("Tokenizer trained by our BPE trainer", (it) => {
  it.effect("has the asked vocabulary: 256 bytes, merges, then the added tokens", () =>
    Effect.gen(function*() {
      const tok = yield* Trained
      assert.strictEqual(tok.vocabSize, 1024)
      assert.strictEqual(tok.tokenToId("<|endoftext|>"), 1015)
      assert.strictEqual(tok.tokenToId("</think>"), 1023)
      assert.strictEqual(tok.eosTokenId, tok.tokenToId("<|im_end|>"))
      assert.strictEqual(tok.padTokenId, tok.tokenToId("<|endoftext|>"))
      assert.strictEqual(tok.bosTokenId, null)
      assert.deepStrictEqual(tok.eosTokenIds, [1017, 1015])
      assert.strictEqual(tok.idToToken(0), "!")
      assert.strictEqual(tok.tokenToId("Ġ"), 220) // the space byte has the id it has in GPT-2 and Qwen
    }))

  it.effect("added tokens are single ids, text around them is BPE", () =>
    Effect.gen(function*() {
      const tok = yield* Trained
      const ids = tok.encode("<|im_start|>assistant\n<tool_call>\n{\"name\": \"guess\"}\n</tool_call><|im_end|>")
      assert.strictEqual(ids[0], tok.tokenToId("<|im_start|>"))
      assert.include(ids, tok.tokenToId("<tool_call>")!)
      assert.include(ids, tok.tokenToId("</tool_call>")!)
      assert.strictEqual(ids.at(-1), tok.tokenToId("<|im_end|>"))
      // The corpus makes the environments' frequent strings cheap.
      assert.isAtMost(tok.encode(" guess").length, 1)
      assert.strictEqual(
        tok.decode(ids, { skipSpecialTokens: true }),
        "assistant\n<tool_call>\n{\"name\": \"guess\"}\n</tool_call>"
      )
    }))

  const roundTrips = (s: string) =>
    Effect.gen(function*() {
      const tok = yield* Trained
      assert.strictEqual(tok.decode(tok.encode(s)), s)
    })

  it.effect.prop(
    "decode(encode(s)) = s for arbitrary Unicode text",
    [FastCheck.string({ unit: "grapheme", maxLength: 60 })],
    ([s]) => roundTrips(s),
    { fastCheck: { numRuns: 200 } }
  )

  it.effect.prop(
    "decode(encode(s)) = s for mixed ASCII, whitespace, added tokens and emoji",
    [
      FastCheck.array(
        FastCheck.constantFrom(
          "a",
          "Z",
          " ",
          "\n",
          "\r\n",
          "\t",
          "  ",
          "é",
          "🙂",
          "中",
          "1",
          "[",
          "'s",
          "<think>",
          "<|im_end|>",
          "\u0000",
          "\u200b",
          "e\u0301"
        ),
        { maxLength: 40 }
      )
    ],
    ([parts]) => roundTrips(parts.join("")),
    { fastCheck: { numRuns: 200 } }
  )
})

describe("Tokenizer errors", () => {
  it.effect("a file without a model section is rejected with its path", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Tok.Tokenizer.fromJson({ version: "1.0" }, {}, "x/tokenizer.json"))
      assert.include(e.message, "Cannot load the tokenizer from x/tokenizer.json")
      assert.include(e.message, `no "model" section`)
    }))

  it.effect("an eos_token that is not in the vocabulary is named", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Tok.Tokenizer.fromJson(Tok.train({ vocabSize: 300 }), { eos_token: "<|nope|>" }))
      assert.include(e.message, `eos_token "<|nope|>"`)
    }))
})
