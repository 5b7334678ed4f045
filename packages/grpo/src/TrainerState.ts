/**
 * Checkpoints: everything needed to continue a run exactly where it stopped. A checkpoint is a directory
 * `<outputDir>/checkpoint-<step>/` holding
 *
 * - the model as a Hugging Face directory (config.json, model.safetensors in f32, tokenizer files, chat template),
 *   loadable by transformers and by `Checkpoint.load`;
 * - `optimizer.safetensors`: AdamW's first and second moments (`exp_avg.<name>`, `exp_avg_sq.<name>`), for a
 *   model that exports them (`exportOptimizerState`: the CPU reference and the GPU model do); without it a resume
 *   restarts the moments, with a warning;
 * - `trainer_state.json`: step, optimizer step, data position, RNG state, cumulative token count, the generation
 *   batch still being consumed (when stepsPerGeneration × numIterations spans optimizer steps), and the
 *   configuration.
 *
 * It is written to a temporary directory and renamed, so an interruption while saving never leaves a checkpoint
 * that looks complete but is not.
 *
 * @example
 * ```ts
 * import { TrainerState } from "@envtrain/grpo"
 * import { Option } from "effect"
 * const dir = yield* TrainerState.save("out", model, state)          // out/checkpoint-12
 * const latest = yield* TrainerState.latest("out")                   // Option<string>
 * const resumed = yield* TrainerState.load(Option.getOrThrow(latest), model) // weights and optimizer restored
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Checkpoint, LoraAdapter, Safetensors } from "@envtrain/gpu"
import { Data, Effect, Option } from "effect"
import type { Position } from "./Dataset.js"
import type { TrainableModel } from "./internal/model.js"

/**
 * The trainer's own state at the end of an optimizer step.
 *
 * @since 0.0.0
 */
export interface State {
  readonly kind: "grpo" | "sft"
  /** Optimizer steps completed. */
  readonly globalStep: number
  readonly totalSteps: number
  /** The next generation batch to draw. */
  readonly position: Position
  /** Base seed; per-step seeds are derived from it and the step, so no other RNG state exists. */
  readonly seed: number
  /** Cumulative prompt + completion tokens seen (TRL's `num_tokens`). */
  readonly numTokens: number
  /** Micro-batches of the current generation batch not yet consumed (JSON), if any. */
  readonly pending?: unknown
  /**
   * Async GRPO: the next generation batch's index (its seeds) and the drops so far. Batches queued or in flight
   * are not kept: a resumed run regenerates them.
   */
  readonly rolloutQueue?: {
    readonly nextBatch: number
    readonly droppedBatches: number
    readonly droppedSamples: number
  }
  /** The configuration the run was started with. */
  readonly config: Readonly<Record<string, unknown>>
  readonly savedAt?: string
}

/**
 * A checkpoint could not be written or read.
 *
 * @since 0.0.0
 */
export class CheckpointStateError extends Data.TaggedError("CheckpointStateError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Checkpoint ${this.path}: ${this.problem}`
  }
}

/** File names inside a checkpoint directory. */
export const files = { state: "trainer_state.json", optimizer: "optimizer.safetensors" } as const

/** The directory name of the checkpoint after `step` optimizer steps. */
export const directoryName = (step: number): string => `checkpoint-${step}`

const fail = (path: string) => (e: { readonly message: string }) =>
  new CheckpointStateError({ path, problem: e.message })

/**
 * Writes a checkpoint of `model` and `state` under `outputDir`; returns its directory. An existing checkpoint of the
 * same step is replaced.
 *
 * @since 0.0.0
 */
export const save = Effect.fn("TrainerState.save")(function*(
  outputDir: string,
  model: TrainableModel,
  state: State
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = path.join(outputDir, directoryName(state.globalStep))
  const tmp = `${dir}.tmp`
  yield* fs.remove(tmp, { recursive: true }).pipe(Effect.ignore)
  const exported = yield* model.exportState
  const optimizer = model.exportOptimizerState === undefined ? undefined : yield* model.exportOptimizerState
  // A LoRA run's checkpoint is its adapter, as PEFT saves it (the base is unchanged).
  yield* (exported.lora !== undefined
    ? LoraAdapter.save(tmp, { config: exported.lora, tensors: exported.weights, baseModel: null })
    : Checkpoint.save(tmp, {
      config: model.config,
      tensors: exported.weights,
      tokenizer: model.tokenizer,
      chatTemplate: model.chatTemplate,
      generationConfig: model.generationConfig
    })).pipe(Effect.mapError(fail(tmp)))
  if (optimizer !== undefined) {
    yield* Safetensors.writeFile(path.join(tmp, files.optimizer), optimizer.moments).pipe(Effect.mapError(fail(tmp)))
  }
  const json = { ...state, optimizerStep: exported.optimizerStep, savedAt: new Date().toISOString() }
  yield* fs.writeFileString(path.join(tmp, files.state), JSON.stringify(json, null, 2) + "\n").pipe(
    Effect.mapError(fail(tmp))
  )
  yield* fs.remove(dir, { recursive: true }).pipe(Effect.ignore)
  yield* fs.rename(tmp, dir).pipe(Effect.mapError(fail(dir)))
  return dir
})

/**
 * The newest complete checkpoint under `outputDir` (highest step with a `trainer_state.json`), if any.
 *
 * @since 0.0.0
 */
export const latest = Effect.fn("TrainerState.latest")(function*(outputDir: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const names = yield* fs.readDirectory(outputDir).pipe(Effect.orElseSucceed(() => [] as Array<string>))
  const steps = names.flatMap((n) => {
    const m = /^checkpoint-(\d+)$/.exec(n)
    return m === null ? [] : [Number(m[1])]
  }).sort((a, b) => b - a)
  for (const step of steps) {
    const dir = path.join(outputDir, directoryName(step))
    if (yield* fs.exists(path.join(dir, files.state)).pipe(Effect.orElseSucceed(() => false))) {
      return Option.some(dir)
    }
  }
  return Option.none<string>()
})

/**
 * Reads a checkpoint's trainer state and restores the model's weights and AdamW moments from it.
 *
 * @since 0.0.0
 */
export const load = Effect.fn("TrainerState.load")(function*(dir: string, model: TrainableModel) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const text = yield* fs.readFileString(path.join(dir, files.state)).pipe(
    Effect.mapError((e) =>
      new CheckpointStateError({
        path: dir,
        problem: `no readable ${files.state} (${e.message}); pass a checkpoint-<step> directory`
      })
    )
  )
  const json = yield* Effect.try({
    try: () => JSON.parse(text) as State & { readonly optimizerStep: number },
    catch: (e) => new CheckpointStateError({ path: dir, problem: `${files.state} is not JSON (${String(e)})` })
  })
  const adapter = yield* fs.exists(path.join(dir, LoraAdapter.CONFIG_FILE)).pipe(Effect.orElseSucceed(() => false))
  const weights = adapter
    ? (yield* LoraAdapter.load(dir, model.config).pipe(Effect.mapError(fail(dir)))).tensors
    : yield* Checkpoint.loadWeights(dir, model.config).pipe(Effect.mapError(fail(dir)))
  const optimizerStep = json.optimizerStep ?? 0
  const optimizerPath = path.join(dir, files.optimizer)
  // An empty file is what checkpoints of models without optimizer export held: no moments.
  const moments = (yield* fs.exists(optimizerPath).pipe(Effect.orElseSucceed(() => false)))
    ? yield* Safetensors.readFile(optimizerPath).pipe(Effect.mapError(fail(optimizerPath)))
    : new Map<string, Safetensors.Tensor>()
  yield* model.importState({ weights, optimizerStep })
  if (moments.size > 0 && model.importOptimizerState !== undefined) {
    yield* model.importOptimizerState({ moments }).pipe(
      Effect.mapError((e) =>
        new CheckpointStateError({ path: optimizerPath, problem: `${e.problem} Resume with the same model.` })
      )
    )
  } else if (optimizerStep > 0) {
    yield* Effect.logWarning(
      moments.size === 0
        ? `${dir} holds no optimizer moments; AdamW restarts its moments at step ${optimizerStep}.`
        : `this model cannot restore optimizer state; AdamW restarts its moments at step ${optimizerStep}.`
    )
  }
  const { optimizerStep: _, ...state } = json
  return { state: state as State, optimizerStep }
})

/**
 * Removes all but the newest `keep` checkpoints (TRL's `save_total_limit`).
 *
 * @since 0.0.0
 */
export const prune = Effect.fn("TrainerState.prune")(function*(outputDir: string, keep: number) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const names = yield* fs.readDirectory(outputDir).pipe(Effect.orElseSucceed(() => [] as Array<string>))
  const steps = names.flatMap((n) => {
    const m = /^checkpoint-(\d+)$/.exec(n)
    return m === null ? [] : [Number(m[1])]
  }).sort((a, b) => b - a)
  for (const step of steps.slice(Math.max(0, keep))) {
    yield* fs.remove(path.join(outputDir, directoryName(step)), { recursive: true }).pipe(Effect.ignore)
  }
})
