// What every agent-facing dialect provides: its request read into a chat-completions body (the one shape the
// upstream speaks), the upstream's answer replayed in the dialect (one JSON body, or the SSE events of a stream),
// and errors in the dialect's own shape.

/** A chat-completions body (OpenAI's request shape) for the upstream. */
export type ChatBody = Record<string, unknown>

/** An OpenAI chat tool call, arguments as JSON text. */
export interface ToolCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

/** What the upstream sampled for one call, dialect-free. */
export interface Captured {
  readonly id: string
  readonly model: string
  readonly created: number
  readonly promptIds: ReadonlyArray<number>
  readonly completionIds: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly content: string | null
  readonly reasoning: string | undefined
  readonly toolCalls: ReadonlyArray<ToolCall>
  /** OpenAI's: "stop" | "length" | "tool_calls". */
  readonly finishReason: string
  readonly stopReason: string | number | null
  /** The upstream's whole chat-completions body (kept in the trace's `response`). */
  readonly raw: Record<string, unknown>
}

/** One server-sent event; `event` absent for OpenAI chat's bare `data:` lines. */
export interface SseEvent {
  readonly event?: string
  readonly data: unknown
}

/** The request could not be read in this dialect (answered 400 in the dialect's error shape). */
export class DialectError extends Error {
  constructor(readonly status: number, message: string, readonly param: string | null = null) {
    super(message)
  }
}

export interface ReadRequest {
  readonly chat: ChatBody
  readonly stream: boolean
  /** What the agent asked to be told back about logprobs (OpenAI chat only). */
  readonly wantsLogprobs: boolean
  /** A stream ends with a usage chunk (OpenAI chat's stream_options.include_usage). */
  readonly includeUsage: boolean
}

export interface Dialect {
  readonly name: "openai-chat" | "openai-responses" | "anthropic-messages"
  readonly read: (body: unknown) => ReadRequest
  readonly reply: (captured: Captured, request: ReadRequest) => unknown
  readonly stream: (captured: Captured, request: ReadRequest) => ReadonlyArray<SseEvent>
  /** Whether the stream ends with OpenAI's `data: [DONE]`. */
  readonly doneMarker: boolean
  readonly error: (status: number, message: string, kind: ErrorKind) => unknown
}

export type ErrorKind = "auth" | "invalid_request" | "upstream" | "not_found"

export const isObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** Text of an OpenAI/Anthropic content value: a string, or a list of text parts. */
export const textOf = (v: unknown, at: string, partTypes: ReadonlyArray<string>): string => {
  if (v === undefined || v === null) return ""
  if (typeof v === "string") return v
  if (Array.isArray(v)) {
    return v.map((part, i) => {
      if (isObject(part) && partTypes.includes(String(part.type)) && typeof part.text === "string") return part.text
      throw new DialectError(
        400,
        `${at}[${i}]: only text parts (${partTypes.join(", ")}) are supported by the capture proxy`,
        at
      )
    }).join("")
  }
  throw new DialectError(400, `${at} must be a string or a list of text parts`, at)
}

/** Copies the sampling fields the upstream understands, under its names. */
export const copySampling = (
  from: Record<string, unknown>,
  names: Readonly<Record<string, string>>
): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [theirs, ours] of Object.entries(names)) {
    if (from[theirs] !== undefined && from[theirs] !== null) out[ours] = from[theirs]
  }
  return out
}

/** Parses a tool call's JSON arguments into an object (`{}` when they are not an object). */
export const argumentsObject = (text: string): Record<string, unknown> => {
  try {
    const v = JSON.parse(text) as unknown
    return isObject(v) ? v : {}
  } catch {
    return {}
  }
}
