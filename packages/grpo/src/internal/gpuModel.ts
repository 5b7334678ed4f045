/**
 * The GPU model (`@envtrain/gpu` Qwen3 + Generation) as a {@link TrainableModel}.
 *
 * GRPO (`accumulateLoss`): each micro-batch's loss inputs (mask, advantages, old / reference / sampler logprobs,
 * the generation batch's token count) are packed into the model's layout and the optimizer step runs every
 * micro-batch in Qwen3's "grpo" mode: forward, the loss kernel (`GrpoLoss`: every supported loss type, clipping,
 * KL, sampler correction, per-row reductions, d loss / d logprob) and backward, then clipping and AdamW, all in
 * the recorded step program; only the loss and its metrics come back, with `step`. Settings the kernel does not
 * compute (luspo, vespo, the top-entropy mask), and micro-batches of more rows than the model's `batch` (the
 * kernel's per-micro-batch normalisers would split), fall back to the weighted path below with `Loss.compute`.
 *
 * Weighted (`accumulate`, SFT and the fallback): each micro-batch is scored (`logprobs`), the caller turns the
 * logprobs into per-token coefficients, and the step runs in "weighted" mode. The weights do not change between
 * the scoring pass and the step, so this is the exact gradient too, at the cost of one extra forward.
 *
 * Checkpoints hold the AdamW moments too (downloaded per shard by `Qwen3.optimizerState`), so a resumed GPU run
 * continues exactly. Device failures are defects.
 *
 * LoRA (`lora`): the checkpoint is the frozen base and the adapter (PEFT's initialisation from the seed) is what
 * trains, on the device as `Qwen3` does it; each training micro-batch draws fresh dropout masks. The exported
 * state, the optimizer state and the weights synced to policy servers are the adapter's, and the KL reference is
 * the base without the adapter (as PEFT's disabled adapter is): the same device model scored with its adapter off.
 */
import { Arena, Generation, GrpoLoss, Qwen3, Qwen3Reference } from "@envtrain/gpu"
import type { Checkpoint, Gpu } from "@envtrain/gpu"
import type { Completion } from "@envtrain/rollout/Policy"
import { Effect, type Scope } from "effect"
import * as Loss from "../Loss.js"
import {
  checkMoments,
  dropoutSeed,
  FIRST_MOMENT,
  type LoraOptions,
  type LossInputs,
  type ModelState,
  type OptimizerState,
  OptimizerStateMismatch,
  SECOND_MOMENT,
  type SequenceBatch,
  type TokenScores,
  type TrainableModel
} from "./model.js"

/** Options of the GPU model (`Trainer.gpuModel`): its batch shape and the run's temperature. */
export interface GpuModelOptions {
  /** Rows of a training / scoring batch (use perDeviceTrainBatchSize). */
  readonly batch: number
  /** Longest prompt + completion in tokens. */
  readonly seq: number
  /** The sampling temperature of the run (the logprobs are of softmax(logits / temperature)). */
  readonly temperature: number
  /** Concurrent generations (KV-cache slots); default 16. */
  readonly slots?: number
  /** Also load a frozen copy as the KL reference (needed when beta > 0). */
  readonly reference?: boolean
  /** Train a LoRA adapter on the frozen checkpoint (its config and the seed of its init and dropout). */
  readonly lora?: LoraOptions | undefined
}

const rowsOf = (batch: SequenceBatch, from: number, to: number) => ({
  prompts: batch.prompts.slice(from, to),
  completions: batch.completions.slice(from, to)
})

const pack = (
  shape: { readonly batch: number; readonly seq: number },
  part: {
    readonly prompts: ReadonlyArray<ReadonlyArray<number>>
    readonly completions: ReadonlyArray<ReadonlyArray<number>>
  }
) => {
  const tokens = new Int32Array(shape.batch * shape.seq)
  const targets = new Int32Array(shape.batch * shape.seq).fill(-1)
  part.prompts.forEach((p, i) => {
    const c = part.completions[i]
    if (p.length + c.length > shape.seq) {
      throw new Error(`a sequence of ${p.length + c.length} tokens does not fit the GPU model's seq ${shape.seq}`)
    }
    tokens.set(p, i * shape.seq)
    tokens.set(c, i * shape.seq + p.length)
    for (let t = 0; t < c.length; t++) targets[i * shape.seq + p.length + t - 1] = c[t]
  })
  return { tokens, targets }
}

/** The kernel's settings for the trainer's loss options, or undefined when the kernel does not compute them. */
const deviceSettings = (options: Loss.LossOptions, inputs: LossInputs): GrpoLoss.Settings | undefined => {
  const lossType = options.lossType
  if (GrpoLoss.unsupported(options) !== undefined || lossType === "luspo" || lossType === "vespo") return undefined
  return {
    lossType,
    epsilon: options.epsilon,
    epsilonHigh: options.epsilonHigh,
    delta: options.delta,
    beta: options.beta,
    useBiasCorrectionKl: options.useBiasCorrectionKl,
    importanceSamplingLevel: options.importanceSamplingLevel,
    sapoTemperaturePos: options.sapoTemperaturePos,
    sapoTemperatureNeg: options.sapoTemperatureNeg,
    offPolicyMaskThreshold: options.offPolicyMaskThreshold,
    gradientAccumulationSteps: options.gradientAccumulationSteps,
    ...(options.stepsPerGeneration === undefined ? {} : { stepsPerGeneration: options.stepsPerGeneration }),
    maxCompletionLength: options.maxCompletionLength,
    mode: options.mode ?? "train",
    numProcesses: options.numProcesses ?? 1,
    ...(inputs.samplerCorrection === undefined ? {} : { samplerCorrection: inputs.samplerCorrection })
  }
}

/** Rows × length values (completion token t of row i at i·T + t) placed where the model has their logprobs. */
const place = (
  shape: { readonly batch: number; readonly seq: number },
  part: {
    readonly prompts: ReadonlyArray<ReadonlyArray<number>>
    readonly completions: ReadonlyArray<ReadonlyArray<number>>
  },
  from: number,
  T: number,
  values: ArrayLike<number> | undefined
) => {
  if (values === undefined) return undefined
  const out = new Float32Array(shape.batch * shape.seq)
  part.prompts.forEach((p, i) => {
    for (let t = 0; t < part.completions[i].length; t++) {
      out[i * shape.seq + p.length + t - 1] = values[(from + i) * T + t]
    }
  })
  return out
}

const scorer =
  (model: Qwen3.Qwen3Model, shape: { readonly batch: number; readonly seq: number }, scoring?: Qwen3.LogprobsOptions) =>
  (batch: SequenceBatch): Effect.Effect<TokenScores> =>
    Effect.gen(function*() {
      const rows = batch.prompts.length
      const T = batch.length
      const logprobs = new Float64Array(rows * T)
      const entropies = new Float64Array(rows * T)
      for (let s = 0; s < rows; s += shape.batch) {
        const part = rowsOf(batch, s, s + shape.batch)
        const out = yield* model.logprobs(pack(shape, part), scoring).pipe(Effect.orDie)
        part.prompts.forEach((p, i) => {
          for (let t = 0; t < part.completions[i].length; t++) {
            logprobs[(s + i) * T + t] = out.logprobs[i * shape.seq + p.length + t - 1]
            entropies[(s + i) * T + t] = out.entropy[i * shape.seq + p.length + t - 1]
          }
        })
      }
      return { logprobs, entropies }
    })

export const gpuModel = (
  checkpoint: Checkpoint.Model,
  options: GpuModelOptions
): Effect.Effect<TrainableModel, Qwen3.MakeError | Generation.GenerationError, Gpu.Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const shape = { batch: options.batch, seq: options.seq }
    const lora = options.lora
    const model = yield* Qwen3.make(checkpoint, {
      ...shape,
      temperature: options.temperature,
      generation: { slots: options.slots ?? 16, capacity: options.seq },
      ...(lora === undefined ? {} : {
        lora: {
          config: lora.config,
          adapters: new Map(
            Object.entries(Qwen3Reference.initAdapters(checkpoint.config, lora.config, { seed: lora.seed })).map((
              [name, data]
            ) => [name, { data }])
          )
        }
      })
    })
    // Training micro-batches draw fresh dropout masks (the n-th forward's seed, as the CPU models do).
    let trainingForwards = 0
    const withDropout = (b: Qwen3.TrainBatch): Qwen3.TrainBatch =>
      lora === undefined ? b : { ...b, dropoutSeed: dropoutSeed(lora, trainingForwards++) }
    const generator = yield* Generation.make(model)
    // The KL reference: with LoRA the same model with its adapter off (no second copy of the base), else a frozen
    // copy of the starting weights.
    const frozen = options.reference === true && lora === undefined
      ? yield* Qwen3.make(checkpoint, { ...shape, temperature: options.temperature, trainable: false })
      : undefined
    let pending: Array<Qwen3.TrainBatch> = []
    // Micro-batches for the "grpo" step mode and the settings they were packed for.
    let pendingLoss: Array<Qwen3.TrainBatch> = []
    let lossSettings: GrpoLoss.Settings | undefined
    let optimizerStep = 0
    // The parameters as the device model lays them out (the names its optimizer state uses).
    const shapes = new Map(
      [...model.arena.plan.tensors.values()].flatMap((t) =>
        t.group === Arena.PARAM ? [[t.name.slice(Arena.PARAM.length + 1), t.shape] as const] : []
      )
    )
    const score = scorer(model, shape)
    const checkTemperature = (temperature: number) =>
      temperature === options.temperature ? Effect.void : Effect.dieMessage(
        `the GPU model computes logprobs at temperature ${options.temperature}, asked for ${temperature}; make it ` +
          `with the run's temperature`
      )
    const frozenModel = (m: Qwen3.Qwen3Model, adapterOff: boolean): TrainableModel => {
      // The frozen model has no optimizer (checkpointing it would save the policy's state) and no adapter.
      const { exportOptimizerState: _e, importOptimizerState: _i, lora: _l, ...rest } = self
      const scoreFrozen = scorer(m, shape, adapterOff ? { adapter: false } : undefined)
      return {
        ...rest,
        score: (batch, temperature) => Effect.zipRight(checkTemperature(temperature), scoreFrozen(batch)),
        accumulate: () => Effect.dieMessage("the reference model is frozen"),
        accumulateLoss: () => Effect.dieMessage("the reference model is frozen"),
        step: () => Effect.dieMessage("the reference model is frozen"),
        exportState: adapterOff
          ? Effect.succeed({ weights: checkpoint.tensors, optimizerStep: 0 })
          : Effect.map(m.weights.pipe(Effect.orDie), (weights): ModelState => ({ weights, optimizerStep: 0 })),
        importState: (state) =>
          adapterOff
            ? Effect.dieMessage("the KL reference of a LoRA run is its frozen base: it takes no weights")
            : m.setWeights(state.weights).pipe(Effect.orDie)
      }
    }
    const self: TrainableModel = {
      ...(lora === undefined ? {} : { lora: lora.config }),
      config: checkpoint.config,
      tokenizer: checkpoint.tokenizer,
      chatTemplate: checkpoint.chatTemplate,
      generationConfig: checkpoint.generationConfig,
      maxBatchSize: options.slots ?? 16,
      generate: (requests) =>
        Effect.forEach(requests, (r) => {
          const s = r.sampling
          return generator.generate({
            prompt: r.promptIds,
            maxNewTokens: Math.max(0, s.maxTokens),
            stopTokens: s.stopTokenIds ?? [],
            seed: s.seed ?? 0,
            sequence: r.promptIds.length,
            temperature: s.temperature ?? 1,
            ...(s.topK !== undefined && s.topK > 0 ? { topK: s.topK } : {}),
            ...(s.topP !== undefined ? { topP: s.topP } : {}),
            ...(s.minP !== undefined ? { minP: s.minP } : {}),
            ...(s.repetitionPenalty !== undefined ? { repetitionPenalty: s.repetitionPenalty } : {})
          }).pipe(
            Effect.map((out): Completion => ({
              tokenIds: out.tokens,
              logprobs: (s.temperature ?? 1) === 0 ? out.logprobs : out.sampledLogprobs,
              finishReason: out.finishReason
            }))
          )
        }, { concurrency: "unbounded" }).pipe(Effect.orDie),
      score: (batch, temperature) => Effect.zipRight(checkTemperature(temperature), score(batch)),
      accumulate: (batch, temperature, weightsFor) =>
        Effect.gen(function*() {
          yield* checkTemperature(temperature)
          if (pendingLoss.length > 0) {
            return yield* Effect.dieMessage(
              "one optimizer step cannot mix weighted (accumulate) and GRPO micro-batches"
            )
          }
          const scores = yield* score(batch)
          const w = weightsFor(scores)
          const T = batch.length
          for (let s = 0; s < batch.prompts.length; s += shape.batch) {
            const part = rowsOf(batch, s, s + shape.batch)
            const packed = pack(shape, part)
            const coef = new Float32Array(shape.batch * shape.seq)
            part.prompts.forEach((p, i) => {
              for (let t = 0; t < part.completions[i].length; t++) {
                coef[i * shape.seq + p.length + t - 1] = w[(s + i) * T + t]
              }
            })
            pending.push(withDropout({ ...packed, coef }))
          }
          return scores
        }),
      accumulateLoss: (batch, temperature, inputs, options) =>
        Effect.gen(function*() {
          yield* checkTemperature(temperature)
          // The kernel normalises per device micro-batch: a trainer micro-batch of more rows than the model's
          // batch (split over several) keeps the exact host path.
          const settings = batch.prompts.length > shape.batch ? undefined : deviceSettings(options, inputs)
          if (settings === undefined) {
            // Not in the kernel: score, Loss.compute on the host, and the weighted step.
            let result: Loss.LossResult | undefined
            yield* self.accumulate(batch, temperature, (scores) => {
              result = Loss.compute({
                ...inputs,
                rows: batch.prompts.length,
                length: batch.length,
                logprobs: scores.logprobs,
                entropies: scores.entropies
              }, options)
              return result.gradient
            })
            return { loss: result!.loss, metrics: result!.metrics }
          }
          if (pending.length > 0) {
            return yield* Effect.dieMessage(
              "one optimizer step cannot mix weighted (accumulate) and GRPO micro-batches"
            )
          }
          lossSettings = settings
          const T = batch.length
          for (let s = 0; s < batch.prompts.length; s += shape.batch) {
            const part = rowsOf(batch, s, s + shape.batch)
            const at = (values: ArrayLike<number> | undefined) => place(shape, part, s, T, values)
            pendingLoss.push(withDropout({
              ...pack(shape, part),
              coef: new Float32Array(0),
              grpo: {
                rows: part.prompts.length,
                mask: at(inputs.mask)!,
                advantages: Array.from(inputs.advantages).slice(s, s + part.prompts.length),
                old: at(inputs.oldLogprobs),
                ref: at(inputs.refLogprobs),
                sampler: at(inputs.samplerLogprobs),
                numItemsInBatch: inputs.numItemsInBatch
              }
            }))
          }
          return undefined
        }),
      step: (o) =>
        Effect.gen(function*() {
          optimizerStep += 1
          const scalars = {
            lr: o.learningRate,
            step: optimizerStep,
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.epsilon,
            weightDecay: o.weightDecay,
            maxGradNorm: o.maxGradNorm
          }
          if (pendingLoss.length > 0) {
            const result = yield* model.step(pendingLoss, scalars, { mode: "grpo", grpo: lossSettings! }).pipe(
              Effect.orDie
            )
            pendingLoss = []
            return { gradNorm: result.gradNorm, loss: result.grpo!.loss, metrics: result.grpo!.metrics }
          }
          const result = yield* model.step(pending, scalars, { mode: "weighted" }).pipe(Effect.orDie)
          pending = []
          return { gradNorm: result.gradNorm }
        }),
      exportState: Effect.map(model.weights.pipe(Effect.orDie), (weights): ModelState => ({
        weights,
        optimizerStep,
        ...(lora === undefined ? {} : { lora: lora.config })
      })),
      importState: (state) =>
        Effect.gen(function*() {
          yield* model.setWeights(state.weights).pipe(Effect.orDie)
          optimizerStep = state.optimizerStep
          yield* model.resetOptimizerState(optimizerStep).pipe(Effect.orDie)
          pending = []
          pendingLoss = []
        }),
      exportOptimizerState: Effect.map(model.optimizerState.pipe(Effect.orDie), (state): OptimizerState => {
        const moments = new Map<string, { readonly shape: ReadonlyArray<number>; readonly data: Float32Array }>()
        for (const [prefix, group] of [[FIRST_MOMENT, state.m], [SECOND_MOMENT, state.v]] as const) {
          for (const [name, data] of group) {
            moments.set(prefix + name, { shape: shapes.get(name) ?? [data.length], data })
          }
        }
        return { moments }
      }),
      importOptimizerState: (state) =>
        Effect.gen(function*() {
          const problem = checkMoments(shapes, state.moments)
          if (problem !== undefined) return yield* new OptimizerStateMismatch({ problem })
          const group = (prefix: string) =>
            new Map([...shapes.keys()].map((n) => [n, state.moments.get(prefix + n)!.data]))
          yield* model.setOptimizerState({ step: optimizerStep, m: group(FIRST_MOMENT), v: group(SECOND_MOMENT) }).pipe(
            Effect.mapError((e) => new OptimizerStateMismatch({ problem: e.message }))
          )
        }),
      frozenCopy: options.reference !== true
        ? Effect.dieMessage("make the GPU model with reference: true to train with beta > 0")
        // Made when asked: it copies this model's fields (`self` is defined by then).
        : Effect.sync(() => frozen === undefined ? frozenModel(model, true) : frozenModel(frozen, false))
    }
    return self
  })
