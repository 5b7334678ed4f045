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
 * With `async: true` (async GRPO, TRL's `AsyncGRPOTrainer`) step 1's generation batches come from a producer that
 * runs ahead of the optimizer, bounded by `maxInflightTasks` and `maxStaleness` (internal/rolloutQueue.ts); with
 * maxStaleness 0 the run equals the synchronous one. On the CPU, train on {@link workerModel} for that: the
 * in-thread model's update is synchronous JavaScript, during which the producer cannot even send its requests.
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
import type { Checkpoint, CpuDevice } from "@envtrain/gpu"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import type { PromptRow } from "@envtrain/rollout/Rollout"
import { type Duration, Effect, Option, type Scope } from "effect"
import * as Advantage from "./Advantage.js"
import * as Config from "./Config.js"
import * as Dataset from "./Dataset.js"
import * as Evaluation from "./Evaluation.js"
import { cachedCpuModel } from "./internal/cachedModel.js"
import type * as DeviceModel from "./internal/deviceModel.js"
import { deviceModel as makeDeviceModel } from "./internal/deviceModel.js"
import * as DynamicSampling from "./internal/dynamicSampling.js"
import {
  type GenerationResult,
  type MicroBatch,
  prepare,
  scoreRecords,
  trainMicroBatch
} from "./internal/generation.js"
import { gpuModel as makeGpuModel, type GpuModelOptions } from "./internal/gpuModel.js"
import type {
  LoraOptions as ModelLoraOptions,
  ModelState,
  OptimizerState,
  OptimizerStateMismatch,
  OptimizerStep,
  SequenceBatch,
  StepDecoder,
  TokenScores,
  TrainableModel
} from "./internal/model.js"
import { optimizerStep } from "./internal/model.js"
import type { QueueEvent } from "./internal/rolloutQueue.js"
import * as RolloutQueue from "./internal/rolloutQueue.js"
import {
  type OpenSession,
  type RolloutFunc,
  type RolloutInput,
  runBatch,
  type TrainerHandle
} from "./internal/rollouts.js"
import * as RunLoop from "./internal/runLoop.js"
import * as WorkerModel from "./internal/workerModel.js"
import * as Loss from "./Loss.js"
import * as LrSchedule from "./LrSchedule.js"
import * as Metrics from "./Metrics.js"
import type * as Progress from "./Progress.js"
import type * as Reward from "./Reward.js"
import * as RolloutGroups from "./RolloutGroups.js"
import type * as TrainerState from "./TrainerState.js"

export type {
  GpuModelOptions,
  ModelState,
  OpenSession,
  OptimizerState,
  OptimizerStateMismatch,
  OptimizerStep,
  QueueEvent,
  RolloutFunc,
  RolloutInput,
  SequenceBatch,
  StepDecoder,
  TokenScores,
  TrainableModel,
  TrainerHandle
}

/** @since 0.0.0 */
export type WorkerModelOptions = WorkerModel.WorkerModelOptions

/**
 * The plain-TypeScript Qwen3 model (`Qwen3Reference`) as a {@link TrainableModel}: exact and slow (tests, tiny
 * models on a CPU). Multi-turn episodes reuse each turn's KV cache for the next (the tokens are those a fresh prefill
 * would draw). The GPU model implements the same interface.
 *
 * @since 0.0.0
 */
export const referenceModel: (
  model: Checkpoint.Model,
  options?: { readonly maxBatchSize?: number; readonly lora?: LoraOptions | undefined }
) => TrainableModel = cachedCpuModel

/**
 * LoRA for {@link referenceModel}, {@link cpuModel}, {@link workerModel} and {@link deviceModel}: PEFT's settings
 * (`Config.GRPOConfig.lora`, decoded from TRL's `use_peft`/`lora_*` keys or a `peft_config` block) and the seed of
 * the adapter's initialisation and dropout masks. The base is frozen; optimizer state, exported state and the
 * weights synced to policy servers are the adapter's.
 *
 * @since 0.0.0
 */
export type LoraOptions = ModelLoraOptions

/**
 * The CPU reference model ({@link referenceModel}: the same code, bit-identical results) in a worker thread, scoped:
 * forward, backward, the optimizer step and generation run there, so the trainer's event loop stays free while the
 * update runs. What async GRPO needs on the CPU backend for generation on a policy server to overlap the update.
 * The worker ends with the Scope; a worker that exits, crashes or passes `callTimeout` fails the run with
 * {@link WorkerModelError} naming it. Details: `internal/workerModel.ts`.
 *
 * @example
 * ```ts
 * const model = yield* Trainer.workerModel(yield* Checkpoint.load("models/tiny-sft"))
 * ```
 *
 * @since 0.0.0
 */
export const workerModel: (
  model: Checkpoint.Model,
  options?: WorkerModelOptions
) => Effect.Effect<TrainableModel, WorkerModelError, Scope.Scope> = WorkerModel.workerModel

/**
 * The CPU device's model in this thread, on a matmul route chosen with `Gemm.select` / `CpuDevice.make`: what a
 * policy server decodes with (each decode step is one short batched pass). Training should use {@link cpuModel},
 * which runs the same model in a worker thread.
 *
 * @since 0.0.0
 */
export const deviceModel: (model: Checkpoint.Model, options: DeviceModelOptions) => TrainableModel = makeDeviceModel

/** @since 0.0.0 */
export type DeviceModelOptions = DeviceModel.DeviceModelOptions

/**
 * Options of {@link cpuModel}: the device's (`threads` per matmul, default every core; `deterministic`: one thread
 * and a fixed summation order; exactly one `route`, or the fastest this machine has), the most generation requests
 * per `generate` call, the most tokens per forward/backward pass, and the worker's time limits.
 *
 * @since 0.0.0
 */
export interface CpuModelOptions extends CpuDevice.DeviceOptions {
  readonly maxBatchSize?: number
  readonly lora?: LoraOptions | undefined
  /** Recompute each decoder layer's activations in the backward (TRL's `gradient_checkpointing`). */
  readonly gradientCheckpointing?: boolean | undefined
  /**
   * How a frozen base (the base of a LoRA run, the KL reference) holds its matrices: bf16 (half the memory, widened
   * to f32 per matrix for the matmuls) or f32. Default bf16 where lossless (a bf16 checkpoint's weights), else f32;
   * bf16 asked for on f32 weights rounds them to nearest even.
   */
  readonly frozenDtype?: "f32" | "bf16" | undefined
  readonly maxTokensPerPass?: number
  readonly callTimeout?: Duration.DurationInput
  readonly startTimeout?: Duration.DurationInput
}

/**
 * The Qwen3 model on the CPU device, the CPU backend: f32 kernels over one preallocated workspace, matmuls on the
 * platform BLAS (OpenBLAS through an FFI, on `threads` cores) or WebAssembly SIMD, in a worker thread so the
 * trainer's event loop stays free (async GRPO overlaps generation with the update). Results match
 * {@link referenceModel} (the specification) at f32 tolerance. `model.device` says which route runs it; a route
 * that was asked for and is missing fails the start with {@link WorkerModelError} naming the fix.
 *
 * @example
 * ```ts
 * const model = yield* Trainer.cpuModel(yield* Checkpoint.load("models/tiny-sft"), { threads: 2 })
 * console.log(model.device) // e.g. "OpenBLAS 0.3.21 on 2 threads"
 * ```
 *
 * @since 0.0.0
 */
export const cpuModel = (
  model: Checkpoint.Model,
  options: CpuModelOptions = {}
): Effect.Effect<TrainableModel, WorkerModelError, Scope.Scope> => {
  const { callTimeout, lora, maxBatchSize, startTimeout, ...device } = options
  return WorkerModel.workerModel(model, {
    lora,
    ...(maxBatchSize === undefined ? {} : { maxBatchSize }),
    ...(callTimeout === undefined ? {} : { callTimeout }),
    ...(startTimeout === undefined ? {} : { startTimeout }),
    device
  })
}

/**
 * The CPU model's worker thread stopped, crashed, or did not answer within `callTimeout`.
 *
 * @since 0.0.0
 */
export const WorkerModelError = WorkerModel.WorkerModelError
/** @since 0.0.0 */
export type WorkerModelError = WorkerModel.WorkerModelError

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
  /** Async GRPO: called as generation batches are produced, dropped as too stale, or taken for training. */
  readonly onQueue?: (event: QueueEvent) => Effect.Effect<void>
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
  const summary: Record<string, unknown> = Object.fromEntries(keys.map((k) => [k, config[k]]))
  if (config.async) {
    Object.assign(summary, {
      async: true,
      maxStaleness: config.maxStaleness,
      maxInflightTasks: config.maxInflightTasks
    })
  }
  return summary
}

/**
 * Runs GRPO training. Needs a FileSystem and Path (`NodeContext.layer`) besides what the environment needs.
 *
 * @since 0.0.0
 */
export const train = <State, E, R, RE = never, RR = never>(options: TrainOptions<State, E, R, RE, RR>) =>
  Effect.gen(function*() {
    const run = yield* openRun(options)
    const batches = yield* batchSource(options, run)
    const evaluation = evaluator(
      batches.queue === undefined ? options : { ...options, model: batches.queue.model },
      run.config,
      run.loop
    )
    const finished = yield* RunLoop.run({
      loop: run.loop,
      step: optimizerSteps(options, run, batches),
      loggingSteps: run.config.loggingSteps,
      saveSteps: run.config.saveSteps,
      evaluation: { evalSteps: run.config.evalSteps, evaluate: evaluation.evaluate },
      logged: (step) => logCompletions(run.loop, run.config, run.feed.samples, step),
      summary: summaryOf(run.config),
      endNote: () => run.flat.note() + (batches.queue === undefined ? "" : batches.queue.note()),
      onStep: options.onStep
    })
    return {
      outputDir: run.loop.outputDir,
      globalStep: finished.globalStep,
      totalSteps: run.totalSteps,
      steps: finished.results,
      evaluations: evaluation.results,
      checkpoint: finished.checkpoint,
      report: finished.report
    } satisfies TrainResult
  }).pipe(Effect.scoped, Effect.withSpan("Trainer.train"))

/** An opened run: the resolved config and its schedule, the KL reference, the run loop and where the data stands. */
interface Run {
  readonly config: Config.ResolvedGRPOConfig
  readonly totalSteps: number
  readonly lr: (step: number) => number
  readonly reference: TrainableModel | undefined
  readonly loop: RunLoop.Loop
  readonly feed: Feed
  readonly flat: FlatCounter
}

/**
 * Resolves the config, takes the KL reference (the model before any update, and before a resumed checkpoint is
 * loaded) and opens the run: output directory, resumed state, logs.
 */
const openRun = <State, E, R, RE, RR>(options: TrainOptions<State, E, R, RE, RR>) =>
  Effect.gen(function*() {
    const { dataset, model } = options
    const config = yield* resolveConfig(options)
    const totalSteps = Config.totalSteps(config, dataset.rows.length)
    const lr = LrSchedule.fromConfig(config, totalSteps)
    const reference = config.beta !== 0 ? options.reference ?? (yield* model.frozenCopy) : undefined
    const loop = yield* RunLoop.open(options, {
      kind: "grpo",
      outputDir: config.outputDir,
      model,
      totalSteps,
      initial: {
        position: Dataset.start,
        seed: config.seed,
        numTokens: 0,
        pending: [],
        config: options.config as unknown as Record<string, unknown>
      },
      logs: [Metrics.files.metrics, Metrics.files.completions, Metrics.files.evaluations],
      trackers: {
        reportTo: config.reportTo,
        runName: config.runName,
        project: config.project,
        config: options.config as unknown as Record<string, unknown>
      }
    })
    const feed = feedOf(loop.state())
    const flat = yield* flatCounter(loop)
    return { config, totalSteps, lr, reference, loop, feed, flat } satisfies Run
  })

/**
 * A generation batch at `position`, seeded by the step and micro-batch it is generated for: take U prompts, roll
 * out a group of G episodes per prompt with `policy`, score them, compute the group-relative advantages (and the
 * old / reference logprobs) and cut the rows into micro-batches.
 */
const generationBatch = <State, E, R, RE, RR>(options: TrainOptions<State, E, R, RE, RR>, run: Run) =>
(
  slot: RolloutQueue.Slot,
  position: Dataset.Position,
  policy: TrainableModel
) =>
  Effect.gen(function*() {
    const { config } = run
    const { dataset, model } = options
    const U = config.promptsPerGeneration
    const prompts = yield* Dataset.batchAt(dataset, position, {
      promptsPerBatch: U,
      seed: config.seed,
      shuffle: config.shuffleDataset
    })
    const rollOut = (rows: ReadonlyArray<PromptRow>, round: number) =>
      rollOutGroups({ ...options, model: policy }, config, rows, slot.step, slot.microBatch, round)
    const trainerState = {
      globalStep: slot.step,
      maxSteps: run.totalSteps,
      epoch: Dataset.epochOf(dataset, prompts.next, U)
    }
    const scored = yield* resampled(
      options,
      config,
      trainerState,
      prompts.rows,
      yield* rollOut(prompts.rows, 0),
      rollOut
    )
    const result = yield* prepare({
      config,
      records: scored.records,
      ...(scored.table === undefined ? {} : { table: scored.table }),
      rewardFunctions: options.rewardFunctions,
      trainerState,
      model: policy,
      reference: run.reference,
      step: slot.step,
      // TRL decodes the completions table with skip_special_tokens=True.
      decode: (ids) => model.tokenizer.decode(ids, { skipSpecialTokens: true })
    })
    Object.assign(result.metrics, scored.metrics)
    return { result, next: prompts.next }
  })

/**
 * Where the steps' generation batches come from. Async GRPO: a producer runs ahead and the step takes its batches
 * (see internal/rolloutQueue.ts); sync: the step generates when its batch is used up. Either way the data position
 * moves past the batch taken.
 */
const batchSource = <State, E, R, RE, RR>(options: TrainOptions<State, E, R, RE, RR>, run: Run) =>
  Effect.gen(function*() {
    const { config, feed, loop } = run
    const generate = generationBatch(options, run)
    const queue = config.async
      ? yield* RolloutQueue.start({
        config,
        model: options.model,
        version: loop.startStep,
        position: feed.position,
        state: loop.state().rolloutQueue,
        pending: feed.pending.length,
        stopAt: loop.stopAt,
        produce: generate,
        onEvent: options.onQueue
      })
      : undefined
    const next = (step: number, microBatch: number) =>
      Effect.map(
        queue === undefined ? generate({ step, microBatch }, feed.position, options.model) : queue.take,
        (out) => {
          feed.position = out.next
          return out.result
        }
      )
    return { queue, next }
  })

/** What a step needs of the async queue. */
type StepQueue = Pick<RolloutQueue.Handle<never, never>, "training" | "stepped" | "state">

/**
 * One optimizer step: its micro-batches (generating when the batch is used up), forward / loss / backward of each,
 * the clipped AdamW update, then the step's metrics.
 */
const optimizerSteps = <EB, RB>(
  options: { readonly dataset: Dataset.Dataset; readonly model: TrainableModel },
  run: Run,
  batches: {
    readonly queue: StepQueue | undefined
    readonly next: (step: number, microBatch: number) => Effect.Effect<GenerationResult, EB, RB>
  }
) =>
(step: number) =>
  Effect.gen(function*() {
    const { config, feed, loop } = run
    const { model } = options
    const { queue } = batches
    const started = Date.now()
    const taken = yield* takeMicroBatches(feed, config, (microBatch) => batches.next(step, microBatch))
    const learningRate = run.lr(step)
    const globalStep = step + 1
    const update = Effect.gen(function*() {
      const trained = yield* trainMicroBatches(model, taken.micro, config)
      // The update and its commit as one against interruption: an awaited update (the GPU's, the worker
      // model's) would otherwise be applied without the commit, and the interruption's checkpoint would pair
      // the new weights with the previous step's state.
      const stepped = yield* Effect.uninterruptible(Effect.tap(
        model.step(optimizerStep(config, learningRate)),
        () =>
          // A copy: the next step shifts micro-batches off `feed.pending`, and an interrupt inside it saves this
          // state.
          loop.commit({
            globalStep,
            position: feed.position,
            numTokens: feed.numTokens,
            pending: [...feed.pending],
            ...(queue === undefined ? {} : { rolloutQueue: queue.state() })
          })
      ))
      return { trained, stepped }
    })
    const { stepped, trained } = yield* (queue === undefined ? update : queue.training(update, globalStep))
    const queueMetrics = queue === undefined ? {} : yield* queue.stepped(feed.pending.length > 0)
    const seconds = Math.max(1e-9, (Date.now() - started) / 1000)
    const { loss, values } = stepValues(taken.generated, trained, stepped, {
      learningRate,
      numTokens: feed.numTokens,
      seconds
    })
    Object.assign(values, queueMetrics)
    return {
      values,
      loss,
      epoch: Dataset.epochOf(options.dataset, feed.position, config.promptsPerGeneration),
      progress: { reward: values["reward"], flat: run.flat.add(globalStep, values) },
      result: { step: globalStep, loss, values } satisfies StepResult
    }
  })

/**
 * Where the data stands between steps: the generation batch's micro-batches not yet trained, the next prompts to
 * draw, the tokens seen, and the latest generation's sample completions.
 */
interface Feed {
  pending: Array<MicroBatch>
  position: Dataset.Position
  numTokens: number
  samples: ReadonlyArray<Metrics.CompletionSample>
}

const feedOf = (state: TrainerState.State): Feed => ({
  pending: [...((state.pending ?? []) as ReadonlyArray<MicroBatch>)],
  position: state.position,
  numTokens: state.numTokens,
  samples: []
})

/**
 * The step's gradientAccumulationSteps micro-batches, generating a new batch whenever the pending ones are used up
 * (several generation batches in one step when a batch holds fewer micro-batches than a step needs).
 */
const takeMicroBatches = <E, R>(
  feed: Feed,
  config: Config.ResolvedGRPOConfig,
  generate: (microBatch: number) => Effect.Effect<GenerationResult, E, R>
) =>
  Effect.gen(function*() {
    const generated = { metrics: [] as Array<Record<string, number>>, tokens: 0, seconds: 0 }
    const micro: Array<MicroBatch> = []
    while (micro.length < config.gradientAccumulationSteps) {
      if (feed.pending.length === 0) {
        const generationStarted = Date.now()
        const generation = yield* generate(micro.length)
        feed.pending = [...generation.microBatches]
        generated.metrics.push(generation.metrics)
        generated.tokens += generation.tokens
        feed.numTokens += generation.tokens
        if (config.logCompletions) feed.samples = generation.samples
        generated.seconds += (Date.now() - generationStarted) / 1000
      }
      micro.push(feed.pending.shift()!)
    }
    return { micro, generated }
  })

/**
 * One step's metrics (TRL's names): the generation and loss metrics averaged over the step's generation batches
 * and micro-batches, then the loss, gradient norm, learning rate, token count and timings.
 */
const stepValues = (
  generated: {
    readonly metrics: ReadonlyArray<Record<string, number>>
    readonly tokens: number
    readonly seconds: number
  },
  trained: { readonly loss: number; readonly tokens: number; readonly metrics: ReadonlyArray<Record<string, number>> },
  stepped: { readonly gradNorm: number; readonly loss?: number; readonly metrics?: Record<string, number> },
  at: { readonly learningRate: number; readonly numTokens: number; readonly seconds: number }
) => {
  // A model that computes the loss in its step program returns the deferred micro-batches' loss and metrics.
  const loss = stepped.loss !== undefined ? trained.loss + stepped.loss : trained.loss
  const values = averaged([
    ...generated.metrics,
    ...trained.metrics,
    ...(stepped.metrics !== undefined ? [stepped.metrics] : [])
  ])
  Object.assign(values, {
    loss,
    grad_norm: stepped.gradNorm,
    learning_rate: at.learningRate,
    num_tokens: at.numTokens,
    step_time: at.seconds,
    tokens_per_second: (trained.tokens + generated.tokens) / at.seconds,
    // Ours (not TRL's): where the step's time went, rollouts (with scoring) versus the update.
    "time/generation": generated.seconds,
    "time/update": at.seconds - generated.seconds
  })
  return { loss, values }
}

/** The configuration resolved against the run's options (reward functions, thinking, episodes in flight). */
const resolveConfig = <State, E, R, RE, RR>(options: TrainOptions<State, E, R, RE, RR>) =>
  Config.resolve(options.config, {
    modelLora: options.model.lora,
    numRewardFunctions: options.rewardFunctions.filter((f) => !f.environmentOwned).length,
    ...(options.enableThinking === undefined ? {} : { enableThinking: options.enableThinking }),
    ...(options.concurrency === undefined ? {} : { episodesInFlight: options.concurrency }),
    ...(options.remoteMaxConcurrentSessions === undefined
      ? {}
      : { remoteMaxConcurrentSessions: options.remoteMaxConcurrentSessions })
  })

/**
 * A group of G episodes per prompt with the model as the policy, seeded by the step and the micro-batch (and a
 * dynamic-sampling re-roll by its round).
 */
const rollOutGroups = <State, E, R, RE, RR>(
  options: TrainOptions<State, E, R, RE, RR>,
  config: Config.ResolvedGRPOConfig,
  rows: ReadonlyArray<PromptRow>,
  step: number,
  microBatch: number,
  round: number
) => {
  const template = Config.templateOptions(config, options.enableThinking)
  const batch: RolloutGroups.Batch = {
    step,
    microBatch,
    round,
    seed: round === 0
      ? Dataset.mixSeed(config.seed, step, microBatch)
      : Dataset.mixSeed(config.seed, step, microBatch, round),
    policyVersion: step,
    rows,
    groupSize: config.numGenerations,
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
    enableThinking: template.enableThinking,
    chatTemplateKwargs: template.extra,
    keepModelTemplate: config.keepModelTemplate,
    episodeTimeout: options.episodeTimeout
  }
  const inProcess = runBatch({
    model: options.model,
    rows,
    groupSize: batch.groupSize,
    open: options.open,
    episode: batch.episode,
    seed: batch.seed,
    concurrency: options.concurrency ?? config.episodesInFlight,
    enableThinking: template.enableThinking,
    chatTemplateKwargs: template.extra,
    keepModelTemplate: config.keepModelTemplate,
    ...(options.episodeTimeout === undefined ? {} : { episodeTimeout: options.episodeTimeout }),
    rolloutFunc: options.rolloutFunc,
    trainer: { globalStep: step, tokenizer: options.model.tokenizer }
  })
  // Elsewhere (a RolloutGroups service in context, e.g. cluster runners): the batch travels as data, so a
  // rollout_func (code) cannot go with it.
  type Records = Effect.Effect<
    ReadonlyArray<EpisodeRecord<State>>,
    Effect.Effect.Error<typeof inProcess> | RolloutGroups.RolloutGroupsError,
    Effect.Effect.Context<typeof inProcess>
  >
  return Effect.flatMap(
    Effect.serviceOption(RolloutGroups.RolloutGroups),
    (elsewhere): Records =>
      Option.isNone(elsewhere)
        ? inProcess
        : options.rolloutFunc !== undefined
        ? Effect.fail(
          new RolloutGroups.RolloutGroupsError({
            problem: "rolloutFunc runs in the trainer's process, but this run's rollouts go to a RolloutGroups " +
              "service (cluster runners): drop rolloutFunc, or train without the cluster"
          })
        )
        : Effect.map(elsewhere.value.run(batch), (records) => records as ReadonlyArray<EpisodeRecord<State>>)
  )
}

/**
 * Dynamic sampling (`config.dynamicSampling`, internal/dynamicSampling.ts): scores the batch and re-rolls its flat
 * groups; off, the records pass through unscored (prepare scores them).
 */
const resampled = <State, E, R, RE, RR, EO, RO>(
  options: TrainOptions<State, E, R, RE, RR>,
  config: Config.ResolvedGRPOConfig,
  trainerState: Reward.TrainerState,
  rows: ReadonlyArray<PromptRow>,
  records: ReadonlyArray<EpisodeRecord<State>>,
  rollOut: (rows: ReadonlyArray<PromptRow>, round: number) => Effect.Effect<ReadonlyArray<EpisodeRecord<State>>, EO, RO>
) =>
  Effect.gen(function*() {
    if (config.dynamicSampling === "off") return { records, table: undefined, metrics: {} }
    const score = (batch: ReadonlyArray<EpisodeRecord<State>>) =>
      scoreRecords({ config, records: batch, rewardFunctions: options.rewardFunctions, trainerState })
    return yield* DynamicSampling.resample({
      mode: config.dynamicSampling,
      rounds: config.dynamicSamplingRounds,
      numGenerations: config.numGenerations,
      records,
      table: yield* score(records),
      reroll: (groups, round) =>
        Effect.gen(function*() {
          const again = yield* rollOut(groups.map((g) => rows[g]), round)
          return { records: again, table: yield* score(again) }
        })
    })
  })

/**
 * Forward, loss and backward of each micro-batch, summing the losses and the tokens in order; a model that computes
 * the loss in its step program defers it to `model.step`.
 */
const trainMicroBatches = (
  model: TrainableModel,
  micro: ReadonlyArray<MicroBatch>,
  config: Config.ResolvedGRPOConfig
) =>
  Effect.gen(function*() {
    const lossOptions = Loss.optionsFromConfig(config)
    const samplerCorrection = config.importanceSamplingCorrection
      ? {
        mode: config.importanceSamplingMode,
        clipMin: config.importanceSamplingClipMin,
        clipMax: config.importanceSamplingClipMax
      }
      : undefined
    let loss = 0
    let tokens = 0
    const metrics: Array<Record<string, number>> = []
    for (const m of micro) {
      const out = yield* trainMicroBatch(model, m, lossOptions, config.temperature, samplerCorrection)
      loss += out.loss
      tokens += out.tokens
      metrics.push(out.metrics)
    }
    return { loss, tokens, metrics }
  })

/** Several generation batches' or micro-batches' metrics in one step: their NaN-aware average, key by key. */
const averaged = (groups: ReadonlyArray<Readonly<Record<string, number>>>): Record<string, number> => {
  const values: Record<string, number> = {}
  for (const group of groups) {
    for (const [k, v] of Object.entries(group)) {
      const n = `__n_${k}`
      const count = (values[n] ?? 0) + (Number.isNaN(v) ? 0 : 1)
      values[k] = Number.isNaN(v) ? (values[k] ?? NaN) : ((values[k] ?? 0) * (count - 1) + v) / count
      values[n] = count
    }
  }
  for (const k of Object.keys(values)) if (k.startsWith("__n_")) delete values[k]
  return values
}

/** Held-out evaluation with greedy decoding (none without an evalDataset); keeps each result for the run's. */
const evaluator = <State, E, R, RE, RR>(
  options: TrainOptions<State, E, R, RE, RR>,
  config: Config.ResolvedGRPOConfig,
  loop: RunLoop.Loop
) => {
  const template = Config.templateOptions(config, options.enableThinking)
  const results: Array<Evaluation.EvaluationResult> = []
  const evaluate = (step: number) =>
    Effect.gen(function*() {
      if (options.evalDataset === undefined) return
      const result = yield* Evaluation.evaluate({
        model: options.model,
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
      results.push(result)
      yield* Evaluation.write(loop.outputDir, result)
      yield* loop.track(step, result.metrics)
      yield* loop.progress.log(Evaluation.formatTable(result))
    })
  return { results, evaluate }
}

/** The latest generation batch's sample completions, logged with each metrics line (`logCompletions`). */
const logCompletions = (
  loop: RunLoop.Loop,
  config: Config.ResolvedGRPOConfig,
  samples: ReadonlyArray<Metrics.CompletionSample>,
  step: number
) =>
  Effect.gen(function*() {
    if (!config.logCompletions || samples.length === 0) return
    const logged = samples.map((s) => ({ ...s, step }))
    yield* Metrics.append(loop.file(Metrics.files.completions), logged)
    yield* loop.progress.log(Metrics.formatCompletions(logged, config.numCompletionsToPrint))
  })

type FlatCounter = Effect.Effect.Success<ReturnType<typeof flatCounter>>

/**
 * Counts the flat steps (no advantage signal): the resumed run's from metrics.jsonl (already cut back to the
 * checkpoint), this run's from each step; says at the end when every step was flat.
 */
const flatCounter = (loop: RunLoop.Loop) =>
  Effect.gen(function*() {
    const before = loop.startStep === 0
      ? Advantage.flatSteps([])
      : Advantage.flatSteps(yield* Metrics.read<Metrics.MetricsRecord>(loop.file(Metrics.files.metrics)))
    const thisRun: Array<Parameters<typeof Advantage.flatSteps>[0][number]> = []
    const ofThisRun = () => Advantage.flatSteps(thisRun, { start: loop.startStep })
    return {
      /** Records a step's values; returns the progress line's count. */
      add: (step: number, values: Readonly<Record<string, number>>) => {
        thisRun.push({ ...values, step })
        return { flat: before.flat.length + ofThisRun().flat.length, steps: step }
      },
      note: () => {
        const run = ofThisRun()
        return run.steps > 0 && run.flat.length === run.steps
          ? ` (every step was flat: each group's rewards had zero variance, so nothing was learnt; a policy that never ` +
            `earns a reward needs an SFT warm-up or a shaped reward, one that always does a harder task)`
          : run.flat.length > 0
          ? ` (${run.flat.length} of ${run.steps} steps flat)`
          : ""
      }
    }
  })
