/**
 * Harness rollouts per minute at 1, 4 and 16 concurrent rollouts, with the real parts: `envtrain serve-policy
 * --backend cpu` as a child over a tiny-preset model, one CaptureProxy in this process, a fresh bubblewrap sandbox
 * per rollout, the task's verifier, the trace fetched and validated. Two agents:
 * - bash-agent (BashAgent, temperature 1, 32 tokens per call, ignore_eos so every call generates exactly that);
 *   the model has random weights and writes no tool call, so each rollout is one model call;
 * - oracle (one captured 1-token call, then the task's solve.sh commands, each its own process in the sandbox);
 * - one-call (one captured 1-token call, nothing run): the fixed cost of a rollout — capture session, sandbox,
 *   verifier, trace — with next to no generation; bash-agent minus it is generation, oracle minus it is the solution.
 * Each (agent, concurrency) runs a batch of rollouts over the 12 training tasks, repeated; the table gives the
 * median rollouts per minute over the repeats and the 1-minute load average while it ran. Saves
 * bench/results/harness-rollouts.json and .md.
 *
 *   nice -n 10 npx tsx bench/harness/rollouts.ts [repeats]
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Checkpoint } from "@envtrain/gpu"
import { BashAgent, CaptureProxy, HarborTask, HarnessSession, PolicyServerProcess } from "@envtrain/harness"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { loadavg } from "node:os"

const repeats = Number(process.argv[2] ?? 5)
const CONCURRENCY = [1, 4, 16] as const
// Rollouts per batch: enough that the batch is mostly steady state at that concurrency.
const batchOf = (c: number) => Math.max(4, 2 * c)
const MAX_TOKENS = 32

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const h = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[h] : (s[h - 1] + s[h]) / 2
}
const round = (x: number, d = 2) => Number(x.toFixed(d))

interface Run {
  readonly agent: string
  readonly concurrency: number
  readonly repeat: number
  readonly rollouts: number
  readonly seconds: number
  readonly rolloutsPerMinute: number
  readonly modelCalls: number
  readonly completionTokens: number
  readonly solved: number
  readonly timedOut: number
  readonly unscoreable: number
  readonly load1: number
}

// One captured 1-token model call and nothing else: what a rollout costs besides generation and the agent's commands.
const oneCall: HarnessSession.Agent = {
  name: "one-call",
  run: (c) =>
    BashAgent.run(c.sandbox, {
      baseUrl: c.baseUrl,
      apiKey: c.apiKey,
      model: c.model,
      instruction: c.task.instruction,
      maxSteps: 1,
      maxTokens: 1
    }).pipe(
      Effect.map((r) => ({ messages: r.messages as unknown as ReadonlyArray<HarnessSession.Message> })),
      Effect.mapError((e) => new HarnessSession.AgentFailed({ message: e.message }))
    )
}

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* Checkpoint.save(dir, yield* Checkpoint.makeModel("tiny", 1))
  const server = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
  const proxy = yield* CaptureProxy.make({
    upstream: server.url,
    model: "tiny",
    extraBody: { ignore_eos: true, chat_template_kwargs: { enable_thinking: false } }
  })
  const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
  const agents = {
    "bash-agent": HarnessSession.bashAgent({ maxSteps: 4, maxTokens: MAX_TOKENS, temperature: 1 }),
    oracle: HarnessSession.oracleAgent({ maxTokens: 1 }),
    "one-call": oneCall
  }
  const factories = Object.fromEntries(
    Object.entries(agents).map((
      [name, agent]
    ) => [name, HarnessSession.makeFactory({ tasks: suite.train, agent, proxy, model: "tiny" })])
  )
  const batch = (agent: string, concurrency: number, repeat: number) =>
    Effect.gen(function*() {
      const n = batchOf(concurrency)
      const loadBefore = loadavg()[0]
      const start = performance.now()
      const outcomes = yield* Effect.forEach(
        Array.from({ length: n }, (_, i) => i),
        (i) =>
          HarnessSession.rollout(
            factories[agent],
            suite.train[i % suite.train.length].instruction,
            repeat * 1000 + i,
            `${agent}-c${concurrency}-r${repeat}-${i}`
          ),
        { concurrency }
      )
      const seconds = (performance.now() - start) / 1000
      const run: Run = {
        agent,
        concurrency,
        repeat,
        rollouts: n,
        seconds: round(seconds),
        rolloutsPerMinute: round((n / seconds) * 60, 1),
        modelCalls: outcomes.reduce((s, o) => s + o.trace.turns.length, 0),
        completionTokens: outcomes.reduce(
          (s, o) => s + o.trace.turns.reduce((t, turn) => t + turn.completion_token_ids.length, 0),
          0
        ),
        solved: outcomes.filter((o) => o.envReward === 1).length,
        timedOut: outcomes.filter((o) => o.timedOut).length,
        unscoreable: outcomes.filter((o) => o.envReward === null).length,
        load1: round((loadBefore + loadavg()[0]) / 2)
      }
      console.log(JSON.stringify(run))
      return run
    })

  // Warm-up: one rollout of each agent (the server's first call, the sandbox binary's page cache).
  for (const agent of Object.keys(agents)) yield* batch(agent, 1, -1).pipe(Effect.asVoid)
  const runs: Array<Run> = []
  // Repeats outermost, so drifting load from other jobs hits every configuration alike.
  for (let repeat = 0; repeat < repeats; repeat++) {
    for (const concurrency of CONCURRENCY) {
      for (const agent of Object.keys(agents)) runs.push(yield* batch(agent, concurrency, repeat))
    }
  }
  const rows = Object.keys(agents).flatMap((agent) =>
    CONCURRENCY.map((concurrency) => {
      const mine = runs.filter((r) => r.agent === agent && r.concurrency === concurrency)
      return {
        agent,
        concurrency,
        rolloutsPerBatch: batchOf(concurrency),
        repeats: mine.length,
        medianRolloutsPerMinute: round(median(mine.map((r) => r.rolloutsPerMinute)), 1),
        rolloutsPerMinute: mine.map((r) => r.rolloutsPerMinute),
        medianSecondsPerBatch: round(median(mine.map((r) => r.seconds))),
        modelCallsPerRollout: round(
          mine.reduce((s, r) => s + r.modelCalls, 0) / mine.reduce((s, r) => s + r.rollouts, 0)
        ),
        completionTokensPerRollout: round(
          mine.reduce((s, r) => s + r.completionTokens, 0) / mine.reduce((s, r) => s + r.rollouts, 0),
          1
        ),
        solved: mine.reduce((s, r) => s + r.solved, 0),
        rollouts: mine.reduce((s, r) => s + r.rollouts, 0),
        timedOut: mine.reduce((s, r) => s + r.timedOut, 0),
        unscoreable: mine.reduce((s, r) => s + r.unscoreable, 0),
        medianLoad1: round(median(mine.map((r) => r.load1)))
      }
    })
  )
  const loads = runs.map((r) => r.load1)
  const result = {
    bench: "harness-rollouts",
    date: new Date().toISOString(),
    model: "tiny preset, random weights (CPU backend, envtrain serve-policy in its own process)",
    completionTokensPerCall: { "bash-agent": MAX_TOKENS, oracle: 1, "one-call": 1 },
    repeats,
    load1: { min: round(Math.min(...loads)), median: round(median(loads)), max: round(Math.max(...loads)) },
    rows,
    runs
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/harness-rollouts.json", JSON.stringify(result, null, 2) + "\n")
  const md = [
    "# Harness rollouts per minute at 1, 4 and 16 concurrent rollouts",
    "",
    `\`nice -n 10 npx tsx bench/harness/rollouts.ts ${repeats}\`: whole harness rollouts (capture session, fresh ` +
    "bubblewrap sandbox with the task's workspace, the agent, the task's verifier, trace fetched and validated) over " +
    "the 12 training tasks, through one CaptureProxy to `envtrain serve-policy --backend cpu` (tiny preset, random " +
    "weights, its own process). bash-agent: BashAgent at temperature 1, " +
    `${MAX_TOKENS} tokens per call (ignore_eos); the random model writes no tool call, so a rollout is one model ` +
    "call. oracle: one 1-token call, then the task's solve.sh commands (each its own process in the sandbox). " +
    "one-call: one 1-token call and nothing else, the fixed cost of a rollout (capture session, sandbox, verifier, " +
    "trace); bash-agent minus it is generation, oracle minus it the solution's commands. " +
    `Median over ${repeats} repeats of a batch of max(4, 2 × concurrency) rollouts.`,
    "",
    "**The machine is shared**: 2 CPUs with other jobs running (1-minute load average during the runs " +
    `${result.load1.min}–${result.load1.max}, median ${result.load1.median}), so absolute numbers are low and noisy; ` +
    "the per-repeat values are in the json.",
    "",
    "| agent | concurrent | rollouts/batch | median rollouts/min | per repeat | s/batch | calls/rollout | tokens/rollout | solved | load 1 min |",
    "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((r) =>
      `| ${r.agent} | ${r.concurrency} | ${r.rolloutsPerBatch} | ${r.medianRolloutsPerMinute} | ${
        r.rolloutsPerMinute.join(", ")
      } | ${r.medianSecondsPerBatch} | ${r.modelCallsPerRollout} | ${r.completionTokensPerRollout} | ${r.solved}/${r.rollouts} | ${r.medianLoad1} |`
    ),
    "",
    "Seconds per rollout from the medians (60 / rollouts per minute; at concurrency c, c rollouts share that time): " +
    CONCURRENCY.map((c) =>
      `${c} concurrent: ${
        Object.keys(agents).map((a) => {
          const r = rows.find((x) => x.agent === a && x.concurrency === c)!
          return `${a} ${round(60 / r.medianRolloutsPerMinute)} s`
        }).join(", ")
      }`
    ).join("; ") + ".",
    "",
    `Timeouts: ${rows.reduce((s, r) => s + r.timedOut, 0)}; unscoreable: ${
      rows.reduce((s, r) => s + r.unscoreable, 0)
    }.`,
    ""
  ].join("\n")
  writeFileSync("bench/results/harness-rollouts.md", md)
  console.log(md)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
