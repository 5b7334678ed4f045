/**
 * The GRPO trainer (TRL's `GRPOTrainer` with `environment_factory`, TRL reference §4.3) as one Effect. Each
 * optimizer step:
 *
 * 1. when the current generation batch is used up: draw U = generationBatchSize / G prompts (seeded shuffle per
 *    epoch), roll out G episodes per prompt with the model as the policy (a fresh environment session each,
 *    bounded concurrency, per-episode seeds), score the rewards, compute group-relative advantages, loss masks,
 *    old / reference logprobs and the sampler correction, shuffle the rows and cut them into micro-batches
 *    (repeated numIterations times);
 * 2. for each of the gradientAccumulationSteps micro-batches: forward, the loss, and backward. A model with
 *    `accumulateLoss` (the GPU model) computes the loss and d loss / d logprob inside its step program (loss and
 *    metrics come back with the step); otherwise `Loss.compute` runs on the CPU from the policy logprobs and the
 *    backward takes the per-token weights d loss / d logprob (exactly TRL's gradient for every loss type: the loss
 *    depends on the weights only through those logprobs, and both passes use the same weights);
 * 3. clip the global gradient norm, AdamW at the scheduled learning rate;
 * 4. metrics (TRL's names) averaged per logging step into `metrics.jsonl`, sample completions, the HTML report,
 *    evaluation every evalSteps on held-out rows with greedy decoding, a checkpoint every saveSteps.
 *
 * Interruption (SIGINT/SIGTERM through `Main.run`, or fiber interruption) writes a checkpoint of the last completed
 * step before the Effect ends; `resume` continues from a checkpoint with the same data, seeds, optimizer state
 * (AdamW moments and step count, on the CPU reference and the GPU model alike) and pending micro-batches, so the
 * following steps' losses equal an uninterrupted run's.
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { Catch, Environment } from "@envtrain/env"
 * import { Checkpoint } from "@envtrain/gpu"
 * import { Config, Dataset, Reward, Trainer } from "@envtrain/grpo"
 * import { Episode } from "@envtrain/rollout"
 *
 * const program = Effect.gen(function*() {
 *   const config = yield* Config.load("catch.yaml")
 *   const model = Trainer.referenceModel(yield* Checkpoint.load("models/tiny-sft"))
 *   const result = yield* Trainer.train({
 *     config,
 *     model,
 *     dataset: Dataset.fromSeeds({ prompt: [{ role: "user", content: "Catch the ball." }], seeds: Dataset.range(0, 1000) }),
 *     evalDataset: Dataset.fromSeeds({ prompt: [{ role: "user", content: "Catch the ball." }], seeds: Dataset.range(10000, 10032) }),
 *     open: (row) => Effect.map(Environment.episode(Catch.environment, row), Episode.fromEnvironment),
 *     rewardFunctions: [Reward.perEpisode("catch", (e: Reward.EpisodeArgs<Catch.State>) => Catch.reward(e.environment))]
 *   })
 * }).pipe(Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import type { Checkpoint } from "@envtrain/gpu"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import { Cause, Effect, Exit, Option } from "effect"
import * as Advantage from "./Advantage.js"
import * as Config from "./Config.js"
import * as Dataset from "./Dataset.js"
import * as Evaluation from "./Evaluation.js"
import { cachedCpuModel } from "./internal/cachedModel.js"
import { type MicroBatch, prepare, trainMicroBatch } from "./internal/generation.js"
import { gpuModel as makeGpuModel, type GpuModelOptions } from "./internal/gpuModel.js"
import type {
  ModelState,
  OptimizerState,
  OptimizerStateMismatch,
  OptimizerStep,
  SequenceBatch,
  TokenScores,
  TrainableModel
} from "./internal/model.js"
import {
  type OpenSession,
  type RolloutFunc,
  type RolloutInput,
  runBatch,
  type TrainerHandle
} from "./internal/rollouts.js"
import * as Loss from "./Loss.js"
import * as LrSchedule from "./LrSchedule.js"
import * as Metrics from "./Metrics.js"
import * as Progress from "./Progress.js"
import * as Report from "./Report.js"
import type * as Reward from "./Reward.js"
import * as TrainerState from "./TrainerState.js"

export type {
  GpuModelOptions,
  ModelState,
  OpenSession,
  OptimizerState,
  OptimizerStateMismatch,
  OptimizerStep,
  RolloutFunc,
  RolloutInput,
  SequenceBatch,
  TokenScores,
  TrainableModel,
  TrainerHandle
}

/**
 * The plain-TypeScript Qwen3 model (`Qwen3Reference`) as a {@link TrainableModel}: exact and slow (tests, tiny
 * models on a CPU). Multi-turn episodes reuse each turn's KV cache for the next (the tokens are those a fresh prefill
 * would draw). The GPU model implements the same interface.
 *
 * @since 0.0.0
 */
export const referenceModel: (model: Checkpoint.Model, options?: { readonly maxBatchSize?: number }) => TrainableModel =
  cachedCpuModel

/**
 * The Qwen3 model on the GPU (WebGPU/Dawn) as a {@link TrainableModel}, scoped to the device. `batch` should be
 * perDeviceTrainBatchSize and `seq` the longest prompt + maxCompletionLength; `temperature` the run's. Checkpoints
 * also hold the AdamW moments (downloaded from the device), so a resumed GPU run continues exactly like the CPU one:
 * weights, moments, step count, data position and seeds.
 *
 * @example
 * ```ts
 * const model = yield* Trainer.gpuModel(yield* Checkpoint.load("models/tiny-sft"), { batch: 8, seq: 512, temperature: 1 })
 * ```
 *
 * @since 0.0.0
 */
export const gpuModel = makeGpuModel

/**
 * Options of {@link train}.
 *
 * @since 0.0.0
 */
export interface TrainOptions<State, E, R, RE = never, RR = never> {
  /** The GRPO configuration (decoded; it is validated with `Config.resolve` before anything runs). */
  readonly config: Config.GRPOConfig
  readonly model: TrainableModel
  readonly dataset: Dataset.Dataset
  /** Opens a fresh environment session for a row (TRL's environment_factory + reset). */
  readonly open: OpenSession<State, E, R>
  /** Reward functions; their failures (`RE`) and requirements (`RR`) are the run's. */
  readonly rewardFunctions: ReadonlyArray<Reward.RewardFunction<State, any, any, RE, RR>>
  /**
   * TRL's `rollout_func`: the user's own episode code in place of the built-in multi-turn loop for training episodes
   * (evaluation keeps the built-in loop). It gets the row, its prompt, `open` for the row's session, the seeded
   * episode settings and the trainer handle, with the policy and chat renderer in context, and returns the record.
   */
  readonly rolloutFunc?: RolloutFunc<State, E, R>
  /** Held-out rows, evaluated with greedy decoding before training, every evalSteps and at the end. */
  readonly evalDataset?: Dataset.Dataset
  /** Whether an evaluated episode is a success (default reward > 0). */
  readonly evalSuccess?: (episode: EpisodeRecord<State>, reward: number) => boolean
  /** The KL reference when beta > 0; default a frozen copy of the model at the start. */
  readonly reference?: TrainableModel
  /**
   * Qwen3 `enable_thinking` for every render; default false (as every TRL OpenEnv example). The config's
   * `chatTemplateKwargs.enable_thinking` sets it too (both given and different: refused).
   */
  readonly enableThinking?: boolean
  /** Episodes in flight; default the whole generation batch (TRL's sync trainer). */
  readonly concurrency?: number
  readonly episodeTimeout?: `${number} ${"seconds" | "minutes"}`
  /** The remote environment's session limit, checked against the episodes in flight. */
  readonly remoteMaxConcurrentSessions?: number
  /** `true`: continue from the newest checkpoint in outputDir (if any); a path: that checkpoint. */
  readonly resume?: boolean | string
  /** Title of the report; default the output directory's name. */
  readonly title?: string
  /** Progress display; default a bar on stdout. `false` prints nothing. */
  readonly progress?: Progress.Progress | false
  /** Called after every optimizer step (tests, custom logging). */
  readonly onStep?: (step: StepResult) => Effect.Effect<void>
  /** Stop after this many steps of this call (the schedule still spans maxSteps); for tests and time boxes. */
  readonly stopAfter?: number
}

/**
 * One optimizer step's values.
 *
 * @since 0.0.0
 */
export interface StepResult {
  readonly step: number
  readonly loss: number
  readonly values: Readonly<Record<string, number>>
}

/**
 * What a finished (or stopped) run returns.
 *
 * @since 0.0.0
 */
export interface TrainResult {
  readonly outputDir: string
  readonly globalStep: number
  readonly totalSteps: number
  readonly steps: ReadonlyArray<StepResult>
  readonly evaluations: ReadonlyArray<Evaluation.EvaluationResult>
  readonly checkpoint: string | undefined
  readonly report: string
}

const summaryOf = (config: Config.ResolvedGRPOConfig): Record<string, unknown> => {
  const keys = [
    "lossType",
    "numGenerations",
    "perDeviceTrainBatchSize",
    "gradientAccumulationSteps",
    "generationBatchSize",
    "learningRate",
    "lrSchedulerType",
    "maxSteps",
    "maxCompletionLength",
    "maxToolCallingIterations",
    "beta",
    "temperature",
    "seed"
  ] as const
  return Object.fromEntries(keys.map((k) => [k, config[k]]))
}

/**
 * Runs GRPO training. Needs a FileSystem and Path (`NodeContext.layer`) besides what the environment needs.
 *
 * @since 0.0.0
 */
export const train = <State, E, R, RE = never, RR = never>(options: TrainOptions<State, E, R, RE, RR>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const userFunctions = options.rewardFunctions.filter((f) => !f.environmentOwned).length
    const config = yield* Config.resolve(options.config, {
      numRewardFunctions: userFunctions,
      ...(options.enableThinking === undefined ? {} : { enableThinking: options.enableThinking }),
      ...(options.concurrency === undefined ? {} : { episodesInFlight: options.concurrency }),
      ...(options.remoteMaxConcurrentSessions === undefined
        ? {}
        : { remoteMaxConcurrentSessions: options.remoteMaxConcurrentSessions })
    })
    const model = options.model
    const template = Config.templateOptions(config, options.enableThinking)
    const outputDir = config.outputDir
    yield* fs.makeDirectory(outputDir, { recursive: true }).pipe(
      Effect.mapError((e) =>
        new TrainerState.CheckpointStateError({ path: outputDir, problem: `cannot create (${e.message})` })
      )
    )
    const totalSteps = Config.totalSteps(config, options.dataset.rows.length)
    const lr = LrSchedule.fromConfig(config, totalSteps)
    const lossOptions = Loss.optionsFromConfig(config)
    const samplerCorrection = config.importanceSamplingCorrection
      ? {
        mode: config.importanceSamplingMode,
        clipMin: config.importanceSamplingClipMin,
        clipMax: config.importanceSamplingClipMax
      }
      : undefined
    const U = config.promptsPerGeneration
    const G = config.numGenerations
    const title = options.title ?? path.basename(outputDir)
    const file = (name: string) => path.join(outputDir, name)
    const progress = options.progress === false
      ? Progress.make({ total: totalSteps, silent: true })
      : options.progress ?? Progress.make({ total: totalSteps, label: "grpo" })
    // The reference is the model before any update (and before a resumed checkpoint is loaded).
    const reference = config.beta !== 0 ? options.reference ?? (yield* model.frozenCopy) : undefined

    // Committed state: what a checkpoint holds (changed only at the end of an optimizer step).
    let committed: TrainerState.State = {
      kind: "grpo",
      globalStep: 0,
      totalSteps,
      position: Dataset.start,
      seed: config.seed,
      numTokens: 0,
      pending: [],
      config: options.config as unknown as Record<string, unknown>
    }
    const resumeFrom = options.resume === undefined || options.resume === false
      ? Option.none<string>()
      : options.resume === true
      ? yield* TrainerState.latest(outputDir)
      : Option.some(options.resume)
    if (Option.isSome(resumeFrom)) {
      const loaded = yield* TrainerState.load(resumeFrom.value, model)
      committed = loaded.state
      yield* progress.log(`resumed from ${resumeFrom.value} at step ${committed.globalStep}`)
    }
    const startStep = committed.globalStep
    // Records after the checkpoint were logged by the interrupted run and are about to be logged again.
    for (const name of [Metrics.files.metrics, Metrics.files.completions, Metrics.files.evaluations]) {
      if (startStep === 0) yield* fs.remove(file(name)).pipe(Effect.ignore)
      else yield* Metrics.truncateAfter(file(name), startStep)
    }
    // Flat steps so far (no advantage signal): the resumed run's from metrics.jsonl, this run's from each step.
    const flatBefore = startStep === 0
      ? Advantage.flatSteps([])
      : Advantage.flatSteps(yield* Metrics.read<Metrics.MetricsRecord>(file(Metrics.files.metrics)))
    const flatThisRun: Array<Parameters<typeof Advantage.flatSteps>[0][number]> = []
    const reportOptions = (status: string) => ({ title, status, config: summaryOf(config) })
    let lastSaved = Option.isSome(resumeFrom) ? startStep : -1
    let lastCheckpoint: string | undefined = Option.getOrUndefined(resumeFrom)
    const save = Effect.suspend(() =>
      TrainerState.save(outputDir, model, committed).pipe(
        Effect.tap((dir) =>
          Effect.sync(() => {
            lastSaved = committed.globalStep
            lastCheckpoint = dir
          })
        )
      )
    )

    const evaluations: Array<Evaluation.EvaluationResult> = []
    const evaluate = (step: number) =>
      Effect.gen(function*() {
        if (options.evalDataset === undefined) return
        const result = yield* Evaluation.evaluate({
          model,
          dataset: options.evalDataset,
          open: options.open,
          rewardFunctions: options.rewardFunctions,
          rewardWeights: config.rewardWeights,
          maxCompletionLength: config.maxCompletionLength,
          maxToolCallingIterations: config.maxToolCallingIterations,
          enableThinking: template.enableThinking,
          chatTemplateKwargs: template.extra,
          keepModelTemplate: config.keepModelTemplate,
          step,
          seed: config.seed,
          ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
          ...(options.evalSuccess === undefined ? {} : { success: options.evalSuccess })
        })
        evaluations.push(result)
        yield* Evaluation.write(outputDir, result)
        yield* progress.log(Evaluation.formatTable(result))
      })

    const run = Effect.gen(function*() {
      if (startStep === 0) yield* evaluate(0)
      yield* Report.write(outputDir, reportOptions("training"))
      const acc = Metrics.accumulator()
      const steps: Array<StepResult> = []
      let samples: ReadonlyArray<Metrics.CompletionSample> = []
      let pending = [...((committed.pending ?? []) as ReadonlyArray<MicroBatch>)]
      let position = committed.position
      let numTokens = committed.numTokens
      const started = Date.now()
      const stopAt = options.stopAfter === undefined ? totalSteps : Math.min(totalSteps, startStep + options.stopAfter)

      for (let step = startStep; step < stopAt; step++) {
        const stepStarted = Date.now()
        const values: Record<string, number> = {}
        const generationValues: Array<Record<string, number>> = []
        let generatedTokens = 0
        let generationSeconds = 0
        const micro: Array<MicroBatch> = []
        while (micro.length < config.gradientAccumulationSteps) {
          if (pending.length === 0) {
            const generationStarted = Date.now()
            const drawn = yield* Dataset.batchAt(options.dataset, position, {
              promptsPerBatch: U,
              seed: config.seed,
              shuffle: config.shuffleDataset
            })
            position = drawn.next
            const records = yield* runBatch({
              model,
              rows: drawn.rows,
              groupSize: G,
              open: options.open,
              episode: {
                maxCompletionLength: config.maxCompletionLength,
                maxToolCallingIterations: config.maxToolCallingIterations ?? undefined,
                sampling: {
                  temperature: config.temperature,
                  topP: config.topP,
                  ...(config.topK > 0 ? { topK: config.topK } : {}),
                  ...(config.minP === null ? {} : { minP: config.minP }),
                  repetitionPenalty: config.repetitionPenalty
                }
              },
              seed: Dataset.mixSeed(config.seed, step, micro.length),
              concurrency: options.concurrency ?? config.episodesInFlight,
              enableThinking: template.enableThinking,
              chatTemplateKwargs: template.extra,
              keepModelTemplate: config.keepModelTemplate,
              ...(options.episodeTimeout === undefined ? {} : { episodeTimeout: options.episodeTimeout }),
              rolloutFunc: options.rolloutFunc,
              trainer: { globalStep: step, tokenizer: model.tokenizer }
            })
            const generation = yield* prepare({
              config,
              records,
              rewardFunctions: options.rewardFunctions,
              trainerState: {
                globalStep: step,
                maxSteps: totalSteps,
                epoch: Dataset.epochOf(options.dataset, position, U)
              },
              model,
              reference,
              step,
              // TRL decodes the completions table with skip_special_tokens=True.
              decode: (ids) => model.tokenizer.decode(ids, { skipSpecialTokens: true })
            })
            pending = [...generation.microBatches]
            generationValues.push(generation.metrics)
            generatedTokens += generation.tokens
            numTokens += generation.tokens
            if (config.logCompletions) samples = generation.samples
            generationSeconds += (Date.now() - generationStarted) / 1000
          }
          micro.push(pending.shift()!)
        }
        let loss = 0
        let trainedTokens = 0
        const lossValues: Array<Record<string, number>> = []
        for (const m of micro) {
          const out = yield* trainMicroBatch(model, m, lossOptions, config.temperature, samplerCorrection)
          loss += out.loss
          trainedTokens += out.tokens
          lossValues.push(out.metrics)
        }
        const learningRate = lr(step)
        const stepped = yield* model.step({
          learningRate,
          maxGradNorm: config.maxGradNorm,
          beta1: config.adamBeta1,
          beta2: config.adamBeta2,
          epsilon: config.adamEpsilon,
          weightDecay: config.weightDecay
        })
        const gradNorm = stepped.gradNorm
        // A model that computes the loss in its step program returns the deferred micro-batches' loss and metrics.
        if (stepped.loss !== undefined) loss += stepped.loss
        if (stepped.metrics !== undefined) lossValues.push(stepped.metrics)
        const globalStep = step + 1
        committed = { ...committed, globalStep, position, numTokens, pending }
        const seconds = Math.max(1e-9, (Date.now() - stepStarted) / 1000)
        for (const group of [...generationValues, ...lossValues]) {
          for (const [k, v] of Object.entries(group)) {
            // Several generation batches or micro-batches in one step: average them.
            const n = `__n_${k}`
            const count = (values[n] ?? 0) + (Number.isNaN(v) ? 0 : 1)
            values[k] = Number.isNaN(v) ? (values[k] ?? NaN) : ((values[k] ?? 0) * (count - 1) + v) / count
            values[n] = count
          }
        }
        for (const k of Object.keys(values)) if (k.startsWith("__n_")) delete values[k]
        Object.assign(values, {
          loss,
          grad_norm: gradNorm,
          learning_rate: learningRate,
          num_tokens: numTokens,
          step_time: seconds,
          tokens_per_second: (trainedTokens + generatedTokens) / seconds,
          // Ours (not TRL's): where the step's time went, rollouts (with scoring) versus the update.
          "time/generation": generationSeconds,
          "time/update": seconds - generationSeconds
        })
        acc.add(values)
        const result: StepResult = { step: globalStep, loss, values }
        steps.push(result)
        flatThisRun.push({ ...values, step: globalStep })
        yield* progress.update({
          step: globalStep,
          reward: values["reward"],
          flat: {
            flat: flatBefore.flat.length + Advantage.flatSteps(flatThisRun, { start: startStep }).flat.length,
            steps: globalStep
          },
          loss,
          tokensPerSecond: values["tokens_per_second"],
          elapsedSeconds: (Date.now() - started) / 1000,
          startStep
        })
        const last = globalStep === totalSteps || globalStep === stopAt
        if (globalStep % config.loggingSteps === 0 || last) {
          const record = acc.flush({ step: globalStep, epoch: Dataset.epochOf(options.dataset, position, U) })
          yield* Metrics.append(file(Metrics.files.metrics), [record])
          if (config.logCompletions && samples.length > 0) {
            const logged = samples.map((s) => ({ ...s, step: globalStep }))
            yield* Metrics.append(file(Metrics.files.completions), logged)
            yield* progress.log(Metrics.formatCompletions(logged, config.numCompletionsToPrint))
          }
        }
        if (globalStep % config.evalSteps === 0 || globalStep === totalSteps) yield* evaluate(globalStep)
        if (globalStep % config.loggingSteps === 0 || globalStep % config.evalSteps === 0 || last) {
          yield* Report.write(outputDir, reportOptions(last ? "finished" : "training"))
        }
        if (globalStep % config.saveSteps === 0 || last) yield* save
        if (options.onStep !== undefined) yield* options.onStep(result)
      }
      const flatRun = Advantage.flatSteps(flatThisRun, { start: startStep })
      const flatNote = flatRun.steps > 0 && flatRun.flat.length === flatRun.steps
        ? ` (every step was flat: each group's rewards had zero variance, so nothing was learnt; a policy that never ` +
          `earns a reward needs an SFT warm-up or a shaped reward, one that always does a harder task)`
        : flatRun.flat.length > 0
        ? ` (${flatRun.flat.length} of ${flatRun.steps} steps flat)`
        : ""
      yield* progress.done(`grpo: ${committed.globalStep}/${totalSteps} steps, output in ${outputDir}${flatNote}`)
      const report = yield* Report.write(
        outputDir,
        reportOptions(committed.globalStep === totalSteps ? "finished" : `stopped at step ${committed.globalStep}`)
      )
      return {
        outputDir,
        globalStep: committed.globalStep,
        totalSteps,
        steps,
        evaluations,
        checkpoint: lastCheckpoint,
        report
      } satisfies TrainResult
    })

    return yield* run.pipe(
      Effect.onExit((exit) =>
        Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause) && committed.globalStep !== lastSaved
          ? Effect.gen(function*() {
            // Interrupted (SIGINT/SIGTERM): keep the last completed step.
            const dir = yield* save
            yield* Report.write(outputDir, reportOptions(`interrupted at step ${committed.globalStep}`))
            yield* progress.done(`interrupted: checkpoint written to ${dir}`)
          }).pipe(
            Effect.catchAllCause((cause) => Effect.logError("could not write the interruption checkpoint", cause))
          )
          : Effect.void
      )
    )
  }).pipe(Effect.withSpan("Trainer.train"))
