/**
 * The plain-TypeScript Qwen3 model: the specification the GPU model is tested against. f64 accumulation in every dot
 * product and reduction, tensors stored as Float32Array (`precision: "f32"`, the GPU contract) or Float64Array
 * (`"f64"`, for finite-difference checks of the hand-written backward). Every sum adds its terms in the order of the
 * obvious loop (k ascending for a matmul, key ascending for attention); the loops are only arranged for speed
 * (contiguous rows, blocks of independent sums, several sequences per matmul in {@link extendBatch}), so the results
 * are the same bits as the naive version's (bench/model/cpu-reference.ts checks this and times both).
 *
 * Numerics follow transformers' Qwen3 (Qwen3ForCausalLM, eager attention) in f32: embedding → per layer
 * [RMSNorm → q,k,v (no bias) → per-head RMSNorm of q and k → RoPE (rotate_half) → causal GQA softmax attention
 * (scale 1/√head_dim) → o_proj → residual → RMSNorm → down(silu(gate(x))·up(x)) → residual] → RMSNorm → lm_head
 * (or the tied embedding).
 *
 * Weights are a record keyed by Hugging Face tensor names (see `ModelConfig.expectedTensors`), linear weights [out, in]
 * row-major as torch stores them.
 *
 * Packed batches: tokens are [batch, seqLen] row-major with position ids (default 0…T−1 per row). A position id
 * of 0 at t > 0 starts a new sequence inside the row, and attention never crosses sequences (TRL's padding-free
 * packing / flash-attention varlen semantics).
 *
 * What the GPU model must reproduce (f32, ≤ 1e-5 relative): {@link forward} logits; {@link tokenLogprobs}
 * (logits / T then log-softmax, entropy of the same); {@link backward} gradients of Σ w·logprob + Σ e·entropy;
 * {@link extend} (KV cache, keys stored after k_norm and RoPE) equal to the no-cache forward; {@link generate}
 * token for token (greedy exactly; sampling through {@link samplingUniform} = Philox4x32-10 with counter
 * [step, sequence, 0, 0] and key [seed lo, seed hi], then {@link sampleToken}'s documented processor order and
 * inverse-CDF pick); {@link clipGradNorm} and {@link adamWStep} with the `ModelConfig.decays` mask. RoPE cos/sin come
 * from {@link ropeTables} (transformers' f32 inverse frequencies and f32 angles). A batch of generations is
 * independent sequences: request r with seed s must give what `generate(..., { seed: s, sequence: r })` gives.
 *
 * @example
 * ```ts
 * import { Qwen3Reference } from "@envtrain/gpu"
 *
 * const config = { vocab_size: 23, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2,
 *   num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, rms_norm_eps: 1e-6, rope_theta: 10000,
 *   tie_word_embeddings: true }
 * const weights = Qwen3Reference.randomWeights(config, { seed: 1 })
 * const fwd = Qwen3Reference.forward(config, weights, { tokens: [1, 2, 3], batch: 1, seqLen: 3 })
 * const targets = Qwen3Reference.nextTokenTargets(fwd)
 * const { loss, grads } = Qwen3Reference.backward(config, weights, fwd, targets, [-0.5, -0.5, 0], 1)
 * ```
 *
 * @since 0.0.0
 */
import { adaptedProjections, type LoraConfig, type LoraTarget } from "../formats/LoraConfig.js"
import {
  type Config,
  decays,
  EMBED_TOKENS,
  expectedTensors,
  FINAL_NORM,
  isNormWeight,
  layerTensorNames,
  LM_HEAD,
  type TensorSpec
} from "../formats/ModelConfig.js"

import { cpuEmbedding, cpuEmbeddingBackward } from "../ops/embedding.js"
import { cpuGradNorm } from "../ops/gradNorm.js"
import { type FloatArray, type Numerics, numerics, type Precision } from "../ops/Numerics.js"
import { cpuRmsNorm, cpuRmsNormBackward } from "../ops/rmsNorm.js"
import { cpuRope, cpuRopeBackward, ropeTables } from "../ops/rope.js"
import { cpuSwiglu, cpuSwigluBackward } from "../ops/swiglu.js"
import { cpuTokenLogprobs, cpuTokenLogprobsBackward } from "../ops/tokenLogprobs.js"
import { add, attendPair, attendRow, attentionBackward, linear, linearBackward } from "./internal/qwen3refFast.js"
import { type AdapterActivations, type LoraRun, loraRun, project, projectBackward } from "./internal/qwen3refLora.js"
import {
  philox4x32,
  type SampledToken,
  sampleToken,
  type SamplingParams,
  samplingUniform
} from "./internal/qwen3refSampling.js"

/** The config fields the model reads (defined with the tensor names in `ModelConfig`). */
export type { Config }
export type { FloatArray, Precision, SampledToken, SamplingParams }
export { ropeTables } from "../ops/rope.js"
export type { AdapterActivations } from "./internal/qwen3refLora.js"
export { dropoutMask, fillDropoutMask } from "./internal/qwen3refLora.js"
export { mulhi32, philox4x32, sampleToken, samplingUniform, seedKey } from "./internal/qwen3refSampling.js"

/** Model weights keyed by Hugging Face tensor name. */
export type Weights = Record<string, FloatArray>

const size = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)

/** The tensor specs of a config, built once per distinct shape (checkWeights runs on every decode step). */
const specsCache = new Map<string, ReadonlyArray<TensorSpec>>()
const cachedSpecs = (config: Config): ReadonlyArray<TensorSpec> => {
  const key = [
    config.vocab_size,
    config.hidden_size,
    config.intermediate_size,
    config.num_hidden_layers,
    config.num_attention_heads,
    config.num_key_value_heads,
    config.head_dim,
    config.tie_word_embeddings
  ].join(",")
  let specs = specsCache.get(key)
  if (specs === undefined) {
    specs = expectedTensors(config)
    specsCache.set(key, specs)
  }
  return specs
}

/** Layer tensor names by layer index, built once (weights are looked up by name in every op). */
const layerNamesCache: Array<ReturnType<typeof layerTensorNames>> = []
const namesOf = (l: number) => (layerNamesCache[l] ??= layerTensorNames(l))

/** Throws, naming the tensor, when a weight is missing or has the wrong number of elements. */
export const checkWeights = (config: Config, weights: Weights): void => {
  if (config.num_attention_heads % config.num_key_value_heads !== 0 || config.head_dim % 2 !== 0) {
    throw new Error(
      `Qwen3 config with ${config.num_attention_heads} heads, ${config.num_key_value_heads} kv heads, head_dim ` +
        `${config.head_dim}: heads must be a multiple of kv heads and head_dim even.`
    )
  }
  for (const spec of cachedSpecs(config)) {
    const w = weights[spec.name]
    if (w === undefined) throw new Error(`Missing weight ${spec.name} [${spec.shape.join(", ")}].`)
    if (w.length !== size(spec.shape)) {
      throw new Error(`Weight ${spec.name} has ${w.length} elements; expected [${spec.shape.join(", ")}].`)
    }
  }
}

/**
 * A seeded random initialisation like transformers' Qwen3 `_init_weights`: every matrix ~ N(0, std²)
 * (std = initializer_range, 0.02 by default), norm weights 1 (plus `normJitter`·N(0,1) when given, so tests
 * exercise the norm weights). Normals come from Philox4x32-10 (key = seed, counter = [tensor index, block]) via
 * Box–Muller, so the same seed gives the same weights everywhere.
 */
export const randomWeights = (
  config: Config,
  options: {
    readonly seed: number
    readonly std?: number
    readonly normJitter?: number
    readonly precision?: Precision
  }
): Weights => {
  const std = options.std ?? 0.02
  const jitter = options.normJitter ?? 0
  const nm = numerics(options.precision ?? "f32")
  const weights: Weights = {}
  expectedTensors(config).forEach((spec, index) => {
    const n = size(spec.shape)
    const w = nm.alloc(n)
    const norm = isNormWeight(spec.name)
    for (let block = 0; block * 4 < n; block++) {
      const r = philox4x32([index, block, 0, 0], [options.seed >>> 0, 0x51ed])
      for (let pair = 0; pair < 2; pair++) {
        const u1 = (r[2 * pair] + 1) / 4294967297
        const u2 = r[2 * pair + 1] / 4294967296
        const radius = Math.sqrt(-2 * Math.log(u1))
        const normals = [radius * Math.cos(2 * Math.PI * u2), radius * Math.sin(2 * Math.PI * u2)]
        for (let c = 0; c < 2; c++) {
          const i = block * 4 + pair * 2 + c
          if (i < n) w[i] = norm ? 1 + jitter * normals[c] : std * normals[c]
        }
      }
    }
    weights[spec.name] = w
  })
  return weights
}

/** A packed batch of token ids [batch, seqLen], row-major. */
export interface Batch {
  readonly tokens: ArrayLike<number>
  readonly batch: number
  readonly seqLen: number
  /** Position ids [batch, seqLen]; default 0…seqLen−1 in every row. 0 at t > 0 starts a new packed sequence. */
  readonly positions?: ArrayLike<number>
}

/** What one decoder layer computed, kept for the backward. Shapes use N = batch·seqLen rows. */
export interface LayerActivations {
  /** Residual stream entering the layer [N, hidden]. */
  readonly input: FloatArray
  readonly attnNormRstd: FloatArray
  /** input_layernorm output [N, hidden]. */
  readonly attnNormed: FloatArray
  /** q_proj output before q_norm [N, heads·head_dim]. */
  readonly qProj: FloatArray
  /** k_proj output before k_norm [N, kv_heads·head_dim]. */
  readonly kProj: FloatArray
  /** v_proj output [N, kv_heads·head_dim]. */
  readonly v: FloatArray
  /** Per (row, head) reciprocal std of q_norm [N·heads] and k_norm [N·kv_heads]. */
  readonly qRstd: FloatArray
  readonly kRstd: FloatArray
  /** q and k after norm and RoPE (k is what a KV cache stores). */
  readonly q: FloatArray
  readonly k: FloatArray
  /** Attention probabilities [batch, heads, seqLen (query), seqLen (key)], 0 where masked. */
  readonly probs: FloatArray
  /** Attention output before o_proj [N, heads·head_dim]. */
  readonly attnOut: FloatArray
  /** Residual stream after attention [N, hidden]. */
  readonly afterAttn: FloatArray
  readonly mlpNormRstd: FloatArray
  /** post_attention_layernorm output [N, hidden]. */
  readonly mlpNormed: FloatArray
  /** gate_proj and up_proj outputs and silu(gate)·up [N, intermediate]. */
  readonly gate: FloatArray
  readonly up: FloatArray
  readonly act: FloatArray
  /** Each adapted projection's adapter input (after dropout) and low-rank intermediate, by target. */
  readonly adapters: ReadonlyMap<LoraTarget, AdapterActivations>
}

/**
 * LoRA adapters on the frozen base weights (PEFT's `LoraConfig` semantics, see `LoraConfig.ts`): the forward adds
 * each adapted projection's `(dropout(x)·Aᵀ·Bᵀ)·scaling`, and the backward computes the gradients of the adapter
 * tensors only (no base gradient is formed).
 */
export interface Lora {
  readonly config: LoraConfig
  /** The adapter tensors, keyed as `adaptedProjections` names them (`….q_proj.lora_A.weight` [r, in], …). */
  readonly adapters: Weights
  /**
   * Training: dropout on each adapter's input (probability `config.dropout`) with masks drawn from this seed by
   * {@link dropoutMask}. Absent: no dropout, as PEFT in eval mode.
   */
  readonly dropoutSeed?: number
}

/** What a forward pass keeps for the backward (activations, per layer). */
export interface Forward {
  readonly precision: Precision
  readonly batch: number
  readonly seqLen: number
  readonly tokens: Int32Array
  readonly positions: Int32Array
  /** For each row, the index t of the first token of its packed sequence. */
  readonly segmentStart: Int32Array
  readonly layers: ReadonlyArray<LayerActivations>
  /** Residual stream after the last layer [N, hidden]. */
  readonly output: FloatArray
  readonly finalRstd: FloatArray
  /** model.norm output [N, hidden]. */
  readonly finalNormed: FloatArray
  /** [N, vocab]. */
  readonly logits: FloatArray
  /** The adapters the forward ran with (then the backward differentiates them only). */
  readonly lora: LoraRun | undefined
}

const runOf = (config: Config, lora: Lora | undefined, dropout = true): LoraRun | undefined =>
  lora === undefined ? undefined : loraRun(config, lora.config, lora.adapters, dropout ? lora.dropoutSeed : undefined)

/**
 * Fresh adapter tensors as PEFT initialises them: A ~ kaiming_uniform(a = √5), i.e. U(−1/√in, 1/√in) (uniforms from
 * Philox4x32-10, key [seed, 0x10a4], counter [projection index, block]); B = 0, so the adapted model starts equal
 * to the base.
 *
 * @example
 * ```ts
 * const lora = { r: 8, alpha: 16, dropout: 0, targetModules: ["q_proj", "v_proj"], useRsLora: false } as const
 * const adapters = Qwen3Reference.initAdapters(config, lora, { seed: 1 })
 * const fwd = Qwen3Reference.forward(config, weights, batch, { lora: { config: lora, adapters } })
 * ```
 */
export const initAdapters = (
  config: Config,
  lora: LoraConfig,
  options: { readonly seed: number; readonly precision?: Precision }
): Weights => {
  const nm = numerics(options.precision ?? "f32")
  const out: Weights = {}
  adaptedProjections(config, lora).forEach((p, index) => {
    const [r, inF] = p.a.shape
    const bound = 1 / Math.sqrt(inF)
    const a = nm.alloc(r * inF)
    for (let block = 0; block * 4 < a.length; block++) {
      const u = philox4x32([index, block, 0, 0], [options.seed >>> 0, 0x10a4])
      for (let c = 0; c < 4 && block * 4 + c < a.length; c++) a[block * 4 + c] = (2 * (u[c] / 4294967296) - 1) * bound
    }
    out[p.a.name] = a
    out[p.b.name] = nm.alloc(p.b.shape[0] * p.b.shape[1])
  })
  return out
}

const headWeight = (config: Config, weights: Weights) =>
  config.tie_word_embeddings ? weights[EMBED_TOKENS] : weights[LM_HEAD]

const embed = (config: Config, weights: Weights, tokens: ArrayLike<number>, nm: Numerics): FloatArray => {
  const h = config.hidden_size
  const table = weights[EMBED_TOKENS]
  const x = nm.alloc(tokens.length * h)
  for (let n = 0; n < tokens.length; n++) {
    const t = tokens[n]
    if (!Number.isInteger(t) || t < 0 || t >= config.vocab_size) {
      throw new Error(`Token id ${t} at index ${n} is outside the vocabulary [0, ${config.vocab_size}).`)
    }
  }
  x.set(cpuEmbedding(table, tokens, tokens.length, h))
  return x
}

/** The projections, q/k norms and RoPE shared by the no-cache and KV-cache paths. */
const attentionInputs = (
  config: Config,
  weights: Weights,
  l: number,
  x: FloatArray,
  rows: number,
  tables: { readonly cos: Float32Array; readonly sin: Float32Array },
  nm: Numerics,
  run: LoraRun | undefined,
  acts: Map<LoraTarget, AdapterActivations> | undefined
) => {
  const names = namesOf(l)
  const { head_dim: D, hidden_size: h, num_attention_heads: H, num_key_value_heads: KV } = config
  const { rstd: attnNormRstd, y: attnNormed } = cpuRmsNorm(
    x,
    rows,
    h,
    weights[names.inputLayernorm],
    config.rms_norm_eps,
    nm
  )
  const qProj = project(attnNormed, rows, h, weights[names.q], H * D, nm, run, l, "q_proj", acts)
  const kProj = project(attnNormed, rows, h, weights[names.k], KV * D, nm, run, l, "k_proj", acts)
  const v = project(attnNormed, rows, h, weights[names.v], KV * D, nm, run, l, "v_proj", acts)
  const qn = cpuRmsNorm(qProj, rows * H, D, weights[names.qNorm], config.rms_norm_eps, nm)
  const kn = cpuRmsNorm(kProj, rows * KV, D, weights[names.kNorm], config.rms_norm_eps, nm)
  const { cos, sin } = tables
  const q = cpuRope(qn.y, rows, H, D, cos, sin, nm)
  const k = cpuRope(kn.y, rows, KV, D, cos, sin, nm)
  return { attnNormRstd, attnNormed, qProj, kProj, v, qRstd: qn.rstd, kRstd: kn.rstd, q, k }
}

/** o_proj, residual and the SwiGLU MLP block shared by both paths. */
const attentionOutputAndMlp = (
  config: Config,
  weights: Weights,
  l: number,
  x: FloatArray,
  attnOut: FloatArray,
  rows: number,
  nm: Numerics,
  run: LoraRun | undefined,
  acts: Map<LoraTarget, AdapterActivations> | undefined
) => {
  const names = namesOf(l)
  const { head_dim: D, hidden_size: h, intermediate_size: I, num_attention_heads: H } = config
  const afterAttn = add(x, project(attnOut, rows, H * D, weights[names.o], h, nm, run, l, "o_proj", acts), nm)
  const { rstd: mlpNormRstd, y: mlpNormed } = cpuRmsNorm(
    afterAttn,
    rows,
    h,
    weights[names.postAttentionLayernorm],
    config.rms_norm_eps,
    nm
  )
  const gate = project(mlpNormed, rows, h, weights[names.gate], I, nm, run, l, "gate_proj", acts)
  const up = project(mlpNormed, rows, h, weights[names.up], I, nm, run, l, "up_proj", acts)
  const act = cpuSwiglu(gate, up, nm)
  const output = add(afterAttn, project(act, rows, I, weights[names.down], h, nm, run, l, "down_proj", acts), nm)
  return { afterAttn, mlpNormRstd, mlpNormed, gate, up, act, output }
}

const finalLogits = (config: Config, weights: Weights, x: FloatArray, rows: number, nm: Numerics) => {
  const { rstd: finalRstd, y: finalNormed } = cpuRmsNorm(
    x,
    rows,
    config.hidden_size,
    weights[FINAL_NORM],
    config.rms_norm_eps,
    nm
  )
  const logits = linear(finalNormed, rows, config.hidden_size, headWeight(config, weights), config.vocab_size, nm)
  return { finalRstd, finalNormed, logits }
}

/** Causal attention of every row of a packed batch (no cache), keeping the probabilities for the backward. */
const attendCausal = (
  q: FloatArray,
  k: FloatArray,
  v: FloatArray,
  segmentStart: Int32Array,
  B: number,
  T: number,
  H: number,
  KV: number,
  D: number,
  attnOut: FloatArray,
  probs: FloatArray,
  nm: Numerics
) => {
  const group = H / KV
  const scale = 1 / Math.sqrt(D)
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / group)
      // Two query heads of one KV head at a time when they exist (same arithmetic per head).
      const paired = h + 1 < H && Math.floor((h + 1) / group) === g
      for (let t = 0; t < T; t++) {
        const n = b * T + t
        const o = (n * H + h) * D
        const kBase = b * T * KV * D + g * D
        const pBase = ((b * H + h) * T + t) * T
        if (paired) {
          attendPair(
            q,
            o,
            o + D,
            k,
            v,
            kBase,
            KV * D,
            segmentStart[n],
            t,
            D,
            scale,
            attnOut,
            probs,
            pBase,
            pBase + T * T,
            nm.round
          )
        } else attendRow(q, o, k, v, kBase, KV * D, segmentStart[n], t, D, scale, attnOut, o, probs, pBase, nm)
      }
      if (paired) h++
    }
  }
}

/**
 * The full forward pass over a packed batch, keeping every activation the backward needs.
 *
 * @example
 * ```ts
 * const fwd = Qwen3Reference.forward(config, weights, { tokens: [5, 6, 7, 8], batch: 1, seqLen: 4, positions: [0, 1, 0, 1] })
 * fwd.logits // [4, vocab]: rows 2-3 do not see rows 0-1
 * ```
 */
export const forward = (
  config: Config,
  weights: Weights,
  batch: Batch,
  options?: { readonly precision?: Precision; readonly lora?: Lora }
): Forward => {
  checkWeights(config, weights)
  const nm = numerics(options?.precision ?? "f32")
  const run = runOf(config, options?.lora)
  const { batch: B, seqLen: T } = batch
  const N = B * T
  if (batch.tokens.length !== N) throw new Error(`Batch has ${batch.tokens.length} tokens; expected ${B}×${T}.`)
  const tokens = Int32Array.from(batch.tokens)
  const positions = new Int32Array(N)
  for (let n = 0; n < N; n++) positions[n] = batch.positions === undefined ? n % T : batch.positions[n]
  const segmentStart = new Int32Array(N)
  for (let b = 0; b < B; b++) {
    let start = 0
    for (let t = 0; t < T; t++) {
      if (t > 0 && positions[b * T + t] === 0) start = t
      segmentStart[b * T + t] = start
    }
  }
  const { head_dim: D, num_attention_heads: H, num_key_value_heads: KV } = config
  let x = embed(config, weights, tokens, nm)
  const tables = ropeTables(positions, D, config.rope_theta)
  const layers: Array<LayerActivations> = []
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const adapters = new Map<LoraTarget, AdapterActivations>()
    const ai = attentionInputs(config, weights, l, x, N, tables, nm, run, adapters)
    const probs = nm.alloc(B * H * T * T)
    const attnOut = nm.alloc(N * H * D)
    attendCausal(ai.q, ai.k, ai.v, segmentStart, B, T, H, KV, D, attnOut, probs, nm)
    const mlp = attentionOutputAndMlp(config, weights, l, x, attnOut, N, nm, run, adapters)
    layers.push({ input: x, ...ai, probs, attnOut, ...mlp, adapters })
    x = mlp.output
  }
  return {
    precision: nm.precision,
    batch: B,
    seqLen: T,
    tokens,
    positions,
    segmentStart,
    layers,
    output: x,
    ...finalLogits(config, weights, x, N, nm),
    lora: run
  }
}

/**
 * Next-token targets for a forward's batch: row (b, t) predicts token (b, t+1) when that token is in the same packed
 * sequence, else −1 (no target).
 */
export const nextTokenTargets = (fwd: Pick<Forward, "batch" | "seqLen" | "tokens" | "segmentStart">): Int32Array => {
  const { batch: B, seqLen: T } = fwd
  const targets = new Int32Array(B * T).fill(-1)
  for (let b = 0; b < B; b++) {
    for (let t = 0; t + 1 < T; t++) {
      const n = b * T + t
      if (fwd.segmentStart[n + 1] === fwd.segmentStart[n]) targets[n] = fwd.tokens[n + 1]
    }
  }
  return targets
}

/**
 * Per-row log-probability of `targets` and entropy under softmax(logits / temperature) over the full vocabulary, as
 * TRL computes them (logits divided by the temperature in the stored type, then log-softmax, f64 sums). A target
 * < 0 means "none": its logprob is 0.
 */
export const tokenLogprobs = (
  logits: ArrayLike<number>,
  vocab: number,
  targets: ArrayLike<number>,
  temperature: number,
  precision: Precision = "f32"
): { readonly logprobs: Float64Array; readonly entropy: Float64Array } => {
  const { entropy, logprobs } = cpuTokenLogprobs(logits, vocab, targets, temperature, numerics(precision))
  return { logprobs, entropy }
}

/** The backward's result: the loss and every weight's gradient. */
export interface Gradients {
  /** L = Σ_n w_n · logprob_n + Σ_n e_n · entropy_n. */
  readonly loss: number
  readonly logprobs: Float64Array
  /**
   * dL/dW for every tensor, keyed like the weights (tied: one embed_tokens gradient holding both uses); with LoRA
   * only the adapter tensors' gradients (the base is frozen).
   */
  readonly grads: Weights
}

/**
 * Hand-written backward of L = Σ_n w_n · logprob_n + Σ_n e_n · entropy_n, with logprob_n =
 * log_softmax(logits_n / temperature)[targets_n] and entropy_n that of softmax(logits_n / temperature) — every GRPO
 * loss reduces to this given dLoss/dlogprob (and dLoss/dentropy for TRL's optional entropy bonus). For plain
 * next-token NLL use w = −1/count and no entropy weights. Rows with target < 0 get no logprob term.
 *
 * @example
 * ```ts
 * const fwd = Qwen3Reference.forward(config, weights, batch)
 * const { loss, grads } = Qwen3Reference.backward(config, weights, fwd, targets, lossWeights, 1.0)
 * ```
 */
export const backward = (
  config: Config,
  weights: Weights,
  fwd: Forward,
  targets: ArrayLike<number>,
  lossWeights: ArrayLike<number>,
  temperature: number,
  entropyWeights?: ArrayLike<number>
): Gradients => {
  const nm = numerics(fwd.precision)
  const {
    head_dim: D,
    hidden_size: h,
    intermediate_size: I,
    num_attention_heads: H,
    num_key_value_heads: KV,
    vocab_size: V
  } = config
  const { batch: B, seqLen: T } = fwd
  const N = B * T
  if (targets.length !== N || lossWeights.length !== N) {
    throw new Error(`targets (${targets.length}) and lossWeights (${lossWeights.length}) must have ${N} entries.`)
  }
  const g: Record<string, Float64Array> = {}
  const run = fwd.lora
  if (run === undefined) { for (const spec of cachedSpecs(config)) g[spec.name] = new Float64Array(size(spec.shape)) }
  else {
    for (const layer of run.byLayer) {
      for (const a of layer.values()) {
        g[a.aName] = new Float64Array(a.a.length)
        g[a.bName] = new Float64Array(a.b.length)
      }
    }
  }
  // Frozen norm weights: their (vector-sized) gradient terms fall into a scratch that is dropped.
  const sink = new Float64Array(Math.max(h, D))
  const gNorm = (name: string) => g[name] ?? sink

  const { dLogits, logprobs, loss } = cpuTokenLogprobsBackward(
    fwd.logits,
    V,
    targets,
    temperature,
    lossWeights,
    entropyWeights,
    nm
  )
  const headName = config.tie_word_embeddings ? EMBED_TOKENS : LM_HEAD
  const dFinalNormed = linearBackward(dLogits, fwd.finalNormed, N, h, headWeight(config, weights), V, g[headName], nm)
  let dx = cpuRmsNormBackward(dFinalNormed, fwd.output, fwd.finalRstd, N, h, weights[FINAL_NORM], gNorm(FINAL_NORM), nm)

  const scale = 1 / Math.sqrt(D)
  const { cos, sin } = ropeTables(fwd.positions, D, config.rope_theta)
  for (let l = config.num_hidden_layers - 1; l >= 0; l--) {
    const a = fwd.layers[l]
    const names = namesOf(l)
    // MLP block: out = afterAttn + down(silu(gate)·up).
    const proj = (
      dy: FloatArray,
      x: FloatArray,
      inF: number,
      name: string,
      outF: number,
      target: LoraTarget
    ) => projectBackward(dy, x, N, inF, weights[name], outF, g[name], nm, run, l, target, a.adapters, g)
    const dAct = proj(dx, a.act, I, names.down, h, "down_proj")
    const { dGate, dUp } = cpuSwigluBackward(dAct, a.gate, a.up, nm)
    const dMlpNormed = add(
      proj(dGate, a.mlpNormed, h, names.gate, I, "gate_proj"),
      proj(dUp, a.mlpNormed, h, names.up, I, "up_proj"),
      nm
    )
    const dAfterAttn = add(
      dx,
      cpuRmsNormBackward(
        dMlpNormed,
        a.afterAttn,
        a.mlpNormRstd,
        N,
        h,
        weights[names.postAttentionLayernorm],
        gNorm(names.postAttentionLayernorm),
        nm
      ),
      nm
    )
    // Attention block: afterAttn = input + o_proj(attention(rope(norm(q)), rope(norm(k)), v)).
    const dAttnOut = proj(dAfterAttn, a.attnOut, H * D, names.o, h, "o_proj")
    const dq = new Float64Array(N * H * D)
    const dk = new Float64Array(N * KV * D)
    const dv = new Float64Array(N * KV * D)
    attentionBackward(dAttnOut, a.q, a.k, a.v, a.probs, fwd.segmentStart, B, T, H, KV, D, scale, dq, dk, dv)
    const dqNormed = cpuRopeBackward(dq, N, H, D, cos, sin, nm)
    const dkNormed = cpuRopeBackward(dk, N, KV, D, cos, sin, nm)
    const dqProj = cpuRmsNormBackward(
      dqNormed,
      a.qProj,
      a.qRstd,
      N * H,
      D,
      weights[names.qNorm],
      gNorm(names.qNorm),
      nm
    )
    const dkProj = cpuRmsNormBackward(
      dkNormed,
      a.kProj,
      a.kRstd,
      N * KV,
      D,
      weights[names.kNorm],
      gNorm(names.kNorm),
      nm
    )
    const dAttnNormed = add(
      add(
        proj(dqProj, a.attnNormed, h, names.q, H * D, "q_proj"),
        proj(dkProj, a.attnNormed, h, names.k, KV * D, "k_proj"),
        nm
      ),
      proj(dv, a.attnNormed, h, names.v, KV * D, "v_proj"),
      nm
    )
    dx = add(
      dAfterAttn,
      cpuRmsNormBackward(
        dAttnNormed,
        a.input,
        a.attnNormRstd,
        N,
        h,
        weights[names.inputLayernorm],
        gNorm(names.inputLayernorm),
        nm
      ),
      nm
    )
  }
  if (run === undefined) cpuEmbeddingBackward(fwd.tokens, dx, N, h, V, g[EMBED_TOKENS])
  const grads: Weights = {}
  for (const name of Object.keys(g)) {
    const out = nm.alloc(g[name].length)
    out.set(g[name])
    grads[name] = out
  }
  return { loss, logprobs, grads }
}

/** A per-sequence KV cache: for each layer, keys (after k_norm and RoPE) and values [kv_heads, capacity, head_dim]. */
export interface KvCache {
  readonly capacity: number
  readonly precision: Precision
  /** Tokens cached so far; the next token gets this position id. */
  length: number
  readonly keys: ReadonlyArray<FloatArray>
  readonly values: ReadonlyArray<FloatArray>
}

/** An empty KV cache for up to `capacity` tokens, stored at `precision`. */
export const makeKvCache = (config: Config, capacity: number, precision: Precision = "f32"): KvCache => {
  const nm = numerics(precision)
  const n = config.num_key_value_heads * capacity * config.head_dim
  return {
    capacity,
    precision,
    length: 0,
    keys: Array.from({ length: config.num_hidden_layers }, () => nm.alloc(n)),
    values: Array.from({ length: config.num_hidden_layers }, () => nm.alloc(n))
  }
}

/** Stores n new keys and values at positions start… of layer l, then attends each new row to the cache. */
const attendCache = (
  config: Config,
  cache: KvCache,
  l: number,
  start: number,
  n: number,
  row0: number,
  q: FloatArray,
  k: FloatArray,
  v: FloatArray,
  attnOut: FloatArray,
  nm: Numerics
) => {
  const { head_dim: D, num_attention_heads: H, num_key_value_heads: KV } = config
  const cap = cache.capacity
  const group = H / KV
  const scale = 1 / Math.sqrt(D)
  const K = cache.keys[l]
  const Vc = cache.values[l]
  for (let i = 0; i < n; i++) {
    for (let g = 0; g < KV; g++) {
      const to = (g * cap + start + i) * D
      const from = ((row0 + i) * KV + g) * D
      for (let d = 0; d < D; d++) {
        K[to + d] = k[from + d]
        Vc[to + d] = v[from + d]
      }
    }
  }
  for (let i = 0; i < n; i++) {
    let h = 0
    // Query heads of one KV head two at a time (same arithmetic per head, one pass over the cache).
    for (; h < H; h++) {
      const g = Math.floor(h / group)
      const o = ((row0 + i) * H + h) * D
      if (h + 1 < H && Math.floor((h + 1) / group) === g) {
        attendPair(q, o, o + D, K, Vc, g * cap * D, D, 0, start + i, D, scale, attnOut, undefined, 0, 0, nm.round)
        h++
      } else attendRow(q, o, K, Vc, g * cap * D, D, 0, start + i, D, scale, attnOut, o, undefined, 0, nm)
    }
  }
}

/**
 * The KV-cache forward of several sequences at once: every chunk's rows go through the matmuls and norms together
 * (row by row the same arithmetic as one sequence alone, so results are identical), and each row attends to its
 * own cache. Returns the logits of every row, or only of each chunk's last row when `lastOnly`.
 */
const extendRows = (
  config: Config,
  weights: Weights,
  caches: ReadonlyArray<KvCache>,
  chunks: ReadonlyArray<ArrayLike<number>>,
  lastOnly: boolean,
  lora: Lora | undefined
): FloatArray => {
  checkWeights(config, weights)
  // Decoding is evaluation: no dropout.
  const run = runOf(config, lora, false)
  if (caches.length !== chunks.length) {
    throw new Error(`extendBatch got ${caches.length} caches and ${chunks.length} token chunks; pass one per sequence.`)
  }
  if (caches.length === 0) return new Float32Array(0)
  const nm = numerics(caches[0].precision)
  const starts: Array<number> = []
  const tokens: Array<number> = []
  const positions: Array<number> = []
  caches.forEach((cache, s) => {
    const n = chunks[s].length
    const start = cache.length
    if (start + n > cache.capacity) {
      throw new Error(
        `KV cache holds ${cache.capacity} tokens; ${start} cached + ${n} new do not fit. Make a larger cache.`
      )
    }
    if (cache.precision !== nm.precision || caches.indexOf(cache) !== s) {
      throw new Error("extendBatch needs one distinct cache per sequence, all of the same precision.")
    }
    if (lastOnly && n === 0) throw new Error(`Sequence ${s} has no new tokens: nothing to take the last logits of.`)
    starts.push(tokens.length)
    for (let i = 0; i < n; i++) {
      tokens.push(chunks[s][i])
      positions.push(start + i)
    }
  })
  const rows = tokens.length
  const { head_dim: D, num_attention_heads: H } = config
  let x = embed(config, weights, tokens, nm)
  const tables = ropeTables(positions, D, config.rope_theta)
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const ai = attentionInputs(config, weights, l, x, rows, tables, nm, run, undefined)
    const attnOut = nm.alloc(rows * H * D)
    caches.forEach((cache, s) => {
      attendCache(config, cache, l, cache.length, chunks[s].length, starts[s], ai.q, ai.k, ai.v, attnOut, nm)
    })
    x = attentionOutputAndMlp(config, weights, l, x, attnOut, rows, nm, run, undefined).output
  }
  caches.forEach((cache, s) => cache.length += chunks[s].length)
  if (!lastOnly) return finalLogits(config, weights, x, rows, nm).logits
  const h = config.hidden_size
  const last = nm.alloc(caches.length * h)
  chunks.forEach((chunk, s) =>
    last.set(x.subarray((starts[s] + chunk.length - 1) * h, (starts[s] + chunk.length) * h), s * h)
  )
  return finalLogits(config, weights, last, caches.length, nm).logits
}

/**
 * Runs `tokens` (a prefill chunk or one decode token) at positions cache.length…, attending to the cache and
 * causally within the chunk; appends their keys and values and returns their logits [tokens.length, vocab].
 *
 * @example
 * ```ts
 * const cache = Qwen3Reference.makeKvCache(config, 64)
 * const prefill = Qwen3Reference.extend(config, weights, cache, promptIds)
 * const next = Qwen3Reference.extend(config, weights, cache, [nextToken])
 * ```
 */
export const extend = (
  config: Config,
  weights: Weights,
  cache: KvCache,
  tokens: ArrayLike<number>,
  lora?: Lora
): FloatArray => extendRows(config, weights, [cache], [tokens], false, lora)

/**
 * {@link extend} for several sequences in one pass (each with its own cache and a non-empty chunk): returns the
 * logits of each chunk's last token [vocab], identical to what separate `extend` calls give, computed with the
 * sequences' rows batched through every matmul (the CPU's cheap way to generate for many episodes).
 *
 * @example
 * ```ts
 * const caches = prompts.map((p) => Qwen3Reference.makeKvCache(config, p.length + 16))
 * const last = Qwen3Reference.extendBatch(config, weights, caches, prompts) // last[i]: next-token logits of prompt i
 * ```
 */
export const extendBatch = (
  config: Config,
  weights: Weights,
  caches: ReadonlyArray<KvCache>,
  chunks: ReadonlyArray<ArrayLike<number>>,
  lora?: Lora
): ReadonlyArray<FloatArray> => {
  const logits = extendRows(config, weights, caches, chunks, true, lora)
  const V = config.vocab_size
  return caches.map((_, s) => logits.subarray(s * V, (s + 1) * V))
}

/** How one sequence is generated: length, stop tokens and sampling. */
export interface GenerateOptions extends SamplingParams {
  readonly maxNewTokens: number
  /** Generation ends after emitting any of these (the stop token is included in the output). */
  readonly stopTokens?: ReadonlyArray<number>
  readonly seed?: number
  /** Which sequence of the seed's stream this is (the Philox counter's second word); default 0. */
  readonly sequence?: number
  readonly precision?: Precision
}

/** One generated sequence: its tokens and their sampling logprobs. */
export interface Generation {
  readonly tokens: ReadonlyArray<number>
  /** Per generated token: log_softmax(logits / T) (T = 1 when greedy) — see {@link SampledToken}. */
  readonly logprobs: ReadonlyArray<number>
  readonly sampledLogprobs: ReadonlyArray<number>
  readonly finishReason: "stop" | "length"
}

/**
 * Generates from `prompt` with the KV cache: step s (0-based) samples with {@link sampleToken} using
 * u = samplingUniform(seed, sequence, s), with the prompt plus the tokens so far as the repetition-penalty context.
 *
 * @example
 * ```ts
 * const out = Qwen3Reference.generate(config, weights, [1, 2, 3], { temperature: 0, maxNewTokens: 8, stopTokens: [0] })
 * ```
 */
export const generate = (
  config: Config,
  weights: Weights,
  prompt: ReadonlyArray<number>,
  options: GenerateOptions,
  lora?: Lora
): Generation => generateBatch(config, weights, [{ prompt, options }], lora)[0]

/** One prompt to generate from, with its options. */
export interface GenerateRequest {
  readonly prompt: ReadonlyArray<number>
  readonly options: GenerateOptions
}

/**
 * {@link generate} for several independent requests at once: request i gives exactly `generate(config, weights,
 * prompt_i, options_i)`, but every decode step runs the still-active sequences together through {@link extendBatch}.
 * All requests must use the same precision.
 *
 * @example
 * ```ts
 * const outs = Qwen3Reference.generateBatch(config, weights, [
 *   { prompt: [1, 2, 3], options: { temperature: 1, maxNewTokens: 8, seed: 7, sequence: 0 } },
 *   { prompt: [4, 5], options: { temperature: 1, maxNewTokens: 8, seed: 7, sequence: 1 } }
 * ])
 * ```
 */
export const generateBatch = (
  config: Config,
  weights: Weights,
  requests: ReadonlyArray<GenerateRequest>,
  lora?: Lora
): ReadonlyArray<Generation> => {
  const states = requests.map(({ options, prompt }) => {
    if (prompt.length === 0) throw new Error("generate needs a non-empty prompt.")
    return {
      options,
      cache: makeKvCache(config, prompt.length + options.maxNewTokens, options.precision ?? "f32"),
      stops: new Set(options.stopTokens ?? []),
      context: [...prompt],
      tokens: [] as Array<number>,
      logprobs: [] as Array<number>,
      sampledLogprobs: [] as Array<number>,
      finishReason: "length" as Generation["finishReason"]
    }
  })
  let active = states
  let rows = extendBatch(config, weights, states.map((s) => s.cache), requests.map((r) => r.prompt), lora)
  for (let step = 0; active.length > 0; step++) {
    const next: typeof states = []
    const nextTokens: Array<Array<number>> = []
    active.forEach((state, i) => {
      const { options } = state
      if (step >= options.maxNewTokens) return
      const u = options.temperature === 0 ? 0 : samplingUniform(options.seed ?? 0, options.sequence ?? 0, step)
      const s = sampleToken(rows[i], state.context, options, u)
      state.tokens.push(s.token)
      state.logprobs.push(s.logprob)
      state.sampledLogprobs.push(s.sampledLogprob)
      state.context.push(s.token)
      if (state.stops.has(s.token)) state.finishReason = "stop"
      else if (step + 1 < options.maxNewTokens) {
        next.push(state)
        nextTokens.push([s.token])
      }
    })
    active = next
    if (active.length > 0) rows = extendBatch(config, weights, active.map((s) => s.cache), nextTokens, lora)
  }
  return states.map((s) => ({
    tokens: s.tokens,
    logprobs: s.logprobs,
    sampledLogprobs: s.sampledLogprobs,
    finishReason: s.finishReason
  }))
}

/**
 * Global-norm gradient clipping as torch.nn.utils.clip_grad_norm_: total = √Σ‖g‖², every gradient is multiplied
 * by min(1, maxNorm / (total + 1e-6)). Mutates `grads`; returns the pre-clip norm and the factor.
 */
export const clipGradNorm = (
  grads: Weights,
  maxNorm: number
): { readonly totalNorm: number; readonly scale: number } => {
  const totalNorm = cpuGradNorm(Object.values(grads), maxNorm).norm
  const scale = Math.min(1, maxNorm / (totalNorm + 1e-6))
  for (const g of Object.values(grads)) for (let i = 0; i < g.length; i++) g[i] *= scale
  return { totalNorm, scale }
}

/** AdamW's hyper-parameters for one step. */
export interface AdamWConfig {
  readonly lr: number
  /** Defaults are torch's / TRL's: betas (0.9, 0.999), eps 1e-8, weight decay 0. */
  readonly beta1?: number
  readonly beta2?: number
  readonly eps?: number
  readonly weightDecay?: number
}

/** AdamW's state: the step count and the first and second moments per weight. */
export interface AdamWState {
  step: number
  readonly m: Weights
  readonly v: Weights
}

/** Fresh AdamW state for these weights (zero moments, step 0). */
export const makeAdamWState = (weights: Weights): AdamWState => {
  const m: Weights = {}
  const v: Weights = {}
  for (const [name, w] of Object.entries(weights)) {
    m[name] = new (w.constructor as typeof Float32Array)(w.length)
    v[name] = new (w.constructor as typeof Float32Array)(w.length)
  }
  return { step: 0, m, v }
}

/**
 * One AdamW step as torch.optim.AdamW (decoupled decay, bias correction), per element with t = state.step + 1:
 * p ← p·(1 − lr·wd·[decays(name)]); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
 * p ← p − (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + eps). Mutates weights and state (f64 per element, stored back).
 */
export const adamWStep = (weights: Weights, grads: Weights, state: AdamWState, config: AdamWConfig): void => {
  const b1 = config.beta1 ?? 0.9
  const b2 = config.beta2 ?? 0.999
  const eps = config.eps ?? 1e-8
  const wd = config.weightDecay ?? 0
  state.step += 1
  const stepSize = config.lr / (1 - Math.pow(b1, state.step))
  const bc2Sqrt = Math.sqrt(1 - Math.pow(b2, state.step))
  for (const [name, p] of Object.entries(weights)) {
    const g = grads[name]
    if (g === undefined) throw new Error(`No gradient for ${name}.`)
    const m = state.m[name]
    const v = state.v[name]
    const decay = decays(name) ? 1 - config.lr * wd : 1
    for (let i = 0; i < p.length; i++) {
      m[i] = b1 * m[i] + (1 - b1) * g[i]
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
      p[i] = p[i] * decay - (stepSize * m[i]) / (Math.sqrt(v[i]) / bc2Sqrt + eps)
    }
  }
}
