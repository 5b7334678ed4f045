/**
 * The model as the trainers need it, and a plain-TypeScript implementation over `Qwen3Reference` (slow, exact;
 * used by tests and as a CPU fallback until the GPU model is plugged in through the same interface).
 */
import { Qwen3Reference } from "@envtrain/gpu"
import { LoraConfig } from "@envtrain/gpu"
import type { Checkpoint, ModelConfig, Safetensors } from "@envtrain/gpu"
import type { Completion, GenerateRequest, PolicyError } from "@envtrain/rollout/Policy"
import type { ChatTemplate } from "@envtrain/text/ChatTemplate"
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import { Data, Effect } from "effect"
import type { LossBatch, LossOptions } from "../Loss.js"

/**
 * Sequences to score or train on: row i is `prompts[i] ++ completions[i]`; per-token outputs cover the completion
 * tokens only, as `rows × length` row-major arrays (`length` = the longest completion; shorter rows are padded
 * with 0).
 */
export interface SequenceBatch {
  readonly prompts: ReadonlyArray<ReadonlyArray<number>>
  readonly completions: ReadonlyArray<ReadonlyArray<number>>
  readonly length: number
}

/** Per completion token: log_softmax(logits / temperature)[token] over the full vocabulary, and the entropy. */
export interface TokenScores {
  readonly logprobs: Float64Array
  readonly entropies: Float64Array
}

/** One optimizer update: clip the accumulated gradient's global norm (0 = off), then AdamW, then zero it. */
export interface OptimizerStep {
  readonly learningRate: number
  readonly maxGradNorm: number
  readonly beta1: number
  readonly beta2: number
  readonly epsilon: number
  readonly weightDecay: number
}

/** The AdamW step a configuration asks for at `learningRate` (GRPO's and SFT's alike). */
export const optimizerStep = (
  config: {
    readonly maxGradNorm: number
    readonly adamBeta1: number
    readonly adamBeta2: number
    readonly adamEpsilon: number
    readonly weightDecay: number
  },
  learningRate: number
): OptimizerStep => ({
  learningRate,
  maxGradNorm: config.maxGradNorm,
  beta1: config.adamBeta1,
  beta2: config.adamBeta2,
  epsilon: config.adamEpsilon,
  weightDecay: config.weightDecay
})

/**
 * What the loss needs besides the policy's logprobs (`rows × length` like {@link SequenceBatch}'s outputs), for a
 * model that computes the loss itself inside its training step. `samplerCorrection` gives the mode and bounds of
 * the sampler correction so that the model can compute it from `oldLogprobs` and `samplerLogprobs`;
 * `importanceSampling` is the same correction computed on the host.
 */
export type LossInputs = Omit<LossBatch, "rows" | "length" | "logprobs" | "entropies"> & {
  readonly samplerCorrection?: {
    readonly mode: "token_truncate" | "token_mask" | "sequence_truncate" | "sequence_mask"
    readonly clipMin: number | null
    readonly clipMax: number | null
  } | undefined
}

/**
 * LoRA on a model: PEFT's settings, and the seed of the adapter's initialisation (PEFT's: A kaiming-uniform, B
 * zero) and of its dropout masks. The base weights are frozen; the trained tensors, the optimizer state, the
 * exported state and the weights synced to policy servers are the adapter's.
 */
export interface LoraOptions {
  readonly config: LoraConfig.LoraConfig
  readonly seed: number
}

/** The adapter tensors' shapes, by envtrain's in-memory names. */
export const adapterShapes = (
  config: ModelConfig.ModelConfig,
  lora: LoraConfig.LoraConfig
): Map<string, ReadonlyArray<number>> =>
  new Map(LoraConfig.adaptedProjections(config, lora).flatMap((p) => [[p.a.name, p.a.shape], [p.b.name, p.b.shape]]))

/** The dropout seed of a LoRA run's n-th training forward (a fresh mask stream per forward). */
export const dropoutSeed = (lora: LoraOptions, n: number): number => (Math.imul(n + 1, 0x9e3779b1) ^ lora.seed) >>> 0

/**
 * Weights and the optimizer step count, for checkpoints. Tensors are f32 and named as in the HF checkpoint; with
 * LoRA, the adapter's tensors (`model.layers.{i}.….lora_A.weight`, `lora_B.weight`).
 */
export interface ModelState {
  readonly weights: Safetensors.Tensors
  /** Optimizer updates applied (AdamW's bias corrections depend on it). */
  readonly optimizerStep: number
  /** Present when `weights` is a LoRA adapter (checkpoints then hold PEFT's adapter files). */
  readonly lora?: LoraConfig.LoraConfig
}

/**
 * AdamW's moments, for checkpoints: `exp_avg.<name>` and `exp_avg_sq.<name>` (torch's names) for every parameter,
 * f32, each with its parameter's shape. The step count is {@link ModelState}'s.
 */
export interface OptimizerState {
  readonly moments: Safetensors.Tensors
}

/** Optimizer state that does not fit the model (a checkpoint of another model, or a damaged one). */
export class OptimizerStateMismatch extends Data.TaggedError("OptimizerStateMismatch")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

export const FIRST_MOMENT = "exp_avg."
export const SECOND_MOMENT = "exp_avg_sq."

/**
 * Checks a state's tensors against the trained tensors' shapes (same names, same sizes): the first problem, naming
 * the tensor, or undefined. A LoRA model's state is its adapter; a full model's, every weight.
 */
export const checkTensors = (
  shapes: ReadonlyMap<string, ReadonlyArray<number>>,
  tensors: Safetensors.Tensors
): string | undefined => {
  for (const [name, shape] of shapes) {
    const t = tensors.get(name)
    if (t === undefined) return `The model state lacks "${name}" [${shape.join(", ")}].`
    if (t.data.length !== shape.reduce((x, y) => x * y, 1)) {
      return `The model state's "${name}" has ${t.data.length} values; expected [${shape.join(", ")}].`
    }
  }
  for (const name of tensors.keys()) {
    if (!shapes.has(name)) {
      return `The model state has "${name}", which this model does not train (a LoRA state holds only the ` +
        "adapter's lora_A/lora_B tensors; a full state every weight)."
    }
  }
  return undefined
}

/**
 * Checks moments against the parameters' shapes: both moments of every parameter, with its shape, and no other
 * names. Returns the first problem, naming the moment and the parameter, or undefined.
 */
export const checkMoments = (
  shapes: ReadonlyMap<string, ReadonlyArray<number>>,
  moments: Safetensors.Tensors
): string | undefined => {
  for (const [key, t] of moments) {
    const prefix = key.startsWith(SECOND_MOMENT) ? SECOND_MOMENT : key.startsWith(FIRST_MOMENT) ? FIRST_MOMENT : ""
    const param = key.slice(prefix.length)
    const shape = shapes.get(param)
    if (prefix === "" || shape === undefined) {
      return `The optimizer state has "${key}", which is not ${FIRST_MOMENT}<name> or ${SECOND_MOMENT}<name> of a ` +
        `parameter of this model (e.g. "${FIRST_MOMENT}${shapes.keys().next().value ?? ""}").`
    }
    const expected = shape.reduce((a, b) => a * b, 1)
    if (t.data.length !== expected || t.shape.join(",") !== shape.join(",")) {
      return `The optimizer state's "${key}" has shape [${t.shape.join(", ")}] (${t.data.length} values); the ` +
        `parameter "${param}" has shape [${shape.join(", ")}].`
    }
  }
  for (const name of shapes.keys()) {
    for (const prefix of [FIRST_MOMENT, SECOND_MOMENT]) {
      if (!moments.has(prefix + name)) {
        return `The optimizer state lacks "${prefix}${name}" (the moment of parameter "${name}").`
      }
    }
  }
  return undefined
}

/**
 * What the GRPO and SFT trainers need from a model. The GPU model (`@envtrain/gpu` Qwen3) and the CPU reference
 * implement it; a failure of any method is a run-level failure (device lost), never an episode's.
 *
 * Gradients: `accumulate` adds d(Σ w·l)/dθ for per-token weights `w` chosen from the logprobs `l` of the same
 * forward pass. The GRPO trainer passes `w = d loss / d l` from `Loss.compute`, which gives exactly the gradient of
 * the loss (the loss depends on θ only through l).
 */
/**
 * Step-wise generation (a policy server's continuous batching): `start` prepares a request as a sequence, `step`
 * runs one decode step of the given sequences together and returns each one's completion when it finished at that
 * step (undefined while it runs). A sequence's tokens equal what `generate` gives for its request, whichever
 * sequences share its steps. Sequences are what `start` returned; the weights must not change while any runs.
 */
export interface StepDecoder {
  readonly start: (request: GenerateRequest) => Effect.Effect<unknown>
  readonly step: (sequences: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<Completion | undefined>>
  /** Optional: a running sequence's tokens and logprobs so far (live arrays: read them, do not keep them). */
  readonly progress?: (sequence: unknown) => {
    readonly tokenIds: ReadonlyArray<number>
    readonly logprobs: ReadonlyArray<number>
  }
}

/** A model the trainer can sample from, score and update: the CPU reference, the CPU worker and the GPU model implement it. */
export interface TrainableModel {
  /** Optional: which device runs the model, in words (printed by the CLI and the examples). */
  readonly device?: string
  /** The LoRA adapter it trains on a frozen base, if any (the trainer checks it against `Config.lora`). */
  readonly lora?: LoraConfig.LoraConfig
  readonly config: ModelConfig.ModelConfig
  readonly tokenizer: Tokenizer
  readonly chatTemplate: ChatTemplate
  readonly generationConfig: Readonly<Record<string, unknown>>
  /** Most generation requests served by one call of `generate`. */
  readonly maxBatchSize: number
  /**
   * Optional: `generate` runs in another process (policy servers), not on these weights' device, so async GRPO does
   * not serialize it with the update (in process it takes the model lock).
   */
  readonly remoteGeneration?: boolean
  /**
   * One completion per request, in order. Sampling is seeded by `sampling.seed` and the prompt length (so a turn's
   * tokens do not depend on which other requests share the batch); temperature 0 is greedy. Logprobs are the
   * sampler's processed logprobs.
   */
  readonly generate: (requests: ReadonlyArray<GenerateRequest>) => Effect.Effect<ReadonlyArray<Completion>>
  /**
   * Optional: one request at a time, failing as the Policy does (a transport failure ends only the episode that
   * asked). A model whose generation is remote (`withPolicyServers`: the servers batch concurrent requests
   * themselves) has it, and the episodes' Policy calls it instead of queueing batches for `generate`.
   */
  readonly generateEach?: (request: GenerateRequest) => Effect.Effect<Completion, PolicyError>
  /** Optional: step-wise generation on these weights ({@link StepDecoder}); the CPU reference model has it. */
  readonly decoder?: StepDecoder
  /** Logprobs and entropies of the completion tokens under the current weights (no gradient). */
  readonly score: (batch: SequenceBatch, temperature: number) => Effect.Effect<TokenScores>
  /** Forward, then backward of Σ w·l with `w = weightsFor(scores)`, added to the gradient buffers. */
  readonly accumulate: (
    batch: SequenceBatch,
    temperature: number,
    weightsFor: (scores: TokenScores) => ArrayLike<number>
  ) => Effect.Effect<TokenScores>
  /**
   * Optional: forward, the GRPO loss (`Loss.compute`'s) and backward inside the model's own step, added to the
   * gradient buffers. Returns the loss and metrics when computed now, or undefined when they come with `step`
   * (the GPU model computes them in its step program, with no host round trip between forward and backward).
   */
  readonly accumulateLoss?: (
    batch: SequenceBatch,
    temperature: number,
    inputs: LossInputs,
    options: LossOptions
  ) => Effect.Effect<{ readonly loss: number; readonly metrics: Record<string, number> } | undefined>
  /**
   * Applies the accumulated gradient; returns the pre-clip global gradient norm, and the summed loss and the
   * loss-side metrics (averaged over micro-batches) of micro-batches whose `accumulateLoss` deferred them.
   */
  readonly step: (options: OptimizerStep) => Effect.Effect<{
    readonly gradNorm: number
    readonly loss?: number
    readonly metrics?: Record<string, number>
  }>
  readonly exportState: Effect.Effect<ModelState>
  /** Sets the weights and the step count; the optimizer moments restart at zero (see `importOptimizerState`). */
  readonly importState: (state: ModelState) => Effect.Effect<void>
  /**
   * The AdamW moments. A model without it checkpoints weights and step count only, and a resumed run restarts
   * the moments; with it, `TrainerState` saves them and a resume continues exactly.
   */
  readonly exportOptimizerState?: Effect.Effect<OptimizerState>
  /** Restores moments from `exportOptimizerState` (after `importState`); nothing changes when they do not fit. */
  readonly importOptimizerState?: (state: OptimizerState) => Effect.Effect<void, OptimizerStateMismatch>
  /** A frozen copy of the current weights (the KL reference model). */
  readonly frozenCopy: Effect.Effect<TrainableModel>
}

const toRecord = (tensors: Safetensors.Tensors): Qwen3Reference.Weights => {
  const out: Qwen3Reference.Weights = {}
  for (const [name, t] of tensors) out[name] = Float32Array.from(t.data)
  return out
}

const toTensors = (
  weights: Qwen3Reference.Weights,
  shapes: ReadonlyMap<string, ReadonlyArray<number>>,
  prefix = ""
): Map<string, Safetensors.Tensor> => {
  const out = new Map<string, Safetensors.Tensor>()
  for (const [name, data] of Object.entries(weights)) {
    out.set(prefix + name, { shape: shapes.get(name) ?? [data.length], data: Float32Array.from(data) })
  }
  return out
}

/**
 * The CPU reference model: `Qwen3Reference` forward/backward in f32 with f64 accumulation, AdamW and clipping as
 * torch. Training runs sequences one at a time; generation decodes all requests of a call together
 * (`Qwen3Reference.generateBatch`). Speeds: bench/results/model-cpu-reference.md.
 */
export const cpuModel = (
  model: Checkpoint.Model,
  options: { readonly maxBatchSize?: number; readonly lora?: LoraOptions | undefined } = {}
): TrainableModel => {
  const config = model.config
  const lora = options.lora
  // With LoRA `weights` is the frozen base and `adapters` the trained tensors; else `weights` is trained.
  let weights = toRecord(model.tensors)
  let adapters = lora === undefined ? undefined : Qwen3Reference.initAdapters(config, lora.config, { seed: lora.seed })
  const trained = () => adapters ?? weights
  const shapes = lora === undefined
    ? new Map<string, ReadonlyArray<number>>([...model.tensors].map(([n, t]) => [n, t.shape]))
    : adapterShapes(config, lora.config)
  let adam = Qwen3Reference.makeAdamWState(trained())
  let grads: Record<string, Float64Array> | undefined
  const V = config.vocab_size
  let forwards = 0
  // Training forwards draw dropout masks (a new seed each); scoring and generation run without dropout.
  const loraRun = (training: boolean): Qwen3Reference.Lora | undefined =>
    lora === undefined || adapters === undefined ? undefined : training
      ? { config: lora.config, adapters, dropoutSeed: dropoutSeed(lora, forwards++) }
      : { config: lora.config, adapters }

  const forwardRow = (
    prompt: ReadonlyArray<number>,
    completion: ReadonlyArray<number>,
    temperature: number,
    training = false
  ) => {
    const tokens = [...prompt, ...completion]
    const run = loraRun(training)
    const fwd = Qwen3Reference.forward(
      config,
      weights,
      { tokens, batch: 1, seqLen: tokens.length },
      run === undefined ? {} : { lora: run }
    )
    const targets = new Int32Array(tokens.length).fill(-1)
    // Position t predicts token t+1: completion token c sits at prompt.length + c and is predicted one earlier.
    for (let c = 0; c < completion.length; c++) targets[prompt.length + c - 1] = completion[c]
    const scores = Qwen3Reference.tokenLogprobs(fwd.logits, V, targets, temperature)
    return { fwd, targets, scores }
  }

  const score = (batch: SequenceBatch, temperature: number) =>
    Effect.sync((): TokenScores => {
      const rows = batch.prompts.length
      const T = batch.length
      const logprobs = new Float64Array(rows * T)
      const entropies = new Float64Array(rows * T)
      for (let i = 0; i < rows; i++) {
        const p = batch.prompts[i]
        const c = batch.completions[i]
        if (c.length === 0) continue
        const { scores } = forwardRow(p, c, temperature)
        for (let t = 0; t < c.length; t++) {
          logprobs[i * T + t] = scores.logprobs[p.length + t - 1]
          entropies[i * T + t] = scores.entropy[p.length + t - 1]
        }
      }
      return { logprobs, entropies }
    })

  const self: TrainableModel = {
    ...(lora === undefined ? {} : { lora: lora.config }),
    config,
    tokenizer: model.tokenizer,
    chatTemplate: model.chatTemplate,
    generationConfig: model.generationConfig,
    maxBatchSize: options.maxBatchSize ?? 64,
    generate: (requests) =>
      Effect.sync(() => {
        // All requests decode together (one batched matmul per step); each gets what a lone generate gives.
        const outs = Qwen3Reference.generateBatch(
          config,
          weights,
          requests.map((request) => {
            const s = request.sampling
            return {
              prompt: request.promptIds,
              options: {
                temperature: s.temperature ?? 1,
                ...(s.topK !== undefined && s.topK > 0 ? { topK: s.topK } : {}),
                ...(s.topP !== undefined ? { topP: s.topP } : {}),
                ...(s.minP !== undefined ? { minP: s.minP } : {}),
                ...(s.repetitionPenalty !== undefined ? { repetitionPenalty: s.repetitionPenalty } : {}),
                maxNewTokens: Math.max(0, s.maxTokens),
                stopTokens: s.stopTokenIds ?? [],
                seed: s.seed ?? 0,
                sequence: request.promptIds.length
              }
            }
          }),
          loraRun(false)
        )
        return outs.map((out, i): Completion => ({
          tokenIds: out.tokens,
          logprobs: (requests[i].sampling.temperature ?? 1) === 0 ? out.logprobs : out.sampledLogprobs,
          finishReason: out.finishReason
        }))
      }),
    score,
    accumulate: (batch, temperature, weightsFor) =>
      Effect.sync(() => {
        const rows = batch.prompts.length
        const T = batch.length
        const runs = batch.prompts.map((p, i) =>
          batch.completions[i].length === 0 ? undefined : forwardRow(p, batch.completions[i], temperature, true)
        )
        const logprobs = new Float64Array(rows * T)
        const entropies = new Float64Array(rows * T)
        runs.forEach((run, i) => {
          if (run === undefined) return
          const p = batch.prompts[i].length
          for (let t = 0; t < batch.completions[i].length; t++) {
            logprobs[i * T + t] = run.scores.logprobs[p + t - 1]
            entropies[i * T + t] = run.scores.entropy[p + t - 1]
          }
        })
        const scores = { logprobs, entropies }
        const w = weightsFor(scores)
        if (grads === undefined) {
          grads = {}
          for (const [name, data] of Object.entries(trained())) grads[name] = new Float64Array(data.length)
        }
        runs.forEach((run, i) => {
          if (run === undefined) return
          const p = batch.prompts[i].length
          const lossWeights = new Float64Array(run.targets.length)
          let any = false
          for (let t = 0; t < batch.completions[i].length; t++) {
            lossWeights[p + t - 1] = w[i * T + t]
            if (w[i * T + t] !== 0) any = true
          }
          if (!any) return
          const g = Qwen3Reference.backward(config, weights, run.fwd, run.targets, lossWeights, temperature)
          for (const [name, gw] of Object.entries(g.grads)) {
            const acc = grads![name]
            for (let j = 0; j < gw.length; j++) acc[j] += gw[j]
          }
        })
        return scores
      }),
    step: (o) =>
      Effect.sync(() => {
        const g: Qwen3Reference.Weights = {}
        for (const [name, data] of Object.entries(trained())) {
          g[name] = grads === undefined ? new Float32Array(data.length) : Float32Array.from(grads[name])
        }
        // maxGradNorm 0 disables clipping: an infinite bound measures the norm and scales by 1.
        const { totalNorm } = Qwen3Reference.clipGradNorm(g, o.maxGradNorm > 0 ? o.maxGradNorm : Infinity)
        Qwen3Reference.adamWStep(trained(), g, adam, {
          lr: o.learningRate,
          beta1: o.beta1,
          beta2: o.beta2,
          eps: o.epsilon,
          weightDecay: o.weightDecay
        })
        grads = undefined
        return { gradNorm: totalNorm }
      }),
    exportState: Effect.sync((): ModelState => ({
      weights: toTensors(trained(), shapes),
      optimizerStep: adam.step,
      ...(lora === undefined ? {} : { lora: lora.config })
    })),
    importState: (state) =>
      Effect.sync(() => {
        const problem = checkTensors(shapes, state.weights)
        if (problem !== undefined) throw new Error(problem)
        if (adapters === undefined) weights = toRecord(state.weights)
        else adapters = toRecord(state.weights)
        adam = { ...Qwen3Reference.makeAdamWState(trained()), step: state.optimizerStep }
        grads = undefined
      }),
    exportOptimizerState: Effect.sync((): OptimizerState => ({
      moments: new Map([...toTensors(adam.m, shapes, FIRST_MOMENT), ...toTensors(adam.v, shapes, SECOND_MOMENT)])
    })),
    importOptimizerState: (state) =>
      Effect.suspend(() => {
        const problem = checkMoments(shapes, state.moments)
        if (problem !== undefined) return Effect.fail(new OptimizerStateMismatch({ problem }))
        for (const name of Object.keys(trained())) {
          adam.m[name].set(state.moments.get(FIRST_MOMENT + name)!.data)
          adam.v[name].set(state.moments.get(SECOND_MOMENT + name)!.data)
        }
        return Effect.void
      }),
    // With LoRA the frozen copy (the KL reference) is the base with the adapter disabled, as PEFT's reference is.
    frozenCopy: Effect.sync(() =>
      lora === undefined
        ? cpuModel({ ...model, tensors: toTensors(weights, shapes) }, options)
        : cpuModel(model, { ...options, lora: undefined })
    )
  }
  return self
}

/** Converts row-major ragged completions into the padded `rows × length` layout. */
export const batchOf = (
  prompts: ReadonlyArray<ReadonlyArray<number>>,
  completions: ReadonlyArray<ReadonlyArray<number>>
): SequenceBatch => ({
  prompts,
  completions,
  length: completions.reduce((m, c) => Math.max(m, c.length), 0)
})
