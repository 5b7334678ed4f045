/**
 * TRL's GRPOTrainer (environment_factory, the seed's Catch) and envtrain's GRPO trainer side by side on this CPU:
 * the same tiny Qwen3 weights and tokenizer (one model directory, loaded by both), the same prompts (system and
 * user messages of envtrain's Catch recipe, tools rendered by each side's chat-template call, the reset
 * observation appended; the first-turn prompt token ids of both sides are compared), the same rows (seeds, in
 * order, no shuffle) and the same GRPO config. Both run in this one invocation; results go to
 * bench/results/interop-trl.{json,md}.
 *
 * The starting weights are the tiny preset after a short SFT warm-up made by envtrain (solver transcripts with the
 * tool definitions in the prompt, as TRL renders them), so that episodes are multi-turn tool-calling episodes on
 * both sides; a random model only writes text and ends every episode after one turn. The SFT model is cached in
 * the system's temporary directory and reused when its settings match.
 *
 *   npx tsx bench/interop/trl-vs-envtrain.ts                  # 6 steps per side, one round
 *   npx tsx bench/interop/trl-vs-envtrain.ts --steps=4 --rounds=2 --threads=2
 *
 * Flags: --steps=N (6)  --rounds=N (1; rounds alternate which side runs first)  --threads=N (torch threads, 1)
 * --fresh (redo the SFT warm-up)  --no-save  --render (rewrite the .md from the saved .json, run nothing)
 */
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Catch, Environment } from "@envtrain/env"
import { Checkpoint } from "@envtrain/gpu"
import { Config, Dataset, Recipe, SftData, SftTrainer, Trainer } from "@envtrain/grpo"
import { Episode } from "@envtrain/rollout"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, loadavg, tmpdir } from "node:os"
import { join } from "node:path"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}

const settings = {
  preset: "tiny" as const,
  initSeed: 0,
  // The prompt is ~555 tokens with the tools block; sequences cut at 800 tokens keep it and about four turns.
  // Measured: 120 transcripts cut at 1152 tokens (60 optimizer steps) left a policy whose calls mostly did not
  // parse, and cuts at 640 tokens left every turn after the first unlearnt; 200 optimizer steps is what the
  // flagship demo's SFT takes too.
  sft: { episodes: 400, errorRate: 0.2, epochs: 2, learningRate: 1e-2, batchSize: 4, maxLength: 800 },
  grpo: {
    steps: Number(flag("steps") ?? 6),
    numGenerations: 8,
    prompts: 2,
    maxCompletionLength: 960,
    temperature: 0.4,
    learningRate: 2e-4,
    beta: 0,
    lossType: "dapo",
    seed: 0,
    firstRowSeed: 10_000
  },
  rounds: Number(flag("rounds") ?? 1),
  torchThreads: Number(flag("threads") ?? 1)
}

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  if (s.length === 0) return NaN
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const sum = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0)

/** One optimizer step as both sides report it. */
interface Step {
  readonly step: number
  readonly seconds: number
  /** Rollouts with scoring and advantages (TRL: _generate_and_score_completions; envtrain: time/generation). */
  readonly rolloutSeconds: number
  /** The model's own generate calls inside the rollouts. */
  readonly decodeSeconds: number
  /** Forward + backward + optimizer (the step minus the rollouts). */
  readonly updateSeconds: number
  /** Model-sampled tokens kept in the completions (completions/mean_length × episodes; tool tokens excluded). */
  readonly completionTokens: number
  /** Tokens through forward + backward: prompt + whole completion (tool tokens included), no padding. */
  readonly trainedTokens: number
  readonly reward: number
  readonly toolCallsPerEpisode: number
  readonly toolFailureFrequency: number
  readonly firstTurnPromptIds: ReadonlyArray<ReadonlyArray<number>>
}

interface SideRun {
  readonly side: "envtrain" | "trl"
  readonly round: number
  readonly wallSeconds: number
  readonly steps: ReadonlyArray<Step>
  readonly extra: Readonly<Record<string, unknown>>
}

// ---------------------------------------------------------------------------------------------------------------
// The shared starting model
// ---------------------------------------------------------------------------------------------------------------

const promptMessages = Recipe.catchRecipe.prompt({}) as ReadonlyArray<ChatMessage>
const systemText = promptMessages.find((m) => m.role === "system")?.content ?? ""
const userText = promptMessages.find((m) => m.role === "user")?.content ?? ""

const startingModel = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const key = createHash("sha256").update(JSON.stringify({ ...settings.sft, preset: settings.preset, v: 1 })).digest(
    "hex"
  ).slice(0, 12)
  const dir = join(tmpdir(), "envtrain-interop-trl", `sft-${key}`)
  const ready = join(dir, ".complete")
  if (flag("fresh") === undefined && (yield* fs.exists(ready))) {
    console.log(`starting model: reusing ${dir}`)
    return { dir, sftSeconds: null as number | null }
  }
  const started = Date.now()
  const base = yield* Checkpoint.makeModel(settings.preset, settings.initSeed)
  const model = yield* Trainer.cpuModel(base)
  // The recipe's environment is typed loosely (any requirements); the in-process Catch needs none.
  const transcripts = yield* (SftData.collect(Recipe.catchRecipe, {
    seeds: Dataset.range(0, settings.sft.episodes),
    errorRate: settings.sft.errorRate,
    playerSeed: settings.initSeed
  }).pipe(Effect.orDie) as Effect.Effect<ReadonlyArray<SftTrainer.Transcript>>)
  const config = yield* Config.fromSources({
    outputDir: join(dir, "..", `sft-run-${key}`),
    perDeviceTrainBatchSize: settings.sft.batchSize,
    gradientAccumulationSteps: 1,
    numTrainEpochs: settings.sft.epochs,
    learningRate: settings.sft.learningRate,
    lrSchedulerType: "cosine",
    warmupRatio: 0.1,
    loggingSteps: 1,
    saveSteps: 1_000_000,
    seed: settings.initSeed
  })
  console.log(`starting model: SFT warm-up of the ${settings.preset} preset on ${transcripts.length} transcripts`)
  yield* SftTrainer.train({ config, model, transcripts, maxLength: settings.sft.maxLength, progress: false })
  const state = yield* model.exportState
  yield* fs.remove(dir, { recursive: true }).pipe(Effect.ignore)
  yield* Checkpoint.save(dir, { ...base, tensors: state.weights })
  yield* fs.writeFileString(ready, new Date().toISOString())
  const sftSeconds = (Date.now() - started) / 1000
  console.log(`starting model: ${dir} (${sftSeconds.toFixed(0)} s)`)
  return { dir, sftSeconds }
}).pipe(Effect.scoped)

// ---------------------------------------------------------------------------------------------------------------
// envtrain
// ---------------------------------------------------------------------------------------------------------------

/** The first-turn prompts among the prompts of a step: those no other prompt of the step is a prefix of. */
const firstTurns = (prompts: ReadonlyArray<ReadonlyArray<number>>) => {
  const unique = [...new Map(prompts.map((p) => [p.join(","), p])).values()].sort((a, b) => a.length - b.length)
  const isPrefix = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) =>
    a.length < b.length && a.every((x, i) => b[i] === x)
  return unique.filter((p) => !unique.some((q) => isPrefix(q, p)))
}

const runEnvtrain = (modelDir: string, round: number) =>
  Effect.gen(function*() {
    const checkpoint = yield* Checkpoint.load(modelDir)
    // What `npm start` trains on: the CPU device in its worker thread.
    const base = yield* Trainer.cpuModel(checkpoint, { threads: settings.torchThreads })
    const counters = { decodeSeconds: 0, trainedTokens: 0, prompts: [] as Array<Array<number>> }
    const trained = (batch: Trainer.SequenceBatch) =>
      sum(batch.prompts.map((p, i) => p.length + batch.completions[i].length))
    const model: Trainer.TrainableModel = {
      ...base,
      generate: (requests) =>
        Effect.suspend(() => {
          for (const r of requests) counters.prompts.push([...r.promptIds])
          const t0 = performance.now()
          return Effect.tap(base.generate(requests), () =>
            Effect.sync(() => {
              counters.decodeSeconds += (performance.now() - t0) / 1000
            }))
        }),
      accumulate: (batch, temperature, weightsFor) =>
        Effect.suspend(() => {
          counters.trainedTokens += trained(batch)
          return base.accumulate(batch, temperature, weightsFor)
        }),
      // The CPU device's worker computes the loss itself: the trainer calls this instead of accumulate.
      ...(base.accumulateLoss === undefined ? {} : {
        accumulateLoss: (batch, temperature, inputs, options) =>
          Effect.suspend(() => {
            counters.trainedTokens += trained(batch)
            return base.accumulateLoss!(batch, temperature, inputs, options)
          })
      })
    }
    const g = settings.grpo
    const rows = Dataset.fromRows(
      Dataset.range(g.firstRowSeed, g.firstRowSeed + g.steps * g.prompts).map((seed) => ({
        prompt: promptMessages,
        seed
      })),
      "catch"
    )
    const config = yield* Config.fromSources({
      outputDir: join(tmpdir(), "envtrain-interop-trl", `envtrain-run-${round}`),
      numGenerations: g.numGenerations,
      perDeviceTrainBatchSize: g.numGenerations * g.prompts,
      gradientAccumulationSteps: 1,
      maxSteps: g.steps,
      learningRate: g.learningRate,
      lrSchedulerType: "constant",
      maxCompletionLength: g.maxCompletionLength,
      temperature: g.temperature,
      lossType: g.lossType,
      beta: g.beta,
      scaleRewards: "group",
      shuffleDataset: false,
      // TRL has no sampler correction without vLLM (transformers generation returns no logprobs).
      importanceSamplingCorrection: false,
      loggingSteps: 1,
      evalSteps: 1_000_000,
      saveSteps: 1_000_000,
      seed: g.seed
    })
    const steps: Array<Step> = []
    let mark = { decode: 0, trained: 0 }
    const started = Date.now()
    // Trainer.train's requirements come out as `any` here; in-process Catch and the CPU model need only the
    // platform services the program provides.
    const training = Trainer.train<Catch.State, never, never>({
      config,
      model,
      dataset: rows,
      open: (row) =>
        Environment.episode(Catch.environment, row).pipe(Effect.orDie, Effect.map(Episode.fromEnvironment)),
      rewardFunctions: [Recipe.catchReward],
      enableThinking: false,
      progress: false,
      onStep: (r) =>
        Effect.sync(() => {
          const v = r.values
          const rollout = v["time/generation"]
          steps.push({
            step: r.step,
            seconds: v["step_time"],
            rolloutSeconds: rollout,
            decodeSeconds: counters.decodeSeconds - mark.decode,
            updateSeconds: v["step_time"] - rollout,
            completionTokens: v["completions/mean_length"] * g.numGenerations * g.prompts,
            trainedTokens: counters.trainedTokens - mark.trained,
            reward: v["reward"],
            toolCallsPerEpisode: v["tools/call_frequency"],
            toolFailureFrequency: v["tools/failure_frequency"],
            firstTurnPromptIds: firstTurns(counters.prompts)
          })
          mark = { decode: counters.decodeSeconds, trained: counters.trainedTokens }
          counters.prompts = []
          console.log(
            `envtrain step ${r.step}: ${v["step_time"].toFixed(1)} s, reward ${v["reward"].toFixed(3)}, ` +
              `${(v["completions/mean_length"] ?? 0).toFixed(0)} tokens/episode`
          )
        })
    })
    yield* (training as Effect.Effect<Trainer.TrainResult, unknown, FileSystem.FileSystem | Path.Path>)
    return {
      side: "envtrain",
      round,
      wallSeconds: (Date.now() - started) / 1000,
      steps,
      extra: { backend: `CPU device (Trainer.cpuModel, as npm start uses): ${base.device}` }
    } satisfies SideRun
  }).pipe(Effect.scoped)

// ---------------------------------------------------------------------------------------------------------------
// TRL
// ---------------------------------------------------------------------------------------------------------------

const runTrl = (modelDir: string, round: number): SideRun => {
  const g = settings.grpo
  const out = join(tmpdir(), "envtrain-interop-trl", `trl-${round}.json`)
  const args = [
    "bench/interop/trl_catch.py",
    `--model=${modelDir}`,
    `--out=${out}`,
    `--system=${systemText}`,
    `--user=${userText}`,
    `--first-seed=${g.firstRowSeed}`,
    `--steps=${g.steps}`,
    `--num-generations=${g.numGenerations}`,
    `--prompts=${g.prompts}`,
    `--max-completion-length=${g.maxCompletionLength}`,
    `--temperature=${g.temperature}`,
    `--learning-rate=${g.learningRate}`,
    `--beta=${g.beta}`,
    `--loss-type=${g.lossType}`,
    `--seed=${g.seed}`,
    `--threads=${settings.torchThreads}`,
    `--output-dir=${join(tmpdir(), "envtrain-interop-trl", `trl-run-${round}`)}`
  ]
  const started = Date.now()
  const proc = spawnSync(".venv/bin/python", args, {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1", PYTHONWARNINGS: "ignore" }
  })
  const wallSeconds = (Date.now() - started) / 1000
  if (proc.status !== 0) throw new Error(`trl_catch.py exited with ${proc.status ?? proc.signal}`)
  const result = JSON.parse(readFileSync(out, "utf8")) as {
    readonly steps: ReadonlyArray<Record<string, any>>
    readonly [key: string]: unknown
  }
  const steps = result.steps.map((s): Step => ({
    step: s.step,
    seconds: s.seconds,
    rolloutSeconds: s.rollout_seconds,
    decodeSeconds: s.decode_seconds,
    updateSeconds: s.update_seconds,
    completionTokens: s.completion_tokens,
    trainedTokens: s.trained_tokens,
    reward: s.reward,
    toolCallsPerEpisode: s.trl_log["tools/call_frequency"],
    toolFailureFrequency: s.trl_log["tools/failure_frequency"],
    firstTurnPromptIds: s.first_turn_prompt_ids
  }))
  for (const s of steps) {
    console.log(`trl step ${s.step}: ${s.seconds.toFixed(1)} s, reward ${s.reward.toFixed(3)}`)
  }
  const { steps: _steps, ...extra } = result
  return { side: "trl", round, wallSeconds, steps, extra }
}

// ---------------------------------------------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------------------------------------------

/** Per-side medians over steps after each run's first (which pays one-time set-up on both sides). */
const summarize = (runs: ReadonlyArray<SideRun>) => {
  const steady = runs.flatMap((r) => r.steps.slice(1))
  const all = runs.flatMap((r) => r.steps)
  return {
    runs: runs.length,
    steadySteps: steady.length,
    secondsPerStep: median(steady.map((s) => s.seconds)),
    firstStepSeconds: median(runs.map((r) => r.steps[0]?.seconds ?? NaN)),
    rolloutSecondsPerStep: median(steady.map((s) => s.rolloutSeconds)),
    updateSecondsPerStep: median(steady.map((s) => s.updateSeconds)),
    completionTokensPerStep: median(steady.map((s) => s.completionTokens)),
    trainedTokensPerStep: median(steady.map((s) => s.trainedTokens)),
    /** Completion tokens per second of the model's generate calls. */
    generatedTokensPerDecodeSecond: median(steady.map((s) => s.completionTokens / s.decodeSeconds)),
    /** Completion tokens per second of the whole rollout phase (tools, parsing, rewards included). */
    generatedTokensPerRolloutSecond: median(steady.map((s) => s.completionTokens / s.rolloutSeconds)),
    trainedTokensPerSecond: median(steady.map((s) => s.trainedTokens / s.updateSeconds)),
    toolCallsPerEpisode: median(all.map((s) => s.toolCallsPerEpisode)),
    toolFailureFrequency: median(all.map((s) => s.toolFailureFrequency)),
    rewardCurve: runs.map((r) => r.steps.map((s) => s.reward))
  }
}

const program = Effect.gen(function*() {
  const path = yield* Path.Path
  const loadStart = loadavg()
  const startedAt = new Date().toISOString()
  const { dir, sftSeconds } = yield* startingModel
  const safetensors = readFileSync(path.join(dir, "model.safetensors"))
  const modelSha256 = createHash("sha256").update(safetensors).digest("hex")
  const runs: Array<SideRun> = []
  for (let round = 0; round < settings.rounds; round++) {
    const order = round % 2 === 0 ? ["envtrain", "trl"] : ["trl", "envtrain"]
    for (const side of order) {
      console.log(`round ${round + 1}/${settings.rounds}: ${side} (load ${loadavg()[0].toFixed(2)})`)
      runs.push(side === "trl" ? runTrl(dir, round) : yield* runEnvtrain(dir, round))
    }
  }
  const loadEnd = loadavg()
  const envtrain = summarize(runs.filter((r) => r.side === "envtrain"))
  const trl = summarize(runs.filter((r) => r.side === "trl"))
  const ratio = (k: keyof typeof envtrain) => (envtrain[k] as number) / (trl[k] as number)
  // Same prompts: every step's first-turn prompt ids, side by side.
  const promptChecks = runs.filter((r) => r.side === "envtrain").flatMap((e) => {
    const t = runs.find((r) => r.side === "trl" && r.round === e.round)
    return e.steps.map((s, i) => {
      const key = (ps: ReadonlyArray<ReadonlyArray<number>>) => ps.map((p) => p.join(",")).sort().join("|")
      const other = t?.steps[i]?.firstTurnPromptIds ?? []
      return { step: s.step, same: key(s.firstTurnPromptIds) === key(other), prompts: s.firstTurnPromptIds.length }
    })
  })
  const samePrompts = promptChecks.length > 0 && promptChecks.every((c) => c.same)
  const firstPromptLength = runs[0]?.steps[0]?.firstTurnPromptIds[0]?.length ?? null
  const trlExtra = runs.find((r) => r.side === "trl")?.extra ?? {}
  const ratios = {
    secondsPerStep: ratio("secondsPerStep"),
    generatedTokensPerDecodeSecond: ratio("generatedTokensPerDecodeSecond"),
    generatedTokensPerRolloutSecond: ratio("generatedTokensPerRolloutSecond"),
    trainedTokensPerSecond: ratio("trainedTokensPerSecond")
  }
  const out = {
    date: startedAt,
    command: `npx tsx bench/interop/trl-vs-envtrain.ts ${process.argv.slice(2).join(" ")}`.trim(),
    machine: {
      cpu: cpus()[0]?.model ?? "unknown",
      cores: cpus().length,
      loadAverage: { start: loadStart, end: loadEnd },
      shared: "other processes (test suites of concurrent sessions) were running on the same cores"
    },
    versions: { node: process.version, ...(trlExtra.versions as Record<string, string> | undefined) },
    torchThreads: trlExtra.torch_threads,
    startingModel: {
      dir,
      modelSha256,
      preset: settings.preset,
      initSeed: settings.initSeed,
      sft: settings.sft,
      sftSeconds
    },
    config: settings.grpo,
    trlConfig: trlExtra.config,
    prompt: { system: systemText, user: userText, firstPromptTokens: firstPromptLength, samePrompts, promptChecks },
    envtrain,
    trl,
    ratios,
    runs: runs.map((r) => ({
      ...r,
      steps: r.steps.map(({ firstTurnPromptIds: _ids, ...s }) => s)
    }))
  }
  console.log(JSON.stringify({ envtrain, trl, ratios, samePrompts }, null, 2))
  if (flag("no-save") === undefined) {
    mkdirSync("bench/results", { recursive: true })
    writeFileSync("bench/results/interop-trl.json", JSON.stringify(out, null, 2) + "\n")
    writeFileSync("bench/results/interop-trl.md", markdown(out))
    console.log("saved bench/results/interop-trl.{json,md}")
  }
})

const stepsOf = (o: any, side: string): ReadonlyArray<Omit<Step, "firstTurnPromptIds">> =>
  (o.runs as ReadonlyArray<SideRun>).filter((r) => r.side === side).flatMap((r) => r.steps)

const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "n/a")

const markdown = (o: any): string => {
  const e = o.envtrain
  const t = o.trl
  const r = o.ratios
  const row = (name: string, a: number, b: number, ratio: number, d = 1) =>
    `| ${name} | ${f(a, d)} | ${f(b, d)} | ${Number.isNaN(ratio) ? "" : f(ratio, 2)} |`
  const curve = (side: string) =>
    (o.runs as Array<SideRun>).filter((x) => x.side === side).map((x) =>
      `| ${side} (round ${x.round + 1}) | ${x.steps.map((s) => f(s.reward, 3)).join(" | ")} |`
    )
  const g = o.config
  return [
    "# TRL GRPOTrainer vs envtrain: Catch, tiny Qwen3, CPU",
    "",
    `${o.date}; \`${o.command}\`; ${o.machine.cpu}, ${o.machine.cores} cores, **shared** with other sessions' test ` +
    `runs (1-minute load average ${f(o.machine.loadAverage.start[0], 2)} at the start, ` +
    `${
      f(o.machine.loadAverage.end[0], 2)
    } at the end), so absolute numbers are noisy; the ratios come from runs made ` +
    `back to back in one invocation. Node ${o.versions.node}, Python ${o.versions.python}, torch ${o.versions.torch} ` +
    `(${o.torchThreads} thread(s)), transformers ${o.versions.transformers}, trl ${o.versions.trl}.`,
    "",
    "## Headline (medians over steps 2.., ratio = envtrain / TRL)",
    "",
    "| | envtrain | TRL | envtrain / TRL |",
    "| --- | ---: | ---: | ---: |",
    row("seconds per GRPO step", e.secondsPerStep, t.secondsPerStep, r.secondsPerStep),
    row("  of which rollouts (generation, tools, rewards)", e.rolloutSecondsPerStep, t.rolloutSecondsPerStep, NaN),
    row("  of which update (forward, backward, AdamW)", e.updateSecondsPerStep, t.updateSecondsPerStep, NaN),
    row("completion tokens per step (model tokens)", e.completionTokensPerStep, t.completionTokensPerStep, NaN, 0),
    row(
      "generated tokens / s (model's generate calls)",
      e.generatedTokensPerDecodeSecond,
      t.generatedTokensPerDecodeSecond,
      r.generatedTokensPerDecodeSecond
    ),
    row(
      "generated tokens / s (whole rollout phase)",
      e.generatedTokensPerRolloutSecond,
      t.generatedTokensPerRolloutSecond,
      r.generatedTokensPerRolloutSecond
    ),
    row("trained tokens per step (prompt + completion)", e.trainedTokensPerStep, t.trainedTokensPerStep, NaN, 0),
    row(
      "trained tokens / s (update phase)",
      e.trainedTokensPerSecond,
      t.trainedTokensPerSecond,
      r.trainedTokensPerSecond
    ),
    row("tool calls per episode (median of steps)", e.toolCallsPerEpisode, t.toolCallsPerEpisode, NaN, 2),
    row(
      "tool failures per call (median of steps)",
      e.toolFailureFrequency ?? median(stepsOf(o, "envtrain").map((s) => s.toolFailureFrequency)),
      t.toolFailureFrequency ?? median(stepsOf(o, "trl").map((s) => s.toolFailureFrequency)),
      NaN,
      3
    ),
    row("first step seconds (one-time set-up included)", e.firstStepSeconds, t.firstStepSeconds, NaN),
    "",
    "A seconds-per-step ratio above 1 means envtrain is slower; a tokens-per-second ratio above 1 means envtrain is " +
    "faster. The two sides sample different episodes (different random streams), so a step's work differs: " +
    "tokens per second is the like-for-like number, seconds per step the user-visible one.",
    "",
    `Where the time goes: the update (forward, backward, AdamW) is ${
      f(100 * e.updateSecondsPerStep / e.secondsPerStep, 0)
    } % ` +
    `of envtrain's step and ${
      f(100 * t.updateSecondsPerStep / t.secondsPerStep, 0)
    } % of TRL's. envtrain's update is ` +
    "the plain-TypeScript model on one thread; torch's is vectorised kernels (bench/results/interop-pytorch.md " +
    "measures the two models alone on the same weights). Both sides are seeded and deterministic here: the two " +
    "rounds of each side give the same rewards.",
    "",
    "## Reward per step",
    "",
    `| run | ${Array.from({ length: g.steps }, (_, i) => `step ${i + 1}`).join(" | ")} |`,
    `| --- | ${Array.from({ length: g.steps }, () => "---:").join(" | ")} |`,
    ...curve("envtrain"),
    ...curve("trl"),
    "",
    "## Same inputs",
    "",
    `- Weights and tokenizer: one model directory (\`${o.startingModel.dir}\`, model.safetensors sha256 ` +
    `\`${o.startingModel.modelSha256.slice(0, 16)}…\`): envtrain's ${o.startingModel.preset} preset (init seed ` +
    `${o.startingModel.initSeed}) after an envtrain SFT warm-up (${o.startingModel.sft.episodes} solver transcripts ` +
    `with ${o.startingModel.sft.errorRate * 100} % random moves, ${o.startingModel.sft.epochs} epochs, lr ` +
    `${o.startingModel.sft.learningRate}, batch ${o.startingModel.sft.batchSize}, sequences cut at ` +
    `${o.startingModel.sft.maxLength} tokens, tool definitions in the prompt), saved with envtrain's Checkpoint.save; ` +
    "TRL loads it with AutoModelForCausalLM / AutoTokenizer.from_pretrained (float32). Shorter warm-ups were " +
    "tried first and left policies whose calls mostly did not parse (sequences cut at 640 tokens leave every turn " +
    "after the first unlearnt, the prompt being ~555 tokens); those runs ended TRL's episodes after one turn and " +
    "were not comparable.",
    `- Prompts: system ${JSON.stringify(o.prompt.system)}, user ${JSON.stringify(o.prompt.user)} + the reset ` +
    `observation, tools move/stay rendered by the chat template, enable_thinking false; rows = seeds ` +
    `${g.firstRowSeed}..${g.firstRowSeed + g.steps * g.prompts - 1} in order (no shuffle; the Python Catch uses ` +
    `envtrain's seeded generator, so a seed is the same ball on both sides). First prompt ` +
    `${o.prompt.firstPromptTokens} tokens. **First-turn prompt token ids identical on both sides at every step: ` +
    `${o.prompt.samePrompts ? "yes" : "NO"}**.`,
    `- GRPO: ${g.numGenerations} generations × ${g.prompts} prompts per step (per-device batch ` +
    `${g.numGenerations * g.prompts}, gradient accumulation 1), ${g.steps} steps, max_completion_length ` +
    `${g.maxCompletionLength} (budget over all turns, tool tokens included, on both), temperature ${g.temperature}, ` +
    `top_p 1, top_k 0, learning rate ${g.learningRate} constant, AdamW (0.9, 0.999, 1e-8), weight decay 0, ` +
    `max_grad_norm 1, beta ${g.beta}, loss ${g.lossType}, epsilon 0.2, scale_rewards group, num_iterations 1, ` +
    `seed ${g.seed}. TRL's config as it resolved it is in the JSON (\`trlConfig\`).`,
    "",
    "## What differs, and why",
    "",
    "- TRL: `use_cpu=True`, `bf16=False` and `gradient_checkpointing=False` (GRPOConfig defaults both to True; " +
    "envtrain trains in float32 without recomputation, and bf16 autocast on a CPU would change the arithmetic), " +
    "`optim` as TRL resolves it (`adamw_torch_fused`), `report_to=none`, `save_strategy=no`; no vLLM " +
    "(`use_vllm=False`, TRL's default): generation is transformers' `generate`, batched over the active episodes " +
    `of each turn, with torch at ${o.torchThreads} thread(s) (\`--threads\`, default 1; envtrain's CPU device runs its matmuls on the same number of threads).`,
    "- TRL does not recognise envtrain's chat template (its own Qwen3-style template, not byte-equal to a template " +
    "TRL ships), so `add_response_schema` would raise \"Unrecognized chat template\"; the script sets " +
    "`tokenizer.response_template = trl.chat_template_utils.qwen3_template` (TRL's own Qwen3 parser), which is what " +
    "the error asks for. The template is prefix-preserving, so TRL keeps it (no training-template swap).",
    "- envtrain: the CPU device (`Trainer.cpuModel`, the backend `npm start` uses: f32 kernels, matmuls on OpenBLAS " +
    "where installed, in a worker thread) with its multi-turn KV-cache reuse; `importanceSamplingCorrection: false` (TRL has no sampler " +
    "correction without vLLM); episodes in flight as the trainer's default.",
    "- Episode semantics both follow TRL's loop (token-concatenated turns, the budget over all turns). One known " +
    "difference: a turn whose tool call does not parse ends TRL's episode (TRL's parse fallback), while envtrain " +
    "answers it with a tool error and continues, so envtrain episodes can be longer for the same policy.",
    "- The environment: TRL's side plays Catch in the Python class itself (OpenSpiel's rules, the seed's texts), " +
    "not through an OpenSpiel server; envtrain plays its in-process Catch. Both are in-process, so neither side " +
    "pays a network round trip.",
    ""
  ].join("\n")
}

// --render: rewrite the markdown from the saved JSON (no runs).
const main = flag("render") === undefined ? program : Effect.sync(() => {
  const saved = JSON.parse(readFileSync("bench/results/interop-trl.json", "utf8"))
  writeFileSync("bench/results/interop-trl.md", markdown(saved))
  console.log("rewrote bench/results/interop-trl.md from bench/results/interop-trl.json")
})

Effect.runPromise(main.pipe(Effect.provide(NodeContext.layer))).then(() => process.exit(0)).catch((e) => {
  console.error(e)
  process.exit(1)
})
