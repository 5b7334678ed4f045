/**
 * Rollouts on a cluster: `envtrain runner --postgres URL` processes execute the trainer's rollout groups, one
 * persisted message per group, on @effect/cluster (0.60, the Effect 3 line) with its SQL storage on Postgres. The
 * trainer sends through {@link client}, a `RolloutGroups` layer (so `Trainer.train` is unchanged); a runner is
 * {@link runner}. Shards of groups move to the surviving runners when one dies; a killed runner's groups run again
 * from scratch (at-least-once), and the trainer counts each group once (internal/cluster/client.ts).
 *
 * Every use of @effect/cluster, @effect/sql and @effect/sql-pg is in this module and `internal/cluster/`, so the
 * move to Effect 4's `effect/unstable/cluster` touches nothing else.
 *
 * @example
 * ```ts
 * import { Cluster } from "@envtrain/harness"
 * import { Trainer } from "@envtrain/grpo"
 * import { Effect } from "effect"
 *
 * // Beside: `envtrain runner --postgres postgres://u@db/envtrain` on each rollout machine.
 * const run = Trainer.train(options).pipe(Effect.provide(Cluster.client({
 *   postgres: "postgres://u@db/envtrain",
 *   runId: "catch-1",
 *   spec: { environment: "catch", model: "models/tiny-sft", policyServers: ["http://gen-0:8000"], servedModelName: "tiny" }
 * })))
 * ```
 *
 * @since 0.0.0
 */
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { NodeHttpClient } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Registry } from "@envtrain/env"
import * as CommandFile from "@envtrain/grpo/CommandFile"
import * as RolloutGroups from "@envtrain/grpo/RolloutGroups"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import * as NodePath from "node:path"
import * as internalClient from "./internal/cluster/client.js"
import * as internalRunner from "./internal/cluster/runner.js"
import * as Sharding from "./internal/cluster/sharding.js"
import type * as Store from "./internal/cluster/store.js"

/**
 * What a runner needs of a run: the environment (a registry spec), the model directory (tokenizer, chat template)
 * and the policy servers it generates on, with their served model name.
 *
 * @since 0.0.0
 */
export type RunSpec = Store.RunSpec

/**
 * The cluster's timing, the same on the trainer and every runner. Defaults are @effect/cluster's, except fewer
 * shards (64: a run has tens of groups per batch, and each shard is a lock to refresh) and a 1 s poll for messages
 * whose runner died (the default 10 s would be most of a failover).
 *
 * @since 0.0.0
 */
export interface Settings {
  readonly shardsPerGroup?: number
  /** How often a runner reads its shards' unprocessed messages from storage. Default 1 s. */
  readonly messagePollInterval?: Duration.DurationInput
  /** How often runners check the others' health; a dead runner's shards move after this. Default 1 minute. */
  readonly runnerHealthCheckInterval?: Duration.DurationInput
  /** How often shard assignments are refreshed. Default 3 s. */
  readonly refreshAssignmentsInterval?: Duration.DurationInput
  readonly shardLockRefreshInterval?: Duration.DurationInput
  readonly shardLockExpiration?: Duration.DurationInput
  /** How long an entity may take to stop when its shard moves (a runner joined) before it is interrupted. */
  readonly entityTerminationTimeout?: Duration.DurationInput
  /**
   * Shard locks as Postgres advisory locks (@effect/cluster's default) instead of rows that expire after
   * `shardLockExpiration`. Default false: an advisory lock lives as long as its holder's connection, so a runner that
   * hangs without dying (SIGSTOP, a wedged host) would keep its shards, and their groups, forever; a row lock expires
   * and the shards move. The price: a dead runner's shards wait for the expiry too.
   */
  readonly advisoryLocks?: boolean
  /** How long one health ping of a runner may take (default 10 s, upstream's). */
  readonly pingTimeout?: Duration.DurationInput
  /** Pings after the first before a runner is declared dead (default 5, upstream's). */
  readonly pingRetries?: number
}

/**
 * Settings for quick failover on one site: health checks every second and shard moves within seconds.
 *
 * @since 0.0.0
 */
export const fastFailover: Settings = {
  runnerHealthCheckInterval: "1 second",
  refreshAssignmentsInterval: "500 millis",
  messagePollInterval: "500 millis",
  shardLockRefreshInterval: "1 second",
  shardLockExpiration: "5 seconds",
  pingTimeout: "1 second",
  pingRetries: 2
}

const shardingConfig = (settings: Settings): Partial<ShardingConfig.ShardingConfig["Type"]> => ({
  shardsPerGroup: settings.shardsPerGroup ?? 64,
  shardLockDisableAdvisory: settings.advisoryLocks !== true,
  entityMessagePollInterval: settings.messagePollInterval ?? Duration.seconds(1),
  ...(settings.runnerHealthCheckInterval === undefined
    ? {}
    : { runnerHealthCheckInterval: settings.runnerHealthCheckInterval }),
  ...(settings.refreshAssignmentsInterval === undefined
    ? {}
    : { refreshAssignmentsInterval: settings.refreshAssignmentsInterval }),
  ...(settings.shardLockRefreshInterval === undefined
    ? {}
    : { shardLockRefreshInterval: settings.shardLockRefreshInterval }),
  ...(settings.shardLockExpiration === undefined ? {} : { shardLockExpiration: settings.shardLockExpiration }),
  ...(settings.entityTerminationTimeout === undefined
    ? {}
    : { entityTerminationTimeout: settings.entityTerminationTimeout })
})

// The application name says which node a Postgres session (and so an advisory shard lock) belongs to.
const postgres = (url: string, applicationName: string) =>
  PgClient.layer({ url: Redacted.make(url), connectTimeout: Duration.seconds(10), applicationName })

/**
 * Options of {@link runner}.
 *
 * @since 0.0.0
 */
export interface RunnerOptions extends Settings {
  readonly postgres: string
  /** The address the other nodes reach this runner at (and it listens on). */
  readonly host: string
  readonly port: number
  /**
   * The most groups this runner rolls out at once (its machine's capacity: sandboxes, env sessions, memory); the
   * others wait on it for a turn. Default: no cap (every group sent to it runs at once).
   */
  readonly maxGroups?: number
}

/**
 * A runner: registers with the cluster, takes its share of the shards and rolls out the groups sent to them, until
 * the layer's scope closes.
 *
 * @since 0.0.0
 */
export const runner = (options: RunnerOptions) => {
  const address = RunnerAddress.make(options.host, options.port)
  return internalRunner.layer(`${options.host}:${options.port}`, options.maxGroups).pipe(
    Layer.provide(Sharding.runner({ ...shardingConfig(options), runnerAddress: Option.some(address) }, {
      pingTimeout: options.pingTimeout ?? Duration.seconds(10),
      pingRetries: options.pingRetries ?? 5
    })),
    Layer.provide(NodeHttpClient.layerUndici),
    Layer.provide(postgres(options.postgres, `envtrain-runner ${options.host}:${options.port}`))
  )
}

/**
 * Options of {@link client}.
 *
 * @since 0.0.0
 */
export interface ClientOptions extends Settings {
  readonly postgres: string
  /** The run's id: its lease and its messages' prefix. One trainer per run id at a time. */
  readonly runId: string
  readonly spec: RunSpec
  /**
   * How long the batch's messages may go unread by every runner, or no runner be healthy, before the run fails
   * naming the cause. Default 2 minutes.
   */
  readonly watchdog?: Duration.DurationInput
  /**
   * How many times one group may be started without finishing before the run fails naming the cause (the livelock
   * watchdog): runners whose event loops block past their shard locks (a CPU-bound environment on an uncapped
   * runner) lose their shards and restart the group forever, or runners die on it. Default
   * {@link defaultMaxAttempts}.
   */
  readonly maxAttempts?: number
}

/**
 * The livelock watchdog's default: a group started 8 times without finishing fails the run. A kill or a joining
 * runner starts the groups it interrupts once more (1-2 re-runs per kill in the failover tests and bench), so a
 * healthy run stays well under it even when runners are restarted one by one during a batch; a livelocked one (a
 * restart every few seconds to a minute, depending on the lock settings) reaches it in minutes.
 *
 * @since 0.0.0
 */
export const defaultMaxAttempts = 8

// The lock timings as @effect/cluster applies them (internal/shardLock.ts there): a refresh every
// min(refresh interval, expiry / 3), each given that long to answer.
const lockTimings = (settings: Settings) => {
  const expiry = Duration.decode(settings.shardLockExpiration ?? ShardingConfig.defaults.shardLockExpiration)
  const refresh = Duration.decode(
    settings.shardLockRefreshInterval ?? ShardingConfig.defaults.shardLockRefreshInterval
  )
  return { expiry, refresh: Duration.min(refresh, Duration.unsafeDivide(expiry, 3)) }
}

/**
 * The trainer's side: `RolloutGroups` through the cluster, holding the run's lease for the layer's lifetime. Fails
 * to build (with `RolloutGroupsError`) when another trainer holds the run.
 *
 * @since 0.0.0
 */
export const client = (options: ClientOptions) =>
  Layer.unwrapEffect(Effect.suspend(() => {
    // Checked before anything connects.
    const maxAttempts = options.maxAttempts ?? defaultMaxAttempts
    if (!Number.isInteger(maxAttempts) || maxAttempts < 2) {
      return Effect.fail(
        new RolloutGroups.RolloutGroupsError({
          problem: `cluster: maxAttempts must be a whole number of at least 2 (a group's first attempt and one ` +
            `re-run after a kill; default ${defaultMaxAttempts}), got ${maxAttempts}`
        })
      )
    }
    return Effect.succeed(
      Layer.scoped(
        RolloutGroups.RolloutGroups,
        internalClient.make({
          runId: options.runId,
          spec: options.spec,
          watchdog: options.watchdog ?? "2 minutes",
          maxAttempts,
          locks: lockTimings(options)
        }).pipe(
          Effect.catchTag("SqlError", (e) =>
            Effect.fail(new RolloutGroups.RolloutGroupsError({ problem: `cluster storage: ${e.message}` })))
        )
      ).pipe(
        Layer.provide(Sharding.client(shardingConfig(options))),
        Layer.provide(postgres(options.postgres, `envtrain-trainer ${options.runId}`.slice(0, 63)))
      )
    )
  }))

/**
 * The client for a command file's run (`envtrain train`): with `cluster: { postgres }` in the file or `postgres`
 * given (`--cluster URL`), the layer; otherwise none. The run id is `cluster.runId`, else the output directory's
 * name; runners generate on the file's `policyServers` and open its `environment` (a single registry spec, in the
 * runner's process or on `envUrl`); `cluster.fastFailover` and `cluster.maxAttempts` are {@link fastFailover} and
 * {@link ClientOptions.maxAttempts}. Anything else is refused with the fix.
 *
 * @since 0.0.0
 */
export const forCommandFile = (path: string, overrides: ReadonlyArray<string>, postgres: string | undefined) =>
  Effect.gen(function*() {
    const { config, spec } = yield* CommandFile.load(path, overrides)
    const url = postgres ?? spec.cluster?.postgres
    if (url === undefined) return Option.none()
    const refuse = (problem: string) => new CommandFile.CommandFileError({ path, problem: `cluster: ${problem}` })
    if (typeof spec.environment !== "string") {
      return yield* refuse("runners open one environment by its registry name or module path: set environment to one")
    }
    if (spec.envUrl !== undefined && typeof spec.envUrl !== "string") {
      return yield* refuse("envUrl must be one URL (runners play one environment)")
    }
    if (config.policyServers.length === 0) {
      return yield* refuse("runners generate on policy servers: set policyServers (`envtrain serve-policy` URLs)")
    }
    // Runners run elsewhere (another working directory): module paths and the model directory made absolute.
    const resolved = (p: string) => Registry.isModulePath(p) ? NodePath.resolve(p) : p
    return Option.some(client({
      postgres: url,
      runId: spec.cluster?.runId ?? NodePath.basename(NodePath.resolve(config.outputDir)),
      spec: {
        environment: resolved(spec.environment),
        ...(spec.envUrl === undefined ? {} : { envUrl: spec.envUrl }),
        model: NodePath.resolve(spec.model),
        policyServers: config.policyServers
      },
      ...(spec.cluster?.fastFailover === true ? fastFailover : {}),
      ...(spec.cluster?.maxAttempts === undefined ? {} : { maxAttempts: spec.cluster.maxAttempts })
    }))
  })
