// OpenAI Responses (`POST /v1/responses`): `instructions` and `input` items (messages, function_call,
// function_call_output) read into chat completions; the reply rebuilt as output items (message, function_call),
// or as the Responses stream's typed events with sequence numbers. Stateless: `previous_response_id` is refused.
import type { Captured, Dialect, SseEvent } from "./dialect.js"
import { copySampling, DialectError, isObject, textOf } from "./dialect.js"

const PARTS = ["input_text", "output_text", "text"]
const ROLES = new Set(["user", "system", "developer", "assistant"])

const messagesOf = (body: Record<string, unknown>): Array<Record<string, unknown>> => {
  const out: Array<Record<string, unknown>> = []
  if (typeof body.instructions === "string" && body.instructions.length > 0) {
    out.push({ role: "system", content: body.instructions })
  }
  const input = body.input
  if (typeof input === "string") {
    out.push({ role: "user", content: input })
    return out
  }
  if (!Array.isArray(input) || input.length === 0) {
    throw new DialectError(400, "input must be a string or a non-empty list of items", "input")
  }
  input.forEach((item, i) => {
    const at = `input[${i}]`
    if (!isObject(item)) throw new DialectError(400, `${at} must be an object`, at)
    const type = item.type ?? "message"
    if (type === "message" && typeof item.role === "string" && ROLES.has(item.role)) {
      out.push({ role: item.role === "developer" ? "system" : item.role, content: textOf(item.content, at, PARTS) })
    } else if (type === "function_call" && typeof item.name === "string") {
      const call = {
        id: typeof item.call_id === "string" ? item.call_id : `call_${i}`,
        type: "function",
        function: { name: item.name, arguments: typeof item.arguments === "string" ? item.arguments : "{}" }
      }
      // Consecutive calls (and calls right after the assistant's text) are one assistant turn.
      const last = out[out.length - 1]
      if (last !== undefined && last.role === "assistant") {
        last.tool_calls = [...(Array.isArray(last.tool_calls) ? last.tool_calls : []), call]
      } else out.push({ role: "assistant", content: "", tool_calls: [call] })
    } else if (type === "function_call_output" && typeof item.call_id === "string") {
      out.push({ role: "tool", tool_call_id: item.call_id, content: textOf(item.output, `${at}.output`, PARTS) })
    } else if (type === "reasoning") {
      return
    } else {
      throw new DialectError(
        400,
        `${at}: item type ${JSON.stringify(type)} is not supported by the capture proxy ` +
          `(message, function_call, function_call_output, reasoning)`,
        at
      )
    }
  })
  return out
}

const toolOf = (t: unknown, i: number) => {
  if (!isObject(t) || t.type !== "function" || typeof t.name !== "string") {
    throw new DialectError(400, `tools[${i}] must be {type: "function", name, description, parameters}`, "tools")
  }
  return {
    type: "function",
    function: {
      name: t.name,
      ...(typeof t.description === "string" ? { description: t.description } : {}),
      parameters: isObject(t.parameters) ? t.parameters : { type: "object", properties: {} }
    }
  }
}

const toolChoice = (v: unknown) =>
  isObject(v) && v.type === "function" && typeof v.name === "string"
    ? { type: "function", function: { name: v.name } }
    : v

type Item = Record<string, unknown> & { readonly id: string; readonly type: string }

const items = (c: Captured): Array<Item> => {
  const out: Array<Item> = []
  if (c.content !== null && c.content.length > 0) {
    out.push({
      type: "message",
      id: `msg_${c.id}`,
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: c.content, annotations: [] }]
    })
  }
  c.toolCalls.forEach((t, i) =>
    out.push({
      type: "function_call",
      id: `fc_${c.id}_${i}`,
      call_id: t.id,
      name: t.name,
      arguments: t.arguments,
      status: "completed"
    })
  )
  return out
}

const response = (c: Captured, status: "in_progress" | "completed" | "incomplete", output: Array<Item>) => ({
  id: `resp_${c.id}`,
  object: "response",
  created_at: c.created,
  status,
  incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
  error: null,
  model: c.model,
  output,
  parallel_tool_calls: true,
  usage: status === "in_progress" ? null : {
    input_tokens: c.promptIds.length,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: c.completionIds.length,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: c.promptIds.length + c.completionIds.length
  }
})

const finalStatus = (c: Captured) => c.finishReason === "length" ? "incomplete" : "completed"

export const dialect: Dialect = {
  name: "openai-responses",
  doneMarker: false,
  read: (body) => {
    if (!isObject(body)) throw new DialectError(400, "The request body must be a JSON object.")
    if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
      throw new DialectError(
        400,
        "previous_response_id is not supported by the capture proxy (it keeps no response state): send the whole " +
          "conversation in input",
        "previous_response_id"
      )
    }
    const tools = Array.isArray(body.tools) ? body.tools.map(toolOf) : []
    return {
      chat: {
        ...(typeof body.model === "string" ? { model: body.model } : {}),
        messages: messagesOf(body),
        ...(tools.length > 0 ? { tools } : {}),
        ...(body.tool_choice === undefined ? {} : { tool_choice: toolChoice(body.tool_choice) }),
        ...copySampling(body, { max_output_tokens: "max_tokens", temperature: "temperature", top_p: "top_p" })
      },
      stream: body.stream === true,
      wantsLogprobs: false,
      includeUsage: false
    }
  },
  reply: (c) => ({ ...response(c, finalStatus(c), items(c)), output_text: c.content ?? "" }),
  stream: (c) => {
    let seq = 0
    const ev = (type: string, data: Record<string, unknown>): SseEvent => ({
      event: type,
      data: { type, sequence_number: seq++, ...data }
    })
    const all = items(c)
    const events: Array<SseEvent> = [
      ev("response.created", { response: response(c, "in_progress", []) }),
      ev("response.in_progress", { response: response(c, "in_progress", []) })
    ]
    all.forEach((item, output_index) => {
      if (item.type === "message") {
        const text = c.content ?? ""
        const part = { type: "output_text", text: "", annotations: [] }
        events.push(ev("response.output_item.added", {
          output_index,
          item: { ...item, status: "in_progress", content: [] }
        }))
        events.push(ev("response.content_part.added", { item_id: item.id, output_index, content_index: 0, part }))
        events.push(
          ev("response.output_text.delta", { item_id: item.id, output_index, content_index: 0, delta: text })
        )
        events.push(ev("response.output_text.done", { item_id: item.id, output_index, content_index: 0, text }))
        events.push(ev("response.content_part.done", {
          item_id: item.id,
          output_index,
          content_index: 0,
          part: { ...part, text }
        }))
      } else {
        events.push(ev("response.output_item.added", {
          output_index,
          item: { ...item, status: "in_progress", arguments: "" }
        }))
        events.push(ev("response.function_call_arguments.delta", {
          item_id: item.id,
          output_index,
          delta: item.arguments
        }))
        events.push(ev("response.function_call_arguments.done", {
          item_id: item.id,
          output_index,
          arguments: item.arguments
        }))
      }
      events.push(ev("response.output_item.done", { output_index, item }))
    })
    const status = finalStatus(c)
    events.push(
      ev(status === "completed" ? "response.completed" : "response.incomplete", { response: response(c, status, all) })
    )
    return events
  },
  error: (status, message, kind) => ({
    error: {
      message,
      type: kind === "upstream" ? "server_error" : "invalid_request_error",
      param: null,
      code: kind === "auth" ? "invalid_api_key" : status
    }
  })
}
