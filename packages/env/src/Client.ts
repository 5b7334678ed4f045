/**
 * A typed OpenEnv client over `/ws`: `reset`, `step`, `state`, `close`, and MCP `tools/list` / `tools/call`.
 *
 * Semantics (OpenEnv's client plus the session-loss contract OpenEnv lacks):
 * - URL rules as OpenEnv: http→ws, https→wss, no scheme→ws, `/ws` appended.
 * - One request at a time per socket; a connect timeout and a per-message timeout on every wait; keep-alive pings.
 * - A `CAPACITY_REACHED` frame (sent right after the handshake) fails with {@link CapacityReachedError}, retryable.
 * - If the socket drops (or a request on it times out or is interrupted) while an episode is active, that request
 *   and every later `step`/`state`/tool call fail with {@link SessionLostError} until the next `reset`: the client
 *   never continues silently on a fresh, un-reset session. A socket whose request timed out or was interrupted is
 *   discarded, never reused (its late reply would be read as the answer to the next request).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Client } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const env = yield* Client.make({ url: "http://127.0.0.1:8000" })
 *   const first = yield* env.reset()
 *   const next = yield* env.step({ action_id: 1 })
 *   console.log(first.observation, next.reward, next.done)
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import type { Duration, Effect, Schema, Scope } from "effect"
import { Data } from "effect"
import * as internal from "./internal/client.js"
import type { McpCallToolResult, McpToolDescriptor } from "./OpenEnv.js"

/** Options of {@link make}. */
export interface ClientOptions<A = Record<string, unknown>, O = Record<string, unknown>> {
  /** Base URL of the server (`http://host:port`, `https://…`, `ws://…`, or `host:port`). `/ws` is appended. */
  readonly url: string
  /** Encodes actions into the step `data` (default: the action is sent as is). */
  readonly action?: Schema.Schema<A, any>
  /** Decodes the `observation` of each envelope (default: the raw object). */
  readonly observation?: Schema.Schema<O, any>
  /** Default 10 s. */
  readonly connectTimeout?: Duration.DurationInput
  /** Per response; default 60 s. */
  readonly messageTimeout?: Duration.DurationInput
  /** Keep-alive ping interval (a missed pong by the next ping drops the socket); default 20 s, 0 disables. */
  readonly pingInterval?: Duration.DurationInput
  /** Largest accepted server frame; default 100 MB (OpenEnv ≥ 0.2.2). */
  readonly maxMessageBytes?: number
}

/** A reset or step reply: `reward` and `done` come from the envelope. */
export interface StepResult<O> {
  readonly observation: O
  readonly reward: number | boolean | null
  readonly done: boolean
}

/** The socket could not be opened (OpenEnv: `ConnectionError("Failed to connect to <url>: <err>")`). */
export class ConnectError extends Data.TaggedError("ConnectError")<{ readonly url: string; readonly reason: string }> {
  override get message() {
    return `Failed to connect to ${this.url}: ${this.reason}. Is the server running and the URL right?`
  }
}

/** The server is full (`CAPACITY_REACHED`). Retryable: back off and connect again, or raise MAX_CONCURRENT_ENVS. */
export class CapacityReachedError extends Data.TaggedError("CapacityReachedError")<{
  readonly url: string
  readonly activeSessions: number
  readonly maxSessions: number
  readonly serverMessage: string
}> {
  readonly retryable = true
  override get message() {
    return `Server error: ${this.serverMessage} (code: CAPACITY_REACHED). Retry later or start the server with a higher --max-concurrent-envs.`
  }
}

/** An error frame (VALIDATION_ERROR, EXECUTION_ERROR, UNKNOWN_TYPE, …); the session continues unless it closed. */
export class ServerError extends Data.TaggedError("ServerError")<{
  readonly code: string
  readonly serverMessage: string
  readonly errors?: ReadonlyArray<unknown>
}> {
  override get message() {
    return `Server error: ${this.serverMessage} (code: ${this.code})`
  }
}

/** The session was lost while an episode was active: the episode cannot be continued; reset to start a new one. */
export class SessionLostError extends Data.TaggedError("SessionLostError")<{
  readonly url: string
  readonly reason: string
  readonly episodeId?: string
}> {
  override get message() {
    return `OpenEnv session at ${this.url} was lost mid-episode (${this.reason}); the episode cannot be continued. ` +
      "Score it as unscoreable and reset to start a new one."
  }
}

/** No reply within the message timeout; the socket was discarded. */
export class RequestTimeoutError extends Data.TaggedError("RequestTimeoutError")<{
  readonly url: string
  readonly request: string
  readonly timeoutMs: number
}> {
  override get message() {
    return `No reply to '${this.request}' from ${this.url} within ${this.timeoutMs} ms; the socket was discarded. ` +
      "Raise messageTimeout if the environment is slow."
  }
}

/** The socket closed while no episode was active (e.g. the server shut down between episodes). */
export class ConnectionClosedError extends Data.TaggedError("ConnectionClosedError")<{
  readonly url: string
  readonly code: number
  readonly reason: string
}> {
  override get message() {
    return `Connection to ${this.url} closed (code ${this.code}${this.reason ? `: ${this.reason}` : ""})`
  }
}

/** The server sent something that is not a valid reply (or the observation failed to decode). */
export class ProtocolError extends Data.TaggedError("ProtocolError")<{ readonly reason: string }> {
  override get message() {
    return `OpenEnv protocol error: ${this.reason}`
  }
}

/** A JSON-RPC error from an MCP call. */
export class McpError extends Data.TaggedError("McpError")<{
  readonly code: number
  readonly serverMessage: string
  readonly data: unknown
}> {
  override get message() {
    return `MCP error ${this.code}: ${this.serverMessage}`
  }
}

/** Every error a client call can fail with. */
export type ClientError =
  | ConnectError
  | CapacityReachedError
  | ServerError
  | SessionLostError
  | RequestTimeoutError
  | ConnectionClosedError
  | ProtocolError

const CLIENT_ERROR_TAGS: ReadonlySet<string> = new Set([
  "ConnectError",
  "CapacityReachedError",
  "ServerError",
  "SessionLostError",
  "RequestTimeoutError",
  "ConnectionClosedError",
  "ProtocolError"
])

/**
 * True for the client's own errors. A remote-backed environment that meets one cannot go on with its episode: it
 * is an infrastructure failure (the episode becomes unscoreable), never a tool failure to show the model.
 */
export const isClientError = (u: unknown): u is ClientError =>
  typeof u === "object" && u !== null && "_tag" in u && CLIENT_ERROR_TAGS.has(String((u as { _tag: unknown })._tag))

/** One OpenEnv session (one socket, one environment instance on the server). */
export interface OpenEnvClient<A = Record<string, unknown>, O = Record<string, unknown>> {
  readonly url: string
  /** `{"type":"reset","data":options}`; opens a new socket if there is none (or the last one was lost). */
  readonly reset: (options?: Readonly<Record<string, unknown>>) => Effect.Effect<StepResult<O>, ClientError>
  readonly step: (action: A) => Effect.Effect<StepResult<O>, ClientError>
  readonly state: Effect.Effect<Readonly<Record<string, unknown>>, ClientError>
  /** MCP `tools/list` over the session (`{"type":"mcp"}` frames). */
  readonly listTools: Effect.Effect<ReadonlyArray<McpToolDescriptor>, ClientError | McpError>
  /** MCP `tools/call` over the session. */
  readonly callTool: (
    name: string,
    args: Readonly<Record<string, unknown>>
  ) => Effect.Effect<McpCallToolResult, ClientError | McpError>
  /** Sends `{"type":"close"}` (best effort) and closes the socket. Also runs when the scope closes. */
  readonly close: Effect.Effect<void>
  /** True between a successful reset and a `done` step. */
  readonly episodeActive: Effect.Effect<boolean>
}

/** Makes a client; the socket opens lazily on the first call and closes with the scope. */
export const make: <A = Record<string, unknown>, O = Record<string, unknown>>(
  options: ClientOptions<A, O>
) => Effect.Effect<OpenEnvClient<A, O>, never, Scope.Scope> = internal.make

/**
 * Makes a client and opens its socket now: fails fast on a bad URL, and with {@link CapacityReachedError} when the
 * server refuses the session right after the handshake (OpenEnv's accept, error, close 1000).
 */
export const connect: <A = Record<string, unknown>, O = Record<string, unknown>>(
  options: ClientOptions<A, O>
) => Effect.Effect<OpenEnvClient<A, O>, ClientError, Scope.Scope> = internal.connect
