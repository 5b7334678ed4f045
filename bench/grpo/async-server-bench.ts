/**
 * Sync vs async GRPO on Catch with generation on a policy server in its own process (`envtrain serve-policy
 * --backend cpu` as a child), next to sync in process for reference. server-async trains on the in-thread CPU
 * model (its update blocks the event loop, so the producer cannot send requests meanwhile); server-async-worker
 * trains on `Trainer.workerModel` (the same model in a worker thread; its start-up is not timed), so generation on
 * the server can overlap the update. The start: a Catch SFT checkpoint given with `--sft-from DIR` (the flagship
 * demo's warm-up: `npx tsx examples/src/catch.ts --seed 1` writes runs/catch/sft-whole/checkpoint-100), or else the
 * tiny preset (seed 1) after a short SFT warm-up on Catch's imperfect player (as examples/src/Pipeline.ts does,
 * smaller; 0 SFT episodes = untrained; too short to earn Catch reward). Served from a copy on disk. Catch as the demo
 * plays it (examples/src/Pipeline.ts): the recipe's rows and reward, no tool schemas in the prompt, temperature
 * 0.4, the dapo loss; G = 4, 8 episodes per step, same seed and steps in every mode. Each server mode gets a fresh
 * child (policy version 0). Modes alternate per round because the machine's two cores are shared. Saves
 * bench/results/grpo/async-server-bench.json and .md (the .md's earlier rounds are kept below the new one).
 *
 *   npx tsx bench/grpo/async-server-bench.ts [--sft-from DIR] [steps] [maxCompletionLength] [rounds] [sftEpisodes] [modes]
 *
 * `modes`: comma-separated, default server-sync,server-async,server-async-worker,in-process-sync. With `--sft-from`,
 * `sftEpisodes` is ignored.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Environment } from "@envtrain/env"
import { Checkpoint, Gemm } from "@envtrain/gpu"
import { PolicyServerProcess } from "@envtrain/harness"
import * as Episode from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as Config from "../../packages/grpo/src/Config.js"
import * as Dataset from "../../packages/grpo/src/Dataset.js"
import * as PolicyServers from "../../packages/grpo/src/PolicyServers.js"
import * as Recipe from "../../packages/grpo/src/Recipe.js"
import * as SftData from "../../packages/grpo/src/SftData.js"
import * as SftTrainer from "../../packages/grpo/src/SftTrainer.js"
import * as Trainer from "../../packages/grpo/src/Trainer.js"

// `--backend cpu|reference` (default cpu: the CPU device on both sides; reference: the plain-TypeScript model).
const rawArgv = process.argv.slice(2)
const backendAt = rawArgv.indexOf("--backend")
const backend = backendAt === -1 ? "cpu" : rawArgv[backendAt + 1]
if (backend !== "cpu" && backend !== "reference") throw new Error(`--backend takes cpu or reference, got ${backend}`)
// `--sft-from DIR` anywhere; the rest are the positionals.
const argv = backendAt === -1 ? rawArgv : [...rawArgv.slice(0, backendAt), ...rawArgv.slice(backendAt + 2)]
const flagAt = argv.indexOf("--sft-from")
const sftFrom = flagAt === -1 ? undefined : argv[flagAt + 1]
if (flagAt !== -1 && (sftFrom === undefined || sftFrom.startsWith("--"))) throw new Error("--sft-from needs a DIR")
const positional = flagAt === -1 ? argv : [...argv.slice(0, flagAt), ...argv.slice(flagAt + 2)]
const steps = Number(positional[0] ?? 6)
const completion = Number(positional[1] ?? 640)
const rounds = Number(positional[2] ?? 1)
const sftEpisodes = Number(positional[3] ?? 64)
const allModes = ["server-sync", "server-async", "server-async-worker", "in-process-sync"] as const
type Mode = typeof allModes[number]
const modes = (positional[4] ?? allModes.join(",")).split(",") as ReadonlyArray<Mode>
// The earlier demo's GRPO sampling temperature, at which its results were measured: the SFT checkpoint's samples
// earn reward at it.
const temperature = 0.4
for (const mode of modes) {
  if (!allModes.includes(mode)) throw new Error(`unknown mode ${mode}: give some of ${allModes.join(",")}`)
}

// `envtrain serve-policy --backend <backend>` in its own process, stopped with the scope; its URL.
const startServer = (dir: string) =>
  Effect.map(PolicyServerProcess.launch({ model: dir, backend }), (server) => server.url)

// The trainer's model: in a worker thread, or in this thread, on the bench's backend.
const modelOf = (checkpoint: Checkpoint.Model, worker: boolean) =>
  backend === "reference"
    ? worker ? Trainer.workerModel(checkpoint) : Effect.succeed(Trainer.referenceModel(checkpoint))
    : worker
    ? Trainer.cpuModel(checkpoint)
    : Effect.map(Gemm.select({}), ({ gemm }) => Trainer.deviceModel(checkpoint, { gemm }))

// Catch's episodes as the demo opens them (examples/src/Pipeline.ts, tiny preset): no tool schemas in the prompt,
// which is what the SFT checkpoint learnt (the call format comes from the SFT data).
const open = (row: Readonly<Record<string, unknown>>) =>
  Effect.map(
    Effect.orDie(Environment.episode(Recipe.catchRecipe.environment, row)),
    (e) => Episode.withoutToolDefinitions(Episode.fromEnvironment(e))
  )

const median = (xs: ReadonlyArray<number>) => {
  if (xs.length === 0) return null
  const s = [...xs].sort((a, b) => a - b)
  const h = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[h] : (s[h - 1] + s[h]) / 2
}

const run = (mode: Mode, round: number, dir: string, checkpoint: Checkpoint.Model) =>
  Effect.scoped(Effect.gen(function*() {
    const config = yield* Config.fromSources({
      numGenerations: 4,
      perDeviceTrainBatchSize: 8,
      maxCompletionLength: completion,
      learningRate: 1e-4,
      lrSchedulerType: "constant",
      temperature,
      lossType: "dapo",
      loggingSteps: 1,
      saveSteps: 10_000,
      maxSteps: steps,
      seed: 42,
      outputDir: `/tmp/envtrain-async-server-bench-${mode}`,
      ...(mode === "server-async" || mode === "server-async-worker" ? { async: true, maxStaleness: 1 } : {})
    })
    const workerStarted = Date.now()
    const local = yield* modelOf(checkpoint, mode === "server-async-worker")
    const workerStartSeconds = mode === "server-async-worker" ? (Date.now() - workerStarted) / 1000 : null
    // The server's start-up (tsx compile, checkpoint load) is outside the timed run; the first weight push is in it.
    const url = mode === "in-process-sync" ? null : yield* startServer(dir)
    const [loadBefore, load5Before] = loadavg()
    const started = Date.now()
    const model = url === null ? local : yield* PolicyServers.withPolicyServers(local, { urls: [url] })
    const result = yield* Trainer.train({
      config,
      model,
      dataset: Recipe.rows(Recipe.catchRecipe, Dataset.range(0, 1000)),
      open,
      rewardFunctions: Recipe.catchRecipe.rewardFunctions,
      progress: false
    })
    const seconds = (Date.now() - started) / 1000
    const values = (k: string) =>
      result.steps.map((s) => s.values[k]).filter((x): x is number => x !== undefined && !Number.isNaN(x))
    const mean = (k: string) => {
      const v = values(k)
      return v.length === 0 ? null : v.reduce((a, b) => a + b, 0) / v.length
    }
    const meanReward = mean("reward")
    const r = {
      round,
      mode,
      seconds,
      medianStepSeconds: median(values("step_time")),
      stepsPerHour: (steps * 3600) / seconds,
      meanReward,
      rewardPerWallMinute: meanReward === null ? null : (meanReward * steps) / (seconds / 60),
      meanGenerationSeconds: mean("time/generation"),
      meanUpdateSeconds: mean("time/update"),
      meanQueueWaitSeconds: mean("queue_wait_time_s"),
      meanOverlap: mean("async/overlap"),
      meanStaleness: mean("async/staleness/mean"),
      maxStaleness: values("async/staleness/max").reduce<number | null>(
        (a, b) => a === null ? b : Math.max(a, b),
        null
      ),
      droppedSamples: result.steps.at(-1)?.values["async/dropped_samples_total"] ?? null,
      meanCompletionLength: mean("completions/mean_length"),
      workerStartSeconds,
      loadBefore,
      loadAfter: loadavg()[0],
      load5Before,
      load5After: loadavg()[1]
    }
    console.log(JSON.stringify(r))
    return r
  }))

// Pipeline's warm-up, smaller: the imperfect player's transcripts (error rate 0.2), 2 epochs, batch 4, lr 1e-2.
const warmUp = Effect.gen(function*() {
  const base = yield* Checkpoint.makeModel("tiny", 1)
  if (sftEpisodes === 0) return base
  const started = Date.now()
  const transcripts = (yield* SftData.collect(Recipe.catchRecipe, {
    seeds: Dataset.range(10_000, 10_000 + sftEpisodes),
    errorRate: 0.2,
    playerSeed: 0
  })).map((t) => ({ messages: t.messages }))
  const model = yield* modelOf(base, true)
  yield* SftTrainer.train({
    config: yield* Config.fromSources({
      outputDir: "/tmp/envtrain-async-server-bench-sft",
      perDeviceTrainBatchSize: 4,
      gradientAccumulationSteps: 1,
      numTrainEpochs: 2,
      learningRate: 1e-2,
      lrSchedulerType: "cosine",
      warmupRatio: 0.1,
      loggingSteps: 1,
      saveSteps: 1_000_000,
      seed: 0
    }),
    model,
    transcripts,
    maxLength: 1024,
    title: "catch (SFT warm-up)",
    progress: false
  })
  sftSeconds = (Date.now() - started) / 1000
  console.log(`sft: ${transcripts.length} episodes, ${sftSeconds.toFixed(1)} s`)
  return { ...base, tensors: (yield* model.exportState).weights } satisfies Checkpoint.Model
})
let sftSeconds = 0

// Where the given SFT checkpoint came from, as its trainer_state.json says (the run's output directory and step).
const provenance = (dir: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(`${dir}/trainer_state.json`).pipe(Effect.option)
    if (text._tag === "None") return null
    const state = JSON.parse(text.value) as {
      readonly kind?: string
      readonly globalStep?: number
      readonly seed?: number
      readonly config?: { readonly outputDir?: string }
    }
    return { kind: state.kind, step: state.globalStep, seed: state.seed, outputDir: state.config?.outputDir }
  })

const DEMO_SFT = "runs/catch/sft-whole/checkpoint-100"
const HISTORY = "bench/results/grpo/async-server-bench.md"

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  const checkpoint = sftFrom === undefined ? yield* warmUp : yield* Checkpoint.load(sftFrom)
  const origin = sftFrom === undefined ? null : yield* provenance(sftFrom)
  // A copy, so nothing the server does can touch the given directory.
  yield* Checkpoint.save(dir, checkpoint)
  const runs = []
  for (let round = 1; round <= rounds; round++) {
    for (const mode of modes) {
      runs.push(yield* run(mode, round, dir, checkpoint))
    }
  }
  const results = {
    date: new Date().toISOString(),
    preset: "tiny",
    steps,
    completion,
    rounds,
    temperature,
    sftFrom: sftFrom ?? null,
    sftFromState: origin,
    sftEpisodes: sftFrom === undefined ? sftEpisodes : null,
    sftSeconds: sftFrom === undefined ? sftSeconds : null,
    cpus: cpus().length,
    note: "other sessions' jobs shared the machine's cores during the runs (see the load averages)",
    runs
  }
  mkdirSync("bench/results/grpo", { recursive: true })
  writeFileSync("bench/results/grpo/async-server-bench.json", JSON.stringify(results, null, 2) + "\n")
  const f = (x: number | null, d = 2) => x === null ? "–" : x.toFixed(d)
  const start = sftFrom === undefined
    ? "the tiny preset (seed 1) after " + (sftEpisodes === 0
      ? "no SFT (untrained). "
      : `a short SFT warm-up (${sftEpisodes} imperfect-player episodes, 2 epochs, ${sftSeconds.toFixed(0)} s). `)
    : `the Catch SFT checkpoint \`${sftFrom}\`` +
      (origin === null
        ? ". "
        : ` (its trainer_state.json: ${origin.kind ?? "?"} step ${origin.step ?? "?"}, seed ${origin.seed ?? "?"}, ` +
          `written to ${origin.outputDir ?? "?"}). `)
  const make = sftFrom === undefined
    ? ""
    : `\`npx tsx examples/src/catch.ts --seed 1\` (the flagship demo; it writes its SFT checkpoint ${DEMO_SFT} ` +
      `before GRPO starts, so it can be stopped there), then `
  const args = `${steps} ${completion} ${rounds} ${sftEpisodes} ${modes.join(",")}`
  const section = [
    `## ${new Date().toISOString().slice(0, 10)}: ${steps} steps from ` +
    (sftFrom === undefined ? `the ${sftEpisodes}-episode warm-up` : "a Catch SFT checkpoint"),
    "",
    `${steps} steps per run, 8 episodes per step (G = 4), maxCompletionLength ${completion}, temperature ` +
    `${temperature}, dapo loss, lr 1e-4, seed 42; Catch's rows, prompt (no tool schemas) and reward as the demo ` +
    `plays them; the start: ${start}` +
    `Backend: ${
      backend === "cpu" ? "the CPU device (Trainer.cpuModel / Trainer.deviceModel)" : "the reference model"
    }. ` +
    `server-*: generation on an \`envtrain serve-policy --backend ${backend}\` child (fresh per run; its start-up ` +
    `is not timed, the first weight push is); server-async*: maxStaleness 1, maxInflightTasks auto; server-async ` +
    `trains on the model in this thread, server-async-worker on the same model in a worker thread (` +
    `${
      backend === "cpu" ? "Trainer.cpuModel" : "Trainer.workerModel"
    }; its start-up is not timed). Machine: ${cpus().length} CPU cores shared with other sessions' jobs, so absolute ` +
    `numbers are noisy; the modes alternate within each round. Reward per wall-minute = mean step reward × steps / ` +
    `wall minutes. Load = 1-minute (5-minute) load average before → after.`,
    "",
    "| round | mode | wall s | step s (median) | steps/hour | mean reward | reward/wall-min | generation s | " +
    "update s | queue wait s | overlap | staleness mean (max) | dropped | mean completion tokens | load |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ...runs.map((r) =>
      `| ${r.round} | ${r.mode} | ${f(r.seconds, 1)} | ${f(r.medianStepSeconds)} | ${f(r.stepsPerHour, 0)} | ` +
      `${f(r.meanReward, 3)} | ${f(r.rewardPerWallMinute, 3)} | ${f(r.meanGenerationSeconds)} | ` +
      `${f(r.meanUpdateSeconds)} | ${f(r.meanQueueWaitSeconds)} | ${f(r.meanOverlap)} | ` +
      `${f(r.meanStaleness)} (${f(r.maxStaleness, 0)}) | ${r.droppedSamples ?? "–"} | ` +
      `${f(r.meanCompletionLength, 0)} | ` +
      `${f(r.loadBefore)} (${f(r.load5Before)}) → ${f(r.loadAfter)} (${f(r.load5After)}) |`
    ),
    "",
    `Reproduce: ${make}\`npx tsx bench/grpo/async-server-bench.ts --backend ${backend} ` +
    (sftFrom === undefined ? "" : `--sft-from ${DEMO_SFT} `) + args + "`."
  ].join("\n")
  // The new round on top; the earlier rounds (each under its own `## date` heading) stay below as history.
  const title = "# Sync vs async GRPO with the policy server in its own process (tiny preset, CPU backend, Catch)"
  const earlier = yield* fs.readFileString(HISTORY).pipe(Effect.orElseSucceed(() => ""))
  const history = earlier.slice(earlier.indexOf("\n## ") + 1)
  const md = [title, "", section, ...(earlier.includes("\n## ") ? ["", history.trimEnd()] : [])].join("\n")
  writeFileSync(HISTORY, md + "\n")
  console.log(section)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

// The recipes' reward functions carry `any` error and requirement channels; what is left needs nothing.
Effect.runPromise(program as Effect.Effect<void, unknown>).catch((e) => {
  console.error(e)
  process.exit(1)
})
