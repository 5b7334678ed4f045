// Rollouts on cluster runners: real `envtrain runner` child processes, a private Postgres, a reference policy server
// (`envtrain serve-policy --backend reference`: bit-exact generation, so "equal" is checked exactly) and Catch in
// each runner's process. The trainer's run through the cluster must equal the in-process run (timing fields aside);
// a runner SIGKILLed mid-step must not change that; a second trainer on the same run is refused. Live clock.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Environment } from "@envtrain/env"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as CommandFile from "@envtrain/grpo/CommandFile"
import * as Config from "@envtrain/grpo/Config"
import * as Dataset from "@envtrain/grpo/Dataset"
import * as Metrics from "@envtrain/grpo/Metrics"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Reward from "@envtrain/grpo/Reward"
import * as RolloutGroups from "@envtrain/grpo/RolloutGroups"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as Episode from "@envtrain/rollout/Episode"
import { Effect, Exit, Fiber, Layer, Option, Redacted } from "effect"
import * as Cluster from "../src/Cluster.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import * as PostgresProcess from "../src/PostgresProcess.js"
import * as RunnerProcess from "../src/RunnerProcess.js"

const open = (row: Readonly<Record<string, unknown>>) =>
  Effect.map(Effect.orDie(Environment.episode(Catch.environment, row)), Episode.fromEnvironment)
const catchReward = Reward.perEpisode<Catch.State>("catch", (e) => Catch.reward(e.environment))

/** A tiny model on disk, a reference policy server for it and a private Postgres, for the scope. */
const site = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const model = yield* Checkpoint.makeModel("tiny", 1)
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* Checkpoint.save(dir, model)
  const server = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
  const pg = yield* PostgresProcess.launch()
  return { model, dir, server, pg }
})
type Site = Effect.Effect.Success<typeof site>

const steps = 3

/** A short GRPO run on Catch generating on the site's server; `layer` decides where the groups run. */
const train = (s: Site, layer: Layer.Layer<never> | Layer.Layer<RolloutGroups.RolloutGroups, unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const outputDir = yield* fs.makeTempDirectoryScoped()
    const model = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(s.model), { urls: [s.server.url] })
    const result = yield* Trainer.train({
      config: yield* Config.fromSources({
        outputDir,
        numGenerations: 4,
        perDeviceTrainBatchSize: 12,
        maxCompletionLength: 8,
        learningRate: 0.05,
        lrSchedulerType: "constant",
        loggingSteps: 1,
        saveSteps: 1000,
        logCompletions: true,
        maxSteps: steps
      }),
      model,
      dataset: Dataset.fromSeeds({
        prompt: [{ role: "user", content: "Catch the ball." }],
        seeds: Dataset.range(0, 64)
      }),
      open,
      rewardFunctions: [catchReward],
      progress: false
    }).pipe(Effect.provide(layer))
    const read = (name: string) => fs.readFileString(path.join(outputDir, name))
    return { result, metrics: yield* read(Metrics.files.metrics), completions: yield* read(Metrics.files.completions) }
  })

/** JSONL lines without the wall-clock fields. */
const timeless = (text: string) =>
  text.split("\n").filter((l) => l !== "").map((l) =>
    Object.fromEntries(Object.entries(JSON.parse(l)).filter(([k]) => !/time|per_second/.test(k)))
  )

const clientLayer = (s: Site, runId: string) =>
  Cluster.client({
    postgres: s.pg.url,
    runId,
    spec: { environment: "catch", model: s.dir, policyServers: [s.server.url], servedModelName: "tiny" },
    watchdog: "60 seconds",
    ...Cluster.fastFailover
  })

const sql = (s: Site) => PgClient.layer({ url: Redacted.make(s.pg.url) })

/**
 * The runner (its cluster address, from its Postgres session's application name) that holds the shard of an
 * unfinished message of `runId` at `step`: a group it is rolling out (messages are sent to their shard's runner as
 * they are stored). Shard `default:N` is advisory lock 1000000 + N-1 (SqlRunnerStorage's numbering).
 */
const inFlightHolder = (runId: string, step: number) =>
  Effect.flatMap(SqlClient.SqlClient, (q) =>
    Effect.map(
      q<{ app: string }>`SELECT a.application_name AS app FROM cluster_messages m
        JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted
          AND l.objid::text::bigint = 1000000 + split_part(m.shard_id, ':', 2)::int - 1
        JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE m.entity_id LIKE ${`${runId}/${step}.%`} AND m.processed = false
        LIMIT 1`,
      (rows) => rows[0]?.app.replace(/^envtrain-runner /, "")
    ))

/**
 * The client, and a SIGKILL of the runner that has a group of `step` in flight, sent as soon as one has (polled
 * every 50 ms while the step's batch is out); `killed` records whom.
 */
const killingAt = (
  s: Site,
  runId: string,
  step: number,
  runners: ReadonlyArray<
    { readonly clusterPort: number; readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void> }
  >,
  killed: Array<string>
) =>
  Layer.scoped(
    RolloutGroups.RolloutGroups,
    Effect.gen(function*() {
      const inner = yield* RolloutGroups.RolloutGroups
      const db = yield* Layer.build(sql(s))
      const killer = Effect.gen(function*() {
        while (true) {
          const holder = yield* Effect.provide(inFlightHolder(runId, step), db)
          const target = runners.find((r) => holder === `127.0.0.1:${r.clusterPort}`)
          if (target !== undefined) {
            yield* target.kill("SIGKILL")
            killed.push(holder!)
            return
          }
          yield* Effect.sleep("50 millis")
        }
      }).pipe(Effect.orDie)
      return {
        run: (batch: RolloutGroups.Batch) =>
          batch.step === step && killed.length === 0
            ? Effect.flatMap(Effect.fork(killer), (fiber) => Effect.ensuring(inner.run(batch), Fiber.interrupt(fiber)))
            : inner.run(batch)
      }
    })
  ).pipe(Layer.provide(clientLayer(s, runId)))

/** Rows left in the cluster's and envtrain's tables for a run. */
const leftRows = (s: Site, runId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (q) =>
    Effect.all([
      q<{ n: string }>`SELECT count(*) AS n FROM cluster_messages WHERE entity_id LIKE ${runId + "/%"}`,
      q<{ n: string }>`SELECT count(*) AS n FROM envtrain_cluster_groups WHERE run_id = ${runId}`,
      q<{ n: string }>`SELECT count(*) AS n FROM envtrain_cluster_batches WHERE run_id = ${runId}`
    ])).pipe(Effect.map((counts) => counts.map((rows) => Number(rows[0].n))), Effect.provide(sql(s)))

describe("rollout groups on cluster runners", () => {
  it.scopedLive(
    "over 2 runner processes a run writes the same metrics.jsonl and completions.jsonl as in process, and leaves " +
      "no rows; with a third runner, SIGKILL of the runner holding a group in flight changes nothing; a second " +
      "trainer on a run is refused while the first holds its lease",
    () =>
      Effect.gen(function*() {
        const s = yield* site
        const local = yield* train(s, Layer.empty)
        assert.isAbove(timeless(local.completions).length, 0)
        const runners = [
          yield* RunnerProcess.launch({ postgres: s.pg.url, fastFailover: true }),
          yield* RunnerProcess.launch({ postgres: s.pg.url, fastFailover: true })
        ]
        const clustered = yield* train(s, clientLayer(s, "equal-run"))
        assert.strictEqual(clustered.result.globalStep, steps)
        assert.deepStrictEqual(timeless(clustered.metrics), timeless(local.metrics))
        assert.deepStrictEqual(timeless(clustered.completions), timeless(local.completions))
        assert.deepStrictEqual(yield* leftRows(s, "equal-run"), [0, 0, 0])

        runners.push(yield* RunnerProcess.launch({ postgres: s.pg.url, fastFailover: true }))
        const killed: Array<string> = []
        const survived = yield* train(s, killingAt(s, "kill-run", 1, runners, killed))
        assert.strictEqual(killed.length, 1, "a runner with a group in flight was killed")
        assert.deepStrictEqual(timeless(survived.metrics), timeless(local.metrics))
        assert.deepStrictEqual(timeless(survived.completions), timeless(local.completions))

        // The lease: held by one client layer, refused to a second one on the same run id.
        yield* Layer.build(clientLayer(s, "leased-run"))
        const second = yield* Effect.exit(Layer.build(clientLayer(s, "leased-run")))
        assert.isTrue(Exit.isFailure(second))
        assert.include(String(Exit.isFailure(second) ? second.cause : ""), "driven by another trainer")
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
})

describe("cluster: in a command file", () => {
  it.scoped(
    "needs policy servers and one environment; without the harness's client the grpo run refuses it; without it " +
      "the run stays in process",
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
        const clustered = yield* file("clustered.yaml", `${base}cluster: { postgres: "postgres://u@127.0.0.1:1/db" }\n`)
        const refused = yield* Effect.flip(CommandFile.train(clustered, []))
        assert.include(refused.message, "cluster: the runners' client is envtrain's command line")
      }).pipe(Effect.provide(NodeContext.layer))
  )
})
