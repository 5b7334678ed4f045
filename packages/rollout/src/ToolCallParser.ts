/**
 * Parsing an assistant turn in the Qwen3 / Hermes format: optional `<think>…</think>` reasoning, any number of
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks, and the remaining text as content.
 *
 * Unlike TRL (which drops every tool call of a turn when one of them does not parse, silently ending the rollout),
 * a malformed call becomes a {@link CallFailure} whose `message` tells the model what was wrong; the episode loop
 * sends it back as a tool result and counts it as a tool failure.
 *
 * @example
 * ```ts
 * import { ToolCallParser } from "@envtrain/rollout"
 *
 * const turn = ToolCallParser.parse(
 *   "<tool_call>\n{\"name\": \"guess\", \"arguments\": {\"guess\": \"[crane]\"}}\n</tool_call><|im_end|>",
 *   { thinking: false, stopStrings: ["<|im_end|>"] }
 * )
 * turn.calls // [{ _tag: "Call", name: "guess", arguments: { guess: "[crane]" }, ... }]
 * ```
 *
 * @since 0.0.0
 */
import { pythonJson } from "@envtrain/env/Tool"
import { isSpace } from "./internal/fastCodec.js"

/** A well-formed tool call. */
export interface Call {
  readonly _tag: "Call"
  readonly name: string
  readonly arguments: Readonly<Record<string, unknown>>
  /** Position of the call among all `<tool_call>` blocks of the turn (well-formed or not). */
  readonly index: number
}

/** Why a `<tool_call>` block could not be used. */
export type FailureReason = "malformed_json" | "not_an_object" | "missing_name" | "invalid_arguments" | "unterminated"

/** A `<tool_call>` block that could not be parsed; `message` is the text the model sees. */
export interface CallFailure {
  readonly _tag: "CallFailure"
  readonly reason: FailureReason
  /** The tool name, when the block named one (failures are counted per tool name). */
  readonly name: string | undefined
  /** The raw text between the tags. */
  readonly raw: string
  readonly message: string
  readonly index: number
}

/** A parsed assistant turn. `calls` and `failures` together list every `<tool_call>` block, in `index` order. */
export interface ParsedTurn {
  /** The `<think>` text, when there is one (`undefined` when the turn has no reasoning block). */
  readonly reasoning: string | undefined
  /** Text outside the reasoning and tool-call blocks, trimmed, without the stop string. */
  readonly content: string
  readonly calls: ReadonlyArray<Call>
  readonly failures: ReadonlyArray<CallFailure>
  /** True when the turn contained at least one `<tool_call>` opening tag (parsable or not). */
  readonly requestedTools: boolean
}

/** Options of {@link parse}. */
export interface ParseOptions {
  /**
   * `enable_thinking`. With either value a leading `<think>…</think>` block is split out as reasoning and a
   * leading `<think>` that never closes (the turn ran out of tokens) makes the whole turn reasoning. When true,
   * text before a `</think>` without an opening tag is reasoning too (templates that open the block in the
   * generation prompt); when false such a stray tag stays in the content.
   */
  readonly thinking: boolean
  /** End-of-turn strings removed from the end of the text (e.g. `<|im_end|>`, `<|endoftext|>`). */
  readonly stopStrings?: ReadonlyArray<string>
}

const OPEN = "<tool_call>"
const CLOSE = "</tool_call>"
const THINK_OPEN = "<think>"
const THINK_CLOSE = "</think>"

const FORMAT_HINT =
  "Write each call as <tool_call>\n{\"name\": <tool-name>, \"arguments\": <args-json-object>}\n</tool_call>."

/** Splits reasoning, tool calls and content out of the decoded text of one assistant turn. Never throws. */
export const parse = (text: string, options: ParseOptions): ParsedTurn => {
  let body = stripStops(text, options.stopStrings ?? [])
  let reasoning: string | undefined
  const close = body.indexOf(THINK_CLOSE)
  const open = body.indexOf(THINK_OPEN)
  if (close >= 0 && (open < 0 || open < close)) {
    const start = open >= 0 ? open + THINK_OPEN.length : 0
    // With thinking off a stray `</think>` with no opening tag is content, not reasoning.
    if (open >= 0 || options.thinking) {
      reasoning = body.slice(start, close).trim()
      body = body.slice(0, open >= 0 ? open : 0) + body.slice(close + THINK_CLOSE.length)
    }
  } else if (open >= 0 && body.slice(0, open).trim() === "") {
    // Thinking never ended (the turn ran out of tokens inside the reasoning): it is all reasoning.
    return {
      reasoning: body.slice(open + THINK_OPEN.length).trim(),
      content: "",
      calls: [],
      failures: [],
      requestedTools: false
    }
  }

  const calls: Array<Call> = []
  const failures: Array<CallFailure> = []
  let content = ""
  let cursor = 0
  let index = 0
  while (true) {
    const at = body.indexOf(OPEN, cursor)
    if (at < 0) {
      content += body.slice(cursor)
      break
    }
    content += body.slice(cursor, at)
    const inner = at + OPEN.length
    const block = findBlock(body, inner)
    if (block === undefined) {
      const raw = body.slice(inner)
      failures.push(failure("unterminated", nameHint(raw), raw, index))
      break
    }
    const result = interpret(block.raw, block.json, index)
    if (result._tag === "Call") calls.push(result)
    else failures.push(result)
    index++
    cursor = block.end
  }
  return { reasoning, content: content.trim(), calls, failures, requestedTools: index > 0 || failures.length > 0 }
}

// Index arithmetic rather than trimming and slicing in a loop (each pass allocated a string, on every model turn).
const stripStops = (text: string, stops: ReadonlyArray<string>): string => {
  let end = text.length
  let changed = true
  while (changed) {
    changed = false
    let trimmed = end
    while (trimmed > 0 && isSpace(text.charCodeAt(trimmed - 1))) trimmed--
    for (const stop of stops) {
      const at = trimmed - stop.length
      if (stop.length > 0 && at >= 0 && text.startsWith(stop, at)) {
        end = at
        changed = true
      }
    }
  }
  return end === text.length ? text : text.slice(0, end)
}

// A JSON string may itself contain "</tool_call>", so take the first closing tag whose inner text parses, falling
// back to the first closing tag (reported as malformed).
const findBlock = (
  body: string,
  inner: number
):
  | { readonly raw: string; readonly json: { ok: true; value: unknown } | { ok: false; error: string }; end: number }
  | undefined =>
{
  let close = body.indexOf(CLOSE, inner)
  if (close < 0) return undefined
  const first = close
  while (close >= 0) {
    const raw = body.slice(inner, close)
    const json = tryJson(raw)
    if (json.ok) return { raw, json, end: close + CLOSE.length }
    // Another `<tool_call>` before the next close means this block really ended here.
    const next = body.indexOf(CLOSE, close + CLOSE.length)
    if (next < 0 || body.slice(close, next).includes(OPEN)) break
    close = next
  }
  const raw = body.slice(inner, first)
  return { raw, json: tryJson(raw), end: first + CLOSE.length }
}

// JSON.parse skips JSON's own whitespace around the value, so the usual block ("\n{…}\n") parses without a trimmed
// copy. Only when that fails is the text trimmed (of any whitespace) and parsed again: the error message then counts
// positions from the JSON's first character, which is what the model is told.
const tryJson = (raw: string): { ok: true; value: unknown } | { ok: false; error: string } => {
  try {
    return { ok: true, value: JSON.parse(raw) }
  } catch {
    try {
      return { ok: true, value: JSON.parse(raw.trim()) }
    } catch (e) {
      return { ok: false, error: e instanceof Error ? e.message : String(e) }
    }
  }
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const interpret = (
  raw: string,
  json: { ok: true; value: unknown } | { ok: false; error: string },
  index: number
): Call | CallFailure => {
  if (!json.ok) return failure("malformed_json", nameHint(raw), raw, index, json.error)
  const value = json.value
  if (!isObject(value)) return failure("not_an_object", undefined, raw, index, describe(value))
  const name = value.name
  if (typeof name !== "string" || name.length === 0) {
    return failure("missing_name", undefined, raw, index, name === undefined ? "no \"name\" key" : describe(name))
  }
  const args = value.arguments
  if (args === undefined || args === null) return { _tag: "Call", name, arguments: {}, index }
  if (!isObject(args)) return failure("invalid_arguments", name, raw, index, describe(args))
  return { _tag: "Call", name, arguments: args, index }
}

const describe = (u: unknown): string =>
  u === null ? "null" : Array.isArray(u) ? "an array" : typeof u === "string" ? "a string" : `a ${typeof u}`

// Best effort: a name in malformed JSON still lets failures be counted per tool.
const nameHint = (raw: string): string | undefined => /"name"\s*:\s*"([^"\\]{1,128})"/.exec(raw)?.[1]

const failure = (
  reason: FailureReason,
  name: string | undefined,
  raw: string,
  index: number,
  detail?: string
): CallFailure => ({ _tag: "CallFailure", reason, name, raw, index, message: messageFor(reason, name, detail) })

const messageFor = (reason: FailureReason, name: string | undefined, detail: string | undefined): string => {
  const which = name === undefined ? "Tool call" : `Tool call '${name}'`
  switch (reason) {
    case "malformed_json":
      return `${which} is not valid JSON (${detail}). ${FORMAT_HINT}`
    case "not_an_object":
      return `Tool call must be a JSON object with "name" and "arguments", got ${detail}. ${FORMAT_HINT}`
    case "missing_name":
      return `Tool call has no tool name (${detail}): "name" must be a non-empty string. ${FORMAT_HINT}`
    case "invalid_arguments":
      return `${which} has "arguments" that are ${detail}; "arguments" must be a JSON object of parameter values. ${FORMAT_HINT}`
    case "unterminated":
      return `${which} was not closed with </tool_call>. ${FORMAT_HINT}`
  }
}

/** Renders tool calls the way the Qwen3 template renders them (Python `json.dumps` separators). */
export const renderCalls = (
  calls: ReadonlyArray<{ readonly name: string; readonly arguments: Readonly<Record<string, unknown>> }>
): string => calls.map((c) => `${OPEN}\n${pythonJson({ name: c.name, arguments: c.arguments })}\n${CLOSE}`).join("\n")

/** Renders a whole assistant turn: optional reasoning block, content, then the calls (Qwen3 layout). */
export const renderTurn = (turn: {
  readonly reasoning?: string | undefined
  readonly content?: string
  readonly calls?: ReadonlyArray<{ readonly name: string; readonly arguments: Readonly<Record<string, unknown>> }>
}): string => {
  const think = turn.reasoning === undefined ? "" : `${THINK_OPEN}\n${turn.reasoning}\n${THINK_CLOSE}\n\n`
  const content = turn.content ?? ""
  const calls = turn.calls ?? []
  const sep = content.length > 0 && calls.length > 0 ? "\n" : ""
  return think + content + sep + renderCalls(calls)
}
