/**
 * `envtrain runner` as a child process: a cluster port and a health port on loopback (free ones unless given), ready
 * once `GET /health` answers (the runner has registered with the cluster), stopped with its scope (SIGTERM, then
 * SIGKILL). Tests and benchmarks start their runners here; `kill` sends any signal (failover tests).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { RunnerProcess } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const runner = yield* RunnerProcess.launch({ postgres: "postgres://envtrain@127.0.0.1:5432/postgres" })
 *   yield* runner.kill("SIGKILL")
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Launcher } from "@envtrain/env"
import { type Duration, Effect } from "effect"

/** Where the runner's cluster is and how it behaves. */
export interface LaunchOptions {
  readonly postgres: string
  /** The cluster port (default a free loopback port). */
  readonly port?: number
  /** `--fast-failover` (the trainer must use `Cluster.fastFailover` too). */
  readonly fastFailover?: boolean
  /** `--max-groups`: the most groups it rolls out at once (default no cap). */
  readonly maxGroups?: number
  /** How long to wait for `/health`. Default 120 s. */
  readonly healthTimeout?: Duration.DurationInput
}

/**
 * Starts `envtrain runner` in its own process; the scope stops it. Fails with env's `LaunchError` (what the process
 * printed) when it exits or is not healthy in time.
 *
 * @since 0.0.0
 */
export const launch = (options: LaunchOptions) =>
  Effect.gen(function*() {
    const port = options.port ?? (yield* Launcher.freePort())
    const launched = yield* Launcher.launch({
      command: process.execPath,
      args: [
        ...Launcher.nodeEntry(new URL("./bin.js", import.meta.url)),
        "runner",
        "--postgres",
        options.postgres,
        "--port",
        String(port),
        "--health-port",
        "{port}",
        ...(options.fastFailover === true ? ["--fast-failover"] : []),
        ...(options.maxGroups === undefined ? [] : ["--max-groups", String(options.maxGroups)])
      ],
      healthTimeout: options.healthTimeout ?? "120 seconds"
    })
    return { ...launched, clusterPort: port }
  })
