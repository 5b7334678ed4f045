/**
 * envtrain's own tables beside the cluster's (`cluster_*`), on the same Postgres:
 *
 * - `envtrain_cluster_runs`: each run's spec (environment, model directory, policy servers), written by the trainer
 *   that holds the run's lease, read by runners on a run's first message;
 * - `envtrain_cluster_batches`: a generation batch's rows and episode settings, written before its messages go out;
 * - `envtrain_cluster_groups`: a finished group's records (JSON), written by the runner as its last act before the
 *   reply. The reply carries only this row's key.
 *
 * - `envtrain_cluster_attempts`: each attempt at a group (runner, start, finish, and the longest event-loop block its
 *   runner recorded while it was out), while its batch is out: the livelock watchdog's evidence (client.ts).
 *
 * Rows rather than files in the run directory: runners on other machines need no shared volume, and the cluster's
 * reply table, which every waiting client polls, stays small. An attempt that is interrupted (a killed runner, a
 * shard moved away) writes nothing, so it is never counted; a re-run of a group that a slow attempt also finished
 * (at-least-once) finds the row there and keeps it (`ON CONFLICT DO NOTHING`): both are the same seeded episodes.
 * The trainer deletes a batch's rows, attempts included, once it has read them; the run's row keeps the count of
 * re-runs (`reruns`), so a long run's tables stay the size of one batch.
 *
 * A slow duplicate attempt may go on after its batch was read (a runner that hung and came back). Its rows are
 * written only while the batch's row exists, under a share lock on that row (`startAttempt`, `putGroup`), and
 * `dropBatch` deletes the batch's row first: a late write either commits before that delete, and goes with the
 * batch's rows, or finds no batch and writes nothing. Its reply, which the cluster stores after its message was
 * cleared, is removed by `dropOrphanReplies`.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Schedule } from "effect"

/** What a runner needs to know of a run besides the batch: where episodes run and what generates. */
export interface RunSpec {
  /** A registry spec: a built-in's name, a module path, or an OpenEnv server's URL. */
  readonly environment: string
  /** Play the environment on this OpenEnv server (its registry entry's remote twin) instead of in the runner. */
  readonly envUrl?: string | undefined
  /** The model directory (tokenizer and chat template; runners generate on the policy servers). */
  readonly model: string
  readonly policyServers: ReadonlyArray<string>
  /** The model name the policy servers answer to (default: the first one their `GET /v1/models` lists). */
  readonly servedModelName?: string | undefined
}

/**
 * Retries a storage operation that failed on the way to Postgres (`SqlError`, the cluster's `PersistenceError`:
 * a restart, a failover, a dropped connection) every half second for up to `outage`, then lets the failure through.
 * Writes here are idempotent (upserts, `ON CONFLICT`, deletes), and so are the cluster's sends (one primary key).
 */
export const throughOutage =
  (outage: Duration.DurationInput) =>
  <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.retry(effect, {
      schedule: Schedule.spaced(Duration.millis(500)).pipe(Schedule.upTo(outage)),
      while: (e) => e._tag === "SqlError" || e._tag === "PersistenceError"
    })

export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS envtrain_cluster_runs (
    run_id TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`
  yield* sql`CREATE TABLE IF NOT EXISTS envtrain_cluster_batches (
    run_id TEXT NOT NULL, batch_key TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (run_id, batch_key))`
  yield* sql`CREATE TABLE IF NOT EXISTS envtrain_cluster_groups (
    run_id TEXT NOT NULL, batch_key TEXT NOT NULL, grp INT NOT NULL, body TEXT NOT NULL, bytes INT NOT NULL,
    runner TEXT NOT NULL, PRIMARY KEY (run_id, batch_key, grp))`
  yield* sql`CREATE TABLE IF NOT EXISTS envtrain_cluster_attempts (
    run_id TEXT NOT NULL, batch_key TEXT NOT NULL, grp INT NOT NULL, runner TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), finished_at TIMESTAMPTZ)`
  // Added after the first release of these tables: a database made by it gains the columns.
  yield* sql`ALTER TABLE envtrain_cluster_runs ADD COLUMN IF NOT EXISTS reruns BIGINT NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE envtrain_cluster_attempts ADD COLUMN IF NOT EXISTS blocked_ms INT`
})

/**
 * An attempt at a group starts (a row of `envtrain_cluster_attempts` while its batch is out: attempts beyond one per
 * group are re-runs after a kill or a shard move; `dropBatch` counts and deletes them); `finishAttempt` stamps it
 * when the records are stored.
 */
export const startAttempt = (runId: string, key: string, group: number, runner: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO envtrain_cluster_attempts (run_id, batch_key, grp, runner)
      SELECT ${runId}::text, ${key}::text, ${group}::int, ${runner}::text FROM envtrain_cluster_batches
      WHERE run_id = ${runId} AND batch_key = ${key} FOR SHARE`
  )

export const finishAttempt = (runId: string, key: string, group: number, runner: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE envtrain_cluster_attempts SET finished_at = clock_timestamp()
      WHERE run_id = ${runId} AND batch_key = ${key} AND grp = ${group} AND runner = ${runner}
        AND finished_at IS NULL`)

export const putRun = (runId: string, spec: RunSpec) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO envtrain_cluster_runs (run_id, spec) VALUES (${runId}, ${JSON.stringify(spec)})
      ON CONFLICT (run_id) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()`
  )

export const getRun = (runId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ spec: string }>`SELECT spec FROM envtrain_cluster_runs WHERE run_id = ${runId}`,
      (rows) => rows.length === 0 ? undefined : JSON.parse(rows[0].spec) as RunSpec
    ))

export const putBatch = (runId: string, key: string, body: unknown) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO envtrain_cluster_batches (run_id, batch_key, body) VALUES (${runId}, ${key}, ${
        JSON.stringify(body)
      }) ON CONFLICT (run_id, batch_key) DO UPDATE SET body = EXCLUDED.body`
  )

export const getBatch = (runId: string, key: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ body: string }>`SELECT body FROM envtrain_cluster_batches WHERE run_id = ${runId} AND batch_key = ${key}`,
      (rows) => rows.length === 0 ? undefined : JSON.parse(rows[0].body) as unknown
    ))

/**
 * Keeps the first finished attempt's records (a re-run's are the same seeded episodes); writes nothing once the
 * batch was read (its row is gone: a late duplicate, see above).
 */
export const putGroup = (runId: string, key: string, group: number, body: string, runner: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO envtrain_cluster_groups (run_id, batch_key, grp, body, bytes, runner)
      SELECT ${runId}::text, ${key}::text, ${group}::int, ${body}::text, ${Buffer.byteLength(body)}::int,
        ${runner}::text
      FROM envtrain_cluster_batches WHERE run_id = ${runId} AND batch_key = ${key} FOR SHARE
      ON CONFLICT (run_id, batch_key, grp) DO NOTHING`
  )

export const getGroups = (runId: string, key: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ grp: number; body: string }>`SELECT grp, body FROM envtrain_cluster_groups
      WHERE run_id = ${runId} AND batch_key = ${key} ORDER BY grp`
  )

/**
 * A batch the trainer has read (or abandoned): its rows go, and its attempts, whose re-runs (attempts beyond one per
 * group) are added to the run's `reruns` in the same statement (a retried call adds nothing twice). Returns the
 * batch's re-runs. The batch's row goes first: it waits for any write of the batch's in flight, and stops later ones.
 */
export const dropBatch = (runId: string, key: string): Effect.Effect<number, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function*() {
      yield* sql`DELETE FROM envtrain_cluster_batches WHERE run_id = ${runId} AND batch_key = ${key}`
      yield* sql`DELETE FROM envtrain_cluster_groups WHERE run_id = ${runId} AND batch_key = ${key}`
      const rows = yield* sql<{ n: string }>`WITH gone AS (
          DELETE FROM envtrain_cluster_attempts WHERE run_id = ${runId} AND batch_key = ${key} RETURNING grp),
        n AS (SELECT count(*) - count(DISTINCT grp) AS n FROM gone)
        UPDATE envtrain_cluster_runs SET reruns = reruns + (SELECT n FROM n) WHERE run_id = ${runId}
        RETURNING (SELECT n FROM n) AS n`
      return Number(rows[0]?.n ?? 0)
    }))

/** The run's re-runs so far: attempts beyond one per group, over its dropped batches. */
export const reruns = (runId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: string }>`SELECT reruns AS n FROM envtrain_cluster_runs WHERE run_id = ${runId}`,
      (rows) => Number(rows[0]?.n ?? 0)
    ))

/**
 * Replies the cluster stored for messages that are gone: a late duplicate attempt's reply, saved after the trainer
 * cleared its message (`MessageStorage.clearAddress`). Nobody reads them; any run's may go.
 */
export const dropOrphanReplies = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`DELETE FROM cluster_replies r WHERE NOT EXISTS (SELECT 1 FROM cluster_messages m WHERE m.id = r.request_id)`
)

/**
 * A runner's event loop was held for `ms` (CPU-bound environments, a starved machine): stamped on its attempts that
 * were out meanwhile (started before the block), keeping the longest. The livelock watchdog reads it.
 */
export const recordBlock = (runner: string, ms: number) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`UPDATE envtrain_cluster_attempts SET blocked_ms = GREATEST(COALESCE(blocked_ms, 0), ${ms}::int)
      WHERE runner = ${runner} AND finished_at IS NULL
        AND started_at <= clock_timestamp() - ${ms}::float8 * interval '1 millisecond'`
  )

/** A group of a batch that was started again and again without finishing (client.ts's livelock watchdog). */
export interface Restarted {
  readonly group: number
  readonly attempts: number
  /** Since its first attempt started. */
  readonly seconds: number
  /** The longest event-loop block its runners recorded while its attempts were out; 0 for none. */
  readonly blockedMs: number
  /** The runners that started it. */
  readonly runners: string
}

/** The batch's unfinished group (no records row) with the most attempts, if it has at least `attempts`. */
export const restartedGroup = (runId: string, key: string, attempts: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ grp: number; attempts: string; seconds: number; blocked_ms: number | null; runners: string }>`
        SELECT a.grp, count(*) AS attempts,
          extract(epoch FROM clock_timestamp() - min(a.started_at))::float8 AS seconds,
          max(a.blocked_ms) AS blocked_ms, string_agg(DISTINCT a.runner, ', ') AS runners
        FROM envtrain_cluster_attempts a
        WHERE a.run_id = ${runId} AND a.batch_key = ${key} AND NOT EXISTS (
          SELECT 1 FROM envtrain_cluster_groups g
          WHERE g.run_id = a.run_id AND g.batch_key = a.batch_key AND g.grp = a.grp)
        GROUP BY a.grp HAVING count(*) >= ${attempts}
        ORDER BY count(*) DESC, a.grp LIMIT 1`,
      (rows): Restarted | undefined =>
        rows.length === 0 ? undefined : {
          group: rows[0].grp,
          attempts: Number(rows[0].attempts),
          seconds: rows[0].seconds,
          blockedMs: rows[0].blocked_ms ?? 0,
          runners: rows[0].runners
        }
    ))

/**
 * The batch's group messages that no runner has read yet (never picked up from storage): the watchdog's evidence.
 * `entity_id` starts with the batch's prefix (entity.ts: run/batch/group).
 */
export const unreadMessages = (prefix: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: string }>`SELECT count(*) AS n FROM cluster_messages
        WHERE entity_id LIKE ${prefix + "%"} AND processed = false AND last_read IS NULL`,
      (rows) => Number(rows[0]?.n ?? 0)
    ))

/** Runners registered and healthy (cluster_runners): none means no one will read the messages. */
export const healthyRunners = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ n: string }>`SELECT count(*) AS n FROM cluster_runners WHERE healthy = true`,
    (rows) => Number(rows[0]?.n ?? 0)
  ))

/**
 * The run lease: a session-level advisory lock on a connection reserved for the run's Scope. Postgres releases it
 * when that connection closes, so a trainer that dies (SIGKILL included) frees the run at once; a second trainer on
 * the same run id is refused while the first lives. Returns whether it was taken, and `check`: whether this
 * session still holds it (it does not after a Postgres restart, which ends every session).
 */
export const lease = (runId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const connection = yield* sql.reserve
    const key = `envtrain-run:${runId}`
    const rows = yield* connection.executeUnprepared(
      "SELECT pg_try_advisory_lock(hashtext($1)::bigint) AS ok",
      [key],
      undefined
    )
    const check = Effect.map(
      connection.executeUnprepared(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted " +
          "AND objid = (hashtext($1)::bigint & 4294967295)::oid",
        [key],
        undefined
      ),
      (held) => Number((held as ReadonlyArray<{ n: string }>)[0]?.n ?? 0) > 0
    )
    return { taken: (rows as ReadonlyArray<{ ok: boolean }>)[0]?.ok === true, check }
  })
