/**
 * Rollout throughput on cluster runners, with the real parts: a private Postgres (PostgresProcess), `envtrain runner`
 * children, `envtrain serve-policy --backend reference` over a tiny model. Batches of 12 groups x 4 episodes
 * (4 tokens each) are sent through `Cluster.client`, as the trainer sends them, on two environments (see
 * slowEnvironment.ts):
 *
 * - latency: 10 environment calls of 200 ms wait per episode (an env server or a sandbox elsewhere). Each runner
 *   takes `--max-groups 2` (a machine's capacity: sandboxes, sessions); without a cap one runner overlaps every wait
 *   of a batch by itself, and more runners could not add anything;
 * - cpu: 200 ms of the runner's own CPU per episode (an environment simulated in process), `--max-groups 2` too:
 *   uncapped, a runner ran all 48 episodes' CPU back to back (about 10 s without the event loop turning), past
 *   `fastFailover`'s 5 s shard-lock expiry, lost its shards, and restarted its groups again and again (354 attempts
 *   in 4.5 minutes, none finished; see bench/results/cluster-throughput.md).
 *
 * With 1, 2 and 3 runners: episodes per second (median batch). And, per environment, the same batch rolled out in
 * this process (`RolloutGroups.runGroup` per group, every group at once, on the same server) beside one uncapped
 * runner: the dispatch overhead per group. Every batch has seeds of its own (the server keeps finished generations'
 * KV caches: a batch it has served would replay them). Saves bench/results/cluster-throughput.{json,md}. The machine
 * has 2 cores shared with other work: the load average is recorded beside each row; the numbers are noisy.
 *
 *   nice -n 10 npx tsx bench/cluster/throughput.ts [batches=3]
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Checkpoint } from "@envtrain/gpu"
import { RolloutGroups } from "@envtrain/grpo"
import { Cluster, PolicyServerProcess, PostgresProcess, RunnerProcess } from "@envtrain/harness"
import { Context, Effect, Layer, Scope } from "effect"
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import cpuEnv from "./cpu-env.js"
import { inProcessBatches } from "./inProcess.js"
import latencyEnv from "./latency-env.js"

const batches = Number(process.argv[2] ?? 3)
const GROUPS = 12
const GROUP_SIZE = 4
const TOKENS = 4

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s[Math.floor((s.length - 1) / 2)]
}
const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits
const uptime = () => execFileSync("uptime", { encoding: "utf8" }).trim()

let nextSeed = 1
const batch = (step: number): RolloutGroups.Batch => ({
  step,
  microBatch: 0,
  round: 0,
  seed: nextSeed++,
  policyVersion: 0,
  rows: Array.from({ length: GROUPS }, (_, i) => ({ prompt: [{ role: "user", content: "Wait." }], seed: i })),
  groupSize: GROUP_SIZE,
  episode: { maxCompletionLength: TOKENS, sampling: { temperature: 1 } },
  enableThinking: false,
  keepModelTemplate: false
})

const environments = [
  { name: "latency", module: resolve("bench/cluster/latency-env.ts"), definition: latencyEnv, maxGroups: 2 },
  { name: "cpu", module: resolve("bench/cluster/cpu-env.ts"), definition: cpuEnv, maxGroups: 2 }
] as const

interface Row {
  readonly environment: string
  readonly where: string
  readonly runners: number
  readonly maxGroups: number | null
  readonly batchSeconds: ReadonlyArray<number>
  readonly medianSeconds: number
  readonly episodesPerSecond: number
  readonly load1: number
}

const program = Effect.gen(function*() {
  const dir = mkdtempSync(join(tmpdir(), "envtrain-bench-throughput-"))
  const model = yield* Checkpoint.makeModel("tiny", 1)
  yield* Checkpoint.save(dir, model)
  const server = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
  const pg = yield* PostgresProcess.launch()
  const rows: Array<Row> = []
  const record = (row: Omit<Row, "medianSeconds" | "episodesPerSecond" | "load1">) => {
    const medianSeconds = median(row.batchSeconds)
    const full = {
      ...row,
      batchSeconds: row.batchSeconds.map((x) => round(x)),
      medianSeconds: round(medianSeconds),
      episodesPerSecond: round((GROUPS * GROUP_SIZE) / medianSeconds, 2),
      load1: round(loadavg()[0], 2)
    }
    rows.push(full)
    console.log(JSON.stringify(full))
  }
  const timed = <E>(run: (b: RolloutGroups.Batch) => Effect.Effect<unknown, E>) =>
    Effect.gen(function*() {
      yield* run(batch(0)) // warm-up: the runners load the run's context on their first group
      const seconds: Array<number> = []
      for (let i = 1; i <= batches; i++) {
        const t0 = performance.now()
        yield* run(batch(i))
        seconds.push((performance.now() - t0) / 1000)
      }
      return seconds
    })

  for (const env of environments) {
    // In process: every group at once, generating on the same server request by request (as a runner does).
    const inProcess = yield* inProcessBatches(server.url, model, env.definition.environment)
    record({
      environment: env.name,
      where: "in process",
      runners: 0,
      maxGroups: null,
      batchSeconds: yield* timed(inProcess)
    })

    const settings = [
      // Uncapped, for the dispatch overhead; not for the CPU-bound environment (it loses its shards, see above).
      ...(env.name === "cpu" ? [] : [{ runners: 1, maxGroups: undefined }]),
      { runners: 1, maxGroups: env.maxGroups },
      { runners: 2, maxGroups: env.maxGroups },
      { runners: 3, maxGroups: env.maxGroups }
    ]
    for (const setting of settings) {
      const scope = yield* Scope.make()
      yield* Effect.forEach(
        Array.from({ length: setting.runners }),
        () =>
          Scope.extend(
            RunnerProcess.launch({
              postgres: pg.url,
              fastFailover: true,
              ...(setting.maxGroups === undefined ? {} : { maxGroups: setting.maxGroups })
            }),
            scope
          ),
        { concurrency: "unbounded" }
      )
      const groups = Context.get(
        yield* Scope.extend(
          Layer.build(Cluster.client({
            postgres: pg.url,
            runId: `throughput-${env.name}-${setting.runners}-${setting.maxGroups ?? "all"}`,
            spec: { environment: env.module, model: dir, policyServers: [server.url] },
            watchdog: "5 minutes",
            ...Cluster.fastFailover
          })),
          scope
        ),
        RolloutGroups.RolloutGroups
      )
      record({
        environment: env.name,
        where: "cluster",
        runners: setting.runners,
        maxGroups: setting.maxGroups ?? null,
        batchSeconds: yield* timed(groups.run)
      })
      yield* Scope.close(scope, { _tag: "Success", value: undefined } as never)
    }
  }

  const overhead = (environment: string) => {
    const local = rows.find((r) => r.environment === environment && r.runners === 0)
    const one = rows.find((r) => r.environment === environment && r.runners === 1 && r.maxGroups === null)
    return local === undefined || one === undefined ? NaN : round((one.medianSeconds - local.medianSeconds) / GROUPS)
  }
  const out = {
    bench: "cluster-throughput",
    date: new Date().toISOString(),
    uptime: uptime(),
    setup:
      `batches of ${GROUPS} groups x ${GROUP_SIZE} episodes (${TOKENS} tokens each), tiny model on one reference ` +
      `policy server, private Postgres on loopback, Cluster.fastFailover; ${batches} timed batches per row after ` +
      `one warm-up`,
    rows,
    dispatchOverheadPerGroupSeconds: { latency: overhead("latency") }
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/cluster-throughput.json", JSON.stringify(out, null, 2) + "\n")
  const md = [
    "# Rollout throughput on cluster runners (bench/cluster/throughput.ts)",
    "",
    `${out.setup}. \`uptime\` at the end: ${out.uptime}. Two cores shared with other work: noisy.`,
    "",
    "| environment | where | runners | --max-groups | batch s (median; all) | episodes / s | load |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.environment} | ${r.where} | ${r.runners} | ${r.maxGroups ?? "-"} | ${r.medianSeconds}; ${
        r.batchSeconds.join(", ")
      } | ${r.episodesPerSecond} | ${r.load1} |`
    ),
    "",
    `Dispatch overhead per group (one uncapped runner minus in process, over ${GROUPS} groups), latency ` +
    `environment: ${out.dispatchOverheadPerGroupSeconds.latency} s.`,
    ""
  ].join("\n")
  writeFileSync("bench/results/cluster-throughput.md", md)
  console.log(md)
}).pipe(
  Effect.scoped,
  Effect.provide(NodeContext.layer),
  // Exits once the scope has closed, whatever keep-alive sockets are left.
  Effect.andThen(Effect.sync(() => process.exit(0)))
)

// runMain: SIGINT/SIGTERM close the scope, so the runners, the server and Postgres stop with the bench.
NodeRuntime.runMain(program)
