/**
 * The CPU device's model (`@envtrain/gpu` CpuModel: f32 kernels over a preallocated workspace, matmuls on a Gemm
 * route) as a {@link TrainableModel}, with the reference model's multi-turn KV-cache reuse and step-wise decoding.
 *
 * Training and scoring pack the sequences of a batch into one packed row per pass (positions restart at each
 * sequence; attention never crosses them), at most `maxTokensPerPass` tokens per pass, so every projection is one
 * large matmul. `accumulate` needs all the batch's logprobs before any backward (the weights depend on them): with
 * one pass it runs forward, weights, backward; with several it scores every pass first and runs each forward again
 * before its backward.
 */
import { type Checkpoint, CpuModel, type Gemm, Qwen3Reference, type Safetensors } from "@envtrain/gpu"
import { Effect } from "effect"
import { type DecodeEngine, withKvReuse } from "./cachedModel.js"
import {
  adapterShapes,
  checkMoments,
  checkTensors,
  dropoutSeed,
  FIRST_MOMENT,
  type LoraOptions,
  type ModelState,
  type OptimizerState,
  OptimizerStateMismatch,
  SECOND_MOMENT,
  type SequenceBatch,
  type TokenScores,
  type TrainableModel
} from "./model.js"

/** Options of {@link deviceModel}. */
export interface DeviceModelOptions {
  readonly gemm: Gemm.Gemm
  /** Most generation requests served by one call of `generate`. Default 64. */
  readonly maxBatchSize?: number
  /**
   * Most tokens in one forward/backward pass (bounds the activations' memory). Default: what fits 2 GiB of
   * activations and logits for this config, between 256 and 8192.
   */
  readonly maxTokensPerPass?: number
  /**
   * Recompute each decoder layer's activations in the backward (TRL's `gradient_checkpointing`): the same
   * gradients, one layer's activations held instead of all; the default pass size grows accordingly.
   */
  readonly gradientCheckpointing?: boolean | undefined
  /**
   * The element-wise kernels (`CpuModel.Options.elementwise`): default WebAssembly SIMD where the model fits its
   * 4 GiB memory. A 0.6B-parameter model's base alone is 2.4 GB, leaving too little for long passes: use "js".
   */
  readonly elementwise?: "wasm-simd" | "js" | undefined
  /** Train a LoRA adapter on the frozen base (only the adapter gets gradients and AdamW moments). */
  readonly lora?: LoraOptions | undefined
  /** Never trained (the KL reference): no gradients or optimizer moments are allocated. */
  readonly frozen?: boolean | undefined
  /**
   * How a frozen base (with `lora`, or `frozen`) holds its matrices (`CpuModel.Options.frozenDtype`): `bf16` halves
   * their memory, `f32` keeps them as loaded. Default: bf16 where that is lossless — a frozen base whose every
   * weight is a bf16 value already (a bf16 checkpoint, widened on load) — else f32. Asking for bf16 on f32 weights
   * rounds them to nearest even.
   */
  readonly frozenDtype?: "f32" | "bf16" | undefined
}

interface Pass {
  /** Rows of the batch in this pass, in order. */
  readonly rows: ReadonlyArray<number>
  readonly tokens: Int32Array
  readonly positions: Int32Array
  readonly targets: Int32Array
  /** Where row r's completion token t sits: packed index of the position predicting it. */
  readonly offsets: ReadonlyArray<number>
}

const plan = (batch: SequenceBatch, maxTokens: number): ReadonlyArray<Pass> => {
  const passes: Array<Pass> = []
  let rows: Array<number> = []
  let count = 0
  const flush = () => {
    if (rows.length === 0) return
    const tokens = new Int32Array(count)
    const positions = new Int32Array(count)
    const targets = new Int32Array(count).fill(-1)
    const offsets: Array<number> = []
    let at = 0
    for (const i of rows) {
      const p = batch.prompts[i]
      const c = batch.completions[i]
      for (let t = 0; t < p.length; t++) {
        tokens[at + t] = p[t]
        positions[at + t] = t
      }
      for (let t = 0; t < c.length; t++) {
        tokens[at + p.length + t] = c[t]
        positions[at + p.length + t] = p.length + t
        // Position t predicts token t+1: completion token t is predicted at p.length + t − 1.
        targets[at + p.length + t - 1] = c[t]
      }
      offsets.push(at + p.length - 1)
      at += p.length + c.length
    }
    passes.push({ rows, tokens, positions, targets, offsets })
    rows = []
    count = 0
  }
  batch.prompts.forEach((p, i) => {
    const c = batch.completions[i]
    if (c.length === 0) return
    if (p.length === 0) throw new Error(`Row ${i} has an empty prompt: a completion needs at least one prompt token.`)
    const n = p.length + c.length
    if (count > 0 && count + n > maxTokens) flush()
    rows.push(i)
    count += n
  })
  flush()
  return passes
}

/** f32 values a forward keeps per token (every layer's activations, the logits) and the backward's scratch. */
const valuesPerToken = (c: Checkpoint.Model["config"], recompute: boolean) => {
  const q = c.num_attention_heads * c.head_dim
  const kv = c.num_key_value_heads * c.head_dim
  const layer = 6 * c.hidden_size + 4 * q + 5 * kv + 3 * c.intermediate_size + 4 + 2 * c.num_attention_heads
  // Recomputation keeps every layer's input and one layer's activations.
  const layers = recompute ? c.num_hidden_layers * c.hidden_size + layer : c.num_hidden_layers * layer
  return layers + 4 * c.hidden_size + c.vocab_size + 3 * c.intermediate_size + 3 * q + 2 * kv
}

const defaultTokensPerPass = (c: Checkpoint.Model["config"], recompute: boolean) =>
  Math.max(256, Math.min(8192, Math.floor(2 ** 31 / (4 * valuesPerToken(c, recompute)))))

/** Whether every weight is exactly a bf16 value (its f32 bits' low half zero), as a bf16 checkpoint's are. */
const allBf16 = (tensors: Safetensors.Tensors) => {
  for (const t of tensors.values()) {
    const bits = new Uint32Array(t.data.buffer, t.data.byteOffset, t.data.length)
    for (let i = 0; i < bits.length; i++) if ((bits[i] & 0xffff) !== 0) return false
  }
  return true
}

const record = (tensors: Safetensors.Tensors): Record<string, Float32Array> => {
  const out: Record<string, Float32Array> = {}
  for (const [name, t] of tensors) out[name] = t.data instanceof Float32Array ? t.data : Float32Array.from(t.data)
  return out
}

/**
 * The CPU device's model on `options.gemm`.
 *
 * @since 0.0.0
 */
export const deviceModel = (checkpoint: Checkpoint.Model, options: DeviceModelOptions): TrainableModel => {
  const config = checkpoint.config
  const V = config.vocab_size
  const gradientCheckpointing = options.gradientCheckpointing ?? false
  const maxTokens = options.maxTokensPerPass ?? defaultTokensPerPass(config, gradientCheckpointing)
  const lora = options.lora
  // The trained tensors' shapes: the adapter's with LoRA, else every weight's.
  const shapes = lora === undefined
    ? new Map<string, ReadonlyArray<number>>([...checkpoint.tensors].map(([n, t]) => [n, t.shape]))
    : adapterShapes(config, lora.config)
  const frozenBase = lora !== undefined || options.frozen === true
  const frozenDtype = options.frozenDtype ?? (frozenBase && allBf16(checkpoint.tensors) ? "bf16" : "f32")
  const dev = CpuModel.make(
    config,
    record(checkpoint.tensors),
    options.gemm,
    {
      gradientCheckpointing,
      frozen: options.frozen === true,
      frozenDtype,
      ...(options.elementwise === undefined ? {} : { elementwise: options.elementwise }),
      ...(lora === undefined ? {} : {
        lora: { config: lora.config, adapters: Qwen3Reference.initAdapters(config, lora.config, { seed: lora.seed }) }
      })
    }
  )
  // Training forwards draw fresh dropout masks; a pass run twice (scored, then again before its backward) the same.
  let trainingForwards = 0
  const seedFor = (pass: number) => lora === undefined ? undefined : dropoutSeed(lora, trainingForwards + pass)

  const tensorsOf = (source: CpuModel.Weights, prefix = ""): Safetensors.Tensors => {
    const out = new Map<string, Safetensors.Tensor>()
    for (const [name, shape] of shapes) out.set(prefix + name, { shape, data: Float32Array.from(source[name]) })
    return out
  }

  // Runs one pass's forward and copies its completion tokens' scores into the batch's `rows × length` layout.
  const scorePass = (pass: Pass, batch: SequenceBatch, temperature: number, out: TokenScores, seed?: number) => {
    dev.forward(pass.tokens, 1, pass.tokens.length, pass.positions, seed)
    const s = dev.tokenLogprobs(pass.targets, temperature)
    pass.rows.forEach((i, j) => {
      const o = pass.offsets[j]
      for (let t = 0; t < batch.completions[i].length; t++) {
        out.logprobs[i * batch.length + t] = s.logprobs[o + t]
        out.entropies[i * batch.length + t] = s.entropy[o + t]
      }
    })
  }
  const emptyScores = (batch: SequenceBatch): TokenScores => ({
    logprobs: new Float64Array(batch.prompts.length * batch.length),
    entropies: new Float64Array(batch.prompts.length * batch.length)
  })
  const backwardPass = (pass: Pass, batch: SequenceBatch, temperature: number, w: ArrayLike<number>) => {
    const lossWeights = new Float64Array(pass.tokens.length)
    let any = false
    pass.rows.forEach((i, j) => {
      for (let t = 0; t < batch.completions[i].length; t++) {
        const x = w[i * batch.length + t]
        lossWeights[pass.offsets[j] + t] = x
        if (x !== 0) any = true
      }
    })
    if (any) dev.backward(pass.targets, lossWeights, temperature)
  }

  const base: Omit<TrainableModel, "generate" | "decoder"> = {
    ...(lora === undefined ? {} : { lora: lora.config }),
    config,
    tokenizer: checkpoint.tokenizer,
    chatTemplate: checkpoint.chatTemplate,
    generationConfig: checkpoint.generationConfig,
    maxBatchSize: options.maxBatchSize ?? 64,
    score: (batch, temperature) =>
      Effect.sync(() => {
        const out = emptyScores(batch)
        for (const pass of plan(batch, maxTokens)) scorePass(pass, batch, temperature, out)
        return out
      }),
    accumulate: (batch, temperature, weightsFor) =>
      Effect.sync(() => {
        const passes = plan(batch, maxTokens)
        const scores = emptyScores(batch)
        const seeds = passes.map((_, i) => seedFor(i))
        trainingForwards += passes.length
        if (passes.length === 1) {
          scorePass(passes[0], batch, temperature, scores, seeds[0])
          backwardPass(passes[0], batch, temperature, weightsFor(scores))
          return scores
        }
        passes.forEach((pass, i) => scorePass(pass, batch, temperature, scores, seeds[i]))
        const w = weightsFor(scores)
        passes.forEach((pass, i) => {
          dev.forward(pass.tokens, 1, pass.tokens.length, pass.positions, seeds[i])
          backwardPass(pass, batch, temperature, w)
        })
        return scores
      }),
    step: (o) =>
      Effect.sync(() => {
        const norm = dev.gradNorm()
        // maxGradNorm 0 disables clipping (the norm is still measured), as the reference's infinite bound does.
        const clip = o.maxGradNorm > 0 ? Math.min(1, o.maxGradNorm / (norm + 1e-6)) : 1
        dev.adamW(clip, {
          lr: o.learningRate,
          beta1: o.beta1,
          beta2: o.beta2,
          eps: o.epsilon,
          weightDecay: o.weightDecay
        })
        return { gradNorm: norm }
      }),
    exportState: Effect.sync((): ModelState => ({
      weights: tensorsOf(dev.weights),
      optimizerStep: dev.step,
      ...(lora === undefined ? {} : { lora: lora.config })
    })),
    importState: (state) =>
      Effect.sync(() => {
        const problem = checkTensors(shapes, state.weights)
        if (problem !== undefined) throw new Error(problem)
        if (lora === undefined) dev.setWeights(record(state.weights))
        else dev.setTrained(record(state.weights))
        for (const m of [dev.moments.m, dev.moments.v]) for (const name in m) m[name].fill(0)
        dev.zeroGrads()
        dev.step = state.optimizerStep
      }),
    exportOptimizerState: Effect.sync((): OptimizerState => ({
      moments: new Map([...tensorsOf(dev.moments.m, FIRST_MOMENT), ...tensorsOf(dev.moments.v, SECOND_MOMENT)])
    })),
    importOptimizerState: (state) =>
      Effect.suspend(() => {
        const problem = checkMoments(shapes, state.moments)
        if (problem !== undefined) return Effect.fail(new OptimizerStateMismatch({ problem }))
        for (const name of shapes.keys()) {
          dev.moments.m[name].set(state.moments.get(FIRST_MOMENT + name)!.data)
          dev.moments.v[name].set(state.moments.get(SECOND_MOMENT + name)!.data)
        }
        return Effect.void
      }),
    // With LoRA the frozen copy (the KL reference) is the base with the adapter disabled, as PEFT's reference is.
    frozenCopy: Effect.sync(() =>
      lora === undefined
        ? deviceModel({ ...checkpoint, tensors: tensorsOf(dev.weights) }, { ...options, frozen: true })
        : deviceModel(checkpoint, { ...options, lora: undefined, frozen: true })
    )
  }

  const engine: DecodeEngine = {
    makeKvCache: dev.makeKvCache,
    extendBatch: (caches, chunks) => {
      const logits = dev.extendBatch(caches as ReadonlyArray<CpuModel.KvCache>, chunks)
      return caches.map((_, s) => logits.subarray(s * V, (s + 1) * V))
    }
  }
  return withKvReuse(base, config, Effect.succeed(engine), () => {})
}
