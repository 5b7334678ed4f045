import { assert, describe, it } from "@effect/vitest"
import type * as ChatTemplate from "@envtrain/text/ChatTemplate"
import { Effect, FastCheck as fc } from "effect"
import { ChatRenderer } from "../src/index.js"
import { tinyModel } from "./fixtures.js"

const dummy: ReadonlyArray<ChatTemplate.ChatMessage> = [
  { role: "user", content: "dummy" },
  { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "dummy", arguments: {} } }] }
]

// The suffix by the definition: render with and without the tool messages, keep what follows the end-of-turn token.
const reference = (template: ChatTemplate.ChatTemplate, tools: ReadonlyArray<ChatTemplate.ChatMessage>) => {
  const a = template.renderUnsafe({ messages: dummy, enableThinking: false })
  const cut = a.lastIndexOf("<|im_end|>") + "<|im_end|>".length
  const b = template.renderUnsafe({ messages: [...dummy, ...tools], addGenerationPrompt: true, enableThinking: false })
  return b.slice(cut)
}

describe("ChatRenderer", () => {
  it.effect.prop(
    "tool suffixes equal the full render, before and after the frame cache takes over",
    [fc.array(fc.array(fc.string({ maxLength: 30 }), { minLength: 1, maxLength: 3 }), {
      minLength: 12,
      maxLength: 12
    })],
    ([batches]) =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* tinyModel
        const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        for (const contents of batches) {
          const messages = contents.map((content) => ({ role: "tool" as const, name: "guess", content }))
          const ids = yield* r.toolSuffixIds(messages)
          assert.deepStrictEqual(ids, tokenizer.encode(reference(template, messages)))
        }
        return true
      }),
    { fastCheck: { numRuns: 6 } }
  )

  it.effect.prop(
    "tool suffixes of many generated tool results keep the plain tokenizer's ids once the fast paths take over",
    [fc.array(
      fc.oneof(
        fc.string({ maxLength: 40 }),
        fc.tuple(fc.constantFrom("crane", "mound", "fuzzy"), fc.nat(6)).map(([w, n]) =>
          `\n[GAME] You submitted [${w}].\nFeedback:\n${[...w.toUpperCase()].join(" ")}\n` +
          `X Y G X X\nYou have ${n} guesses left.`
        ),
        fc.constantFrom("<|im_end|>", "</tool_response", "<tool_call>", "é😀", "\n\n", " ")
      ),
      { minLength: 80, maxLength: 80 }
    )],
    ([results]) =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* tinyModel
        const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        for (const content of results) {
          const messages = [{ role: "tool" as const, name: "guess", content }]
          assert.deepStrictEqual(yield* r.toolSuffixIds(messages), tokenizer.encode(reference(template, messages)))
        }
        return true
      }),
    { fastCheck: { numRuns: 5 } }
  )

  it.effect.prop(
    "prompts equal the full render, before and after the frame cache takes over",
    [fc.array(fc.tuple(fc.string({ maxLength: 30 }), fc.string({ maxLength: 30 })), { minLength: 12, maxLength: 12 })],
    ([prompts]) =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* tinyModel
        const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        const tools = [{ type: "function", function: { name: "guess", description: "Guess.", parameters: {} } }]
        for (const [system, user] of prompts) {
          const messages = [{ role: "system" as const, content: system }, { role: "user" as const, content: user }]
          const full = template.renderUnsafe({ messages, tools, addGenerationPrompt: true, enableThinking: false })
          assert.deepStrictEqual(yield* r.promptIds(messages, tools), tokenizer.encode(full))
          // Again: the G episodes of a group ask for the same prompt, which comes from the recent-prompts cache.
          assert.deepStrictEqual(yield* r.promptIds(messages, tools), tokenizer.encode(full))
        }
        return true
      }),
    { fastCheck: { numRuns: 6 } }
  )

  it.effect("the recent-prompts cache tells apart content lists that join to the same text", () =>
    Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
      const tools = [{ type: "function", function: { name: "guess", description: "Guess.", parameters: {} } }]
      const pairs = [["a\u0000b", "c"], ["a", "b\u0000c"], ["a\u00003:b", "c"], ["a", "3:b\u0000c"]]
      // Warm the frame up first (its first uses are checked by rendering), then compare cached answers.
      for (let i = 0; i < 10; i++) {
        yield* r.promptIds([{ role: "system", content: `${i}` }, { role: "user", content: "x" }], tools)
      }
      for (const [system, user] of [...pairs, ...pairs]) {
        const messages = [{ role: "system" as const, content: system }, { role: "user" as const, content: user }]
        const full = template.renderUnsafe({ messages, tools, addGenerationPrompt: true, enableThinking: false })
        assert.deepStrictEqual(yield* r.promptIds(messages, tools), tokenizer.encode(full))
      }
    }))

  it.effect("the prompt renders the tools and ends with the generation prompt", () =>
    Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      const r = ChatRenderer.make({ tokenizer, template, enableThinking: false })
      const tools = [{ type: "function", function: { name: "guess", description: "Guess.", parameters: {} } }]
      const text = tokenizer.decode(yield* r.promptIds([{ role: "user", content: "Play." }], tools))
      assert.include(text, "\"name\": \"guess\"")
      assert.isTrue(text.endsWith("<|im_start|>user\nPlay.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"))
      assert.deepStrictEqual(r.stopStrings.slice().sort(), ["<|endoftext|>", "<|im_end|>"])
    }))
})
