/**
 * A typed OpenEnv client over `/ws`: `reset`, `step`, `state`, `close`, and MCP `tools/list` / `tools/call`.
 *
 * Semantics (OpenEnv's client plus the session-loss contract OpenEnv lacks):
 * - URL rules as OpenEnv: http→ws, https→wss, no scheme→ws, `/ws` appended.
 * - One request at a time per socket; a connect timeout and a per-message timeout on every wait; keep-alive pings.
 * - A full server (`CAPACITY_REACHED`, sent right after the handshake) is waited out: the open backs off and
 *   retries until `capacityWait` (default 5 minutes) passes with no session of the process at that URL opening or
 *   closing, and the clients of one process share a per-URL limit
 *   (`maxSessions`, {@link limitSessions}, else the limit the server's refusal reports), queueing for a session
 *   locally. Past the bound it fails with {@link CapacityReachedError} naming the limit and the fix;
 *   `capacityWait: 0` fails at the first refusal. Only opening is retried: a refusal reaches no environment.
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
import type { Effect, Scope } from "effect"
import * as internal from "./internal/client.js"
import type { ClientError, ClientOptions, OpenEnvClient } from "./internal/clientContract.js"

// The contract lives in internal/clientContract.ts, which the socket code (internal/client.ts) imports too: neither
// module imports this one, so there is no cycle.
export {
  CapacityReachedError,
  ConnectError,
  ConnectionClosedError,
  isClientError,
  McpError,
  ProtocolError,
  RequestTimeoutError,
  ServerError,
  SessionLostError
} from "./internal/clientContract.js"
export type { ClientError, ClientOptions, OpenEnvClient, StepResult } from "./internal/clientContract.js"

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

/**
 * Sets how many sessions this process opens at once on the server at `url` (the `--env-concurrency` knob): every
 * client of that URL shares the limit, and one past it waits for a session (at most its `capacityWait`).
 */
export const limitSessions: (url: string, maxSessions: number) => Effect.Effect<void> = internal.limitSessions
