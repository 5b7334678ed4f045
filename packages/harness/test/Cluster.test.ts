// Rollouts on cluster runners: real `envtrain runner` child processes, a private Postgres, a reference policy server
// (`envtrain serve-policy --backend reference`: bit-exact generation, so "equal" is checked exactly) and Catch in
// each runner's process. Every run through the cluster must write the in-process run's metrics.jsonl and
// completions.jsonl (timing fields aside), whatever happens mid-step: a runner SIGKILLed or SIGSTOPped while it holds
// a group, a runner joining, Postgres restarted. The site (model, server, Postgres, the in-process run) is shared by
// the tests; each starts the runners it needs. Live clock.
import { Command, FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it, layer } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as CommandFile from "@envtrain/grpo/CommandFile"
import * as Metrics from "@envtrain/grpo/Metrics"
import * as RolloutGroups from "@envtrain/grpo/RolloutGroups"
import { Context, Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Ref, Scope, Stream } from "effect"
import { fileURLToPath } from "node:url"
import * as Cluster from "../src/Cluster.js"
import * as ClusterClient from "../src/internal/cluster/client.js"
import * as Store from "../src/internal/cluster/store.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import * as PostgresProcess from "../src/PostgresProcess.js"
import * as RunnerProcess from "../src/RunnerProcess.js"

const steps = 2

interface Site {
  readonly dir: string
  readonly server: { readonly url: string }
  readonly pg: PostgresProcess.Postgres
  readonly local: { readonly metrics: string; readonly completions: string }
}

// Catch's own reward is 0 for every episode of the untrained model (no update would happen): this one varies within
// a group, so each step changes the weights and a resume must restore them and the optimizer exactly.
const evenTokens = `export default function even_tokens({ completionIds }) {
  return completionIds.map((ids) => ids.length === 0 ? 0 : ids.filter((id) => id % 2 === 0).length / ids.length)
}
`

/**
 * The run, as a command file: a short GRPO run on Catch (the reference backend) generating on the site's server, a
 * checkpoint every step; `extra` lines are added (a cluster, resume).
 */
const commandFile = (
  s: Pick<Site, "dir" | "server">,
  outputDir: string,
  rewards: string,
  extra: ReadonlyArray<string>
) =>
  [
    `model: ${s.dir}`,
    "backend: reference",
    "environment: catch",
    `rewardFuncs: [${rewards}]`,
    "dataset: { seeds: [0, 64], prompt: \"Catch the ball.\" }",
    `policyServers: [${s.server.url}]`,
    `outputDir: ${outputDir}`,
    "numGenerations: 4",
    "perDeviceTrainBatchSize: 12",
    "maxCompletionLength: 8",
    "learningRate: 0.05",
    "lrSchedulerType: constant",
    "loggingSteps: 1",
    "saveSteps: 1",
    "logCompletions: true",
    `maxSteps: ${steps}`,
    ...extra
  ].join("\n") + "\n"

/** A run's directory, removed with the scope: its command file and its output directory. */
const runDirectory = (s: Pick<Site, "dir" | "server">, extra: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    const outputDir = path.join(dir, "out")
    const file = path.join(dir, "run.yaml")
    const rewards = path.join(dir, "even_tokens.mjs")
    yield* fs.writeFileString(rewards, evenTokens)
    yield* fs.writeFileString(file, commandFile(s, outputDir, rewards, extra))
    return { file, outputDir }
  })

/** What a run wrote: metrics.jsonl and completions.jsonl. */
const outputs = (outputDir: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const read = (name: string) => fs.readFileString(path.join(outputDir, name))
    return { metrics: yield* read(Metrics.files.metrics), completions: yield* read(Metrics.files.completions) }
  })

// CommandFile.train's type is inferred as Effect<…, any, any>; the reference backend needs only the platform.
const trainFile = CommandFile.train as (
  file: string,
  overrides: ReadonlyArray<string>
) => Effect.Effect<{ readonly globalStep: number }, unknown, FileSystem.FileSystem | Path.Path>

/** The run in this process; `where` decides where its groups run (no layer: in process). */
const train = (
  s: Pick<Site, "dir" | "server">,
  where: Layer.Layer<never> | Layer.Layer<RolloutGroups.RolloutGroups, unknown>
) =>
  Effect.gen(function*() {
    const run = yield* runDirectory(s)
    const result = yield* trainFile(run.file, []).pipe(Effect.provide(where))
    assert.strictEqual(result.globalStep, steps)
    return yield* outputs(run.outputDir)
  }).pipe(Effect.scoped)

class TestSite extends Context.Tag("test/Cluster/Site")<TestSite, Site>() {}

/** A tiny model on disk, a reference policy server for it, a private Postgres and the in-process run. */
const siteLayer = Layer.scoped(
  TestSite,
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const model = yield* Checkpoint.makeModel("tiny", 1)
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* Checkpoint.save(dir, model)
    const server = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
    const pg = yield* PostgresProcess.launch()
    const local = yield* train({ dir, server }, Layer.empty)
    assert.isAbove(timeless(local.completions).length, 0)
    // Not flat: the policy moved, so runs that equal this one carried the weights and the optimizer over.
    assert.isTrue(timeless(local.metrics).some((m) => m.grad_norm !== 0), local.metrics)
    return { dir, server, pg, local }
  })
).pipe(Layer.provide(NodeContext.layer))

/** JSONL lines without the wall-clock fields. */
const timeless = (text: string) =>
  text.split("\n").filter((l) => l !== "").map((l) =>
    Object.fromEntries(Object.entries(JSON.parse(l)).filter(([k]) => !/time|per_second/.test(k)))
  )

const assertSameRun = (s: Site, run: { readonly metrics: string; readonly completions: string }) => {
  assert.deepStrictEqual(timeless(run.metrics), timeless(s.local.metrics))
  assert.deepStrictEqual(timeless(run.completions), timeless(s.local.completions))
}

const clientLayer = (s: Site, runId: string) =>
  Cluster.client({
    postgres: s.pg.url,
    runId,
    spec: { environment: "catch", model: s.dir, policyServers: [s.server.url] },
    watchdog: "60 seconds",
    ...Cluster.fastFailover
  })

const runners = (s: Site, n: number, maxGroups?: number) =>
  Effect.forEach(
    Array.from({ length: n }, () => 0),
    () =>
      RunnerProcess.launch({
        postgres: s.pg.url,
        fastFailover: true,
        ...(maxGroups === undefined ? {} : { maxGroups })
      })
  )
type Runner = Effect.Effect.Success<ReturnType<typeof runners>>[number]

const sql = (s: Site) => PgClient.layer({ url: Redacted.make(s.pg.url) })

const query = <A extends object>(s: Site, text: (q: SqlClient.SqlClient) => Effect.Effect<ReadonlyArray<A>, unknown>) =>
  Effect.flatMap(SqlClient.SqlClient, text).pipe(Effect.provide(sql(s)), Effect.orDie)

/**
 * A runner with a group of `runId` at `step` in flight: an attempt it started and has not finished
 * (envtrain_cluster_attempts; the runner is named by its cluster address).
 */
const inFlightHolder = (s: Site, runId: string, step: number) =>
  Effect.map(
    query<{ runner: string }>(s, (q) =>
      q`SELECT runner FROM envtrain_cluster_attempts
        WHERE run_id = ${runId} AND batch_key LIKE ${`${step}.%`} AND finished_at IS NULL
        LIMIT 1`),
    (rows) => rows[0]?.runner
  )

/**
 * The groups of `runId` that ran again: attempts beyond one per group, counted into the run's row as its batches'
 * attempts are trimmed.
 */
const reruns = (s: Site, runId: string) =>
  Effect.map(
    query<{ n: string }>(s, (q) => q`SELECT reruns AS n FROM envtrain_cluster_runs WHERE run_id = ${runId}`),
    (rows) => Number(rows[0].n)
  )

/** `probe` every 50 ms until it gives a value. */
const until = <A, E, R>(probe: Effect.Effect<A | undefined, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    probe,
    (a) => a !== undefined ? Effect.succeed(a) : Effect.zipRight(Effect.sleep("50 millis"), until(probe))
  )

/**
 * The client, and `act` done once, as soon as a runner holds a group of `step` in flight (polled every 50 ms while
 * the step's batch is out); `acted` records the runner's address.
 */
const duringStep = (
  s: Site,
  runId: string,
  step: number,
  act: (holder: string) => Effect.Effect<void>,
  acted: Array<string>
) =>
  Layer.effect(
    RolloutGroups.RolloutGroups,
    Effect.gen(function*() {
      const inner = yield* RolloutGroups.RolloutGroups
      const watch = Effect.flatMap(until(inFlightHolder(s, runId, step)), (holder) =>
        Effect.map(act(holder), () => void acted.push(holder)))
      return {
        run: (batch: RolloutGroups.Batch) =>
          batch.step === step && acted.length === 0
            ? Effect.flatMap(Effect.fork(watch), (fiber) =>
              Effect.ensuring(inner.run(batch), Fiber.interrupt(fiber)))
            : inner.run(batch)
      }
    })
  ).pipe(Layer.provide(clientLayer(s, runId)))

const signalHolder = (pool: ReadonlyArray<Runner>, signal: NodeJS.Signals) => (holder: string) =>
  Effect.forEach(pool.filter((r) => holder === `127.0.0.1:${r.clusterPort}`), (r) => r.kill(signal), {
    discard: true
  })

/**
 * The Postgres backend holding run `runId`'s lease, if one does: the advisory lock store.ts takes, on the hash of
 * `envtrain-run:<runId>`.
 */
const leaseHolder = (s: Site, runId: string) =>
  Effect.map(
    query<{ pid: number }>(s, (q) =>
      q`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
        AND objid = (hashtext(${`envtrain-run:${runId}`})::bigint & 4294967295)::oid`),
    (rows) => rows[0]?.pid
  )

const bin = Launcher.nodeEntry(new URL("../src/bin.js", import.meta.url))

/** `envtrain train FILE` in a child process (stopped with the scope); `printed`: its output, once it exits. */
const trainerProcess = (file: string) =>
  Effect.gen(function*() {
    const proc = yield* Command.start(Command.make(process.execPath, ...bin, "train", file))
    const printed = yield* Stream.merge(proc.stdout, proc.stderr).pipe(
      Stream.decodeText(),
      Stream.runFold("", (all, text) => (all + text).slice(-6000)),
      Effect.orDie,
      Effect.forkScoped
    )
    return { proc, printed: Fiber.join(printed) }
  })

/** For the scope, samples every 50 ms how many groups of `runId` one runner has in flight; gives the most seen. */
const busiestRunner = (s: Site, runId: string) =>
  Effect.gen(function*() {
    const most = yield* Ref.make(0)
    const sample = Effect.flatMap(
      query<{ n: string }>(s, (q) =>
        q`SELECT count(*) AS n FROM envtrain_cluster_attempts WHERE run_id = ${runId} AND finished_at IS NULL
          GROUP BY runner ORDER BY n DESC LIMIT 1`),
      (rows) =>
        Ref.update(most, (m) =>
          Math.max(m, Number(rows[0]?.n ?? 0)))
    )
    // A sample fails until the run's client has made the tables: it is skipped.
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.exit(sample), Effect.sleep("50 millis"))))
    return Ref.get(most)
  })

/** Rows left in the cluster's and envtrain's tables for a finished run (its row in envtrain_cluster_runs aside). */
const leftRows = (s: Site, runId: string) =>
  Effect.map(
    query<{ n: string }>(s, (q) =>
      q`SELECT (SELECT count(*) FROM cluster_messages WHERE entity_id LIKE ${runId + "/%"})
        + (SELECT count(*) FROM envtrain_cluster_groups WHERE run_id = ${runId})
        + (SELECT count(*) FROM envtrain_cluster_batches WHERE run_id = ${runId})
        + (SELECT count(*) FROM envtrain_cluster_attempts WHERE run_id = ${runId}) AS n`),
    (rows) => Number(rows[0].n)
  )

/** A batch of one group of `groupSize` Catch episodes. */
const oneGroup = (groupSize: number): RolloutGroups.Batch => ({
  step: 0,
  microBatch: 0,
  round: 0,
  seed: 1,
  policyVersion: 0,
  rows: [{ prompt: [{ role: "user", content: "Catch the ball." }], seed: 3 }],
  groupSize,
  episode: { maxCompletionLength: 4, sampling: { temperature: 1 } },
  enableThinking: false,
  keepModelTemplate: false
})

/** Store operations on the site's Postgres. */
const store = <A, E>(s: Site, effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  effect.pipe(Effect.provide(sql(s)), Effect.orDie)

layer(siteLayer, { timeout: 180_000, excludeTestServices: true })("rollout groups on cluster runners", (it) => {
  it.scoped(
    "over 2 runner processes (--max-groups 1) a run writes the in-process run's metrics.jsonl and completions.jsonl " +
      "and leaves no rows; no runner rolls out two groups at once; a second trainer on a run is refused while the " +
      "first holds its lease",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        yield* runners(s, 2, 1)
        const busiest = yield* busiestRunner(s, "equal-run")
        assertSameRun(s, yield* train(s, clientLayer(s, "equal-run")))
        assert.strictEqual(yield* busiest, 1)
        assert.strictEqual(yield* leftRows(s, "equal-run"), 0)
        assert.strictEqual(yield* reruns(s, "equal-run"), 0)
        yield* Layer.build(clientLayer(s, "leased-run"))
        const second = yield* Effect.exit(Layer.build(clientLayer(s, "leased-run")))
        assert.isTrue(Exit.isFailure(second))
        assert.include(String(Exit.isFailure(second) ? second.cause : ""), "driven by another trainer")
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "SIGKILL of one of 3 runners while it holds a group: the group runs again elsewhere, the run is unchanged",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        const pool = yield* runners(s, 3)
        const killed: Array<string> = []
        assertSameRun(s, yield* train(s, duringStep(s, "kill-run", 1, signalHolder(pool, "SIGKILL"), killed)))
        assert.strictEqual(killed.length, 1)
        assert.isAbove(yield* reruns(s, "kill-run"), 0)
        // The dead runner's unfinished attempt went with its batch's rows.
        assert.strictEqual(yield* leftRows(s, "kill-run"), 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "SIGSTOP of a runner holding a group (hung, its connections open) past the lock expiry: its shards move, the " +
      "run is unchanged",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        const pool = yield* runners(s, 2)
        const stopped: Array<string> = []
        assertSameRun(s, yield* train(s, duringStep(s, "stop-run", 1, signalHolder(pool, "SIGSTOP"), stopped)))
        assert.strictEqual(stopped.length, 1)
        assert.isAbove(yield* reruns(s, "stop-run"), 0)
        // Let it go, so the scope can stop it.
        yield* signalHolder(pool, "SIGCONT")(stopped[0])
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "a runner joining mid-run (shards move to it; groups in flight on them are interrupted and run again): the run " +
      "is unchanged",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        yield* runners(s, 1)
        const scope = yield* Effect.scope
        // Started at the first group in flight, in the background: it registers seconds later, mid-run.
        const join = () => Effect.asVoid(Effect.forkIn(Effect.orDie(Scope.extend(runners(s, 1), scope)), scope))
        const joined: Array<string> = []
        assertSameRun(s, yield* train(s, duringStep(s, "join-run", 0, join, joined)))
        assert.strictEqual(joined.length, 1)
        yield* Effect.log(`join-run: ${yield* reruns(s, "join-run")} group(s) ran again`)
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "Postgres stopped (immediate) and started again while a group is in flight: the run is unchanged",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        yield* runners(s, 2)
        const restarted: Array<string> = []
        const restart = () =>
          Effect.orDie(Effect.zipRight(s.pg.stop, Effect.zipRight(Effect.sleep("1 second"), s.pg.start)))
        assertSameRun(s, yield* train(s, duringStep(s, "restart-run", 1, restart, restarted)))
        assert.strictEqual(restarted.length, 1)
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "SIGKILL of the trainer process mid-step after a checkpoint, then `envtrain train` again (resume: true): the new " +
      "trainer takes the run's lease again, resumes from the checkpoint, and the run is unchanged; a second trainer " +
      "is refused while one lives",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        yield* runners(s, 2)
        const runId = "trainer-kill-run"
        // What a Kubernetes Job restarts: the same command on the same file, which resumes from the newest checkpoint.
        const run = yield* runDirectory(s, [
          "resume: true",
          `cluster: { postgres: "${s.pg.url}", runId: ${runId}, fastFailover: true }`
        ])
        const first = yield* trainerProcess(run.file)
        const finished = (trainer: typeof first, what: string) =>
          Effect.flatMap(
            Effect.zip(Effect.orDie(trainer.proc.exitCode), trainer.printed),
            ([code, printed]) => Effect.dieMessage(`the trainer exited (code ${code}) ${what}:\n${printed}`)
          )
        const firstHolder = yield* Effect.raceFirst(until(leaseHolder(s, runId)), finished(first, "before its lease"))
        const refused = yield* Effect.exit(Layer.build(clientLayer(s, runId)))
        assert.isTrue(Exit.isFailure(refused))
        assert.include(String(Exit.isFailure(refused) ? refused.cause : ""), "driven by another trainer")

        // Killed once checkpoint-1 is saved and a group of the second step (index 1) is in flight on a runner.
        const inSecondStep = Effect.flatMap(
          Effect.orDie(fs.exists(path.join(run.outputDir, "checkpoint-1"))),
          (saved) => saved ? inFlightHolder(s, runId, 1) : Effect.succeed(undefined)
        )
        yield* Effect.raceFirst(until(inSecondStep), finished(first, "before it could be killed mid-step"))
        yield* Effect.orDie(first.proc.kill("SIGKILL"))
        // Postgres ends the dead trainer's session, and with it the lease.
        yield* until(Effect.map(leaseHolder(s, runId), (pid) => pid === undefined ? true : undefined)).pipe(
          Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "the dead trainer's lease was not released" })
        )

        const second = yield* trainerProcess(run.file)
        const retaken = yield* Effect.fork(until(leaseHolder(s, runId)))
        const code = yield* Effect.orDie(second.proc.exitCode)
        const printed = yield* second.printed
        assert.strictEqual(code, 0, printed)
        assert.include(printed, "at step 1", "the second trainer resumed from checkpoint-1")
        const holder = yield* Fiber.join(retaken).pipe(Effect.timeout("1 second"))
        assert.notStrictEqual(holder, firstHolder)
        assertSameRun(s, yield* outputs(run.outputDir))
        assert.strictEqual(yield* leftRows(s, runId), 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scoped(
    "a runner whose environment holds its event loop past the lock expiry (6 s spins) loses its shards and restarts " +
      "the group again and again: the livelock watchdog fails the run within bounded time, naming the blocks and " +
      "the fix, and deletes the batch",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        yield* runners(s, 1)
        const groups = yield* Layer.build(Cluster.client({
          postgres: s.pg.url,
          runId: "livelock-run",
          spec: {
            environment: fileURLToPath(new URL("./blockingEnvironment.ts", import.meta.url)),
            model: s.dir,
            policyServers: [s.server.url]
          },
          watchdog: "60 seconds",
          maxAttempts: 3,
          ...Cluster.fastFailover
        }))
        const started = Date.now()
        const failure = yield* Effect.flip(Context.get(groups, RolloutGroups.RolloutGroups).run(oneGroup(1)))
        const seconds = (Date.now() - started) / 1000
        assert.strictEqual(failure._tag, "RolloutGroupsError")
        const named = failure.message.match(
          /^group 0 of batch 0\.0\.0 \(run livelock-run\) was started 3 times in [\d.]+ s without finishing \(runners: 127\.0\.0\.1:\d+\): runner event loops were blocked for up to ([\d.]+) s while it was out, past the shard locks \(refreshed every 1 s, expiring after 5 s\)/
        )
        assert.isNotNull(named, failure.message)
        assert.isAtLeast(Number(named?.[1]), 5, "the recorded block is a 6 s spin")
        assert.include(failure.message, "--max-groups")
        assert.include(failure.message, "default (slower) failover settings")
        // Each attempt spins at most two 6 s turns before it loses its shards: 3 attempts take well under this.
        assert.isBelow(seconds, 150)
        yield* Effect.log(`livelock-run: failed after ${seconds.toFixed(1)} s: ${failure.message}`)
        // Abandoned: the runner has nothing left to re-run, and a late attempt writes nothing.
        assert.strictEqual(yield* leftRows(s, "livelock-run"), 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    240_000
  )

  it.scoped(
    "a duplicate attempt that goes on after its batch was read leaves no rows, and replies stored for cleared " +
      "messages are removed",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        // The client makes the cluster's and envtrain's tables.
        yield* Layer.build(clientLayer(s, "late-run"))
        const [runId, key] = ["late-run", "0.0.0"]
        yield* store(s, Store.putBatch(runId, key, oneGroup(1)))
        yield* store(s, Store.startAttempt(runId, key, 0, "runner-a"))
        // A second attempt is out (its runner hung, and its shard moved) when the first one finishes.
        yield* store(s, Store.startAttempt(runId, key, 0, "runner-b"))
        yield* store(s, Store.putGroup(runId, key, 0, "[]", "runner-a"))
        yield* store(s, Store.finishAttempt(runId, key, 0, "runner-a"))
        assert.strictEqual(yield* store(s, Store.dropBatch(runId, key)), 1, "one re-run")
        // The hung runner comes back after the trainer read the batch: it finishes, and starts another attempt.
        yield* store(s, Store.putGroup(runId, key, 0, "[]", "runner-b"))
        yield* store(s, Store.finishAttempt(runId, key, 0, "runner-b"))
        yield* store(s, Store.startAttempt(runId, key, 0, "runner-b"))
        assert.strictEqual(yield* leftRows(s, runId), 0)
        // Its reply, which the cluster stores although the trainer cleared its message.
        yield* query(s, (q) =>
          q`INSERT INTO cluster_replies (id, kind, request_id, payload)
            VALUES (987654321, 0, 987654320, '{}') RETURNING id`)
        yield* store(s, Store.dropOrphanReplies)
        const left = yield* query<{ n: string }>(s, (q) =>
          q`SELECT count(*) AS n FROM cluster_replies WHERE id = 987654321 OR request_id NOT IN (
              SELECT id FROM cluster_messages)`)
        assert.strictEqual(Number(left[0].n), 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scoped(
    "the watchdog fails a batch that no runner reads, naming the cause",
    () =>
      Effect.gen(function*() {
        const s = yield* TestSite
        const groups = yield* Layer.build(Cluster.client({
          postgres: s.pg.url,
          runId: "orphan-run",
          spec: { environment: "catch", model: s.dir, policyServers: [s.server.url] },
          watchdog: "2 seconds",
          ...Cluster.fastFailover
        }))
        // Every runner of the earlier tests is gone: none is healthy.
        const failure = yield* Effect.flip(Context.get(groups, RolloutGroups.RolloutGroups).run(oneGroup(2)))
        assert.match(failure.message, /no healthy cluster runner for 2 s|not been read by any runner/)
      }),
    60_000
  )
})

describe("cluster: the livelock watchdog's cause", () => {
  const restarted: Store.Restarted = { group: 2, attempts: 8, seconds: 95.04, blockedMs: 0, runners: "10.0.0.7:34431" }
  const fast = { refresh: Duration.seconds(1), expiry: Duration.seconds(5) }
  const defaults = { refresh: Duration.seconds(10), expiry: Duration.seconds(35) }

  it("names blocked event loops when the runners recorded a block past the lock refresh, and the settings' fix", () => {
    const blocked = ClusterClient.livelockProblem("r", "4.0.0", { ...restarted, blockedMs: 9800 }, fast).message
    assert.include(blocked, "group 2 of batch 4.0.0 (run r) was started 8 times in 95 s without finishing")
    assert.include(blocked, "blocked for up to 9.8 s while it was out, past the shard locks (refreshed every 1 s")
    assert.include(blocked, "use the default (slower) failover settings")
    // With the default settings already, that fix is not offered.
    const slow = ClusterClient.livelockProblem("r", "4.0.0", { ...restarted, blockedMs: 12_000 }, defaults).message
    assert.include(slow, "blocked for up to 12 s")
    assert.notInclude(slow, "default (slower)")
  })

  it("names runners dying on the group when no block as long as the refresh was recorded", () => {
    const none = ClusterClient.livelockProblem("r", "4.0.0", restarted, fast).message
    assert.include(none, "recorded no event-loop block as long as the shard-lock refresh (1 s)")
    assert.include(none, "they died during it")
    assert.notInclude(none, "blocked for up to")
    const short = ClusterClient.livelockProblem("r", "4.0.0", { ...restarted, blockedMs: 2500 }, defaults).message
    assert.include(short, "(10 s; the longest: 2.5 s)")
  })

  it.live("refuses a maxAttempts under 2, naming the fix", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.flip(Layer.build(Cluster.client({
        postgres: "postgres://u@127.0.0.1:1/db",
        runId: "r",
        spec: { environment: "catch", model: "m", policyServers: [] },
        maxAttempts: 1
      })))
      assert.include(String(refused), "maxAttempts must be a whole number of at least 2")
    }).pipe(Effect.scoped), 20_000)
})

describe("cluster: in a command file", () => {
  it.scoped(
    "needs policy servers and one environment, and maxAttempts of at least 2; without the harness's client the grpo " +
      "run refuses it; without it the run stays in process",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const file = (name: string, text: string) =>
          Effect.as(fs.writeFileString(path.join(dir, name), text), path.join(dir, name))
        const base = "model: models/tiny\nenvironment: catch\ndataset: { seeds: [0, 8], prompt: Catch. }\n"
        const plain = yield* file("plain.yaml", base)
        assert.isTrue(Option.isNone(yield* Cluster.forCommandFile(plain, [], undefined)))
        const noServers = yield* Effect.flip(Cluster.forCommandFile(plain, [], "postgres://u@127.0.0.1:1/db"))
        assert.include(noServers.message, "set policyServers")
        const routed = yield* file(
          "routed.yaml",
          "model: models/tiny\nenvironment: { a: catch, b: wordle }\npolicyServers: [http://127.0.0.1:1]\n"
        )
        assert.include(
          (yield* Effect.flip(Cluster.forCommandFile(routed, [], "postgres://u@127.0.0.1:1/db"))).message,
          "one environment"
        )
        const oneAttempt = yield* file(
          "one-attempt.yaml",
          `${base}policyServers: [http://127.0.0.1:1]\ncluster: { postgres: "postgres://u@127.0.0.1:1/db", maxAttempts: 1 }\n`
        )
        const attempts = yield* Effect.flip(Cluster.forCommandFile(oneAttempt, [], undefined))
        assert.include(attempts.message, "maxAttempts")
        const clustered = yield* file("clustered.yaml", `${base}cluster: { postgres: "postgres://u@127.0.0.1:1/db" }\n`)
        const refused = yield* Effect.flip(CommandFile.train(clustered, []))
        assert.include(refused.message, "cluster: the runners' client is envtrain's command line")
      }).pipe(Effect.provide(NodeContext.layer))
  )
})
