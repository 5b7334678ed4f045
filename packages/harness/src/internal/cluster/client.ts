/**
 * The trainer's side: a `RolloutGroups` service that sends each group of a batch to the cluster as one persisted
 * message and reads the records back from the groups' rows.
 *
 * - Lease: the run's advisory lock is taken first (store.ts); a second trainer on the run is refused.
 * - Dedup: a group is one entity with one message (primary key), so a re-sent group meets its stored message and
 *   reply; its records are one row per group (the first finished attempt's). The batch is complete only when every
 *   group has its row; an interrupted attempt has none, so it is never counted.
 * - Cleanup: once read, the batch's rows, its attempts (their re-runs counted in the run's row) and its messages and
 *   replies (`MessageStorage.clearAddress`) are deleted, and so are replies left by late duplicates of earlier
 *   batches (store.ts); a batch the watchdog fails is deleted the same way, so runners stop re-running it.
 * - Watchdog: while waiting, the batch's messages are checked every few seconds; unread ones (no runner picked them
 *   up) for longer than `watchdog`, or no healthy runner for as long, fail the batch with the cause named. Messages
 *   that are read but never finish are the other way a run hangs: a runner whose event loop blocks past its shard
 *   locks (a CPU-bound environment, uncapped) loses its shards, the group restarts, blocks the next runner, and so
 *   on. A group started `maxAttempts` times without finishing fails the batch too, naming the blocks the runners
 *   recorded (`blocked_ms` of its attempts) against the lock timings, or, with none recorded, runners dying on it.
 */
import * as EntityAddress from "@effect/cluster/EntityAddress"
import * as EntityId from "@effect/cluster/EntityId"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as RolloutGroups from "@envtrain/grpo/RolloutGroups"
import type * as Episode from "@envtrain/rollout/Episode"
import { Deferred, Duration, Effect } from "effect"
import * as Entity from "./entity.js"
import * as Store from "./store.js"

/** The shard locks' timings, as the runners use them: what a runner's event loop must not be blocked past. */
export interface LockTimings {
  /** How often a runner refreshes its locks; a refresh unanswered this long loses them all. */
  readonly refresh: Duration.Duration
  /** How long an unrefreshed lock lasts before another runner may take its shard. */
  readonly expiry: Duration.Duration
}

export interface ClientOptions {
  readonly runId: string
  readonly spec: Store.RunSpec
  readonly watchdog: Duration.DurationInput
  readonly maxAttempts: number
  readonly locks: LockTimings
}

const problem = (text: string) => new RolloutGroups.RolloutGroupsError({ problem: text })

const inSeconds = (ms: number) => Number((ms / 1000).toFixed(1))

/** Why group `restarted.group` of batch `key` keeps starting over, from what its attempts' rows say. */
export const livelockProblem = (runId: string, key: string, restarted: Store.Restarted, locks: LockTimings) => {
  const refresh = Duration.toMillis(locks.refresh)
  const expiry = Duration.toMillis(locks.expiry)
  const what = `group ${restarted.group} of batch ${key} (run ${runId}) was started ${restarted.attempts} times in ` +
    `${inSeconds(restarted.seconds * 1000)} s without finishing (runners: ${restarted.runners})`
  if (restarted.blockedMs >= refresh) {
    const slower = expiry < Duration.toMillis(ShardingConfig.defaults.shardLockExpiration)
      ? `, or use the default (slower) failover settings (without --fast-failover / fastFailover: locks expire after ${
        inSeconds(Duration.toMillis(ShardingConfig.defaults.shardLockExpiration))
      } s)`
      : ""
    return problem(
      `${what}: runner event loops were blocked for up to ${inSeconds(restarted.blockedMs)} s while it was out, ` +
        `past the shard locks (refreshed every ${inSeconds(refresh)} s, expiring after ${inSeconds(expiry)} s), so ` +
        `its runners lost their shards and the group started again, over and over. Cap the groups per runner ` +
        `with --max-groups so that no turn of a runner's event loop runs that long (a CPU-bound environment), ` +
        `give runners cores of their own${slower}`
    )
  }
  return problem(
    `${what}: every attempt stopped before it stored its records, and its runners recorded no event-loop block ` +
      `as long as the shard-lock refresh (${inSeconds(refresh)} s${
        restarted.blockedMs > 0 ? `; the longest: ${inSeconds(restarted.blockedMs)} s` : ""
      }): they died during it (killed, out of memory: see their logs), or lost their shards to runners joining ` +
      `and leaving; fix the runners, or raise maxAttempts (now ${restarted.attempts}) if runners are restarted ` +
      `one by one on purpose while groups run long`
  )
}

interface Watch {
  readonly runId: string
  readonly key: string
  readonly limit: Duration.Duration
  readonly maxAttempts: number
  readonly locks: LockTimings
}

/**
 * Fails once the batch's messages have gone unread, or no runner has been healthy, for `limit`, or a group of it has
 * started `maxAttempts` times without finishing.
 */
const watchdog = ({ key, limit, locks, maxAttempts, runId }: Watch) =>
  Effect.gen(function*() {
    const prefix = Entity.entityId(runId, key, 0).slice(0, -1)
    let unreadSince: number | undefined
    let noRunnerSince: number | undefined
    const every = Duration.millis(Math.min(2000, Math.max(100, Duration.toMillis(limit) / 4)))
    while (true) {
      yield* Effect.sleep(every)
      const now = Date.now()
      const unread = yield* Store.throughOutage(limit)(Store.unreadMessages(prefix))
      const runners = yield* Store.throughOutage(limit)(Store.healthyRunners)
      unreadSince = unread === 0 ? undefined : unreadSince ?? now
      noRunnerSince = runners > 0 ? undefined : noRunnerSince ?? now
      const seconds = (Duration.toMillis(limit) / 1000).toFixed(0)
      if (noRunnerSince !== undefined && now - noRunnerSince >= Duration.toMillis(limit)) {
        return yield* problem(
          `no healthy cluster runner for ${seconds} s while ${unread} rollout-group message(s) of ${prefix} wait: ` +
            `start \`envtrain runner --postgres URL\` processes on this database, or train without --cluster`
        )
      }
      if (unreadSince !== undefined && now - unreadSince >= Duration.toMillis(limit)) {
        return yield* problem(
          `${unread} rollout-group message(s) of ${prefix} have not been read by any runner for ${seconds} s ` +
            `although ${runners} runner(s) are registered: their shards are held by a runner that does not read ` +
            `(hung, or its event loop blocked), or the storage stalled; restart that runner`
        )
      }
      const restarted = yield* Store.throughOutage(limit)(Store.restartedGroup(runId, key, maxAttempts))
      if (restarted !== undefined) return yield* livelockProblem(runId, key, restarted, locks)
    }
  })

export const make = (options: ClientOptions) =>
  Effect.gen(function*() {
    const { runId } = options
    const limit = Duration.decode(options.watchdog)
    const durable = Store.throughOutage(limit)
    yield* Store.migrate
    const first = yield* Store.lease(runId)
    if (!first.taken) {
      return yield* problem(
        `run ${runId} is driven by another trainer (it holds the run's lease on this Postgres): stop it, or use ` +
          `another run id / output directory`
      )
    }
    // The lease lives with its session: after a Postgres restart it is taken again, unless another trainer was
    // quicker, which fails the run.
    const lost = yield* Deferred.make<never, RolloutGroups.RolloutGroupsError>()
    let held = first.check
    yield* Effect.gen(function*() {
      while (true) {
        yield* Effect.sleep("2 seconds")
        if (yield* Effect.orElseSucceed(held, () => false)) continue
        const again = yield* durable(Store.lease(runId))
        if (!again.taken) {
          return yield* problem(`run ${runId} lost its lease while Postgres was away: another trainer took the run`)
        }
        held = again.check
      }
    }).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(problem(`the run's lease could not be renewed: ${e.message}`))),
      Effect.catchAll((e) => Deferred.fail(lost, e)),
      Effect.forkScoped
    )
    yield* Store.putRun(runId, options.spec)
    const makeClient = yield* Entity.RolloutGroup.client
    const sharding = yield* Sharding.Sharding
    const storage = yield* MessageStorage.MessageStorage
    const context = yield* Effect.context<SqlClient.SqlClient>()

    const clear = (key: string, groups: number) =>
      Effect.forEach(Array.from({ length: groups }, (_, g) => g), (g) => {
        const entityId = EntityId.make(Entity.entityId(runId, key, g))
        return durable(storage.clearAddress(EntityAddress.make({
          shardId: sharding.getShardId(entityId, "default"),
          entityType: Entity.RolloutGroup.type,
          entityId
        })))
      }, { discard: true }).pipe(Effect.zipRight(durable(Store.dropOrphanReplies)))
    // A batch the watchdog failed: deleted, so the runners stop re-running it (a resumed run sends it again). At
    // most a few seconds: the storage may be what failed.
    const abandon = (key: string, groups: number) =>
      Effect.zipRight(Store.dropBatch(runId, key), clear(key, groups)).pipe(
        Effect.timeout("10 seconds"),
        Effect.catchAllCause((cause) => Effect.logWarning(`cluster: batch ${key} could not be deleted`, cause))
      )
    yield* durable(Store.dropOrphanReplies)

    const run = (batch: RolloutGroups.Batch) =>
      Effect.gen(function*() {
        const key = Entity.batchKey(batch)
        yield* durable(Store.putBatch(runId, key, batch))
        const send = Effect.forEach(batch.rows, (_, group) =>
          durable(
            makeClient(Entity.entityId(runId, key, group)).RunGroup({
              runId,
              step: batch.step,
              microBatch: batch.microBatch,
              round: batch.round,
              group,
              seed: batch.seed,
              policyVersion: batch.policyVersion
            })
          ), { concurrency: "unbounded" })
        yield* Effect.raceFirst(
          send,
          watchdog({ runId, key, limit, maxAttempts: options.maxAttempts, locks: options.locks })
        ).pipe(Effect.tapErrorTag("RolloutGroupsError", () => abandon(key, batch.rows.length)))
        const rows = yield* durable(Store.getGroups(runId, key))
        const byGroup = new Map(rows.map((r) => [r.grp, r.body]))
        const records: Array<Episode.EpisodeRecord<unknown>> = []
        for (let g = 0; g < batch.rows.length; g++) {
          const body = byGroup.get(g)
          if (body === undefined) {
            return yield* problem(`group ${g} of batch ${key} replied but has no records row: the storage lost it`)
          }
          records.push(...(JSON.parse(body) as Array<Episode.EpisodeRecord<unknown>>))
        }
        const reruns = yield* durable(Store.dropBatch(runId, key))
        if (reruns > 0) {
          yield* Effect.logInfo(
            `cluster: ${reruns} group attempt(s) of batch ${key} ran again (a runner died or hung, or a shard moved); ` +
              `each group was counted once`
          )
        }
        yield* clear(key, batch.rows.length)
        return records
      }).pipe(
        Effect.catchTags({
          SqlError: (e) => Effect.fail(problem(`cluster storage: ${e.message}`)),
          PersistenceError: (e) => Effect.fail(problem(`cluster storage: ${e.message}`)),
          GroupFailed: (e) => Effect.fail(problem(`a runner could not roll out a group: ${e.problem}`)),
          MailboxFull: (e) => Effect.fail(problem(`a runner's mailbox is full: ${String(e)}`)),
          AlreadyProcessingMessage: (e) => Effect.fail(problem(`cluster: ${String(e)}`))
        }),
        Effect.provide(context),
        Effect.raceFirst(Deferred.await(lost))
      )
    return { run }
  })
