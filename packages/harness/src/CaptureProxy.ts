/**
 * The capture proxy: the model endpoint a black-box agent is given. It speaks OpenAI chat completions (streaming
 * too), OpenAI Responses and Anthropic Messages to the agent; the API key the agent presents (`Authorization:
 * Bearer ID` or `x-api-key: ID`) is its capture session id, and any other key is refused with 401 in the agent's
 * dialect, so the proxy is safe to hand to a sandbox. Each call is normalised to one non-streaming chat completion
 * on the policy server (envtrain's `serve-policy`, or vLLM) asking for the engine's token ids and logprobs
 * (`return_token_ids`, `logprobs`), replayed in the agent's dialect (tool calls included; a stream is cut from the
 * finished completion), and recorded as a turn. Turns link into conversations by exact token prefix; retries that
 * led nowhere are discarded; calls matching an auxiliary rule (title generation by default) keep loss mask 0. A
 * session's {@link TrainingTrace} comes from the admin API or from this module's service.
 *
 * Surfaces: the loopback TCP listener serves the agent routes (`/v1/chat/completions`, `/v1/responses`,
 * `/v1/messages`, `/v1/models`, each also without `/v1`) and the admin routes (`POST /admin/sessions` → `{session_id}`,
 * `GET /admin/sessions/ID` → status, `GET /admin/sessions/ID/trace` → TrainingTrace, `DELETE /admin/sessions/ID` →
 * final status; `adminKey` guards them); the optional Unix socket (`socketPath`, what sandboxes reach) serves the
 * agent routes only.
 *
 * Failures: the policy server unreachable, failing (5xx) or slower than `upstreamTimeout` → the agent gets 502/504
 * in its dialect and the session records a transport failure (`transport_failure`: the rollout is unscoreable); an
 * answer without token ids or logprobs → the same, as a capture-contract failure; a request the engine refuses (4xx)
 * → passed back to the agent, the session unharmed.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CaptureProxy } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const proxy = yield* CaptureProxy.make({ upstream: "http://127.0.0.1:8000", model: "tiny" })
 *   const session = yield* proxy.open({ label: "rollout-0" })
 *   // give the agent OPENAI_BASE_URL=`${proxy.url}/v1` and OPENAI_API_KEY=session; let it run; then:
 *   const trace = yield* proxy.trace(session)
 *   yield* proxy.close(session)
 *   return trace
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import type { Scope } from "effect"
import { Context, Data, Duration, Effect, Layer } from "effect"
import type { SessionStatus } from "./internal/capture/graph.js"
import * as internal from "./internal/capture/server.js"
import type { TrainingTrace } from "./TrainingTrace.js"

export type { Conversation, Failure, Role, SessionStatus } from "./internal/capture/graph.js"

/**
 * Marks calls as auxiliary (loss mask 0, never a conversation's parent): the first rule whose `pattern` matches the
 * text of a message where it looks wins. `where`: "system" (system messages), "lastUser" (the last user message),
 * "any" (every message; the default).
 *
 * @since 0.0.0
 */
export interface AuxiliaryRule {
  readonly name: string
  readonly pattern: RegExp
  readonly where?: "system" | "lastUser" | "any"
}

/**
 * Title generation, as agents such as opencode and claude-code ask for it (a system prompt or request that asks for
 * a short title for the conversation).
 *
 * @since 0.0.0
 */
export const titleGeneration: AuxiliaryRule = {
  name: "title_generation",
  pattern:
    /\btitle generator\b|\bgenerate a (?:short |concise |brief )?title\b|\btitle for (?:this|the) conversation\b/i
}

/** Options of {@link make}. @since 0.0.0 */
export interface CaptureProxyOptions {
  /** The policy server's root, e.g. `http://127.0.0.1:8000` (calls go to `/v1/chat/completions`). */
  readonly upstream: string
  /** The model name sent upstream, replacing the agent's; unset: the agent's is passed on. */
  readonly model?: string
  /** Bearer token for the upstream. */
  readonly upstreamApiKey?: string
  /** Longest wait for one upstream call; default 5 minutes. */
  readonly upstreamTimeout?: Duration.DurationInput
  /** Merged into every upstream body (e.g. `{"chat_template_kwargs": {"enable_thinking": false}}`). */
  readonly extraBody?: Readonly<Record<string, unknown>>
  /** Default "127.0.0.1". */
  readonly host?: string
  /** Default 0 (a free port). */
  readonly port?: number
  /** Also serve the agent routes (only) on this Unix socket; removed when the scope closes. */
  readonly socketPath?: string
  /** When set, the admin routes need it as a bearer token. */
  readonly adminKey?: string
  /** Default `[titleGeneration]`. */
  readonly auxiliary?: ReadonlyArray<AuxiliaryRule>
  /** Largest request body; default 32 MiB. */
  readonly maxBodyBytes?: number
}

/** No open session has that id. @since 0.0.0 */
export class CaptureSessionNotFound extends Data.TaggedError("CaptureSessionNotFound")<{ readonly sessionId: string }> {
  override get message() {
    return `No capture session ${this.sessionId}: it was closed or never opened (open one with open()).`
  }
}

/** The proxy could not start (bad options, a port or socket path in use). @since 0.0.0 */
export class CaptureProxyError extends Data.TaggedError("CaptureProxyError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** A running proxy. @since 0.0.0 */
export interface RunningCaptureProxy {
  /** `http://host:port` — agents use `${url}/v1` as their base URL. */
  readonly url: string
  readonly host: string
  readonly port: number
  readonly socketPath: string | undefined
  /** Opens a session; its id is the API key to give the agent. */
  readonly open: (options?: { readonly label?: string }) => Effect.Effect<string>
  readonly status: (sessionId: string) => Effect.Effect<SessionStatus, CaptureSessionNotFound>
  /** The session's turns so far as a TrainingTrace (it validates by construction). */
  readonly trace: (sessionId: string) => Effect.Effect<TrainingTrace, CaptureSessionNotFound>
  /** Refuses the key from now on; returns the final status. */
  readonly close: (sessionId: string) => Effect.Effect<SessionStatus, CaptureSessionNotFound>
}

const textsOf = (messages: ReadonlyArray<Record<string, unknown>>, where: AuxiliaryRule["where"]) => {
  const text = (m: Record<string, unknown>) =>
    typeof m.content === "string" ? m.content : Array.isArray(m.content) ? JSON.stringify(m.content) : ""
  if (where === "system") return messages.filter((m) => m.role === "system").map(text)
  if (where === "lastUser") {
    const users = messages.filter((m) => m.role === "user")
    return users.length === 0 ? [] : [text(users[users.length - 1])]
  }
  return messages.map(text)
}

const resolve = (options: CaptureProxyOptions): internal.Resolved | string => {
  const port = options.port ?? 0
  if (!Number.isInteger(port) || port < 0 || port > 65535) return `port must be 0..65535, got ${port}`
  if (!/^https?:\/\//.test(options.upstream)) {
    return `upstream must be an http(s) URL of the policy server (e.g. http://127.0.0.1:8000), got ${options.upstream}`
  }
  return {
    host: options.host ?? "127.0.0.1",
    port,
    socketPath: options.socketPath,
    adminKey: options.adminKey,
    upstream: {
      url: options.upstream,
      model: options.model,
      apiKey: options.upstreamApiKey,
      timeout: Duration.decode(options.upstreamTimeout ?? Duration.minutes(5)),
      extraBody: options.extraBody ?? {}
    },
    rules: (options.auxiliary ?? [titleGeneration]).map((rule) => ({
      name: rule.name,
      matches: (messages) => textsOf(messages, rule.where).some((t) => rule.pattern.test(t))
    })),
    maxBodyBytes: options.maxBodyBytes ?? 32 * 1024 * 1024
  }
}

/**
 * Starts the proxy; the scope stops it (exchanges in flight are interrupted, the socket file removed).
 *
 * @since 0.0.0
 */
export const make = (
  options: CaptureProxyOptions
): Effect.Effect<RunningCaptureProxy, CaptureProxyError, Scope.Scope> =>
  Effect.gen(function*() {
    const resolved = resolve(options)
    if (typeof resolved === "string") return yield* new CaptureProxyError({ problem: resolved })
    const running = yield* internal.make(resolved).pipe(
      Effect.mapError((problem) => new CaptureProxyError({ problem }))
    )
    const find = (sessionId: string) =>
      Effect.suspend(() => {
        const s = running.session(sessionId)
        return s === undefined ? Effect.fail(new CaptureSessionNotFound({ sessionId })) : Effect.succeed(s)
      })
    const host = running.host.includes(":") ? `[${running.host}]` : running.host
    return {
      url: `http://${host}:${running.port}`,
      host: running.host,
      port: running.port,
      socketPath: running.socketPath,
      open: (o) => Effect.sync(() => running.open(o?.label)),
      status: (id) => Effect.map(find(id), (s) => s.status()),
      trace: (id) => Effect.map(find(id), (s) => s.trace()),
      close: (id) =>
        Effect.suspend(() => {
          const status = running.close(id)
          return status === undefined
            ? Effect.fail(new CaptureSessionNotFound({ sessionId: id }))
            : Effect.succeed(status)
        })
    } satisfies RunningCaptureProxy
  }).pipe(Effect.withSpan("CaptureProxy.make"))

/**
 * The running proxy as a service, for in-process use (a rollout opens a session, runs its agent, fetches the trace).
 *
 * @since 0.0.0
 */
export class CaptureProxy extends Context.Tag("@envtrain/harness/CaptureProxy")<CaptureProxy, RunningCaptureProxy>() {
  static readonly layer = (options: CaptureProxyOptions) => Layer.scoped(CaptureProxy, make(options))
}
