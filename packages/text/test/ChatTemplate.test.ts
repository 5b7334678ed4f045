import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChatMessage, ChatTemplate, QWEN3_STYLE_TEMPLATE } from "../src/ChatTemplate.js"

const guessTool = {
  type: "function",
  function: {
    name: "guess",
    description: "Make a guess in the Wordle environment.",
    parameters: {
      type: "object",
      properties: { guess: { type: "string", description: "The guessed word, formatted as '[abcde]'" } },
      required: ["guess"]
    }
  }
}

const call = (args: Record<string, unknown>) => ({
  type: "function" as const,
  function: { name: "guess", arguments: args }
})

// A multi-turn tool-calling episode: each element is one turn the rollout loop appends.
const episode: ReadonlyArray<ReadonlyArray<ChatMessage>> = [
  [{ role: "system", content: "You play Wordle." }, { role: "user", content: "Start." }],
  [{ role: "assistant", content: "", tool_calls: [call({ guess: "[crane]" })] }],
  [{ role: "tool", content: "C R A N E\nX X Y X G" }],
  [{
    role: "assistant",
    content: "Trying again.",
    tool_calls: [call({ guess: "[angle]" }), call({ guess: "[apple]" })]
  }],
  [{ role: "tool", content: "first" }, { role: "tool", content: "second" }],
  [{ role: "assistant", content: "<think>\nIt is apple.\n</think>\n\nDone." }]
]

const TOOLS_BLOCK = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
  `{"type": "function", "function": {"name": "guess", "description": "Make a guess in the Wordle environment.", ` +
  `"parameters": {"type": "object", "properties": {"guess": {"type": "string", "description": ` +
  `"The guessed word, formatted as '[abcde]'"}}, "required": ["guess"]}}}\n</tools>\n\n` +
  "For each function call, return a json object with function name and arguments within <tool_call></tool_call> " +
  `XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>`

describe("ChatTemplate (envtrain's Qwen3-style template)", () => {
  it.effect("renders tools, tool calls, grouped tool responses and thinking exactly as Qwen3 does", () =>
    Effect.gen(function*() {
      const t = yield* ChatTemplate.fromString(QWEN3_STYLE_TEMPLATE)
      const text = yield* t.render({
        messages: episode.flat(),
        tools: [guessTool],
        addGenerationPrompt: true,
        enableThinking: false
      })
      assert.strictEqual(
        text,
        `<|im_start|>system\nYou play Wordle.\n\n${TOOLS_BLOCK}<|im_end|>\n` +
          "<|im_start|>user\nStart.<|im_end|>\n" +
          `<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "guess", "arguments": {"guess": "[crane]"}}\n</tool_call><|im_end|>\n` +
          "<|im_start|>user\n<tool_response>\nC R A N E\nX X Y X G\n</tool_response><|im_end|>\n" +
          `<|im_start|>assistant\n<think>\n\n</think>\n\nTrying again.\n<tool_call>\n{"name": "guess", "arguments": {"guess": "[angle]"}}\n</tool_call>\n` +
          `<tool_call>\n{"name": "guess", "arguments": {"guess": "[apple]"}}\n</tool_call><|im_end|>\n` +
          "<|im_start|>user\n<tool_response>\nfirst\n</tool_response>\n<tool_response>\nsecond\n</tool_response><|im_end|>\n" +
          "<|im_start|>assistant\n<think>\nIt is apple.\n</think>\n\nDone.<|im_end|>\n" +
          "<|im_start|>assistant\n<think>\n\n</think>\n\n"
      )
    }))

  it.effect("without tools: plain ChatML; enable_thinking unset leaves the generation prompt open", () =>
    Effect.gen(function*() {
      const t = yield* ChatTemplate.fromString(QWEN3_STYLE_TEMPLATE)
      const messages: Array<ChatMessage> = [{ role: "system", content: "S" }, { role: "user", content: "Hi" }]
      assert.strictEqual(
        yield* t.render({ messages, addGenerationPrompt: true }),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
      )
      // An empty tool list renders like none (TRL passes tools=None).
      assert.strictEqual(
        yield* t.render({ messages, tools: [], addGenerationPrompt: false }),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      )
      // String arguments are emitted verbatim; reasoning_content wins over content parsing.
      assert.strictEqual(
        yield* t.render({
          messages: [{
            role: "assistant",
            content: "ok",
            reasoning_content: "\nr\n",
            tool_calls: [{ function: { name: "f", arguments: "{\"x\": 1}" } }]
          }]
        }),
        `<|im_start|>assistant\n<think>\nr\n</think>\n\nok\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>\n`
      )
    }))

  for (const enableThinking of [false, true]) {
    it.effect(`is prefix-stable turn by turn (enable_thinking=${enableThinking})`, () =>
      Effect.gen(function*() {
        const t = yield* ChatTemplate.fromString(QWEN3_STYLE_TEMPLATE)
        const generated = (k: number) => (k % 2 === 1) // turns 1, 3, 5 are the model's
        for (let k = 0; k + 1 < episode.length; k++) {
          const before = episode.slice(0, k + 1).flat()
          // With thinking off the model writes no reasoning (its prompt already closed the think block).
          const after = episode.slice(0, k + 2).flat().map((m) =>
            !enableThinking && m.content.startsWith("<think>") ? { ...m, content: "Done." } : m
          )
          // Before a model turn the prompt ends in the generation prompt; the model's text continues it.
          const prompt = yield* t.render({
            messages: before,
            tools: [guessTool],
            addGenerationPrompt: generated(k + 1),
            enableThinking
          })
          const full = yield* t.render({
            messages: after,
            tools: [guessTool],
            addGenerationPrompt: false,
            enableThinking
          })
          if (!enableThinking || !generated(k + 1)) assert.isTrue(full.startsWith(prompt), `turn ${k + 1}`)
          else {
            // With thinking on, the model itself writes "<think>\n...\n</think>\n\n" after the open header.
            assert.isTrue(full.startsWith(prompt + "<think>\n"), `turn ${k + 1}`)
          }
        }
      }))
  }

  it.scoped("loads from tokenizer_config.json, and chat_template.jinja takes precedence", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(
        path.join(dir, "tokenizer_config.json"),
        JSON.stringify({ chat_template: "{{ eos_token }}|{{ messages[0].content }}", eos_token: "<|im_end|>" })
      )
      const a = yield* ChatTemplate.load(dir)
      assert.strictEqual(yield* a.render({ messages: [{ role: "user", content: "x" }] }), "<|im_end|>|x")
      yield* fs.writeFileString(path.join(dir, "chat_template.jinja"), "J{{ messages | length }}")
      const b = yield* ChatTemplate.load(dir)
      assert.strictEqual(yield* b.render({ messages: [{ role: "user", content: "x" }] }), "J1")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a missing template and a broken template say so", () =>
    Effect.gen(function*() {
      const e1 = yield* Effect.flip(ChatTemplate.fromTokenizerConfig({}))
      assert.include(e1.message, `no "chat_template" string found`)
      const e2 = yield* Effect.flip(ChatTemplate.fromString("{% if %}"))
      assert.include(e2.message, "cannot parse")
    }))
})
