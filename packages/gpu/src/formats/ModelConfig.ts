/**
 * A Qwen3 `config.json`: decoded with Schema, checked for the features this package implements, and turned into
 * the list of tensors (Hugging Face names and shapes) a checkpoint of that config must hold.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ModelConfig } from "@envtrain/gpu"
 *
 * const program = Effect.gen(function*() {
 *   const config = yield* ModelConfig.decode(JSON.parse(text))
 *   for (const t of ModelConfig.expectedTensors(config)) console.log(t.name, t.shape)
 * })
 * ```
 *
 * @since 0.0.0
 */
import { Data, Effect, Either, ParseResult, Schema } from "effect"

/** The only architecture the model code implements. */
export const SUPPORTED_ARCHITECTURE = "Qwen3ForCausalLM"

const PositiveInt = Schema.Int.pipe(Schema.positive())
const NonNegativeInt = Schema.Int.pipe(Schema.nonNegative())
const PositiveNumber = Schema.Number.pipe(Schema.positive())
const TokenIds = Schema.Union(NonNegativeInt, Schema.Array(NonNegativeInt), Schema.Null)

/**
 * The fields of a Hugging Face Qwen3 `config.json` that matter here, snake_case as in the file. Other keys are
 * kept (see {@link ModelConfig.extra}) so that saving writes them back unchanged.
 */
export const ConfigJson = Schema.Struct({
  architectures: Schema.Array(Schema.String),
  model_type: Schema.optional(Schema.String),
  vocab_size: PositiveInt,
  hidden_size: PositiveInt,
  intermediate_size: PositiveInt,
  num_hidden_layers: PositiveInt,
  num_attention_heads: PositiveInt,
  num_key_value_heads: Schema.optional(PositiveInt),
  head_dim: Schema.optional(Schema.NullOr(PositiveInt)),
  rms_norm_eps: PositiveNumber,
  rope_theta: Schema.optional(PositiveNumber),
  rope_parameters: Schema.optional(Schema.NullOr(Schema.Struct({ rope_theta: Schema.optional(PositiveNumber) }))),
  rope_scaling: Schema.optional(Schema.Unknown),
  max_position_embeddings: PositiveInt,
  tie_word_embeddings: Schema.optional(Schema.Boolean),
  torch_dtype: Schema.optional(Schema.NullOr(Schema.String)),
  dtype: Schema.optional(Schema.NullOr(Schema.String)),
  hidden_act: Schema.optional(Schema.String),
  attention_bias: Schema.optional(Schema.Boolean),
  use_sliding_window: Schema.optional(Schema.Boolean),
  bos_token_id: Schema.optional(TokenIds),
  eos_token_id: Schema.optional(TokenIds),
  pad_token_id: Schema.optional(TokenIds),
  initializer_range: Schema.optional(PositiveNumber)
})
/** A decoded `config.json`. */
export type ConfigJson = typeof ConfigJson.Type

/** Floating-point types a checkpoint may be stored in. */
export type CheckpointDtype = "float32" | "bfloat16" | "float16"

/** A validated Qwen3 configuration with every derived value filled in. */
export interface ModelConfig {
  readonly architecture: typeof SUPPORTED_ARCHITECTURE
  readonly vocab_size: number
  readonly hidden_size: number
  readonly intermediate_size: number
  readonly num_hidden_layers: number
  readonly num_attention_heads: number
  readonly num_key_value_heads: number
  readonly head_dim: number
  readonly rms_norm_eps: number
  readonly rope_theta: number
  readonly max_position_embeddings: number
  readonly tie_word_embeddings: boolean
  /** The dtype the checkpoint declares (`torch_dtype` or `dtype`); tensors are converted to f32 on load anyway. */
  readonly torch_dtype: CheckpointDtype
  readonly bos_token_id: number | null
  /** Every id that ends generation (`eos_token_id` may be a number or a list). */
  readonly eos_token_ids: ReadonlyArray<number>
  readonly pad_token_id: number | null
  readonly initializer_range: number
  /** The config.json keys not modelled above (e.g. `transformers_version`), written back as they were. */
  readonly extra: Readonly<Record<string, unknown>>
}

/** config.json does not describe a model this package can run. */
export class UnsupportedArchitecture extends Data.TaggedError("UnsupportedArchitecture")<{
  readonly found: string
  readonly path: string
}> {
  override get message() {
    return `Unsupported architecture ${this.found} in ${this.path}: envtrain implements only ${SUPPORTED_ARCHITECTURE} ` +
      `(model_type "qwen3", e.g. Qwen/Qwen3-0.6B, or a model made by \`envtrain init-model\`). ` +
      `Use a Qwen3 checkpoint.`
  }
}

/** config.json is malformed or its values contradict each other. */
export class InvalidModelConfig extends Data.TaggedError("InvalidModelConfig")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Invalid model config ${this.path}: ${this.problem}`
  }
}

/** Every way reading a `config.json` can fail. */
export type ModelConfigError = UnsupportedArchitecture | InvalidModelConfig

const DTYPES: ReadonlyArray<CheckpointDtype> = ["float32", "bfloat16", "float16"]

const toIds = (v: number | ReadonlyArray<number> | null | undefined): ReadonlyArray<number> =>
  v === null || v === undefined ? [] : typeof v === "number" ? [v] : v

/**
 * Decode and validate a parsed config.json. `path` only labels error messages.
 *
 * @example
 * ```ts
 * const config = yield* ModelConfig.decode(JSON.parse(text), "Qwen3-0.6B/config.json")
 * ```
 */
export const decode = (
  json: unknown,
  path = "config.json"
): Effect.Effect<ModelConfig, ModelConfigError> =>
  Effect.gen(function*() {
    // Say "unsupported architecture" before any field error: a Llama config is not a broken Qwen3 config.
    if (typeof json === "object" && json !== null && !Array.isArray(json)) {
      const archs = (json as Record<string, unknown>).architectures
      if (Array.isArray(archs) && archs.length > 0 && archs[0] !== SUPPORTED_ARCHITECTURE) {
        return yield* new UnsupportedArchitecture({ found: JSON.stringify(archs[0]), path })
      }
      const type = (json as Record<string, unknown>).model_type
      if (typeof type === "string" && type !== "qwen3") {
        return yield* new UnsupportedArchitecture({ found: `model_type ${JSON.stringify(type)}`, path })
      }
    }
    const decoded = Schema.decodeUnknownEither(ConfigJson, { errors: "all", onExcessProperty: "preserve" })(json)
    if (Either.isLeft(decoded)) {
      return yield* new InvalidModelConfig({
        path,
        problem: ParseResult.TreeFormatter.formatErrorSync(decoded.left)
      })
    }
    const c = decoded.right
    const bad = (problem: string) => new InvalidModelConfig({ path, problem })
    if (c.architectures.length !== 1 || c.architectures[0] !== SUPPORTED_ARCHITECTURE) {
      return yield* new UnsupportedArchitecture({ found: JSON.stringify(c.architectures), path })
    }
    const heads = c.num_attention_heads
    const kvHeads = c.num_key_value_heads ?? heads
    if (heads % kvHeads !== 0) {
      return yield* bad(
        `num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads}) for grouped-query attention.`
      )
    }
    let headDim = c.head_dim ?? 0
    if (!headDim) {
      if (c.hidden_size % heads !== 0) {
        return yield* bad(
          `head_dim is missing and hidden_size (${c.hidden_size}) is not divisible by num_attention_heads (${heads}); ` +
            `set head_dim.`
        )
      }
      headDim = c.hidden_size / heads
    }
    if (headDim % 2 !== 0) return yield* bad(`head_dim (${headDim}) must be even for rotary embeddings.`)
    if (c.hidden_act !== undefined && c.hidden_act !== "silu") {
      return yield* bad(`hidden_act is "${c.hidden_act}", but Qwen3's MLP here is SwiGLU with "silu".`)
    }
    if (c.attention_bias === true) {
      return yield* bad(`attention_bias is true; Qwen3 checkpoints have no attention biases and none are supported.`)
    }
    if (c.use_sliding_window === true) {
      return yield* bad(`use_sliding_window is true; only full causal attention is supported. Set it to false.`)
    }
    if (c.rope_scaling !== undefined && c.rope_scaling !== null) {
      return yield* bad(
        `rope_scaling is ${JSON.stringify(c.rope_scaling)}; only plain RoPE is supported. Set it to null.`
      )
    }
    const ropeTheta = c.rope_theta ?? c.rope_parameters?.rope_theta
    if (ropeTheta === undefined) return yield* bad(`rope_theta is missing (neither rope_theta nor rope_parameters).`)
    const dtype = c.torch_dtype ?? c.dtype ?? "float32"
    if (!DTYPES.includes(dtype as CheckpointDtype)) {
      return yield* bad(`torch_dtype "${dtype}" is not one of ${DTYPES.join(", ")}.`)
    }
    const bos = toIds(c.bos_token_id)
    const eos = toIds(c.eos_token_id)
    const pad = toIds(c.pad_token_id)
    for (const [key, ids] of [["bos_token_id", bos], ["eos_token_id", eos], ["pad_token_id", pad]] as const) {
      for (const id of ids) {
        if (id >= c.vocab_size) {
          return yield* bad(`${key} ${id} is outside the vocabulary (vocab_size ${c.vocab_size}).`)
        }
      }
    }
    const known = new Set(Object.keys(ConfigJson.fields))
    const extra: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(c)) if (!known.has(k)) extra[k] = v
    return {
      architecture: SUPPORTED_ARCHITECTURE,
      vocab_size: c.vocab_size,
      hidden_size: c.hidden_size,
      intermediate_size: c.intermediate_size,
      num_hidden_layers: c.num_hidden_layers,
      num_attention_heads: heads,
      num_key_value_heads: kvHeads,
      head_dim: headDim,
      rms_norm_eps: c.rms_norm_eps,
      rope_theta: ropeTheta,
      max_position_embeddings: c.max_position_embeddings,
      tie_word_embeddings: c.tie_word_embeddings ?? false,
      torch_dtype: dtype as CheckpointDtype,
      bos_token_id: bos[0] ?? null,
      eos_token_ids: eos,
      pad_token_id: pad[0] ?? null,
      initializer_range: c.initializer_range ?? 0.02,
      extra
    }
  })

/**
 * The config.json object for a config, in the key order transformers writes. Unknown keys read earlier come back.
 */
export const toJson = (config: ModelConfig): Record<string, unknown> => ({
  architectures: [config.architecture],
  attention_bias: false,
  attention_dropout: 0,
  bos_token_id: config.bos_token_id,
  eos_token_id: config.eos_token_ids.length === 1 ? config.eos_token_ids[0] : config.eos_token_ids,
  head_dim: config.head_dim,
  hidden_act: "silu",
  hidden_size: config.hidden_size,
  initializer_range: config.initializer_range,
  intermediate_size: config.intermediate_size,
  max_position_embeddings: config.max_position_embeddings,
  max_window_layers: config.num_hidden_layers,
  model_type: "qwen3",
  num_attention_heads: config.num_attention_heads,
  num_hidden_layers: config.num_hidden_layers,
  num_key_value_heads: config.num_key_value_heads,
  ...(config.pad_token_id === null ? {} : { pad_token_id: config.pad_token_id }),
  rms_norm_eps: config.rms_norm_eps,
  rope_scaling: null,
  rope_theta: config.rope_theta,
  sliding_window: null,
  tie_word_embeddings: config.tie_word_embeddings,
  torch_dtype: config.torch_dtype,
  use_cache: true,
  use_sliding_window: false,
  vocab_size: config.vocab_size,
  ...config.extra
})

/** The config fields the model reads (a full {@link ModelConfig} satisfies it): the shapes and numerics of the model, CPU and GPU alike. Hugging Face names. */
export type Config = Pick<
  ModelConfig,
  | "vocab_size"
  | "hidden_size"
  | "intermediate_size"
  | "num_hidden_layers"
  | "num_attention_heads"
  | "num_key_value_heads"
  | "head_dim"
  | "rms_norm_eps"
  | "rope_theta"
  | "tie_word_embeddings"
>

/** A tensor a checkpoint must contain. */
export interface TensorSpec {
  readonly name: string
  readonly shape: ReadonlyArray<number>
}

/** Hugging Face tensor names of layer `i`, in the order transformers lists them. */
export const layerTensorNames = (i: number) => {
  const p = `model.layers.${i}.`
  return {
    inputLayernorm: `${p}input_layernorm.weight`,
    q: `${p}self_attn.q_proj.weight`,
    k: `${p}self_attn.k_proj.weight`,
    v: `${p}self_attn.v_proj.weight`,
    o: `${p}self_attn.o_proj.weight`,
    qNorm: `${p}self_attn.q_norm.weight`,
    kNorm: `${p}self_attn.k_norm.weight`,
    postAttentionLayernorm: `${p}post_attention_layernorm.weight`,
    gate: `${p}mlp.gate_proj.weight`,
    up: `${p}mlp.up_proj.weight`,
    down: `${p}mlp.down_proj.weight`
  } as const
}

/** The token embedding's tensor name in Hugging Face Qwen3 checkpoints. */
export const EMBED_TOKENS = "model.embed_tokens.weight"
/** The final RMSNorm's tensor name in Hugging Face Qwen3 checkpoints. */
export const FINAL_NORM = "model.norm.weight"
/** The output projection's tensor name (absent when the embedding is tied). */
export const LM_HEAD = "lm_head.weight"

/**
 * Every tensor of a Qwen3 checkpoint with this config, with its shape (row-major, `[out, in]` for linear layers as
 * PyTorch stores them). `lm_head.weight` is absent when the embeddings are tied.
 */
export const expectedTensors = (config: Config): ReadonlyArray<TensorSpec> => {
  const h = config.hidden_size
  const q = config.num_attention_heads * config.head_dim
  const kv = config.num_key_value_heads * config.head_dim
  const out: Array<TensorSpec> = [{ name: EMBED_TOKENS, shape: [config.vocab_size, h] }]
  for (let i = 0; i < config.num_hidden_layers; i++) {
    const n = layerTensorNames(i)
    out.push(
      { name: n.inputLayernorm, shape: [h] },
      { name: n.q, shape: [q, h] },
      { name: n.k, shape: [kv, h] },
      { name: n.v, shape: [kv, h] },
      { name: n.o, shape: [h, q] },
      { name: n.qNorm, shape: [config.head_dim] },
      { name: n.kNorm, shape: [config.head_dim] },
      { name: n.postAttentionLayernorm, shape: [h] },
      { name: n.gate, shape: [config.intermediate_size, h] },
      { name: n.up, shape: [config.intermediate_size, h] },
      { name: n.down, shape: [h, config.intermediate_size] }
    )
  }
  out.push({ name: FINAL_NORM, shape: [h] })
  if (!config.tie_word_embeddings) out.push({ name: LM_HEAD, shape: [config.vocab_size, h] })
  return out
}

/** Whether a tensor is a norm weight (initialised to ones, excluded from weight decay). */
export const isNormWeight = (name: string) => name.endsWith("norm.weight")

/**
 * Whether AdamW decays a tensor, as transformers' Trainer decides by default: every parameter except those whose
 * name matches bias, layernorm, rmsnorm, a `norm` path component or `_norm` (so all RMSNorm weights, q/k norms
 * and model.norm are excluded; embeddings, lm_head and projections are decayed).
 */
export const decays = (name: string): boolean => {
  const lower = name.toLowerCase()
  return ![/bias/, /layernorm/, /rmsnorm/, /(?:^|\.)norm(?:$|\.)/, /_norm(?:$|\.)/].some((re) => re.test(lower))
}

/** Number of parameters (tied embeddings counted once). */
export const parameterCount = (config: ModelConfig): number =>
  expectedTensors(config).reduce((sum, t) => sum + t.shape.reduce((a, b) => a * b, 1), 0)
