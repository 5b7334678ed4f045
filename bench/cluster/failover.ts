/**
 * Cluster runners under failure, with the real parts: a private Postgres (PostgresProcess), `envtrain runner`
 * children, `envtrain serve-policy --backend reference` over a tiny model, Catch in the runners. Batches of rollout
 * groups (6 groups of 4 episodes, 8 tokens each) are sent through `Cluster.client`, as the trainer sends them:
 *
 * - no kill: batch wall time (median, p95), the Postgres rows inserted and WAL bytes written per batch
 *   (pg_stat_user_tables, pg_current_wal_lsn: messages, replies, locks, envtrain's rows), and the same batch rolled
 *   out in this process first (`RolloutGroups.runGroup` per group on the same server, a batch of other seeds): the
 *   dispatch overhead per group;
 * - a kill per batch: as soon as a runner has started a group (envtrain_cluster_attempts) it is SIGKILLed; the
 *   failover time is from the kill to the group's next attempt starting on another runner (Postgres' clock both);
 *   groups run again per kill; the batch's wall time; a fresh runner replaces the killed one before the next batch.
 *
 * Both for `Cluster.fastFailover` and for the defaults (health ping 10 s x 6, a health check a minute). Three
 * runners. Saves bench/results/cluster-failover.{json,md}. The machine has 2 cores shared with other work: the load
 * average is recorded beside the numbers, which are noisy.
 *
 *   nice -n 10 npx tsx bench/cluster/failover.ts [kills=5] [settings=fast,default]
 */
import { NodeContext } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { Catch } from "@envtrain/env"
import { Checkpoint } from "@envtrain/gpu"
import { RolloutGroups } from "@envtrain/grpo"
import { Cluster, PolicyServerProcess, PostgresProcess, RunnerProcess } from "@envtrain/harness"
import { Context, Effect, Layer, Redacted, Scope } from "effect"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { inProcessBatches } from "./inProcess.js"

const kills = Number(process.argv[2] ?? 5)
const settingsNames = (process.argv[3] ?? "fast,default").split(",")
const GROUPS = 6
const RUNNERS = 3

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(q * s.length))]
}
const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits

const batchAt = (step: number): RolloutGroups.Batch => ({
  step,
  microBatch: 0,
  round: 0,
  seed: 1000 + step,
  policyVersion: 0,
  rows: Array.from({ length: GROUPS }, (_, i) => ({ prompt: [{ role: "user", content: "Catch the ball." }], seed: i })),
  groupSize: 4,
  episode: { maxCompletionLength: 8, sampling: { temperature: 1 } },
  enableThinking: false,
  keepModelTemplate: false
})

const program = Effect.gen(function*() {
  const dir = mkdtempSync(join(tmpdir(), "envtrain-bench-cluster-"))
  const model = yield* Checkpoint.makeModel("tiny", 1)
  yield* Checkpoint.save(dir, model)
  const server = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
  const pg = yield* PostgresProcess.launch()
  const db = yield* Layer.build(PgClient.layer({ url: Redacted.make(pg.url) }))
  const q = <A extends object>(f: (sql: SqlClient.SqlClient) => Effect.Effect<ReadonlyArray<A>, unknown>) =>
    Effect.orDie(Effect.provide(Effect.flatMap(SqlClient.SqlClient, f), db))
  const counters = q<{ rows: string; wal: string }>((sql) =>
    sql`SELECT (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables) AS rows,
      pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS wal`
  ).pipe(Effect.map((r) => ({ rows: Number(r[0].rows), wal: Number(r[0].wal) })))

  // In process: the same batch, on the same server (the runner's way of generating).
  const inProcess = yield* inProcessBatches(server.url, model, Catch.environment)

  const results: Record<string, unknown> = {}
  for (const name of settingsNames) {
    const fast = name === "fast"
    const scope = yield* Scope.make()
    const launch = () => Scope.extend(RunnerProcess.launch({ postgres: pg.url, fastFailover: fast }), scope)
    const pool = yield* Effect.forEach(Array.from({ length: RUNNERS }), launch)
    const runId = `bench-${name}`
    const groups = Context.get(
      yield* Scope.extend(
        Layer.build(Cluster.client({
          postgres: pg.url,
          runId,
          spec: { environment: "catch", model: dir, policyServers: [server.url] },
          watchdog: "5 minutes",
          ...(fast ? Cluster.fastFailover : {})
        })),
        scope
      ),
      RolloutGroups.RolloutGroups
    )
    // Attempts beyond one per group, counted in the run's row as each batch's attempts are trimmed.
    const reruns = Effect.map(
      q<{ n: string }>((sql) => sql`SELECT reruns AS n FROM envtrain_cluster_runs WHERE run_id = ${runId}`),
      (r) => Number(r[0].n)
    )
    // Warm-up: the runners load the run's context on their first group.
    yield* groups.run(batchAt(0))
    const plain: Array<{ seconds: number; rows: number; walBytes: number; inProcessSeconds: number }> = []
    for (let i = 1; i <= kills; i++) {
      // In process first, on a batch of its own (other seeds): the server keeps finished generations' KV caches, so
      // a batch it has just served would mostly replay cached work.
      const t1 = performance.now()
      yield* inProcess(batchAt(500 + i))
      const inProcessSeconds = (performance.now() - t1) / 1000
      const before = yield* counters
      const t0 = performance.now()
      yield* groups.run(batchAt(i))
      const seconds = (performance.now() - t0) / 1000
      const after = yield* counters
      plain.push({ seconds, rows: after.rows - before.rows, walBytes: after.wal - before.wal, inProcessSeconds })
    }
    const killed: Array<{ failoverSeconds: number; reruns: number; seconds: number }> = []
    for (let i = 1; i <= kills; i++) {
      const step = 100 + i
      const t0 = performance.now()
      // The batch's attempts are trimmed when it returns: the restart is read while it is out.
      const watch = Effect.gen(function*() {
        let victim: { group: number; runner: string; at: Date } | undefined
        while (true) {
          if (victim === undefined) {
            const rows = yield* q<{ runner: string; grp: number }>((sql) =>
              sql`SELECT runner, grp FROM envtrain_cluster_attempts WHERE run_id = ${runId}
                AND batch_key = ${`${step}.0.0`} AND finished_at IS NULL LIMIT 1`
            )
            const runner = pool.find((r) => rows[0] !== undefined && rows[0].runner === `127.0.0.1:${r.clusterPort}`)
            if (runner !== undefined) {
              yield* runner.kill("SIGKILL")
              const at = yield* q<{ now: Date }>((sql) => sql`SELECT clock_timestamp() AS now`)
              pool.splice(pool.indexOf(runner), 1)
              victim = { group: rows[0].grp, runner: rows[0].runner, at: at[0].now }
            }
          } else {
            const v = victim
            const restart = yield* q<{ started: Date | null }>((sql) =>
              sql`SELECT min(started_at) AS started FROM envtrain_cluster_attempts WHERE run_id = ${runId}
                AND batch_key = ${`${step}.0.0`} AND grp = ${v.group} AND runner <> ${v.runner}`
            )
            if (restart[0]?.started != null) {
              return (new Date(restart[0].started).getTime() - new Date(v.at).getTime()) / 1000
            }
          }
          yield* Effect.sleep("20 millis")
        }
      })
      const rerunsBefore = yield* reruns
      const [failoverSeconds] = yield* Effect.all([watch, groups.run(batchAt(step))], { concurrency: 2 })
      const seconds = (performance.now() - t0) / 1000
      killed.push({ failoverSeconds, reruns: (yield* reruns) - rerunsBefore, seconds })
      console.log(`${name}: kill ${i}: ${JSON.stringify(killed[killed.length - 1])}`)
      pool.push(yield* launch())
    }
    yield* Scope.close(scope, { _tag: "Success", value: undefined } as never)
    const load1 = round(loadavg()[0], 2)
    results[name] = {
      load1,
      failoverSeconds: {
        median: round(quantile(killed.map((k) => k.failoverSeconds), 0.5)),
        all: killed.map((k) => round(k.failoverSeconds))
      },
      rerunsPerKill: round(killed.reduce((a, k) => a + k.reruns, 0) / killed.length, 2),
      batchSeconds: {
        noKill: {
          median: round(quantile(plain.map((p) => p.seconds), 0.5)),
          p95: round(quantile(plain.map((p) => p.seconds), 0.95))
        },
        withKill: {
          median: round(quantile(killed.map((k) => k.seconds), 0.5)),
          p95: round(quantile(killed.map((k) => k.seconds), 0.95))
        }
      },
      inProcessBatchSeconds: round(quantile(plain.map((p) => p.inProcessSeconds), 0.5)),
      dispatchOverheadPerGroupSeconds: round(
        (quantile(plain.map((p) => p.seconds), 0.5) - quantile(plain.map((p) => p.inProcessSeconds), 0.5)) / GROUPS
      ),
      postgresPerBatch: {
        rowsInserted: quantile(plain.map((p) => p.rows), 0.5),
        walBytes: quantile(plain.map((p) => p.walBytes), 0.5)
      }
    }
    console.log(`${name}: ${JSON.stringify(results[name])}`)
  }
  const out = {
    bench: "cluster-failover",
    date: new Date().toISOString(),
    setup: `${RUNNERS} runners, batches of ${GROUPS} groups x 4 Catch episodes (8 tokens), tiny model on a reference ` +
      `policy server, private Postgres 15 on loopback; ${kills} batches per measure`,
    results
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/cluster-failover.json", JSON.stringify(out, null, 2) + "\n")
  const md = [
    "# Cluster runners under failure (bench/cluster/failover.ts)",
    "",
    out.setup + ". Two cores shared with other work: noisy; the 1-minute load average is beside each row.",
    "",
    "| settings | load | failover s (median; all) | re-runs per kill | batch s no kill (median / p95) | batch s with kill (median / p95) | in-process batch s | dispatch overhead s per group | Postgres rows / WAL bytes per batch |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...Object.entries(results).map(([name, r]) => {
      const x = r as any
      return `| ${name} | ${x.load1} | ${x.failoverSeconds.median}; ${
        x.failoverSeconds.all.join(", ")
      } | ${x.rerunsPerKill} | ` +
        `${x.batchSeconds.noKill.median} / ${x.batchSeconds.noKill.p95} | ${x.batchSeconds.withKill.median} / ` +
        `${x.batchSeconds.withKill.p95} | ${x.inProcessBatchSeconds} | ${x.dispatchOverheadPerGroupSeconds} | ` +
        `${x.postgresPerBatch.rowsInserted} / ${x.postgresPerBatch.walBytes} |`
    }),
    ""
  ].join("\n")
  writeFileSync("bench/results/cluster-failover.md", md)
  console.log(md)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
