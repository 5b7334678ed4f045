// Anthropic Messages (`POST /v1/messages`): system prompt, user/assistant turns of content blocks (text, thinking,
// tool_use, tool_result) and tools with `input_schema`, read into chat completions; the reply rebuilt as content
// blocks with Anthropic's stop reasons, or as its named stream events.
import type { Captured, Dialect, SseEvent } from "./dialect.js"
import { argumentsObject, copySampling, DialectError, isObject, textOf } from "./dialect.js"

const TEXT = ["text"]

const toolResultText = (v: unknown, at: string): string => textOf(v, at, TEXT)

const userMessages = (content: unknown, at: string): Array<Record<string, unknown>> => {
  if (!Array.isArray(content)) return [{ role: "user", content: textOf(content, `${at}.content`, TEXT) }]
  const out: Array<Record<string, unknown>> = []
  const text: Array<string> = []
  content.forEach((block, j) => {
    const where = `${at}.content[${j}]`
    if (!isObject(block)) throw new DialectError(400, `${where} must be a content block`, where)
    if (block.type === "text" && typeof block.text === "string") text.push(block.text)
    else if (block.type === "tool_result" && typeof block.tool_use_id === "string") {
      // Tool results answer the previous assistant turn's calls, so they come before any new user text.
      out.push({ role: "tool", tool_call_id: block.tool_use_id, content: toolResultText(block.content, where) })
    } else {
      throw new DialectError(
        400,
        `${where}: block type ${JSON.stringify(block.type)} is not supported by the capture proxy (text, tool_result)`,
        where
      )
    }
  })
  if (text.length > 0) out.push({ role: "user", content: text.join("") })
  return out
}

const assistantMessage = (content: unknown, at: string): Record<string, unknown> => {
  if (!Array.isArray(content)) return { role: "assistant", content: textOf(content, `${at}.content`, TEXT) }
  const text: Array<string> = []
  const reasoning: Array<string> = []
  const calls: Array<Record<string, unknown>> = []
  content.forEach((block, j) => {
    const where = `${at}.content[${j}]`
    if (!isObject(block)) throw new DialectError(400, `${where} must be a content block`, where)
    if (block.type === "text" && typeof block.text === "string") text.push(block.text)
    else if (block.type === "thinking" && typeof block.thinking === "string") reasoning.push(block.thinking)
    else if (block.type === "redacted_thinking") return
    else if (block.type === "tool_use" && typeof block.id === "string" && typeof block.name === "string") {
      calls.push({
        id: block.id,
        type: "function",
        function: { name: block.name, arguments: JSON.stringify(isObject(block.input) ? block.input : {}) }
      })
    } else {
      throw new DialectError(
        400,
        `${where}: block type ${JSON.stringify(block.type)} is not supported by the capture proxy ` +
          `(text, thinking, tool_use)`,
        where
      )
    }
  })
  return {
    role: "assistant",
    content: text.join(""),
    ...(reasoning.length > 0 ? { reasoning_content: reasoning.join("") } : {}),
    ...(calls.length > 0 ? { tool_calls: calls } : {})
  }
}

const toolOf = (t: unknown, i: number) => {
  if (!isObject(t) || typeof t.name !== "string" || (t.type !== undefined && t.type !== "custom")) {
    throw new DialectError(
      400,
      `tools[${i}] must be a client tool {name, description, input_schema}; server tools are not supported`,
      "tools"
    )
  }
  return {
    type: "function",
    function: {
      name: t.name,
      ...(typeof t.description === "string" ? { description: t.description } : {}),
      parameters: isObject(t.input_schema) ? t.input_schema : { type: "object", properties: {} }
    }
  }
}

const toolChoice = (v: unknown) => {
  if (!isObject(v)) return undefined
  if (v.type === "auto") return "auto"
  if (v.type === "none") return "none"
  if (v.type === "any") return "required"
  if (v.type === "tool" && typeof v.name === "string") return { type: "function", function: { name: v.name } }
  throw new DialectError(400, `tool_choice type ${JSON.stringify(v.type)} is not one of auto, any, tool, none`)
}

const stopReason = (c: Captured) =>
  c.toolCalls.length > 0
    ? "tool_use"
    : c.finishReason === "length"
    ? "max_tokens"
    : typeof c.stopReason === "string"
    ? "stop_sequence"
    : "end_turn"

type Block =
  | { readonly type: "thinking"; readonly thinking: string }
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: Record<string, unknown> }

const blocks = (c: Captured): Array<Block> => [
  ...(c.reasoning === undefined ? [] : [{ type: "thinking" as const, thinking: c.reasoning }]),
  ...(c.content !== null && c.content.length > 0 ? [{ type: "text" as const, text: c.content }] : []),
  ...c.toolCalls.map((t) => ({
    type: "tool_use" as const,
    id: t.id,
    name: t.name,
    input: argumentsObject(t.arguments)
  }))
]

const withSignature = (b: Block) => b.type === "thinking" ? { ...b, signature: "" } : b

export const dialect: Dialect = {
  name: "anthropic-messages",
  doneMarker: false,
  read: (body) => {
    if (!isObject(body)) throw new DialectError(400, "The request body must be a JSON object.")
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new DialectError(400, "messages: a non-empty list of {role, content} is required", "messages")
    }
    const messages: Array<Record<string, unknown>> = []
    if (body.system !== undefined && body.system !== null) {
      messages.push({ role: "system", content: textOf(body.system, "system", TEXT) })
    }
    body.messages.forEach((m, i) => {
      const at = `messages[${i}]`
      if (!isObject(m) || (m.role !== "user" && m.role !== "assistant")) {
        throw new DialectError(400, `${at}.role must be "user" or "assistant"`, at)
      }
      if (m.role === "user") messages.push(...userMessages(m.content, at))
      else messages.push(assistantMessage(m.content, at))
    })
    const tools = body.tools === undefined || body.tools === null
      ? []
      : Array.isArray(body.tools)
      ? body.tools.map(toolOf)
      : (() => {
        throw new DialectError(400, "tools must be a list", "tools")
      })()
    const choice = toolChoice(body.tool_choice)
    return {
      chat: {
        ...(typeof body.model === "string" ? { model: body.model } : {}),
        messages,
        ...(tools.length > 0 ? { tools } : {}),
        ...(choice === undefined ? {} : { tool_choice: choice }),
        ...copySampling(body, {
          max_tokens: "max_tokens",
          temperature: "temperature",
          top_p: "top_p",
          top_k: "top_k",
          stop_sequences: "stop"
        })
      },
      stream: body.stream === true,
      wantsLogprobs: false,
      includeUsage: false
    }
  },
  reply: (c) => ({
    id: c.id,
    type: "message",
    role: "assistant",
    model: c.model,
    content: blocks(c).map(withSignature),
    stop_reason: stopReason(c),
    stop_sequence: typeof c.stopReason === "string" ? c.stopReason : null,
    usage: { input_tokens: c.promptIds.length, output_tokens: c.completionIds.length }
  }),
  stream: (c) => {
    const ev = (type: string, data: Record<string, unknown>): SseEvent => ({ event: type, data: { type, ...data } })
    const events: Array<SseEvent> = [
      ev("message_start", {
        message: {
          id: c.id,
          type: "message",
          role: "assistant",
          model: c.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: c.promptIds.length, output_tokens: 0 }
        }
      })
    ]
    blocks(c).forEach((b, index) => {
      if (b.type === "text") {
        events.push(ev("content_block_start", { index, content_block: { type: "text", text: "" } }))
        events.push(ev("content_block_delta", { index, delta: { type: "text_delta", text: b.text } }))
      } else if (b.type === "thinking") {
        events.push(ev("content_block_start", { index, content_block: { type: "thinking", thinking: "" } }))
        events.push(ev("content_block_delta", { index, delta: { type: "thinking_delta", thinking: b.thinking } }))
      } else {
        events.push(
          ev("content_block_start", { index, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } })
        )
        events.push(
          ev("content_block_delta", {
            index,
            delta: { type: "input_json_delta", partial_json: JSON.stringify(b.input) }
          })
        )
      }
      events.push(ev("content_block_stop", { index }))
    })
    events.push(ev("message_delta", {
      delta: { stop_reason: stopReason(c), stop_sequence: typeof c.stopReason === "string" ? c.stopReason : null },
      usage: { output_tokens: c.completionIds.length }
    }))
    events.push(ev("message_stop", {}))
    return events
  },
  error: (_status, message, kind) => ({
    type: "error",
    error: {
      type: kind === "auth"
        ? "authentication_error"
        : kind === "not_found"
        ? "not_found_error"
        : kind === "upstream"
        ? "api_error"
        : "invalid_request_error",
      message
    }
  })
}
