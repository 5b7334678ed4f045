/**
 * Chat templates: the Jinja program in `tokenizer_config.json` (`chat_template`) or `chat_template.jinja`,
 * rendered with `@huggingface/jinja` with `messages`, `tools`, `add_generation_prompt` and `enable_thinking`, as
 * transformers' `apply_chat_template` does. {@link QWEN3_STYLE_TEMPLATE} is envtrain's own Qwen3-style template,
 * used by the models `envtrain init-model` makes.
 *
 * Renders are byte-identical to transformers' on Qwen3's own template (interop/test/Qwen3Tokenizer.test.ts), except
 * where JavaScript values cannot say what Python's did: under `tojson`, an integer-valued float prints as an
 * integer (`1`, not `1.0`), a float below 1e-4 in JavaScript's form (`0.00001` and `1e-7`, not `1e-05` and `1e-07`),
 * and integer-like object keys come first. Tool-call `arguments` given as JSON text render verbatim.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ChatTemplate } from "@envtrain/text"
 *
 * const program = Effect.gen(function*() {
 *   const template = yield* ChatTemplate.ChatTemplate.fromString(ChatTemplate.QWEN3_STYLE_TEMPLATE)
 *   const prompt = yield* template.render({
 *     messages: [{ role: "user", content: "Guess the word." }],
 *     tools: [{ type: "function", function: { name: "guess", description: "Make a guess.", parameters: {} } }],
 *     addGenerationPrompt: true,
 *     enableThinking: false
 *   })
 * })
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Template } from "@huggingface/jinja"
import { Data, Effect } from "effect"
import { QWEN3_STYLE_TEMPLATE } from "./internal/qwen3Template.js"

export { QWEN3_STYLE_TEMPLATE }

/** A tool call in an assistant message (OpenAI/transformers shape). `arguments` may be an object or JSON text. */
export interface ToolCall {
  readonly type?: "function"
  readonly id?: string
  readonly function: {
    readonly name: string
    readonly arguments: Readonly<Record<string, unknown>> | string
  }
}

/** One chat message. */
export interface ChatMessage {
  readonly role: "system" | "user" | "assistant" | "tool"
  readonly content: string
  /** Assistant reasoning, rendered inside `<think>` (otherwise taken from `<think>…</think>` in `content`). */
  readonly reasoning_content?: string
  readonly tool_calls?: ReadonlyArray<ToolCall>
  /** Tool name for `tool` messages (ignored by Qwen templates). */
  readonly name?: string
  readonly tool_call_id?: string
}

/** A tool in the JSON-schema form transformers passes to templates: `{ type: "function", function: {...} }`. */
export type ToolDefinition = Readonly<Record<string, unknown>>

/** What to render. */
export interface RenderOptions {
  readonly messages: ReadonlyArray<ChatMessage>
  /** Tools; an empty list renders like none (as TRL passes `tools=None`). */
  readonly tools?: ReadonlyArray<ToolDefinition>
  /** Append the assistant header so the model continues with its answer. Default false. */
  readonly addGenerationPrompt?: boolean
  /** Qwen3: false appends an empty think block to the generation prompt. Undefined leaves it out of the context. */
  readonly enableThinking?: boolean
  /** Any other template variables (`chat_template_kwargs`). */
  readonly extra?: Readonly<Record<string, unknown>>
}

/** The template could not be found, parsed or rendered. */
export class ChatTemplateError extends Data.TaggedError("ChatTemplateError")<{
  readonly source: string
  readonly problem: string
}> {
  override get message() {
    return `Chat template (${this.source}): ${this.problem}`
  }
}

/** A parsed chat template. */
export class ChatTemplate {
  private constructor(
    /** The Jinja source, saved back unchanged. */
    readonly source: string,
    private readonly template: Template,
    /** Variables every render gets (special token strings from tokenizer_config.json). */
    private readonly defaults: Readonly<Record<string, unknown>>,
    private readonly label: string
  ) {}

  /** Parse a template. `defaults` are variables such as `bos_token`/`eos_token`. */
  static fromString(
    source: string,
    defaults: Readonly<Record<string, unknown>> = {},
    label = "chat template"
  ): Effect.Effect<ChatTemplate, ChatTemplateError> {
    return Effect.try({
      try: () => new ChatTemplate(source, new Template(source), defaults, label),
      catch: (e) => new ChatTemplateError({ source: label, problem: `cannot parse: ${(e as Error).message}` })
    })
  }

  /**
   * Pick the template out of a tokenizer_config.json object: `chat_template` as a string, or the list form
   * `[{ name, template }]` (the "tool_use" entry when `preferTools`, else "default").
   */
  static fromTokenizerConfig(
    config: Readonly<Record<string, unknown>>,
    options: { readonly preferTools?: boolean; readonly label?: string } = {}
  ): Effect.Effect<ChatTemplate, ChatTemplateError> {
    const label = options.label ?? "tokenizer_config.json"
    const t = config.chat_template
    let source: string | undefined
    if (typeof t === "string") source = t
    else if (Array.isArray(t)) {
      const named = new Map(t.map((x: { name?: unknown; template?: unknown }) => [x.name, x.template]))
      const chosen = (options.preferTools ? named.get("tool_use") : undefined) ?? named.get("default")
      if (typeof chosen === "string") source = chosen
    }
    if (source === undefined) {
      return Effect.fail(
        new ChatTemplateError({
          source: label,
          problem: `no "chat_template" string found. Add one, or write chat_template.jinja next to it.`
        })
      )
    }
    return ChatTemplate.fromString(source, specialTokenStrings(config), label)
  }

  /**
   * Load from a model directory: `chat_template.jinja` if present (newer transformers save it there), else
   * `chat_template` in `tokenizer_config.json`.
   */
  static load(dir: string): Effect.Effect<ChatTemplate, ChatTemplateError, FileSystem.FileSystem | Path.Path> {
    return Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const fail = (file: string) => (e: { message: string }) =>
        new ChatTemplateError({ source: file, problem: e.message })
      const configPath = path.join(dir, "tokenizer_config.json")
      let config: Record<string, unknown> = {}
      if (yield* fs.exists(configPath).pipe(Effect.mapError(fail(configPath)))) {
        const text = yield* fs.readFileString(configPath).pipe(Effect.mapError(fail(configPath)))
        config = yield* Effect.try({ try: () => JSON.parse(text), catch: (e) => fail(configPath)(e as Error) })
      }
      const jinjaPath = path.join(dir, "chat_template.jinja")
      if (yield* fs.exists(jinjaPath).pipe(Effect.mapError(fail(jinjaPath)))) {
        const source = yield* fs.readFileString(jinjaPath).pipe(Effect.mapError(fail(jinjaPath)))
        return yield* ChatTemplate.fromString(source, specialTokenStrings(config), jinjaPath)
      }
      return yield* ChatTemplate.fromTokenizerConfig(config, { label: configPath })
    })
  }

  /** Render a conversation to text. */
  render(options: RenderOptions): Effect.Effect<string, ChatTemplateError> {
    return Effect.try({
      try: () => this.renderUnsafe(options),
      catch: (e) => new ChatTemplateError({ source: this.label, problem: `cannot render: ${(e as Error).message}` })
    })
  }

  /** Render, throwing on template errors. For hot paths after the template has been exercised once. */
  renderUnsafe(options: RenderOptions): string {
    const context: Record<string, unknown> = {
      ...this.defaults,
      ...options.extra,
      messages: options.messages,
      add_generation_prompt: options.addGenerationPrompt ?? false
    }
    if (options.tools && options.tools.length > 0) context.tools = options.tools
    if (options.enableThinking !== undefined) context.enable_thinking = options.enableThinking
    return this.template.render(context)
  }
}

const specialTokenStrings = (config: Readonly<Record<string, unknown>>): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const key of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
    const v = config[key]
    const s = typeof v === "string" ? v : typeof v === "object" && v !== null && "content" in v ? v.content : null
    if (typeof s === "string") out[key] = s
  }
  return out
}
