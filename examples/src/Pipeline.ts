/**
 * The seed's recipe for every example, end to end: a model (a new tiny/small preset or `--model DIR`), SFT data
 * from the recipe's imperfect player, SFT warm-up, greedy evaluation on held-out seeds (the SFT start), GRPO with
 * the recipe's reward functions, evaluation again, and a before/after table with the solver's score as the
 * ceiling. Writes `runs/<name>/` — `sft.jsonl`, `sft/` (warm-up metrics and checkpoint), `metrics.jsonl`,
 * `completions.jsonl`, `eval.jsonl`, `eval.json` (before / after / solver), `report.html`, `checkpoint-N/`.
 *
 * @example
 * ```ts
 * import { Recipe } from "@envtrain/grpo"
 * import { Main } from "@envtrain/harness"
 * import * as Pipeline from "./Pipeline.js"
 * Main.run(Pipeline.run(Recipe.catchRecipe, Pipeline.defaults))
 * ```
 */
import { FileSystem, Path } from "@effect/platform"
import { Client, Environment } from "@envtrain/env"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import {
  Advantage,
  Config,
  Dataset,
  Evaluation,
  PolicyServers,
  Recipe,
  Report,
  SftData,
  SftTrainer,
  Trainer
} from "@envtrain/grpo"
import { Episode } from "@envtrain/rollout"
import { Console, Effect } from "effect"

/** Every knob of a run (the programs' flags). */
export interface Settings {
  /** Output directory; default `runs/<name>`. */
  readonly out?: string
  /** A Qwen3 checkpoint directory; default a new model of `preset`. */
  readonly model?: string
  readonly preset: "tiny" | "small"
  /**
   * Where the model trains: "gpu" is the Qwen3 model on WebGPU (what a GPU machine wants); "cpu" is the CPU device
   * (BLAS or WebAssembly SIMD kernels in a worker thread, `Trainer.cpuModel`); "reference" is the plain-TypeScript
   * specification (exact, slow).
   */
  readonly backend: "cpu" | "gpu" | "reference"
  /** CPU device: threads per matmul (default every core). */
  readonly threads?: number
  /** CPU device: one thread and a fixed summation order. */
  readonly deterministic?: boolean
  /** An envtrain or OpenEnv server; default in-process environments. */
  readonly envUrl?: string
  /**
   * Most sessions opened at once on each environment server (`--env-concurrency`); more episodes wait for a
   * session, bounded. Default: the limit the server's first CAPACITY_REACHED reports.
   */
  readonly envConcurrency?: number
  /**
   * Policy servers (`envtrain serve-policy` URLs) that generate GRPO's and the evaluations' episodes; the weights
   * are pushed to them after every step. Default: generation in-process.
   */
  readonly policyServers?: ReadonlyArray<string>
  /** Send the weights to the policy servers through this shared directory (a vLLM server's `--model`). */
  readonly policyServerWeights?: string
  /**
   * One server per environment, by name, for a recipe over several environments (`--wordle-url`, `--catch-url`);
   * an environment without one runs in-process.
   */
  readonly envUrls?: Readonly<Record<string, string>>
  /**
   * Skip the SFT data and warm-up and start GRPO from this checkpoint directory (an earlier run's
   * `runs/<example>/sft/checkpoint-N`, or any checkpoint of the same model): GRPO experiments without paying for the
   * warm-up again.
   */
  readonly sftFrom?: string
  /** The recipe's reward set by name (`--rewards`, e.g. Wordle's `seed` or `shaped`); default its first. */
  readonly rewards?: string
  /** The recipe's scripted SFT player by name (`--sft-player`, e.g. Catch's `hesitant`); default its first. */
  readonly player?: string
  readonly seed: number
  /**
   * Render the tool definitions into the system prompt (the chat template's tools block). Off for the tiny preset
   * by default: the block is ~350 tokens, most of a tiny model's per-token cost, and the SFT data teaches the call
   * format anyway.
   */
  readonly toolsInPrompt: boolean
  readonly sft: {
    readonly episodes: number
    readonly errorRate: number
    readonly epochs: number
    readonly learningRate: number
    readonly batchSize: number
    /** Longest SFT sequence in tokens (the tail of longer transcripts is not learnt). */
    readonly maxLength: number
    /**
     * A second pass over the whole transcripts (cut only at the GRPO budget: prompt + maxCompletionLength), after
     * the first: the first pass's short sequences buy many steps on the opening moves, this one teaches the late
     * turns the rollouts reach. Absent: one pass.
     */
    readonly whole?: { readonly epochs: number; readonly batchSize: number }
  }
  readonly grpo: {
    readonly steps: number
    readonly learningRate: number
    readonly numGenerations: number
    /** Prompts per optimizer step. */
    readonly prompts: number
    readonly maxCompletionLength: number
    readonly temperature: number
    /** KL coefficient to the GRPO start (the SFT weights); default 0, TRL's default. */
    readonly beta?: number
    /**
     * μ (TRL's `num_iterations`): optimizer updates per generation batch, each clipped against the sampling
     * policy's logprobs. Default 1.
     */
    readonly numIterations?: number
    /**
     * Prompts drawn so that each step's rows take the recipe's strata (`Recipe.stratum`: for Catch, where the ball
     * starts) in turn, in order (no shuffle); with `prompts` = the number of strata every step holds each once.
     */
    readonly stratified?: boolean
    /**
     * Re-roll groups whose rewards all agree (the GRPO config's `dynamicSampling`, DAPO's dynamic sampling), at most
     * `dynamicSamplingRounds` times (default 2). Default off.
     */
    readonly dynamicSampling?: "off" | "flat" | "failed"
    readonly dynamicSamplingRounds?: number
    /**
     * Async GRPO (`async: true` with this `maxStaleness`): rollouts run ahead of the optimizer. With the CPU backend
     * GRPO then trains in a worker thread (`Trainer.workerModel`), so generation on policy servers overlaps the
     * update. Default: synchronous GRPO.
     */
    readonly maxStaleness?: number
  }
  readonly evalEpisodes: number
  /**
   * Episodes played at once in the evaluations and in each GRPO step (`--episodes-in-flight`); default all of a
   * batch at once. A real browser on a loaded machine needs fewer: 20-40 pages loading at once on 2 shared cores
   * passed Chromium's 30 s navigation timeout, and every such episode is unscoreable.
   */
  readonly episodesInFlight?: number
  /** Print progress bars and tables. */
  readonly verbose: boolean
}

/** Defaults for the tiny preset on a CPU (the flagship demo tunes its own). */
export const defaults: Settings = {
  preset: "tiny",
  backend: "cpu",
  seed: 0,
  toolsInPrompt: false,
  sft: { episodes: 64, errorRate: 0.2, epochs: 2, learningRate: 1e-2, batchSize: 4, maxLength: 1024 },
  grpo: { steps: 10, learningRate: 1e-3, numGenerations: 8, prompts: 2, maxCompletionLength: 640, temperature: 1 },
  evalEpisodes: 32,
  verbose: true
}

/** Within a run's block of episode seeds, held-out seeds start here; SFT and GRPO seeds are below. */
export const EVAL_SEED_BASE = 1_000_000

/**
 * The episode seeds of a run: the run's seed picks a block of its own, so the SFT data, the GRPO prompts and the
 * held-out set all change with it (seed 0's block starts at 0).
 */
export const episodeSeeds = (settings: Pick<Settings, "seed" | "sft" | "grpo" | "evalEpisodes">) => {
  const block = settings.seed * 10_000_000
  const sft = block + settings.sft.episodes
  const grpo = settings.grpo.steps * settings.grpo.prompts
  return {
    sft: Dataset.range(block, sft),
    grpo: { from: sft, to: sft + grpo },
    heldOut: Dataset.range(block + EVAL_SEED_BASE, block + EVAL_SEED_BASE + settings.evalEpisodes)
  }
}

/** One evaluation with the recipe's details. */
export interface EvalSummary {
  readonly label: string
  readonly episodes: number
  readonly successRate: number | null
  readonly meanReward: number | null
  readonly toolCallsPerEpisode: number | null
  readonly toolFailureFrequency: number | null
  readonly details: Readonly<Record<string, number | null>>
  readonly seconds: number
}

/** What a run returns (and `eval.json` holds). */
export interface RunResult {
  readonly example: string
  readonly outputDir: string
  readonly before: EvalSummary
  readonly after: EvalSummary
  /** The solver on the same held-out seeds (the ceiling), and the SFT data's imperfect player. */
  readonly solver: EvalSummary
  readonly sftPlayer: EvalSummary
  readonly settings: Settings
  readonly seconds: { readonly sft: number; readonly grpo: number; readonly total: number }
  /** GRPO's flat steps (no advantage signal: every advantage was 0). */
  readonly flatSteps: Advantage.FlatSteps
  readonly checkpoint: string | undefined
  readonly report: string
  /** The CLI command that re-evaluates the checkpoint on the same held-out rows (absent when the CLI cannot). */
  readonly evalCommand: string | undefined
}

const round = (x: number | null, d = 3) => (x === null ? null : Math.round(x * 10 ** d) / 10 ** d)

/** Scores a scripted player on seeds (no model). */
export const playerScore = <State>(
  recipe: Recipe.Recipe<State>,
  seeds: ReadonlyArray<number>,
  errorRate: number,
  name = "player"
) =>
  Effect.gen(function*() {
    const started = Date.now()
    const states: Array<State> = []
    let calls = 0
    let failures = 0
    let rewards = 0
    for (const seed of seeds) {
      const row = { seed, ...recipe.columns?.(seed) }
      const r = yield* Environment.run(recipe.environment, row, recipe.player({ errorRate, seed: seed + 7 }))
      states.push(r.state)
      calls += r.steps.length
      failures += r.steps.filter((s) => s.outcome._tag === "Failure").length
      const episode = { prompt: [], completion: [], completionIds: [], environment: r.state, columns: row }
      let total = 0
      for (const f of recipe.rewardFunctions) {
        const v = yield* Effect.orDie(f.score({
          prompts: [episode.prompt],
          completions: [episode.completion],
          completionIds: [[]],
          environments: [r.state],
          columns: [row],
          trainerState: { globalStep: 0, maxSteps: 0, epoch: 0 }
        }))
        total += v[0] ?? 0
      }
      rewards += total
    }
    return {
      label: errorRate === 0 && name === "player" ? "solver" : `${name} (error rate ${errorRate})`,
      episodes: seeds.length,
      successRate: states.filter(recipe.success).length / Math.max(1, seeds.length),
      meanReward: round(rewards / Math.max(1, seeds.length)),
      toolCallsPerEpisode: calls / Math.max(1, seeds.length),
      toolFailureFrequency: calls === 0 ? 0 : round(failures / calls),
      details: recipe.details?.(states) ?? {},
      seconds: (Date.now() - started) / 1000
    } satisfies EvalSummary
  })

/** The before/after table as markdown. */
export const formatTable = (result: Pick<RunResult, "before" | "after" | "solver" | "sftPlayer">): string => {
  const cols = [result.before, result.after, result.solver, result.sftPlayer]
  const heads = ["SFT start", "after GRPO", "solver (ceiling)", "SFT data player"]
  const cell = (v: number | null | undefined, pct = false) =>
    v === null || v === undefined
      ? "-"
      : pct
      ? `${(v * 100).toFixed(1)} %`
      : Number.isInteger(v)
      ? String(v)
      : v.toFixed(3)
  const rows: Array<[string, Array<string>]> = [
    ["success", cols.map((c) => cell(c.successRate, true))],
    ["mean reward", cols.map((c) => cell(c.meanReward))],
    ["tool calls / episode", cols.map((c) => cell(c.toolCallsPerEpisode))],
    ["tool failures / call", cols.map((c) => cell(c.toolFailureFrequency))]
  ]
  for (const key of Object.keys(result.before.details)) {
    rows.push([key.replace(/_/g, " "), cols.map((c) => cell(c.details[key]))])
  }
  const lines = [
    `| held-out (${result.before.episodes} episodes) | ${heads.join(" | ")} |`,
    `| --- | ${heads.map(() => "---:").join(" | ")} |`,
    ...rows.map(([name, cells]) => `| ${name} | ${cells.join(" | ")} |`)
  ]
  return lines.join("\n")
}

/** The longest sequence GRPO trains on: the prompt's allowance plus the completion budget (model and tool tokens). */
const grpoSequence = (settings: Settings) => settings.grpo.maxCompletionLength + 256

/** A model on the run's backend (the GPU ones live as long as the run's scope). */
type Trainable = (
  weights: Checkpoint.Model,
  batch: number,
  seq: number,
  temperature: number
) => Effect.Effect<Trainer.TrainableModel, unknown, any>

/** SFT data from the recipe's imperfect player (the run's SFT seeds), then the warm-up; returns the weights. */
const warmUp = <State>(
  recipe: Recipe.Recipe<State>,
  environment: Recipe.Recipe<State>["environment"],
  checkpoint: Checkpoint.Model,
  settings: Settings,
  seeds: ReadonlyArray<number>,
  outputDir: string,
  trainable: Trainable,
  say: (text: string) => Effect.Effect<void>
) =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const transcripts = (yield* SftData.collect({ ...recipe, environment }, {
      seeds,
      errorRate: settings.sft.errorRate,
      playerSeed: settings.seed
    })).map((t) => (settings.toolsInPrompt ? t : { messages: t.messages }))
    const sftFile = path.join(outputDir, "sft.jsonl")
    yield* SftData.writeJsonl(sftFile, transcripts)
    yield* say(
      `sft data: ${transcripts.length} episodes (${
        settings.player === undefined ? "" : `player ${settings.player}, `
      }error rate ${settings.sft.errorRate}) -> ${sftFile}`
    )
    // Tool schemas rendered into the system prompt push every assistant turn later by their length: the cut moves
    // with them, so the same turns are learnt with and without --tools-in-prompt.
    const schemaTokens = settings.toolsInPrompt ? yield* toolSchemaTokens(checkpoint, transcripts) : 0
    const pass = (
      weights: Checkpoint.Model,
      stage: { readonly name: string; readonly epochs: number; readonly batchSize: number; readonly maxLength: number }
    ) =>
      Effect.gen(function*() {
        const maxLength = stage.maxLength + schemaTokens
        const model = yield* trainable(weights, stage.batchSize, maxLength, 1)
        const config = yield* Config.fromSources({
          outputDir: path.join(outputDir, stage.name),
          perDeviceTrainBatchSize: Math.min(stage.batchSize, transcripts.length),
          gradientAccumulationSteps: 1,
          numTrainEpochs: stage.epochs,
          learningRate: settings.sft.learningRate,
          lrSchedulerType: "cosine",
          warmupRatio: 0.1,
          loggingSteps: 1,
          saveSteps: 1_000_000,
          seed: settings.seed
        })
        yield* SftTrainer.train({
          config,
          model,
          transcripts,
          maxLength,
          title: `${recipe.name} (SFT warm-up${stage.name === "sft" ? "" : ", whole episodes"})`,
          ...(settings.verbose ? {} : { progress: false as const })
        })
        return { ...weights, tensors: (yield* model.exportState).weights } satisfies Checkpoint.Model
      })
    const first = yield* pass(checkpoint, { name: "sft", ...settings.sft })
    const whole = settings.sft.whole
    if (whole === undefined) return first
    return yield* pass(first, {
      name: "sft-whole",
      epochs: whole.epochs,
      batchSize: whole.batchSize,
      maxLength: grpoSequence(settings)
    })
  })

/** How many tokens the tool schemas add to a rendered transcript (0 without tools). */
const toolSchemaTokens = (checkpoint: Checkpoint.Model, transcripts: ReadonlyArray<SftTrainer.Transcript>) =>
  Effect.gen(function*() {
    const first = transcripts[0]
    if (first?.tools === undefined || first.tools.length === 0) return 0
    const rendering = { tokenizer: checkpoint.tokenizer, chatTemplate: checkpoint.chatTemplate }
    const withTools = yield* SftTrainer.tokenize(rendering, first)
    const without = yield* SftTrainer.tokenize(rendering, { messages: first.messages })
    return Math.max(0, withTools.ids.length - without.ids.length)
  })

/**
 * `count` episode seeds from `from` on, ordered so that the recipe's strata (the class of each seed's first
 * observation) come in turn: one of each, then again.
 */
export const stratifiedSeeds = <State>(
  recipe: Recipe.Recipe<State>,
  environment: Recipe.Recipe<State>["environment"],
  from: number,
  count: number
) =>
  Effect.gen(function*() {
    const stratum = recipe.stratum!
    const buckets = new Map<string, Array<number>>()
    // Scan far enough that the rarest stratum fills its share (uniform strata need ~count seeds).
    for (let seed = from; seed < from + count * 20; seed++) {
      const observation = yield* Recipe.observationOf({ ...recipe, environment }, { seed, ...recipe.columns?.(seed) })
      const key = stratum(observation)
      const bucket = buckets.get(key) ?? []
      bucket.push(seed)
      buckets.set(key, bucket)
    }
    const keys = [...buckets.keys()].sort()
    const out: Array<number> = []
    for (let round = 0; out.length < count; round++) {
      for (const key of keys) {
        if (out.length < count && round < buckets.get(key)!.length) out.push(buckets.get(key)![round])
      }
    }
    return out
  })

/**
 * Writes `reeval.yaml` and returns the `envtrain eval` command that re-evaluates the checkpoint as the run did: the
 * same recipe and reward set (so the same prompts, rewards and success rule), the same held-out seeds, served
 * environments and budget.
 */
export const writeEvalConfig = (
  recipeName: string,
  settings: Settings,
  outputDir: string,
  checkpoint: string,
  heldOut: ReadonlyArray<number>
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    // Absolute paths: the command works from any directory.
    const dir = path.resolve(outputDir)
    const file = path.join(dir, "reeval.yaml")
    const first = heldOut[0] ?? 0
    const servers = settings.envUrl !== undefined
      ? [`envUrl: ${JSON.stringify(settings.envUrl)}`]
      : settings.envUrls !== undefined
      ? [`envUrl: ${JSON.stringify(settings.envUrls)}`]
      : []
    if (servers.length > 0 && settings.envConcurrency !== undefined) {
      servers.push(`envConcurrency: ${settings.envConcurrency}`)
    }
    const lines = [
      `# Written by the ${recipeName} example: \`envtrain eval\` of its checkpoint on the same held-out seeds.`,
      `model: ${JSON.stringify(path.resolve(checkpoint))}`,
      `backend: ${settings.backend}`,
      `recipe: ${recipeName}`,
      ...(settings.rewards === undefined ? [] : [`rewards: ${settings.rewards}`]),
      ...servers,
      `toolsInPrompt: ${settings.toolsInPrompt}`,
      `evalDataset: { seeds: [${first}, ${first + heldOut.length}] }`,
      `max_completion_length: ${settings.grpo.maxCompletionLength}`,
      `seed: ${settings.seed}`,
      `output_dir: ${JSON.stringify(path.join(dir, "reeval"))}`
    ]
    yield* fs.writeFileString(file, lines.join("\n") + "\n")
    return `npm run envtrain -- eval ${file}`
  })

/**
 * Runs the whole recipe. Needs FileSystem and Path (`Main.run` provides them).
 */
export const run = <State>(chosen: Recipe.Recipe<State>, settings: Settings) =>
  Effect.gen(function*() {
    const rewarded = yield* Recipe.withRewards(chosen, settings.rewards)
    const recipe = yield* Recipe.withPlayer(rewarded, settings.player)
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const started = Date.now()
    const outputDir = settings.out ?? path.join("runs", recipe.name)
    yield* fs.remove(outputDir, { recursive: true }).pipe(Effect.ignore)
    yield* fs.makeDirectory(outputDir, { recursive: true })
    const say = (text: string) => (settings.verbose ? Console.log(text) : Effect.void)

    const environment = yield* Recipe.environmentOf(recipe, settings)
    if (settings.envConcurrency !== undefined) {
      for (const url of [settings.envUrl, ...Object.values(settings.envUrls ?? {})]) {
        if (url !== undefined) yield* Client.limitSessions(url, settings.envConcurrency)
      }
    }
    const seeds = episodeSeeds(settings)

    // 1. The model: a CPU-reference tiny/small model, or a checkpoint.
    const checkpoint = settings.model === undefined
      ? yield* Checkpoint.makeModel(settings.preset, settings.seed)
      : yield* Checkpoint.load(settings.model)
    // The same trainable-model interface on every backend; the GPU models and the CPU device's worker threads live
    // as long as the run's scope.
    const cpuOptions = {
      ...(settings.threads === undefined ? {} : { threads: settings.threads }),
      ...(settings.deterministic === undefined ? {} : { deterministic: settings.deterministic })
    }
    const trainable = (weights: Checkpoint.Model, batch: number, seq: number, temperature: number) =>
      settings.backend === "gpu"
        ? Trainer.gpuModel(weights, { batch, seq, temperature })
        : settings.backend === "cpu"
        ? Trainer.cpuModel(weights, cpuOptions)
        : Effect.succeed(Trainer.referenceModel(weights))
    yield* say(
      `${recipe.name}: model ${settings.model ?? `preset ${settings.preset}`} (${
        settings.backend === "gpu" ? "WebGPU" : settings.backend === "cpu" ? "CPU device" : "CPU reference"
      }, ${checkpoint.config.num_hidden_layers} layers, hidden ${checkpoint.config.hidden_size})`
    )

    // 2–3. SFT data and warm-up, or the warm-up of an earlier run.
    const sftStarted = Date.now()
    const warm = settings.sftFrom === undefined
      ? yield* warmUp(recipe, environment, checkpoint, settings, seeds.sft, outputDir, trainable, say)
      : yield* Checkpoint.load(settings.sftFrom)
    if (settings.sftFrom !== undefined) yield* say(`sft: skipped, starting GRPO from ${settings.sftFrom}`)
    const sftSeconds = (Date.now() - sftStarted) / 1000
    // GRPO starts from the SFT weights with a fresh optimizer (as a new TRL trainer would): the SFT run's Adam
    // moments would otherwise keep moving the weights even on steps whose advantages are all zero.
    // Async on the CPU: the update in a worker thread, so the event loop keeps serving the rollouts meanwhile.
    const async = settings.grpo.maxStaleness !== undefined
    const local = async && settings.backend === "reference"
      ? yield* Trainer.workerModel(warm)
      : yield* trainable(
        warm,
        settings.grpo.numGenerations * settings.grpo.prompts,
        grpoSequence(settings),
        settings.grpo.temperature
      )
    if (local.device !== undefined) yield* say(`device: ${local.device}`)
    // With policy servers the episodes (GRPO's and the evaluations') sample there; the rest stays local.
    const model = yield* PolicyServers.withPolicyServers(local, {
      urls: settings.policyServers ?? [],
      ...(settings.policyServerWeights === undefined ? {} : { weightDirectory: settings.policyServerWeights })
    })
    if (settings.policyServers !== undefined && settings.policyServers.length > 0) {
      yield* say(`generation: policy servers ${settings.policyServers.join(", ")}`)
    }

    // 4. Evaluation and GRPO share the rows and the environment sessions.
    const toolDefinitions = settings.toolsInPrompt
    const open = (row: Readonly<Record<string, unknown>>) =>
      Environment.episode(environment, row).pipe(
        // Rows are built here, so columns that do not decode are a bug, not an episode outcome.
        Effect.orDie,
        Effect.map((e) => {
          const session = Episode.fromEnvironment(e)
          return toolDefinitions ? session : Episode.withoutToolDefinitions(session)
        })
      )
    const rows = (seedsOfRows: ReadonlyArray<number>) => Recipe.rows(recipe, seedsOfRows)
    const evalRows = rows(seeds.heldOut)
    const stratified = settings.grpo.stratified === true && recipe.stratum !== undefined
    const trainRows = rows(
      stratified
        ? yield* stratifiedSeeds(recipe, environment, seeds.grpo.from, seeds.grpo.to - seeds.grpo.from)
        : Dataset.range(seeds.grpo.from, seeds.grpo.to)
    )
    const grpoConfig = yield* Config.fromSources({
      outputDir,
      numGenerations: settings.grpo.numGenerations,
      perDeviceTrainBatchSize: settings.grpo.numGenerations * settings.grpo.prompts,
      gradientAccumulationSteps: 1,
      maxSteps: settings.grpo.steps,
      learningRate: settings.grpo.learningRate,
      lrSchedulerType: "constant",
      maxCompletionLength: settings.grpo.maxCompletionLength,
      temperature: settings.grpo.temperature,
      lossType: "dapo",
      beta: settings.grpo.beta ?? 0,
      numIterations: settings.grpo.numIterations ?? 1,
      loggingSteps: 1,
      evalSteps: 1_000_000,
      saveSteps: 1_000_000,
      logCompletions: true,
      numCompletionsToPrint: 1,
      shuffleDataset: !stratified,
      ...(settings.grpo.dynamicSampling === undefined ? {} : { dynamicSampling: settings.grpo.dynamicSampling }),
      ...(settings.grpo.dynamicSamplingRounds === undefined
        ? {}
        : { dynamicSamplingRounds: settings.grpo.dynamicSamplingRounds }),
      seed: settings.seed,
      ...(async ? { async: true, maxStaleness: settings.grpo.maxStaleness } : {})
    })

    let states: Array<State> = []
    const evaluate = (label: string, step: number) =>
      Effect.gen(function*() {
        states = []
        const result = yield* Evaluation.evaluate({
          model,
          dataset: evalRows,
          open,
          rewardFunctions: recipe.rewardFunctions,
          maxCompletionLength: settings.grpo.maxCompletionLength,
          step,
          label,
          seed: settings.seed,
          ...(settings.episodesInFlight === undefined ? {} : { concurrency: settings.episodesInFlight }),
          success: (episode) => {
            states.push(episode.state as State)
            return recipe.success(episode.state as State)
          }
        })
        yield* say(Evaluation.formatTable(result))
        const summary = {
          label,
          episodes: result.overall.episodes,
          successRate: round(result.overall.successRate),
          meanReward: round(result.overall.meanReward),
          toolCallsPerEpisode: round(result.overall.toolCallsPerEpisode),
          toolFailureFrequency: round(result.overall.toolFailureFrequency),
          details: Object.fromEntries(Object.entries(recipe.details?.(states) ?? {}).map(([k, v]) => [k, round(v)])),
          seconds: result.seconds
        } satisfies EvalSummary
        return { result, summary }
      })

    const { result: beforeResult, summary: before } = yield* evaluate("SFT start", 0)
    const grpoStarted = Date.now()
    const trained = yield* Trainer.train({
      config: grpoConfig,
      model,
      dataset: trainRows,
      open,
      rewardFunctions: recipe.rewardFunctions,
      title: `${recipe.name}: SFT warm-up, then GRPO`,
      ...(settings.episodesInFlight === undefined ? {} : { concurrency: settings.episodesInFlight }),
      ...(settings.verbose ? {} : { progress: false as const })
    })
    const grpoSeconds = (Date.now() - grpoStarted) / 1000
    const flatSteps = Advantage.flatSteps(
      trained.steps.map((s) => ({ ...s.values, step: s.step }))
    )
    const { result: afterResult, summary: after } = yield* evaluate("after GRPO", trained.globalStep)
    // Written now: the trainer starts its run by clearing eval.jsonl.
    yield* Evaluation.write(outputDir, beforeResult)
    yield* Evaluation.write(outputDir, afterResult)
    const solver = yield* playerScore({ ...recipe, player: rewarded.player, environment }, seeds.heldOut, 0)
    const sftPlayer = yield* playerScore(
      { ...recipe, environment },
      seeds.heldOut,
      settings.sft.errorRate,
      settings.player === undefined ? "player" : `player ${settings.player}`
    )
    const report = yield* Report.write(outputDir, {
      title: `${recipe.name}: SFT warm-up, then GRPO`,
      status: `finished: success ${before.successRate ?? "-"} -> ${after.successRate ?? "-"} on ${before.episodes} ` +
        `held-out episodes (solver ${solver.successRate})`
    })
    const evalCommand = trained.checkpoint === undefined
      ? undefined
      : yield* writeEvalConfig(recipe.name, settings, outputDir, trained.checkpoint, seeds.heldOut)
    const result: RunResult = {
      example: recipe.name,
      outputDir,
      before,
      after,
      solver,
      sftPlayer,
      settings,
      seconds: { sft: sftSeconds, grpo: grpoSeconds, total: (Date.now() - started) / 1000 },
      flatSteps,
      checkpoint: trained.checkpoint,
      report,
      evalCommand
    }
    // eval.json: before / after / ceiling in one file (Evaluation.write left only the latest evaluation there).
    yield* fs.writeFileString(path.join(outputDir, "eval.json"), JSON.stringify(result, null, 2) + "\n")
    yield* say(`\n${recipe.name}: before/after on held-out seeds\n\n${formatTable(result)}\n`)
    yield* say(
      `GRPO flat steps (every advantage was 0: each group had zero reward variance or too few scoreable episodes ` +
        `to have one; nothing learnt): ` +
        `${flatSteps.flat.length}/${flatSteps.steps}` +
        (flatSteps.flat.length === 0 ? "" : ` (steps ${Report.formatSteps(flatSteps.flat)})`)
    )
    yield* say(`report: ${report}\neval: ${path.join(outputDir, "eval.json")}\ncheckpoint: ${trained.checkpoint}`)
    if (evalCommand !== undefined) yield* say(`re-evaluate the checkpoint from the CLI: ${evalCommand}`)
    yield* say(
      `time: SFT ${sftSeconds.toFixed(0)} s, GRPO ${grpoSeconds.toFixed(0)} s, total ${
        result.seconds.total.toFixed(0)
      } s`
    )
    return result
  }).pipe(
    // The GPU models (backend "gpu") live for the run: a device for the run's scope. With the CPU backend the
    // device is opened too (well under a second) and not used.
    Effect.scoped,
    Effect.provide(Gpu.layer())
  )
