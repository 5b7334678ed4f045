/**
 * A scripted model endpoint: a real loopback HTTP server answering OpenAI chat completions from a fixed script, no
 * model behind it. Pointed at by an agent (BashAgent, mini-swe-agent in a sandbox, any OpenAI client), it makes the
 * agent act out the script in its own format: the transcript of a scripted run is SFT data with the agent's exact
 * messages, tool schemas and tool results (the harness example warms its model up this way), and a test can drive
 * an unmodified agent deterministically.
 *
 * The reply to a call is picked by how far the conversation has got: the request's count of assistant messages
 * `n` selects `replies[n]`, and past the end the last reply repeats (so an agent that keeps asking gets the final
 * answer again). A reply is text plus optional tool calls (ids `call_<n>`, arguments sent as a JSON string); the
 * answer is a complete `chat.completion` (the request's `model`, usage 0, `finish_reason` "tool_calls" or "stop").
 * Every call is kept, in order, with its path, `Authorization` header, request body and the message answered.
 *
 * Routes: `POST /v1/chat/completions` (also without `/v1`). A body that is not JSON with a `messages` array, or that
 * asks for a stream, gets 400; any other route 404 (OpenAI's error shape).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ScriptedEndpoint } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const endpoint = yield* ScriptedEndpoint.make([ScriptedEndpoint.bash("ls"), { content: "Done." }])
 *   // give the agent the base URL `${endpoint.url}/v1`; let it run; then:
 *   return endpoint.exchanges.map((e) => e.reply)
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"

/**
 * One tool call of a scripted reply. `arguments` is sent as its JSON; a string is sent as it is (to script a
 * malformed call).
 *
 * @since 0.0.0
 */
export interface ToolCall {
  readonly name: string
  readonly arguments: Readonly<Record<string, unknown>> | string
}

/**
 * One scripted reply: the assistant's text (null, as OpenAI sends beside tool calls) and the tool calls it makes
 * (none: a plain answer).
 *
 * @since 0.0.0
 */
export interface Reply {
  readonly content: string | null
  readonly toolCalls?: ReadonlyArray<ToolCall>
}

/** A reply calling the `bash` tool once with `command` (the tool BashAgent and mini-swe-agent offer). @since 0.0.0 */
export const bash = (command: string, content: string | null = ""): Reply => ({
  content,
  toolCalls: [{ name: "bash", arguments: { command } }]
})

/** The assistant message an endpoint answered with (OpenAI's shape). @since 0.0.0 */
export interface AssistantMessage {
  readonly role: "assistant"
  readonly content: string | null
  readonly tool_calls?: ReadonlyArray<{
    readonly id: string
    readonly type: "function"
    readonly function: { readonly name: string; readonly arguments: string }
  }>
}

/** A chat-completions request as the agent sent it (only `messages` is checked). @since 0.0.0 */
export type ChatRequest = Readonly<Record<string, unknown>> & {
  readonly messages: ReadonlyArray<Readonly<Record<string, unknown>>>
}

/** One call the endpoint answered. @since 0.0.0 */
export interface Exchange {
  readonly path: string
  readonly authorization: string | undefined
  readonly request: ChatRequest
  readonly reply: AssistantMessage
}

/** A running scripted endpoint. @since 0.0.0 */
export interface ScriptedEndpoint {
  /** `http://127.0.0.1:PORT`; an OpenAI client's base URL is `${url}/v1`. */
  readonly url: string
  /** Every call answered so far, in order. */
  readonly exchanges: ReadonlyArray<Exchange>
}

const messageOf = (reply: Reply, n: number): AssistantMessage =>
  reply.toolCalls === undefined || reply.toolCalls.length === 0
    ? { role: "assistant", content: reply.content }
    : {
      role: "assistant",
      content: reply.content,
      tool_calls: reply.toolCalls.map((call, i) => ({
        id: reply.toolCalls!.length === 1 ? `call_${n}` : `call_${n}_${i}`,
        type: "function",
        function: {
          name: call.name,
          arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments)
        }
      }))
    }

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const parseRequest = (text: string): ChatRequest | string => {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return "the body is not JSON"
  }
  if (!isObject(body) || !Array.isArray(body.messages) || !body.messages.every(isObject)) {
    return "the body needs a `messages` array of objects"
  }
  if (body.stream === true) return "a scripted endpoint does not stream: send `stream: false`"
  return body as ChatRequest
}

const send = (res: Http.ServerResponse, status: number, body: unknown) => {
  res.statusCode = status
  res.setHeader("content-type", "application/json")
  res.end(JSON.stringify(body))
}

const error = (message: string, type: string) => ({ error: { message, type, param: null, code: null } })

/**
 * Starts a scripted endpoint on a free loopback port; the scope stops it. `replies` must not be empty.
 *
 * @since 0.0.0
 */
export const make = (replies: ReadonlyArray<Reply>): Effect.Effect<ScriptedEndpoint, never, Scope.Scope> =>
  replies.length === 0
    ? Effect.dieMessage("ScriptedEndpoint.make: the script needs at least one reply")
    : Effect.acquireRelease(
      Effect.async<{ readonly server: Http.Server; readonly endpoint: ScriptedEndpoint }>((resume) => {
        const exchanges: Array<Exchange> = []
        const server = Http.createServer((req, res) => {
          let text = ""
          req.on("data", (c: Buffer) => (text += c.toString()))
          req.on("end", () => {
            const path = req.url ?? "/"
            if (req.method !== "POST" || (path !== "/v1/chat/completions" && path !== "/chat/completions")) {
              return send(res, 404, error(`${req.method} ${path}: only POST /v1/chat/completions`, "not_found"))
            }
            const request = parseRequest(text)
            if (typeof request === "string") return send(res, 400, error(request, "invalid_request_error"))
            const n = request.messages.filter((m) => m.role === "assistant").length
            const reply = messageOf(replies[Math.min(n, replies.length - 1)], n)
            exchanges.push({ path, authorization: req.headers.authorization, request, reply })
            send(res, 200, {
              id: `chatcmpl-${n}`,
              object: "chat.completion",
              created: 0,
              model: typeof request.model === "string" ? request.model : "scripted",
              choices: [{ index: 0, message: reply, finish_reason: reply.tool_calls ? "tool_calls" : "stop" }],
              usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }
            })
          })
        })
        server.once("error", (e) => resume(Effect.die(e)))
        server.listen(0, "127.0.0.1", () =>
          resume(Effect.succeed({
            server,
            endpoint: { url: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`, exchanges }
          })))
      }),
      ({ server }) =>
        Effect.async<void>((resume) => {
          // An agent's keep-alive connection would hold `close` open.
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    ).pipe(Effect.map(({ endpoint }) => endpoint))
