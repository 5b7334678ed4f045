// The OpenEnv client's contract: its options, replies, errors and the client interface. Re-exported by Client.ts
// (the public module) and used by the socket code in client.ts.
import type { Duration, Effect, Schema } from "effect"
import { Data } from "effect"
import type { McpCallToolResult, McpToolDescriptor } from "../OpenEnv.js"

/** Options of `Client.make`. */
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
  /**
   * How long opening a session may wait for a free one when the server is full (CAPACITY_REACHED): the client
   * backs off and retries, and clients of this process past the server's limit queue for a session locally. When
   * this long passes with no session of this process at that URL freed, it fails with {@link CapacityReachedError}
   * naming the limit and the fix (a queue that keeps moving waits on). Default 5 minutes; 0 fails at the first
   * refusal.
   */
  readonly capacityWait?: Duration.DurationInput
  /**
   * Most sessions this process opens at once on this server (every client of the same URL shares the limit).
   * Default: what the server's first CAPACITY_REACHED frame reports (OpenEnv publishes its limit nowhere else).
   */
  readonly maxSessions?: number
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

/**
 * The server is full (`CAPACITY_REACHED`). Retryable: back off and connect again, or raise MAX_CONCURRENT_ENVS.
 * With `waitedMs` the client already waited that long (its `capacityWait`) for a free session.
 */
export class CapacityReachedError extends Data.TaggedError("CapacityReachedError")<{
  readonly url: string
  readonly activeSessions: number
  readonly maxSessions: number
  readonly serverMessage: string
  readonly waitedMs?: number
}> {
  readonly retryable = true
  override get message() {
    const base = `Server error: ${this.serverMessage} (code: CAPACITY_REACHED).`
    if (this.waitedMs === undefined) {
      return `${base} Retry later or start the server with a higher --max-concurrent-envs.`
    }
    const limit = this.maxSessions > 0
      ? `${this.maxSessions} session${this.maxSessions === 1 ? "" : "s"}`
      : "few sessions"
    return `${base} No session at ${this.url} opened or closed for ${Math.round(this.waitedMs / 100) / 10} s: ` +
      `the server allows ${limit} at once. Start it with more (\`envtrain serve <env> --max-concurrent-envs N\`, ` +
      "or MAX_CONCURRENT_ENVS=N for an OpenEnv server), open fewer at once (`--env-concurrency N`, config key " +
      "envConcurrency, or the client's maxSessions), or wait longer (the client's capacityWait)."
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
