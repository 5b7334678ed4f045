/**
 * The training-template swap, as TRL's `get_training_chat_template` does it for tool-calling GRPO: a model's chat
 * template must be *prefix-preserving* (rendering `[user, assistant(tool call)]` gives a token prefix of rendering
 * the same conversation plus a tool result and the generation prompt), because the episode loop appends the tokens
 * of tool results after the model's own tokens and never re-renders earlier turns. Qwen3's own template is not: it
 * drops the (empty) think block of an assistant turn once another message follows it. TRL then renders the whole
 * run with its bundled `qwen3_training.jinja`; envtrain renders it with its own `QWEN3_STYLE_TEMPLATE`, whose output
 * is the same (interop/test/TrlTrainingTemplate.test.ts holds both to TRL's template rendered by transformers).
 *
 * TRL recognises a template by exact text against the revisions it ships. envtrain recognises the Qwen3 family by
 * what it renders: on conversations where Qwen3's own template and its training variant agree (tools, a system
 * message, tool calls with reasoning, grouped tool results, thinking on and off), the model's template must render
 * exactly what the training template renders. So every revision of Qwen3's template that renders like Qwen3 is
 * swapped, including ones TRL does not list (TRL raises for those).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { TrainingTemplate } from "@envtrain/rollout"
 *
 * // the template the run renders with: the model's own when it is prefix-preserving, else Qwen3's training one
 * const template = TrainingTemplate.resolve(modelTemplate, tokenizer)
 * ```
 *
 * @since 0.0.0
 */
import {
  type ChatMessage,
  ChatTemplate,
  type ChatTemplateError,
  QWEN3_STYLE_TEMPLATE,
  type RenderOptions,
  type ToolDefinition
} from "@envtrain/text/ChatTemplate"
import { Effect, Option } from "effect"

/** What the check needs of a tokenizer. */
export interface Encoder {
  readonly encode: (text: string) => Array<number>
}

const dummyCall = [{ type: "function" as const, function: { name: "dummy", arguments: {} } }]
const toolCallTurn: ReadonlyArray<ChatMessage> = [
  { role: "user", content: "dummy" },
  { role: "assistant", content: "", tool_calls: dummyCall }
]

/**
 * TRL's `is_chat_template_prefix_preserving`: the ids of `[user, assistant(tool call)]` are a prefix of the ids of
 * the same plus a tool result, with the generation prompt (rendered without template kwargs, as TRL does).
 */
export const isPrefixPreserving = (
  template: ChatTemplate,
  tokenizer: Encoder
): Effect.Effect<boolean, ChatTemplateError> =>
  Effect.gen(function*() {
    const before = tokenizer.encode(yield* template.render({ messages: toolCallTurn }))
    const after = tokenizer.encode(
      yield* template.render({
        messages: [...toolCallTurn, { role: "tool", name: "dummy", content: "dummy" }],
        addGenerationPrompt: true
      })
    )
    return before.every((id, i) => after[i] === id)
  })

const probeTools: ReadonlyArray<ToolDefinition> = [{
  type: "function",
  function: {
    name: "probe",
    description: "A probe.",
    parameters: { type: "object", properties: { x: { type: "integer", description: "X." } }, required: ["x"] }
  }
}]

// Conversations Qwen3's own template and its training variant render alike: every assistant turn comes after the
// last user query and has reasoning (or is the last message), so the original keeps its think block too.
const probes: ReadonlyArray<RenderOptions> = [
  {
    messages: [{ role: "system", content: "S" }, { role: "user", content: "U" }],
    tools: probeTools,
    addGenerationPrompt: true,
    enableThinking: false
  },
  {
    messages: [
      { role: "user", content: "U" },
      {
        role: "assistant",
        content: "C",
        reasoning_content: "R",
        tool_calls: [{ type: "function", function: { name: "probe", arguments: { x: 1 } } }]
      },
      { role: "tool", name: "probe", content: "X" },
      { role: "tool", name: "probe", content: "Y" },
      { role: "assistant", content: "", reasoning_content: "R2", tool_calls: dummyCall },
      { role: "tool", name: "dummy", content: "Z" }
    ],
    tools: probeTools,
    addGenerationPrompt: true
  },
  { messages: [{ role: "user", content: "U" }], addGenerationPrompt: true },
  {
    messages: [
      { role: "system", content: "S" },
      { role: "user", content: "U" },
      { role: "assistant", content: "<think>\nR\n</think>\n\nA" }
    ]
  }
]

/** envtrain's Qwen3 training template (output-identical to TRL's `qwen3_training.jinja`). */
export const qwen3Training: Effect.Effect<ChatTemplate, ChatTemplateError> = ChatTemplate.fromString(
  QWEN3_STYLE_TEMPLATE,
  {},
  "envtrain's Qwen3 training template"
)

/**
 * The training template for a template that is not prefix-preserving: Qwen3's when the template renders as
 * Qwen3's does (see the module note), else none.
 */
export const trainingTemplateFor = (
  template: ChatTemplate
): Effect.Effect<Option.Option<ChatTemplate>, ChatTemplateError> =>
  Effect.gen(function*() {
    const training = yield* qwen3Training
    for (const probe of probes) {
      const theirs = yield* Effect.option(template.render(probe))
      if (Option.isNone(theirs) || theirs.value !== (yield* training.render(probe))) return Option.none()
    }
    return Option.some(training)
  })

/**
 * The template a run renders with: the model's own when it is prefix-preserving (or when no training template is
 * known for it, which then fails the first tool result with `TemplateNotPrefixStable`), else the training template.
 */
export const resolve = (
  template: ChatTemplate,
  tokenizer: Encoder
): Effect.Effect<ChatTemplate, ChatTemplateError> =>
  Effect.gen(function*() {
    if (yield* isPrefixPreserving(template, tokenizer)) return template
    const training = yield* trainingTemplateFor(template)
    if (Option.isNone(training)) return template
    yield* Effect.logInfo(
      "The model's chat template is not prefix-preserving (it re-renders earlier assistant turns once a tool " +
        "result follows); rendering with the Qwen3 training template, as TRL does (keepModelTemplate keeps it)."
    )
    return training.value
  })
