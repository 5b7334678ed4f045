// OpenAI chat completions: the upstream's own dialect. The request goes up as it came (with the capture fields
// added by the proxy); the reply is the upstream's, less the fields the agent did not ask for; a stream is cut
// from the finished completion (role, content, tool calls, finish, usage), since the upstream is asked once,
// without streaming, for exact ids and logprobs.
import type { Captured, Dialect, SseEvent } from "./dialect.js"
import { DialectError, isObject } from "./dialect.js"

const CAPTURE_FIELDS = ["prompt_token_ids", "policy_version"]

const usage = (c: Captured) => ({
  prompt_tokens: c.promptIds.length,
  completion_tokens: c.completionIds.length,
  total_tokens: c.promptIds.length + c.completionIds.length
})

export const dialect: Dialect = {
  name: "openai-chat",
  doneMarker: true,
  read: (body) => {
    if (!isObject(body)) throw new DialectError(400, "The request body must be a JSON object.")
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new DialectError(400, "messages must be a non-empty list of messages.", "messages")
    }
    if (body.n !== undefined && body.n !== null && body.n !== 1) {
      throw new DialectError(400, "n must be 1 behind the capture proxy (each call is one recorded turn).", "n")
    }
    const { stream, stream_options: streamOptions, ...rest } = body
    return {
      chat: rest,
      stream: stream === true,
      wantsLogprobs: body.logprobs === true,
      includeUsage: isObject(streamOptions) && streamOptions.include_usage === true
    }
  },
  reply: (c, request) => {
    const raw = Object.fromEntries(Object.entries(c.raw).filter(([k]) => !CAPTURE_FIELDS.includes(k)))
    const choices = Array.isArray(raw.choices) ? raw.choices : []
    return {
      ...raw,
      choices: choices.map((choice) => {
        if (!isObject(choice)) return choice
        const { logprobs, token_ids: _ids, ...rest } = choice
        return { ...rest, logprobs: request.wantsLogprobs ? logprobs : null }
      })
    }
  },
  stream: (c, request) => {
    const head = { id: c.id, object: "chat.completion.chunk", created: c.created, model: c.model }
    const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra = {}) => ({
      data: { ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...extra }] }
    })
    const events: Array<SseEvent> = [chunk({ role: "assistant", content: "" })]
    if (c.reasoning !== undefined) events.push(chunk({ reasoning_content: c.reasoning }))
    if (c.content !== null && c.content.length > 0) events.push(chunk({ content: c.content }))
    if (c.toolCalls.length > 0) {
      events.push(chunk({
        tool_calls: c.toolCalls.map((t, index) => ({
          index,
          id: t.id,
          type: "function",
          function: { name: t.name, arguments: t.arguments }
        }))
      }))
    }
    events.push(chunk({}, c.finishReason))
    if (request.includeUsage) {
      events.push({ data: { ...head, choices: [], usage: usage(c) } })
    }
    return events
  },
  error: (status, message, kind) => ({
    error: {
      message,
      type: kind === "auth" ? "invalid_request_error" : kind === "upstream" ? "api_error" : "invalid_request_error",
      param: null,
      code: kind === "auth" ? "invalid_api_key" : status
    }
  })
}
