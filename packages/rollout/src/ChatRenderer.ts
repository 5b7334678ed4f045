/**
 * Chat rendering for rollouts: the model's tokenizer and chat template, with the template kwargs of the run
 * (`enable_thinking`, `chat_template_kwargs`). It renders the first prompt (tools included) and the token suffix
 * that follows a model turn with tool results, the way TRL's `_get_tool_suffix_ids` does: render a fixed
 * `[user, assistant(tool call)]` conversation, cut it right after its end-of-turn token, render it again with the
 * tool messages and the generation prompt, check the first is a prefix of the second, and keep the rest. Earlier
 * turns are never rendered or tokenised again. A model template that is not prefix-preserving (Qwen3's own) is
 * replaced by its training template on first use, as TRL does (`TrainingTemplate`); `keepModelTemplate` keeps it.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ChatRenderer } from "@envtrain/rollout"
 *
 * const RendererLive = ChatRenderer.ChatRenderer.layer({ tokenizer, template, enableThinking: false })
 * const ids = Effect.flatMap(ChatRenderer.ChatRenderer, (r) => r.promptIds([{ role: "user", content: "Hi" }], tools))
 * ```
 *
 * @since 0.0.0
 */
import type {
  ChatMessage,
  ChatTemplate,
  ChatTemplateError,
  RenderOptions,
  ToolDefinition
} from "@envtrain/text/ChatTemplate"
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import { Context, Data, Effect, Layer } from "effect"
import * as FastCodec from "./internal/fastCodec.js"
import * as TrainingTemplate from "./TrainingTemplate.js"

/** The template renders a conversation differently once a turn follows it, so appended tokens would drift. */
export class TemplateNotPrefixStable extends Data.TaggedError("TemplateNotPrefixStable")<{
  readonly prefix: string
  readonly rendered: string
}> {
  override get message() {
    let i = 0
    while (i < this.prefix.length && this.prefix[i] === this.rendered[i]) i++
    return `The chat template is not prefix-stable: rendering a tool-call turn followed by tool results changes the ` +
      `tool-call turn (first difference at character ${i}: ${JSON.stringify(this.prefix.slice(i, i + 40))} vs ` +
      `${JSON.stringify(this.rendered.slice(i, i + 40))}). Use a training template that renders every assistant turn ` +
      `the same way wherever it stands (envtrain's QWEN3_STYLE_TEMPLATE, or TRL's qwen3_training.jinja). envtrain ` +
      `swaps one in by itself only for Qwen3-family templates, and not when keepModelTemplate is set.`
  }
}

/** Options of {@link make}. */
export interface ChatRendererOptions {
  readonly tokenizer: Tokenizer
  readonly template: ChatTemplate
  /** `enable_thinking` for every render (Qwen3: false puts an empty think block in the generation prompt). */
  readonly enableThinking?: boolean
  /** Other `chat_template_kwargs`. */
  readonly extra?: Readonly<Record<string, unknown>>
  /**
   * Render with the model's template even when it is not prefix-preserving (the first tool result then fails with
   * {@link TemplateNotPrefixStable}). Default false: such a template is replaced by its training template, as TRL's
   * `get_training_chat_template` does (Qwen3's own becomes Qwen3's training template).
   */
  readonly keepModelTemplate?: boolean
}

/** Rendering and tokenisation for the episode loop. */
export interface Renderer {
  readonly tokenizer: Tokenizer
  readonly enableThinking: boolean
  /** Token ids that end an assistant turn (EOS, `<|im_end|>`, `<|endoftext|>`). */
  readonly eosTokenIds: ReadonlyArray<number>
  /** Their texts, stripped from a decoded turn before parsing. */
  readonly stopStrings: ReadonlyArray<string>
  /** The first prompt: `messages` with `tools`, plus the generation prompt. */
  readonly promptIds: (
    messages: ReadonlyArray<ChatMessage>,
    tools: ReadonlyArray<ToolDefinition>
  ) => Effect.Effect<Array<number>, ChatTemplateError>
  /** Tokens that follow a model turn ending in EOS: the tool messages, then the next generation prompt. */
  readonly toolSuffixIds: (
    toolMessages: ReadonlyArray<ChatMessage>
  ) => Effect.Effect<Array<number>, ChatTemplateError | TemplateNotPrefixStable>
  /** Decoded text of ids, special tokens kept. */
  readonly decode: (ids: ReadonlyArray<number>) => string
}

interface Frame {
  readonly pieces: ReadonlyArray<string>
  checksLeft: number
  /** Encodes the text spliced from contents (set on the first checked use). */
  encode?: FastCodec.Framed
}

const contentsOf = (messages: ReadonlyArray<ChatMessage>): Array<string> => {
  const out = new Array<string>(messages.length)
  for (let i = 0; i < messages.length; i++) out[i] = messages[i].content
  return out
}

// How many recent prompts' ids are kept (oldest dropped first); a few groups in flight at once.
const RECENT_PROMPTS = 64

const sentinel = (i: number) => `\u0001envtrain-content-${i}\u0001`

const withSentinels = (messages: ReadonlyArray<ChatMessage>): Array<ChatMessage> =>
  messages.map((m, i) => ({ ...m, content: sentinel(i) }))

// Cuts a text rendered with sentinel contents into the pieces around them (null if a sentinel is missing).
const cut = (text: string, count: number): Frame | null => {
  const pieces: Array<string> = []
  let rest = text
  for (let i = 0; i < count; i++) {
    const at = rest.indexOf(sentinel(i))
    if (at < 0) return null
    pieces.push(rest.slice(0, at))
    rest = rest.slice(at + sentinel(i).length)
  }
  pieces.push(rest)
  return { pieces, checksLeft: 8 }
}

const splice = (frame: Frame, messages: ReadonlyArray<ChatMessage>): string => {
  let text = frame.pieces[0]
  for (let i = 0; i < messages.length; i++) text += messages[i].content + frame.pieces[i + 1]
  return text
}

// A key per tool definition object, so a prompt's frame is found without serialising its tools each episode
// (environments hand out the same definition objects; other objects are keyed by their JSON).
const toolKeys = new WeakMap<object, string>()
let toolKeyCount = 0
const jsonKeys = new Map<string, string>()
const toolKey = (tool: ToolDefinition): string => {
  let key = toolKeys.get(tool)
  if (key === undefined) {
    const json = JSON.stringify(tool)
    key = jsonKeys.get(json)
    if (key === undefined) {
      key = `t${toolKeyCount++}`
      jsonKeys.set(json, key)
    }
    toolKeys.set(tool, key)
  }
  return key
}
const toolsKey = (tools: ReadonlyArray<ToolDefinition>): string => {
  let key = ""
  for (const t of tools) key += toolKey(t) + ","
  return key
}

/** The renderer service of a run. */
export class ChatRenderer extends Context.Tag("@envtrain/rollout/ChatRenderer")<ChatRenderer, Renderer>() {
  static readonly layer = (options: ChatRendererOptions): Layer.Layer<ChatRenderer> =>
    Layer.sync(ChatRenderer, () => make(options))
}

/** Makes a renderer from a loaded tokenizer and chat template. */
export const make = (options: ChatRendererOptions): Renderer => {
  const { tokenizer } = options
  // The template the run renders with, decided on the first render.
  let chosen: ChatTemplate | undefined
  const resolveTemplate = options.keepModelTemplate === true
    ? Effect.succeed(options.template)
    : TrainingTemplate.resolve(options.template, tokenizer)
  const active = Effect.suspend(() =>
    chosen !== undefined ? Effect.succeed(chosen) : Effect.map(resolveTemplate, (t) => {
      chosen = t
      return t
    })
  )
  const template = {
    render: (o: RenderOptions) => Effect.flatMap(active, (t) => t.render(o))
  }
  const kwargs = {
    ...(options.enableThinking === undefined ? {} : { enableThinking: options.enableThinking }),
    ...(options.extra === undefined ? {} : { extra: options.extra })
  }
  const codec = FastCodec.make(tokenizer)
  const eosTokenIds = tokenizer.eosTokenIds
  const stopStrings = eosTokenIds.map((id) => tokenizer.idToToken(id)).filter((s): s is string => s !== undefined)
  // The fixed context the suffix is measured against (TRL uses the first real tool name; any name works because
  // only the part after the assistant's end-of-turn token is kept).
  const dummy: ReadonlyArray<ChatMessage> = [
    { role: "user", content: "dummy" },
    { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "dummy", arguments: {} } }] }
  ]
  let prefix: string | undefined
  const prefixText = Effect.gen(function*() {
    if (prefix !== undefined) return prefix
    const full = yield* template.render({ messages: dummy, addGenerationPrompt: false, ...kwargs })
    let cut = -1
    for (const s of stopStrings) cut = Math.max(cut, full.lastIndexOf(s) >= 0 ? full.lastIndexOf(s) + s.length : -1)
    prefix = cut < 0 ? full : full.slice(0, cut)
    return prefix
  })
  // The suffix text after the dummy prefix, checked to be a prefix extension.
  const suffixText = (toolMessages: ReadonlyArray<ChatMessage>) =>
    Effect.gen(function*() {
      const a = yield* prefixText
      const b = yield* template.render({ messages: [...dummy, ...toolMessages], addGenerationPrompt: true, ...kwargs })
      if (!b.startsWith(a)) return yield* new TemplateNotPrefixStable({ prefix: a, rendered: b })
      return b.slice(a.length)
    })
  // Rendering the template costs ~0.1 ms, a large part of a remote environment step. The suffix of a given list of
  // tool messages (roles and names) is the same text around their contents, so it is rendered once with sentinel
  // contents and cut into pieces; contents are then spliced in.
  const frames = new Map<string, Frame | null>()
  const promptFrames = new Map<string, Frame | null>()
  const recentPrompts = new Map<string, Array<number>>()
  const makeFrame = (toolMessages: ReadonlyArray<ChatMessage>) =>
    Effect.map(suffixText(withSentinels(toolMessages)), (text) => cut(text, toolMessages.length))
  return {
    tokenizer,
    enableThinking: options.enableThinking ?? true,
    eosTokenIds,
    stopStrings,
    promptIds: (messages, tools) => {
      // Prompts of a run share their tools and message roles; only contents differ. Same frame idea as the
      // tool suffixes: render once with sentinel contents, splice contents in, check the first uses.
      let key = toolsKey(tools)
      for (const m of messages) key += "|" + m.role
      const frame = promptFrames.get(key)
      // Hot path: a checked frame gives the ids without rendering (and without a generator). The G episodes of a
      // group send the same prompt (and usually the same reset observation): the last prompts' ids are kept and
      // shared (callers treat them as read-only).
      if (frame !== undefined && frame !== null && frame.checksLeft === 0) {
        const contents = contentsOf(messages)
        // Length-prefixed, so no two content lists share a key whatever characters they hold.
        let memoKey = key
        for (const c of contents) memoKey += "\u0000" + c.length + ":" + c
        let ids = recentPrompts.get(memoKey)
        if (ids === undefined) {
          ids = (frame.encode ??= codec.framed(frame.pieces)).encode(contents)
          if (recentPrompts.size >= RECENT_PROMPTS) recentPrompts.delete(recentPrompts.keys().next().value!)
          recentPrompts.set(memoKey, ids)
        }
        return Effect.succeed(ids)
      }
      return Effect.gen(function*() {
        const render = (ms: ReadonlyArray<ChatMessage>) =>
          template.render({ messages: ms, tools, addGenerationPrompt: true, ...kwargs })
        let frame = promptFrames.get(key)
        if (frame === undefined) {
          const plain = messages.every((m) => m.tool_calls === undefined && m.reasoning_content === undefined)
          frame = plain ? cut(yield* render(withSentinels(messages)), messages.length) : null
          if (promptFrames.size >= 256) promptFrames.clear()
          promptFrames.set(key, frame)
        }
        if (frame === null) return codec.encode(yield* render(messages))
        let text = splice(frame, messages)
        if (frame.checksLeft > 0) {
          frame.checksLeft--
          const full = yield* render(messages)
          if (full !== text) {
            promptFrames.set(key, null)
            text = full
          }
        }
        return codec.encode(text)
      })
    },
    toolSuffixIds: (toolMessages) => {
      let key = ""
      for (const m of toolMessages) key += `${m.role}:${m.name ?? ""}|`
      const ready = frames.get(key)
      // The text follows an end-of-turn token, which the tokenizer always splits on (an added token), so the ids
      // of the whole conversation are the ids before it followed by the ids of this text.
      if (ready !== undefined && ready !== null && ready.checksLeft === 0) {
        return Effect.succeed((ready.encode ??= codec.framed(ready.pieces)).encode(contentsOf(toolMessages)))
      }
      return Effect.gen(function*() {
        let frame = frames.get(key)
        if (frame === undefined) {
          frame = yield* makeFrame(toolMessages)
          frames.set(key, frame)
        }
        let text: string
        if (frame === null) text = yield* suffixText(toolMessages)
        else {
          text = splice(frame, toolMessages)
          if (frame.checksLeft > 0) {
            // The first uses of a frame are checked against a full render; a template that treats contents
            // specially falls back to rendering every time.
            frame.checksLeft--
            const full = yield* suffixText(toolMessages)
            if (full !== text) {
              frames.set(key, null)
              text = full
            }
          }
        }
        return codec.encode(text)
      })
    },
    decode: codec.decode
  }
}
