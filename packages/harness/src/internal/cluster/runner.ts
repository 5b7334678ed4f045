/**
 * A runner's side: the rollout-group entity's handler. Per message it reads the run's spec (once per run) and the
 * batch row, rolls the group out with the trainer's own episode loop (`RolloutGroups.runGroup`: same seeds as in
 * process) on the run's environment, generating on the run's policy servers, writes the records as the group's row
 * and replies with its key. Interrupted (SIGKILL, the shard moved away), it writes nothing: the next owner of the
 * shard runs the group again from scratch.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import { Environment, Registry } from "@envtrain/env"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as RolloutGroups from "@envtrain/grpo/RolloutGroups"
import * as Episode from "@envtrain/rollout/Episode"
import * as Policy from "@envtrain/rollout/Policy"
import { Cache, Duration, Effect, Layer, type Scope } from "effect"
import * as Entity from "./entity.js"
import * as Store from "./store.js"

/** What a runner builds once per run: the environment's sessions and the model's tokenizer and chat template. */
interface RunContext {
  readonly open: (
    row: Readonly<Record<string, unknown>>
  ) => Effect.Effect<Episode.Session<unknown, never>, never, Scope.Scope>
  readonly model: Checkpoint.Model
  readonly policies: ReadonlyArray<Policy.Policy["Type"]>
}

const failed = (problem: string) => new Entity.GroupFailed({ problem })

// A Postgres restart or failover is waited out this long before a group fails with it.
const durable = Store.throughOutage(Duration.minutes(1))

/** The model a policy server serves: the first of `GET /v1/models`. */
const servedModel = (client: HttpClient.HttpClient, url: string) =>
  client.get(`${url.replace(/\/+$/, "")}/v1/models`).pipe(
    Effect.flatMap((res) => res.json),
    Effect.map((body) => (body as { data?: ReadonlyArray<{ id?: unknown }> }).data?.[0]?.id),
    Effect.timeout(Duration.seconds(30)),
    Effect.flatMap((id) =>
      typeof id === "string" ? Effect.succeed(id) : Effect.fail(`${url}/v1/models lists no model`)
    ),
    Effect.mapError((e) => failed(`policy server ${url}: ${typeof e === "string" ? e : String(e)}`))
  )

const runContext = (runId: string) =>
  Effect.gen(function*() {
    const spec = yield* durable(Store.getRun(runId))
    if (spec === undefined) {
      return yield* failed(`run ${runId} has no spec in envtrain_cluster_runs: its trainer has not started it`)
    }
    const entry = yield* Effect.mapError(Registry.load(spec.environment), (e) => failed(e.message))
    const environment = spec.envUrl === undefined ? entry.environment : entry.remote?.(spec.envUrl)
    if (environment === undefined) {
      return yield* failed(
        spec.envUrl === undefined
          ? `environment ${spec.environment} has no in-process implementation to run on a runner: give envUrl`
          : `environment ${spec.environment} has no typed client for the server at ${spec.envUrl}`
      )
    }
    const model = yield* Effect.mapError(
      Checkpoint.load(spec.model),
      (e) => failed(`model ${spec.model}: ${e.message}`)
    )
    if (spec.policyServers.length === 0) {
      return yield* failed(`run ${runId} names no policy servers: runners generate on them (set policyServers)`)
    }
    const client = yield* HttpClient.HttpClient
    const servedModelName = spec.servedModelName ?? (yield* servedModel(client, spec.policyServers[0]))
    const policies = yield* Effect.forEach(spec.policyServers, (url) =>
      Effect.provide(
        Policy.Policy,
        Policy.openAiCompatible({ baseUrl: url, model: servedModelName }).pipe(
          Layer.provide(Layer.succeed(HttpClient.HttpClient, client))
        )
      ))
    const open = (row: Readonly<Record<string, unknown>>) =>
      Effect.map(Effect.orDie(Environment.episode(environment, row)), Episode.fromEnvironment)
    return { open, model, policies } satisfies RunContext
  })

// The event-loop watch: a tick every 200 ms; a tick a second or more late means the loop was held that long.
const tick = 200
const worthRecording = 1000

/**
 * For the scope, records every block of this process's event loop of a second or more on the runner's attempts in
 * flight (`Store.recordBlock`): a block past the shard locks loses the runner its shards, and the trainer's livelock
 * watchdog names it from these rows. Best effort: a failed write is logged and the watch goes on.
 */
const watchEventLoop = (name: string) =>
  Effect.gen(function*() {
    let last = performance.now()
    while (true) {
      yield* Effect.sleep(tick)
      const late = performance.now() - last - tick
      if (late >= worthRecording) {
        yield* Effect.logWarning(
          `cluster runner ${name}: event loop blocked for ${(late / 1000).toFixed(1)} s (a CPU-bound environment? ` +
            `cap this runner's groups with --max-groups)`
        )
        yield* Store.recordBlock(name, Math.round(late)).pipe(
          Effect.timeout("30 seconds"),
          Effect.catchAllCause((cause) => Effect.logDebug("cluster runner: the block was not recorded", cause))
        )
      }
      last = performance.now()
    }
  }).pipe(Effect.forkScoped)

/**
 * The entity's handler layer; `name` is what the runner writes beside each group (its address). With `maxGroups`, at
 * most that many groups roll out at once; the others wait here for a permit before their attempt starts.
 */
export const layer = (name: string, maxGroups?: number) =>
  Layer.unwrapScoped(Effect.gen(function*() {
    if (maxGroups !== undefined && (!Number.isInteger(maxGroups) || maxGroups < 1)) {
      return yield* Effect.dieMessage(`maxGroups must be a whole number of at least 1 (got ${maxGroups})`)
    }
    yield* watchEventLoop(name)
    // Made once per runner, here: the entity's handlers are built once per entity, i.e. per group.
    const capacity = maxGroups === undefined ? undefined : yield* Effect.makeSemaphore(maxGroups)
    const limited = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      capacity === undefined ? effect : capacity.withPermits(1)(effect)
    const contexts = yield* Cache.make({
      capacity: 16,
      timeToLive: Duration.hours(1),
      lookup: (runId: string) => runContext(runId)
    })
    const sqlContext = yield* Effect.context<SqlClient.SqlClient>()
    return Entity.RolloutGroup.toLayer({
      RunGroup: ({ payload }) =>
        limited(Effect.gen(function*() {
          // A failed lookup is not kept: the next group of the run tries again.
          const context = yield* Effect.tapError(contexts.get(payload.runId), () => contexts.invalidate(payload.runId))
          const key = Entity.batchKey(payload)
          const batch = (yield* durable(Store.getBatch(payload.runId, key))) as RolloutGroups.Batch | undefined
          if (batch === undefined) return yield* failed(`run ${payload.runId} has no batch ${key}`)
          yield* durable(Store.startAttempt(payload.runId, key, payload.group, name))
          // A policy server per group, in turn; its completions carry the version the trainer dispatched at (the
          // servers' own counters start at their first push).
          const policy = context.policies[payload.group % context.policies.length]
          const records = yield* RolloutGroups.runGroup(batch, payload.group, {
            model: {
              tokenizer: context.model.tokenizer,
              chatTemplate: context.model.chatTemplate,
              maxBatchSize: batch.groupSize,
              generate: () => Effect.die("runners generate request by request (generateEach)"),
              generateEach: (request) =>
                Effect.map(policy.generate(request), (c) => ({ ...c, policyVersion: payload.policyVersion }))
            },
            open: context.open
          })
          const body = JSON.stringify(records)
          yield* durable(Store.putGroup(payload.runId, key, payload.group, body, name))
          yield* durable(Store.finishAttempt(payload.runId, key, payload.group, name))
          return { group: payload.group, episodes: records.length, bytes: Buffer.byteLength(body), runner: name }
        })).pipe(
          Effect.catchTags({
            SqlError: (e) => Effect.fail(failed(`storage: ${e.message}`))
          }),
          Effect.catchAll((e) => Effect.fail(e._tag === "GroupFailed" ? e : failed(String(e)))),
          Effect.provide(sqlContext)
        )
    })
  }))
