/**
 * Options of the OpenEnv-compatible server, and how the session limit is resolved (OpenEnv's rules plus the
 * `MAX_CONCURRENT_ENVS` variable that each OpenEnv app reads).
 *
 * @example
 * ```ts
 * import { Duration } from "effect"
 * import { ServerOptions } from "@envtrain/env"
 *
 * const options: ServerOptions.ServerOptions = { port: 0, maxConcurrentEnvs: 64, sessionTimeout: Duration.minutes(10) }
 * ```
 *
 * @since 0.0.0
 */
import { Config, Data, Duration, Effect, Option } from "effect"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import { concurrencyRefusalMessage } from "./Wire.js"

/** How to serve one environment. Every field is optional. */
export interface ServerOptions {
  /** Default "127.0.0.1". */
  readonly host?: string
  /** Default 8000; 0 picks a free port (read it back from the running server). */
  readonly port?: number
  /** Concurrent sessions (WS `/ws`, WS `/mcp`, HTTP MCP sessions). Default: `MAX_CONCURRENT_ENVS`, else the definition's default (1 if not concurrency-safe). */
  readonly maxConcurrentEnvs?: number
  /** Idle sessions (no reset/step/mcp for this long) are destroyed and their sockets closed. Default: none. */
  readonly sessionTimeout?: Duration.DurationInput
  /** Largest accepted client frame or HTTP body. Default 16 MiB (uvicorn's `ws_max_size`). */
  readonly maxFrameBytes?: number
  /** Server keep-alive ping interval; a socket that misses a pong by the next ping is terminated. Default 20 s; 0 disables. */
  readonly pingInterval?: Duration.DurationInput
}

/** The resolved options. */
export interface ResolvedServerOptions {
  readonly host: string
  readonly port: number
  readonly maxConcurrentEnvs: number
  readonly sessionTimeout: Option.Option<Duration.Duration>
  readonly maxFrameBytes: number
  readonly pingInterval: Option.Option<Duration.Duration>
}

/** OpenEnv's `ConcurrencyConfigurationError`: more than one session asked of an environment that is not concurrency-safe. */
export class ConcurrencyConfigurationError extends Data.TaggedError("ConcurrencyConfigurationError")<{
  readonly environment: string
  readonly maxConcurrentEnvs: number
}> {
  override get message() {
    return concurrencyRefusalMessage(this.environment, this.maxConcurrentEnvs)
  }
}

/** A value out of range (e.g. `maxConcurrentEnvs: 0`). */
export class InvalidServerOptions extends Data.TaggedError("InvalidServerOptions")<{
  readonly reason: string
}> {
  override get message() {
    return `Invalid server options: ${this.reason}`
  }
}

/** Reads `MAX_CONCURRENT_ENVS` (through Effect's `Config`, so tests can swap the provider). */
export const maxConcurrentEnvsConfig = Config.option(Config.integer("MAX_CONCURRENT_ENVS"))

/**
 * Resolves options against a definition: explicit option > `MAX_CONCURRENT_ENVS` > definition default
 * (1 when the environment does not support concurrent sessions). Refuses more than 1 session for such environments.
 */
export const resolve = Effect.fn("ServerOptions.resolve")(function*(
  definition: OpenEnvDefinition,
  options: ServerOptions
) {
  const fromEnv = yield* maxConcurrentEnvsConfig.pipe(
    Effect.mapError((e) => new InvalidServerOptions({ reason: `MAX_CONCURRENT_ENVS: ${e.message}` }))
  )
  const fallback = definition.supportsConcurrentSessions ? definition.defaultMaxConcurrentEnvs : 1
  const maxConcurrentEnvs = options.maxConcurrentEnvs ?? Option.getOrElse(fromEnv, () => fallback)
  if (!Number.isInteger(maxConcurrentEnvs) || maxConcurrentEnvs < 1) {
    return yield* new InvalidServerOptions({
      reason: `maxConcurrentEnvs must be an integer >= 1, got ${maxConcurrentEnvs}`
    })
  }
  if (maxConcurrentEnvs > 1 && !definition.supportsConcurrentSessions) {
    return yield* new ConcurrencyConfigurationError({ environment: definition.name, maxConcurrentEnvs })
  }
  const port = options.port ?? 8000
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    return yield* new InvalidServerOptions({ reason: `port must be 0..65535, got ${port}` })
  }
  const sessionTimeout = options.sessionTimeout === undefined
    ? Option.none()
    : Option.some(Duration.decode(options.sessionTimeout))
  if (Option.isSome(sessionTimeout) && Duration.toMillis(sessionTimeout.value) <= 0) {
    return yield* new InvalidServerOptions({ reason: "sessionTimeout must be > 0" })
  }
  const ping = Duration.decode(options.pingInterval ?? Duration.seconds(20))
  const resolved: ResolvedServerOptions = {
    host: options.host ?? "127.0.0.1",
    port,
    maxConcurrentEnvs,
    sessionTimeout,
    maxFrameBytes: options.maxFrameBytes ?? 16 * 1024 * 1024,
    pingInterval: Duration.toMillis(ping) > 0 ? Option.some(ping) : Option.none()
  }
  return resolved
})
