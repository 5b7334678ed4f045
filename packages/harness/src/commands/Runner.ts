/**
 * `envtrain runner --postgres URL [--host] [--port] [--health-port] [--fast-failover] [--max-groups N]`: a cluster
 * runner that rolls out the rollout groups of trainers started with `--cluster URL` (see {@link Cluster}), until
 * SIGINT/SIGTERM. `--health-port` serves `GET /health` (200 once the runner has registered), for a process
 * supervisor's probe; `--max-groups` caps the groups it rolls out at once (the rest wait their turn on it).
 *
 * @example
 * ```ts
 * import { Command } from "@effect/cli"
 * import * as Runner from "@envtrain/harness/commands/Runner"
 *
 * const cli = Command.make("envtrain").pipe(Command.withSubcommands([Runner.command]))
 * // envtrain runner --postgres postgres://envtrain@db:5432/envtrain --host 10.0.0.7 --port 34431
 * ```
 *
 * @since 0.0.0
 */
import { Command, Options } from "@effect/cli"
import { Effect, Layer, Option } from "effect"
import * as Http from "node:http"
import * as Cluster from "../Cluster.js"

const postgres = Options.text("postgres").pipe(
  Options.withDescription("the cluster's Postgres, e.g. postgres://user@host:5432/db (the trainer's --cluster URL)")
)
const host = Options.text("host").pipe(
  Options.withDefault("127.0.0.1"),
  Options.withDescription("the address other cluster nodes reach this runner at")
)
const port = Options.integer("port").pipe(Options.withDefault(34431), Options.withDescription("cluster port"))
const healthPort = Options.integer("health-port").pipe(
  Options.optional,
  Options.withDescription("serve GET /health on this port (for probes)")
)
const fastFailover = Options.boolean("fast-failover").pipe(
  Options.withDescription("health checks every second, shard moves within seconds (trainer and runners alike)")
)
const maxGroups = Options.integer("max-groups").pipe(
  Options.optional,
  Options.withDescription("roll out at most this many groups at once (the machine's capacity; default: no cap)")
)

/** `GET /health` on `port` for the Scope. */
const health = (port: number, host: string) =>
  Effect.acquireRelease(
    Effect.async<Http.Server, Error>((resume) => {
      const server = Http.createServer((req, res) => {
        const ok = req.url === "/health"
        res.writeHead(ok ? 200 : 404, { "content-type": "application/json" })
        res.end(JSON.stringify(ok ? { status: "healthy" } : { error: "not found" }))
      })
      server.once("error", (e) => resume(Effect.fail(e)))
      server.listen(port, host, () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
      })
  )

/** `runner`; runs until interrupted (NodeRuntime.runMain turns SIGINT/SIGTERM into interruption). */
export const command = Command.make(
  "runner",
  { postgres, host, port, healthPort, fastFailover, maxGroups },
  (args) =>
    Effect.gen(function*() {
      // Built in this Scope: registered with the cluster once this returns; a failure to start fails the command.
      yield* Layer.build(Cluster.runner({
        postgres: args.postgres,
        host: args.host,
        port: args.port,
        ...(Option.isSome(args.maxGroups) ? { maxGroups: args.maxGroups.value } : {}),
        ...(args.fastFailover ? Cluster.fastFailover : {})
      }))
      if (Option.isSome(args.healthPort)) yield* health(args.healthPort.value, args.host)
      yield* Effect.log(`envtrain runner on ${args.host}:${args.port}`)
      return yield* Effect.never
    }).pipe(Effect.scoped)
).pipe(Command.withDescription("Roll out the rollout groups of trainers started with --cluster (a cluster runner)."))
