// Reading an OpenAI/vLLM request body into what the server runs. Unknown fields are ignored, as vLLM ignores them
// (its request models allow extra fields); known fields of the wrong type or out of range are refused with vLLM's
// 400, and features that would change the output but are not implemented here (beam search, echo, logit bias,
// presence/frequency penalties, guided decoding, forced tool choice) are refused rather than silently dropped.
import type { ChatMessage, ToolCall, ToolDefinition } from "@envtrain/text/ChatTemplate"
import { Data } from "effect"

/** An error answered as OpenAI's `{"error": {message, type, param, code}}`, with its HTTP status. */
export class ApiError extends Data.TaggedError("ApiError")<{
  readonly status: number
  readonly message: string
  readonly param: string | null
  readonly type: string
}> {
  get body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.status } }
  }
}

const typeFor = (status: number) =>
  status === 404
    ? "NotFoundError"
    : status === 405
    ? "MethodNotAllowed"
    : status === 413
    ? "RequestEntityTooLarge"
    : status === 503
    ? "ServiceUnavailableError"
    : status >= 500
    ? "InternalServerError"
    : "BadRequestError"

/** An {@link ApiError} with the error type OpenAI/vLLM use for its status. */
export const apiError = (status: number, message: string, param: string | null = null): ApiError =>
  new ApiError({ status, message, param, type: typeFor(status) })

export interface SamplingSpec {
  readonly n: number
  /** Undefined: fill the context. */
  readonly maxTokens: number | undefined
  /** Undefined (here and below): the backend's default (the model's generation_config), as vLLM does. */
  readonly temperature: number | undefined
  readonly topP: number | undefined
  readonly topK: number | undefined
  readonly minP: number | undefined
  readonly repetitionPenalty: number | undefined
  readonly seed: number | undefined
  readonly stop: ReadonlyArray<string>
  readonly stopTokenIds: ReadonlyArray<number>
  readonly ignoreEos: boolean
  readonly includeStopStrInOutput: boolean
  readonly skipSpecialTokens: boolean
  /** Per-token logprobs wanted. */
  readonly logprobs: boolean
  /** Alternatives per token (0: none). */
  readonly topLogprobs: number
  readonly returnTokenIds: boolean
  readonly returnTokensAsTokenIds: boolean
  readonly stream: boolean
  readonly includeUsage: boolean
}

export interface ChatRequest extends SamplingSpec {
  readonly _tag: "Chat"
  readonly model: string | undefined
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools: ReadonlyArray<ToolDefinition>
  /** Parse `<tool_call>` blocks into `tool_calls` (tools given and tool_choice not "none"). */
  readonly parseTools: boolean
  readonly chatTemplateKwargs: Readonly<Record<string, unknown>>
}

export interface CompletionRequest extends SamplingSpec {
  readonly _tag: "Completion"
  readonly model: string | undefined
  /** One entry per prompt: text to encode, or token ids. */
  readonly prompts: ReadonlyArray<string | ReadonlyArray<number>>
}

type Body = Record<string, unknown>

const isObject = (u: unknown): u is Body => typeof u === "object" && u !== null && !Array.isArray(u)
const isInt = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u)

const bad = (param: string, message: string) => apiError(400, message, param)

// Reads optional fields, collecting the first problem.
const reader = (body: Body) => {
  const present = (key: string) => body[key] !== undefined && body[key] !== null
  return {
    present,
    number: (key: string, check: (x: number) => boolean, range: string): number | undefined => {
      if (!present(key)) return undefined
      const v = body[key]
      if (typeof v !== "number" || !Number.isFinite(v) || !check(v)) {
        throw bad(key, `${key} must be a number ${range}, got ${JSON.stringify(v)}.`)
      }
      return v
    },
    int: (key: string, check: (x: number) => boolean, range: string): number | undefined => {
      if (!present(key)) return undefined
      const v = body[key]
      if (!isInt(v) || !check(v)) throw bad(key, `${key} must be an integer ${range}, got ${JSON.stringify(v)}.`)
      return v
    },
    bool: (key: string): boolean | undefined => {
      if (!present(key)) return undefined
      const v = body[key]
      if (typeof v !== "boolean") throw bad(key, `${key} must be a boolean, got ${JSON.stringify(v)}.`)
      return v
    }
  }
}

const unsupported = (body: Body) => {
  const r = reader(body)
  if (r.bool("use_beam_search") === true) throw bad("use_beam_search", "Beam search is not supported by envtrain.")
  if (r.bool("echo") === true) throw bad("echo", "echo is not supported by envtrain.")
  const n = isInt(body.n) ? body.n : 1
  const bestOf = r.int("best_of", (x) => x >= 1, ">= 1")
  if (bestOf !== undefined && bestOf !== n) throw bad("best_of", "best_of other than n is not supported by envtrain.")
  for (const key of ["presence_penalty", "frequency_penalty"]) {
    if (r.number(key, () => true, "") ?? 0) {
      throw bad(key, `${key} is not supported by envtrain (use repetition_penalty).`)
    }
  }
  if (isObject(body.logit_bias) && Object.keys(body.logit_bias).length > 0) {
    throw bad("logit_bias", "logit_bias is not supported by envtrain.")
  }
  for (const key of ["guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"]) {
    if (r.present(key)) throw bad(key, `${key} (guided decoding) is not supported by envtrain.`)
  }
  if (isObject(body.response_format) && body.response_format.type !== "text") {
    throw bad("response_format", "response_format other than {\"type\": \"text\"} is not supported by envtrain.")
  }
}

const stopList = (v: unknown): Array<string> => {
  if (v === undefined || v === null) return []
  if (typeof v === "string") return v.length > 0 ? [v] : []
  if (Array.isArray(v) && v.every((s) => typeof s === "string")) return (v as Array<string>).filter((s) => s.length > 0)
  throw bad("stop", `stop must be a string or a list of strings, got ${JSON.stringify(v)}.`)
}

const samplingOf = (body: Body, chat: boolean, maxTopLogprobs: number): SamplingSpec => {
  unsupported(body)
  const r = reader(body)
  const n = r.int("n", (x) => x >= 1 && x <= 128, "between 1 and 128") ?? 1
  const maxTokens = chat
    ? r.int("max_completion_tokens", (x) => x >= 1, ">= 1") ?? r.int("max_tokens", (x) => x >= 1, ">= 1")
    : r.int("max_tokens", (x) => x >= 1, ">= 1") ?? (r.present("max_tokens") ? undefined : 16)
  const temperature = r.number("temperature", (x) => x >= 0, ">= 0")
  const topP = r.number("top_p", (x) => x > 0 && x <= 1, "in (0, 1]")
  const topK = r.int("top_k", (x) => x === -1 || x >= 0, "-1 (off), 0 (off) or >= 1")
  const minP = r.number("min_p", (x) => x >= 0 && x <= 1, "in [0, 1]")
  const repetitionPenalty = r.number("repetition_penalty", (x) => x > 0, "> 0")
  const seed = r.int("seed", (x) => x >= 0, ">= 0")
  const stopTokenIds = body.stop_token_ids ?? []
  if (!Array.isArray(stopTokenIds) || !stopTokenIds.every((x) => isInt(x) && x >= 0)) {
    throw bad("stop_token_ids", "stop_token_ids must be a list of token ids.")
  }
  let logprobs: boolean
  let topLogprobs: number
  if (chat) {
    logprobs = r.bool("logprobs") ?? false
    topLogprobs = r.int("top_logprobs", (x) => x >= 0 && x <= 20, "between 0 and 20") ?? 0
    if (topLogprobs > 0 && !logprobs) throw bad("top_logprobs", "top_logprobs needs logprobs: true.")
  } else {
    const k = r.int("logprobs", (x) => x >= 0 && x <= 20, "between 0 and 20")
    logprobs = k !== undefined
    topLogprobs = k ?? 0
  }
  if (topLogprobs > maxTopLogprobs) {
    throw bad(
      chat ? "top_logprobs" : "logprobs",
      maxTopLogprobs === 0
        ? "This backend does not report top logprobs; ask for the sampled token's logprob only (0)."
        : `This backend reports at most ${maxTopLogprobs} top logprobs, got ${topLogprobs}.`
    )
  }
  const streamOptions = body.stream_options
  if (streamOptions !== undefined && streamOptions !== null && !isObject(streamOptions)) {
    throw bad("stream_options", "stream_options must be an object.")
  }
  const stream = r.bool("stream") ?? false
  return {
    n,
    maxTokens,
    temperature,
    topP,
    // -1 and 0 switch top-k off, whatever the default.
    topK: topK === undefined ? undefined : topK <= 0 ? 0 : topK,
    minP,
    repetitionPenalty,
    seed,
    stop: stopList(body.stop),
    stopTokenIds: stopTokenIds as Array<number>,
    ignoreEos: r.bool("ignore_eos") ?? false,
    includeStopStrInOutput: r.bool("include_stop_str_in_output") ?? false,
    skipSpecialTokens: r.bool("skip_special_tokens") ?? true,
    logprobs,
    topLogprobs,
    returnTokenIds: r.bool("return_token_ids") ?? false,
    returnTokensAsTokenIds: r.bool("return_tokens_as_token_ids") ?? false,
    stream,
    includeUsage: stream && isObject(streamOptions) && streamOptions.include_usage === true
  }
}

const modelOf = (body: Body): string | undefined => {
  if (body.model === undefined || body.model === null) return undefined
  if (typeof body.model !== "string") throw bad("model", "model must be a string.")
  return body.model
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"])

const contentOf = (v: unknown, at: string): string => {
  if (v === undefined || v === null) return ""
  if (typeof v === "string") return v
  if (Array.isArray(v)) {
    return v.map((part, i) => {
      if (isObject(part) && part.type === "text" && typeof part.text === "string") return part.text
      throw bad(`${at}.content`, `${at}.content[${i}]: only text parts ({"type": "text", "text": ...}) are supported.`)
    }).join("")
  }
  throw bad(`${at}.content`, `${at}.content must be a string, a list of text parts, or null.`)
}

const messageOf = (m: unknown, i: number): ChatMessage => {
  const at = `messages[${i}]`
  if (!isObject(m) || typeof m.role !== "string" || !ROLES.has(m.role)) {
    throw bad(`${at}.role`, `${at} must be an object with a role of system, developer, user, assistant or tool.`)
  }
  const role = m.role === "developer" ? "system" : m.role as ChatMessage["role"]
  let toolCalls: Array<ToolCall> | undefined
  if (m.tool_calls !== undefined && m.tool_calls !== null) {
    if (!Array.isArray(m.tool_calls)) throw bad(`${at}.tool_calls`, `${at}.tool_calls must be a list.`)
    toolCalls = m.tool_calls.map((c, j) => {
      const f = isObject(c) ? c.function : undefined
      if (!isObject(f) || typeof f.name !== "string") {
        throw bad(
          `${at}.tool_calls`,
          `${at}.tool_calls[${j}] must be {"type": "function", "function": {name, arguments}}.`
        )
      }
      const args = f.arguments
      // OpenAI sends arguments as JSON text; the template wants the object (it renders it with tojson).
      let parsed: Readonly<Record<string, unknown>> | string = isObject(args) ? args : "{}"
      if (typeof args === "string") {
        try {
          const v = JSON.parse(args) as unknown
          parsed = isObject(v) ? v : args
        } catch {
          parsed = args
        }
      }
      return {
        type: "function",
        ...(typeof c.id === "string" ? { id: c.id } : {}),
        function: { name: f.name, arguments: parsed }
      } satisfies ToolCall
    })
  }
  return {
    role,
    content: contentOf(m.content, at),
    ...(typeof m.reasoning_content === "string" ? { reasoning_content: m.reasoning_content } : {}),
    ...(toolCalls === undefined ? {} : { tool_calls: toolCalls }),
    ...(typeof m.name === "string" ? { name: m.name } : {}),
    ...(typeof m.tool_call_id === "string" ? { tool_call_id: m.tool_call_id } : {})
  }
}

export const chatRequest = (body: unknown, maxTopLogprobs: number): ChatRequest => {
  if (!isObject(body)) throw apiError(400, "The request body must be a JSON object.")
  const model = modelOf(body)
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw bad("messages", "messages must be a non-empty list of messages.")
  }
  const messages = body.messages.map(messageOf)
  const tools = body.tools ?? []
  if (!Array.isArray(tools) || !tools.every((t) => isObject(t) && t.type === "function" && isObject(t.function))) {
    throw bad(
      "tools",
      "tools must be a list of {\"type\": \"function\", \"function\": {name, description, parameters}}."
    )
  }
  const choice = body.tool_choice ?? "auto"
  if (choice === "required" || isObject(choice)) {
    throw bad(
      "tool_choice",
      "tool_choice \"required\" or a named function needs guided decoding, which envtrain does not have; use \"auto\"."
    )
  }
  if (choice !== "auto" && choice !== "none") throw bad("tool_choice", "tool_choice must be \"auto\" or \"none\".")
  const kwargs = body.chat_template_kwargs ?? {}
  if (!isObject(kwargs)) throw bad("chat_template_kwargs", "chat_template_kwargs must be an object.")
  return {
    _tag: "Chat",
    model,
    messages,
    tools: tools as Array<ToolDefinition>,
    parseTools: tools.length > 0 && choice === "auto",
    chatTemplateKwargs: kwargs,
    ...samplingOf(body, true, maxTopLogprobs)
  }
}

export const completionRequest = (body: unknown, maxTopLogprobs: number): CompletionRequest => {
  if (!isObject(body)) throw apiError(400, "The request body must be a JSON object.")
  const model = modelOf(body)
  const p = body.prompt
  const isIds = (v: unknown): v is Array<number> =>
    Array.isArray(v) && v.length > 0 && v.every((x) => isInt(x) && x >= 0)
  let prompts: Array<string | Array<number>>
  if (typeof p === "string") prompts = [p]
  else if (isIds(p)) prompts = [p]
  else if (Array.isArray(p) && p.length > 0 && p.every((x) => typeof x === "string" || isIds(x))) {
    prompts = p as Array<string | Array<number>>
  } else {
    throw bad("prompt", "prompt must be a string, a list of token ids, or a list of either.")
  }
  return { _tag: "Completion", model, prompts, ...samplingOf(body, false, maxTopLogprobs) }
}
