/**
 * The OpenEnv-compatible server: serves any {@link OpenEnvDefinition} over OpenEnv's wire protocol — `GET /health`,
 * `/metadata`, `/schema`, `/openapi.json`, `/state`, stateless `POST /reset` and `/step`, the `/ws` session protocol,
 * and MCP over `POST /mcp`, `WS /mcp` and `{"type":"mcp"}` frames (an HTTP-MCP session drives `/ws` too when the socket
 * names it, `/ws?session_id=`, as OpenEnv's `MCPToolClient` does), and OpenEnv's plain-HTTP Task API
 * (`/list_environments`, `/<env>/splits`, `/<env>/task_range`, …) over the definition's `tasks` (see `TaskApi`) — so
 * TRL's and OpenEnv's Python clients work against it unchanged.
 *
 * Frames are read as OpenEnv's server reads them (CPython's `json.loads`: NaN/Infinity accepted, its
 * `JSONDecodeError` texts in INVALID_JSON; pydantic's error entries, `url` included, in VALIDATION_ERROR) and
 * written as it writes them (pydantic's compact JSON, Python floats for definitions with `pythonFloats`).
 * Environments whose step answers synchronously are stepped without a fiber per frame.
 *
 * Beyond OpenEnv: the idle timeout also closes the socket, frames above `maxFrameBytes` close only that socket,
 * keep-alive pings drop dead peers, and closing the scope closes every session (graceful shutdown).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Server } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const server = yield* Server.serve(myDefinition, { port: 0, maxConcurrentEnvs: 64 })
 *   console.log(`listening on ${server.url}`)
 *   yield* Effect.never
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer } from "effect"
import * as internal from "./internal/server.js"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import * as ServerOptions from "./ServerOptions.js"

/** A running server. */
export interface RunningServer {
  readonly host: string
  /** The bound port (useful with `port: 0`). */
  readonly port: number
  /** `http://host:port` — pass it to the client or to TRL's `base_url`. */
  readonly url: string
  /** Sessions holding a slot right now (WS `/ws`, WS `/mcp`, HTTP-MCP sessions, including ones still initialising). */
  readonly activeSessions: Effect.Effect<number>
  readonly maxConcurrentEnvs: number
}

/**
 * Serves `definition` until the scope closes. Fails with `ConcurrencyConfigurationError` (OpenEnv's exact text) when
 * more than one session is asked of an environment that does not support concurrent sessions.
 */
export const serve = (definition: OpenEnvDefinition, options: ServerOptions.ServerOptions = {}) =>
  Effect.flatMap(ServerOptions.resolve(definition, options), (resolved) => internal.make(definition, resolved)).pipe(
    Effect.withSpan("Server.serve", { attributes: { environment: definition.name } })
  )

/** The running server as a service, for programs that build it as a Layer. */
export class Server extends Context.Tag("@envtrain/env/Server")<Server, RunningServer>() {
  /** Serves `definition` for the lifetime of the layer. */
  static readonly layer = (definition: OpenEnvDefinition, options: ServerOptions.ServerOptions = {}) =>
    Layer.scoped(Server, serve(definition, options))
}
