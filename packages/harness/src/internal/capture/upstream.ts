// The one call upstream: a non-streaming chat completion asking for the engine's token ids and logprobs (vLLM's
// `return_token_ids` → top-level `prompt_token_ids` and `choices[0].token_ids`; `logprobs: true` →
// `choices[0].logprobs.content[i].logprob`), read into a dialect-free `Captured`. Every failure is classified: the
// engine unreachable, slow or failing (transport: the rollout is unscoreable), the engine refusing the request
// (rejected: the agent's request was at fault, passed back), or an answer without what capture needs (contract).
import * as PolicyRequest from "@envtrain/rollout/PolicyRequest"
import { Data, Duration, Effect } from "effect"
import { randomUUID } from "node:crypto"
import type { Captured, ChatBody, ToolCall } from "./dialect.js"
import { isObject } from "./dialect.js"

export interface Upstream {
  /** Server root, e.g. http://127.0.0.1:8000 (the call goes to `/v1/chat/completions`). */
  readonly url: string
  /** Replaces the model the agent names; unset: the agent's is passed on. */
  readonly model: string | undefined
  readonly apiKey: string | undefined
  readonly timeout: Duration.Duration
  /** Merged into every upstream body (e.g. chat_template_kwargs). */
  readonly extraBody: Readonly<Record<string, unknown>>
}

/** `abandoned`: the agent hung up before the answer (its own timeout or kill; not the engine's fault). */
export type FailureKind = "transport" | "rejected" | "contract" | "abandoned"

export class UpstreamFailure extends Data.TaggedError("UpstreamFailure")<{
  readonly kind: FailureKind
  /** What the agent is answered. */
  readonly status: number
  readonly message: string
}> {}

const failure = (kind: FailureKind, status: number, message: string) => new UpstreamFailure({ kind, status, message })

export const requestBody = (upstream: Upstream, chat: ChatBody): Record<string, unknown> => ({
  ...chat,
  ...(upstream.model === undefined ? {} : { model: upstream.model }),
  ...upstream.extraBody,
  n: 1,
  stream: false,
  return_token_ids: true,
  logprobs: true
})

const errorMessage = (text: string) => {
  try {
    const body = JSON.parse(text) as unknown
    if (isObject(body) && isObject(body.error) && typeof body.error.message === "string") return body.error.message
    if (isObject(body) && typeof body.message === "string") return body.message
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 500)
}

const isIds = (v: unknown): v is Array<number> => Array.isArray(v) && v.every((x) => Number.isSafeInteger(x) && x >= 0)

const toolCallsOf = (message: Record<string, unknown>): Array<ToolCall> =>
  Array.isArray(message.tool_calls)
    ? message.tool_calls.flatMap((t, i) =>
      isObject(t) && isObject(t.function) && typeof t.function.name === "string"
        ? [{
          id: typeof t.id === "string" ? t.id : `call_${i}`,
          name: t.function.name,
          arguments: typeof t.function.arguments === "string"
            ? t.function.arguments
            : JSON.stringify(t.function.arguments ?? {})
        }]
        : []
    )
    : []

/** Reads a chat-completions answer; a string says what capture is missing. */
export const capturedOf = (raw: unknown): Captured | string => {
  if (!isObject(raw) || !Array.isArray(raw.choices) || !isObject(raw.choices[0])) return "the answer has no choices"
  const choice = raw.choices[0]
  if (!isIds(raw.prompt_token_ids) || raw.prompt_token_ids.length === 0) {
    return "the answer has no prompt_token_ids (serve vLLM with --return-tokens-as-token-ids; the proxy asks " +
      "return_token_ids)"
  }
  if (!isIds(choice.token_ids)) return "choices[0].token_ids is missing (the engine ignored return_token_ids)"
  const content = isObject(choice.logprobs) && Array.isArray(choice.logprobs.content) ? choice.logprobs.content : []
  const logprobs = content.map((e) => (isObject(e) && typeof e.logprob === "number" ? e.logprob : Number.NaN))
  if (logprobs.length !== choice.token_ids.length || logprobs.some((lp) => !Number.isFinite(lp))) {
    return `choices[0].logprobs.content has ${logprobs.length} usable logprobs for ${choice.token_ids.length} ` +
      "tokens (the engine ignored logprobs: true)"
  }
  const message = isObject(choice.message) ? choice.message : {}
  const id = typeof raw.id === "string" ? raw.id.replace(/^chatcmpl-/, "") : randomUUID().replace(/-/g, "")
  return {
    id,
    model: typeof raw.model === "string" ? raw.model : "",
    created: typeof raw.created === "number" ? raw.created : Math.floor(Date.now() / 1000),
    promptIds: raw.prompt_token_ids,
    completionIds: choice.token_ids,
    logprobs,
    content: typeof message.content === "string" ? message.content : null,
    reasoning: typeof message.reasoning_content === "string"
      ? message.reasoning_content
      : typeof message.reasoning === "string"
      ? message.reasoning
      : undefined,
    toolCalls: toolCallsOf(message),
    finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "stop",
    stopReason: typeof choice.stop_reason === "string" || typeof choice.stop_reason === "number"
      ? choice.stop_reason
      : null,
    raw
  }
}

/** One chat completion upstream, within the upstream's timeout. */
export const complete = (upstream: Upstream, chat: ChatBody): Effect.Effect<Captured, UpstreamFailure> => {
  const url = `${upstream.url.replace(/\/+$/, "")}/v1/chat/completions`
  return Effect.gen(function*() {
    // Kept-alive connections; a request that one the server had closed dropped before any answer byte never
    // reached it, and is sent again once on a fresh connection (PolicyRequest). Anything else is a transport failure.
    const res = yield* PolicyRequest.sendResending(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(upstream.apiKey === undefined ? {} : { authorization: `Bearer ${upstream.apiKey}` })
      },
      body: JSON.stringify(requestBody(upstream, chat))
    }, { timeout: upstream.timeout }).pipe(
      Effect.mapError((f) =>
        f.reason === "timeout"
          ? failure(
            "transport",
            504,
            `the policy server at ${url} did not answer within ${Duration.format(upstream.timeout)}`
          )
          : failure("transport", 502, `the policy server at ${url} could not be reached: ${f.message}`)
      )
    )
    if (res.status >= 500) {
      return yield* failure(
        "transport",
        502,
        `the policy server answered ${res.status}: ${errorMessage(res.text)}`
      )
    }
    if (res.status >= 400) return yield* failure("rejected", res.status, errorMessage(res.text))
    let raw: unknown
    try {
      raw = JSON.parse(res.text)
    } catch {
      return yield* failure("contract", 502, `the policy server's answer is not JSON: ${res.text.slice(0, 200)}`)
    }
    const captured = capturedOf(raw)
    if (typeof captured === "string") {
      return yield* failure("contract", 502, `the policy server's answer cannot be captured: ${captured}`)
    }
    return captured
  })
}
