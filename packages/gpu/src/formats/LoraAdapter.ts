/**
 * LoRA adapter directories exactly as PEFT saves them: `adapter_config.json` (PEFT 0.21's `LoraConfig` fields,
 * snake_case) and `adapter_model.safetensors` (keys `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`,
 * f32 or bf16). What envtrain saves, PEFT's `PeftModel.from_pretrained` loads; what PEFT saves, {@link load} reads.
 *
 * Reading refuses, naming the field and the fix, every PEFT option envtrain cannot honour (DoRA, trained biases,
 * `modules_to_save`, per-layer selection, rank/alpha patterns, `fan_in_fan_out`, targets that are not Qwen3
 * projections) and every tensor whose name or shape disagrees with the base model's config, so an adapter never
 * loads into the wrong model silently.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { NodeContext } from "@effect/platform-node"
 * import { Checkpoint, LoraAdapter } from "@envtrain/gpu"
 *
 * const program = Effect.gen(function*() {
 *   const base = yield* Checkpoint.load("models/tiny")
 *   const adapter = yield* LoraAdapter.load("runs/catch/adapter", base.config)
 *   yield* LoraAdapter.save("out/adapter", adapter, { dtype: "BF16" })
 * }).pipe(Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Data, Effect } from "effect"
import * as Checkpoint from "./Checkpoint.js"
import { roundToDtype } from "./internal/dtype.js"
import {
  adaptedProjections,
  LORA_TARGETS,
  type LoraConfig,
  type LoraTarget,
  PEFT_KEY_PREFIX,
  scaling
} from "./LoraConfig.js"
import * as ModelConfig from "./ModelConfig.js"
import * as Safetensors from "./Safetensors.js"

/** An adapter held in memory. */
export interface Adapter {
  readonly config: LoraConfig
  /**
   * Every tensor of {@link adaptedProjections}, by envtrain's in-memory name (`model.layers.0.self_attn.q_proj.lora_A
   * .weight`), f32, in that order.
   */
  readonly tensors: Safetensors.Tensors
  /** `base_model_name_or_path`: where the base model lives; informational, PEFT reads it to find the base. */
  readonly baseModel: string | null
}

/** The adapter config file's name. */
export const CONFIG_FILE = "adapter_config.json"
/** The adapter weights file's name. */
export const WEIGHTS_FILE = "adapter_model.safetensors"

/** The adapter directory cannot be read or written (missing files, unreadable JSON, OS errors). */
export class AdapterFileError extends Data.TaggedError("AdapterFileError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Cannot use LoRA adapter ${this.path}: ${this.problem}`
  }
}

/** `adapter_config.json` asks for something envtrain does not do, or is malformed. */
export class UnsupportedAdapterConfig extends Data.TaggedError("UnsupportedAdapterConfig")<{
  readonly path: string
  readonly field: string
  readonly problem: string
  readonly fix: string
}> {
  override get message() {
    return `${this.path}: "${this.field}" ${this.problem}. ${this.fix}`
  }
}

/** The adapter's tensors do not fit the base model (other names, other shapes, missing ones). */
export class AdapterTensorMismatch extends Data.TaggedError("AdapterTensorMismatch")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `${this.path}: ${this.problem}. The adapter was trained on another base model or with another ` +
      `adapter_config.json; load it onto the base it was made for.`
  }
}

/** Every way loading an adapter can fail. */
export type LoadError =
  | AdapterFileError
  | UnsupportedAdapterConfig
  | AdapterTensorMismatch
  | Safetensors.SafetensorsError

/**
 * `adapter_config.json` as PEFT 0.21.2 writes it for a plain LoRA on a causal LM, every field PEFT serialises, with
 * PEFT's defaults for what envtrain does not use (so PEFT reads back exactly the configuration it would have saved).
 */
export const toConfigJson = (config: LoraConfig, baseModel: string | null): Record<string, unknown> => ({
  alora_invocation_tokens: null,
  alpha_pattern: {},
  arrow_config: null,
  auto_mapping: null,
  base_model_name_or_path: baseModel,
  bias: "none",
  corda_config: null,
  ensure_weight_tying: false,
  eva_config: null,
  exclude_modules: null,
  fan_in_fan_out: false,
  inference_mode: true,
  init_lora_weights: true,
  kasa_config: null,
  layer_replication: null,
  layers_pattern: null,
  layers_to_transform: null,
  loftq_config: {},
  lora_alpha: config.alpha,
  lora_bias: false,
  lora_dropout: config.dropout,
  lora_ga_config: null,
  megatron_config: null,
  megatron_core: "megatron.core",
  modules_to_save: null,
  monteclora_config: null,
  peft_type: "LORA",
  peft_version: "0.21.2",
  qalora_group_size: 16,
  r: config.r,
  rank_pattern: {},
  revision: null,
  target_modules: LORA_TARGETS.filter((t) => config.targetModules.includes(t)),
  target_parameters: null,
  task_type: "CAUSAL_LM",
  trainable_token_indices: null,
  use_bdlora: null,
  use_dora: false,
  use_qalora: false,
  use_rslora: config.useRsLora,
  velora_config: null
})

const isEmpty = (v: unknown) =>
  v === undefined || v === null || v === false ||
  (Array.isArray(v) && v.length === 0) ||
  (typeof v === "object" && v !== null && Object.keys(v).length === 0)

/**
 * Options PEFT may set that change what the adapter computes or where it applies; each must be absent or empty
 * (null, false, {}, []). The text says what to do instead.
 */
const MUST_BE_EMPTY: ReadonlyArray<readonly [field: string, fix: string]> = [
  ["use_dora", "DoRA is not implemented; train a plain LoRA (use_dora=False) or merge the adapter with PEFT first"],
  ["lora_bias", "LoRA biases are not implemented; train with lora_bias=False"],
  [
    "modules_to_save",
    "fully trained extra modules are not part of envtrain's adapters; merge them into the base " +
    "with PEFT (merge_and_unload) and save that as the base"
  ],
  ["layers_to_transform", "envtrain adapts every layer; drop layers_to_transform (or merge the adapter with PEFT)"],
  ["layers_pattern", "envtrain adapts every layer; drop layers_pattern"],
  ["rank_pattern", "one rank for every module is supported; drop rank_pattern"],
  ["alpha_pattern", "one alpha for every module is supported; drop alpha_pattern"],
  ["exclude_modules", "envtrain adapts the targets in every layer; drop exclude_modules"],
  ["layer_replication", "layer replication is not supported; drop it"],
  ["target_parameters", "only nn.Linear targets (target_modules) are supported"],
  ["trainable_token_indices", "trainable token embeddings are not supported; drop trainable_token_indices"],
  ["fan_in_fan_out", "Qwen3's projections are [out, in] (nn.Linear); fan_in_fan_out=True is for GPT-2's Conv1D"],
  ["use_qalora", "QA-LoRA is not supported"],
  ["alora_invocation_tokens", "activated LoRA (aLoRA) is not supported"]
]

/** `init_lora_weights` values whose saved adapter is a plain LoRA on the unmodified base. */
const PLAIN_INITS: ReadonlyArray<unknown> = [true, false, "gaussian", undefined, null]

/** Decode `adapter_config.json` (already parsed), refusing what envtrain cannot honour. */
export const decodeConfig = (
  json: unknown,
  path: string
): Effect.Effect<{ readonly config: LoraConfig; readonly baseModel: string | null }, UnsupportedAdapterConfig> =>
  Effect.gen(function*() {
    const refuse = (field: string, problem: string, fix: string) =>
      new UnsupportedAdapterConfig({ path, field, problem, fix })
    if (typeof json !== "object" || json === null || Array.isArray(json)) {
      return yield* refuse("(file)", "is not a JSON object", "Save the adapter again with PEFT's save_pretrained.")
    }
    const c = json as Record<string, unknown>
    if (c.peft_type !== "LORA") {
      return yield* refuse(
        "peft_type",
        `is ${JSON.stringify(c.peft_type)}`,
        "Only LoRA adapters (peft_type \"LORA\") are supported."
      )
    }
    if (c.task_type !== undefined && c.task_type !== null && c.task_type !== "CAUSAL_LM") {
      return yield* refuse(
        "task_type",
        `is ${JSON.stringify(c.task_type)}`,
        "envtrain runs causal LMs; the adapter must be saved with task_type=\"CAUSAL_LM\"."
      )
    }
    if (c.bias !== undefined && c.bias !== "none") {
      return yield* refuse(
        "bias",
        `is ${JSON.stringify(c.bias)}`,
        "Qwen3's projections have no biases to train; use bias=\"none\"."
      )
    }
    for (const [field, fix] of MUST_BE_EMPTY) {
      if (!isEmpty(c[field])) return yield* refuse(field, `is ${JSON.stringify(c[field])}`, `${fix}.`)
    }
    if (!PLAIN_INITS.includes(c.init_lora_weights)) {
      return yield* refuse(
        "init_lora_weights",
        `is ${JSON.stringify(c.init_lora_weights)}, an initialisation that also changes the base weights`,
        "Convert it to a plain LoRA on the original base with PEFT (save_pretrained(..., " +
          "path_initial_model_for_weight_conversion=...)) and load that."
      )
    }
    const r = c.r
    if (typeof r !== "number" || !Number.isSafeInteger(r) || r < 1) {
      return yield* refuse("r", `is ${JSON.stringify(r)}`, "The rank must be a positive integer.")
    }
    const alpha = c.lora_alpha ?? 8
    if (typeof alpha !== "number" || !Number.isFinite(alpha)) {
      return yield* refuse("lora_alpha", `is ${JSON.stringify(alpha)}`, "lora_alpha must be a number.")
    }
    const dropout = c.lora_dropout ?? 0
    if (typeof dropout !== "number" || !(dropout >= 0 && dropout < 1)) {
      return yield* refuse("lora_dropout", `is ${JSON.stringify(dropout)}`, "lora_dropout must be in [0, 1).")
    }
    const useRsLora = c.use_rslora ?? false
    if (typeof useRsLora !== "boolean") {
      return yield* refuse("use_rslora", `is ${JSON.stringify(useRsLora)}`, "use_rslora must be true or false.")
    }
    const targetModules = yield* decodeTargets(c.target_modules, refuse)
    const baseModel = typeof c.base_model_name_or_path === "string" ? c.base_model_name_or_path : null
    return { config: { r, alpha, dropout, targetModules, useRsLora }, baseModel }
  })

const decodeTargets = (
  value: unknown,
  refuse: (field: string, problem: string, fix: string) => UnsupportedAdapterConfig
): Effect.Effect<ReadonlyArray<LoraTarget>, UnsupportedAdapterConfig> => {
  const names = `Name Qwen3 projections as a list: ${LORA_TARGETS.join(", ")} (or "all-linear")`
  // PEFT's "all-linear" adapts every linear layer of the decoder except the output head.
  if (value === "all-linear") return Effect.succeed(LORA_TARGETS)
  if (typeof value === "string") {
    return Effect.fail(refuse("target_modules", `is the regular expression ${JSON.stringify(value)}`, `${names}.`))
  }
  if (!Array.isArray(value) || value.length === 0) {
    return Effect.fail(refuse("target_modules", `is ${JSON.stringify(value)}`, `${names}.`))
  }
  const out = new Set<LoraTarget>()
  for (const t of value) {
    // PEFT matches a list entry against the end of each module's dotted name; `self_attn.q_proj` means q_proj.
    const leaf = typeof t === "string" ? t.split(".").at(-1)! : ""
    if (!(LORA_TARGETS as ReadonlyArray<string>).includes(leaf)) {
      return Effect.fail(
        refuse("target_modules", `names ${JSON.stringify(t)}, which is not a Qwen3 projection`, `${names}.`)
      )
    }
    out.add(leaf as LoraTarget)
  }
  return Effect.succeed(LORA_TARGETS.filter((t) => out.has(t)))
}

const readConfigFile = (file: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const fail = (problem: string) => new AdapterFileError({ path: file, problem })
    if (!(yield* fs.exists(file).pipe(Effect.mapError((e) => fail(e.message))))) {
      return yield* fail(`the file does not exist; a PEFT adapter directory holds ${CONFIG_FILE} and ${WEIGHTS_FILE}`)
    }
    const text = yield* fs.readFileString(file).pipe(Effect.mapError((e) => fail(e.message)))
    return yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => fail(`not valid JSON (${(e as Error).message})`)
    })
  })

/** Read only `adapter_config.json` of an adapter directory. */
export const loadConfig = (
  dir: string
): Effect.Effect<
  { readonly config: LoraConfig; readonly baseModel: string | null },
  AdapterFileError | UnsupportedAdapterConfig,
  FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const file = path.join(dir, CONFIG_FILE)
    return yield* decodeConfig(yield* readConfigFile(file), file)
  })

/**
 * Load an adapter directory for a base model of `base`'s shape: the config is checked, then every tensor name and
 * shape from the safetensors header before any data is read.
 */
export const load = (
  dir: string,
  base: ModelConfig.Config
): Effect.Effect<Adapter, LoadError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const fs = yield* FileSystem.FileSystem
    const { baseModel, config } = yield* loadConfig(dir)
    const weights = path.join(dir, WEIGHTS_FILE)
    if (!(yield* fs.exists(weights).pipe(Effect.orElseSucceed(() => false)))) {
      return yield* new AdapterFileError({
        path: weights,
        problem: "the file does not exist (an adapter saved as adapter_model.bin must be re-saved with " +
          "safe_serialization=True)"
      })
    }
    const tensors = yield* Effect.scoped(Effect.gen(function*() {
      const file = yield* Safetensors.open(weights)
      const expected = yield* checkTensors(weights, file.header.tensors, base, config)
      const out = new Map<string, Safetensors.Tensor>()
      for (const spec of expected) {
        out.set(spec.name, { shape: spec.shape, data: yield* file.read(PEFT_KEY_PREFIX + spec.name) })
      }
      return out
    }))
    return { config, tensors, baseModel }
  })

/**
 * Checks stored tensors (PEFT's keys) against what `config` on `base` needs: every one present with its shape,
 * nothing else. Returns the expected tensors (in-memory names) in order.
 */
const checkTensors = (
  path: string,
  stored: ReadonlyArray<{ readonly name: string; readonly shape: ReadonlyArray<number> }>,
  base: ModelConfig.Config,
  config: LoraConfig
) =>
  Effect.gen(function*() {
    const mismatch = (problem: string) => new AdapterTensorMismatch({ path, problem })
    const byName = new Map(stored.map((t) => [t.name, t.shape]))
    const expected = adaptedProjections(base, config).flatMap((p) => [p.a, p.b])
    for (const spec of expected) {
      const shape = byName.get(PEFT_KEY_PREFIX + spec.name)
      if (shape === undefined) return yield* mismatch(`tensor "${PEFT_KEY_PREFIX + spec.name}" is missing`)
      if (shape.length !== spec.shape.length || shape.some((d, i) => d !== spec.shape[i])) {
        return yield* mismatch(
          `tensor "${PEFT_KEY_PREFIX + spec.name}" has shape [${shape.join(", ")}] but r=${config.r} on this base ` +
            `model needs [${spec.shape.join(", ")}]`
        )
      }
    }
    const wanted = new Set(expected.map((s) => PEFT_KEY_PREFIX + s.name))
    const extra = stored.map((t) => t.name).filter((n) => !wanted.has(n))
    if (extra.length > 0) {
      const more = extra.length > 3 ? ` and ${extra.length - 3} more` : ""
      return yield* mismatch(
        `it holds tensors this config does not describe: ${extra.slice(0, 3).map((n) => `"${n}"`).join(", ")}${more}`
      )
    }
    return expected
  })

/**
 * The `__metadata__` key under which a pushed adapter (one safetensors file, see {@link encodePushed}) carries its
 * `adapter_config.json`.
 */
export const PUSHED_CONFIG_KEY = "peft_adapter_config"

/**
 * An adapter as one safetensors file for a weight push (`POST /update_weights`): PEFT's tensor keys, f32, and the
 * adapter_config.json in the header's metadata — a trainer of a LoRA sends this instead of the full model.
 */
export const encodePushed = (adapter: Adapter): Uint8Array => {
  const prefixed = new Map<string, Safetensors.Tensor>()
  for (const [name, t] of adapter.tensors) prefixed.set(PEFT_KEY_PREFIX + name, t)
  return Safetensors.encode(prefixed, {
    metadata: { format: "pt", [PUSHED_CONFIG_KEY]: JSON.stringify(toConfigJson(adapter.config, adapter.baseModel)) }
  })
}

/**
 * Reads a pushed safetensors file: the adapter, checked against `base`, when its metadata carries an adapter
 * config ({@link encodePushed}); undefined when it does not (then it is a full model's weights).
 */
export const decodePushed = (
  bytes: Uint8Array,
  base: ModelConfig.Config,
  path = "<pushed weights>"
): Effect.Effect<Adapter | undefined, LoadError> =>
  Effect.gen(function*() {
    const header = yield* Safetensors.readHeader(bytes, path)
    const text = header.metadata?.[PUSHED_CONFIG_KEY]
    if (text === undefined) return undefined
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => new AdapterFileError({ path, problem: `its adapter config is not JSON (${(e as Error).message})` })
    })
    const { baseModel, config } = yield* decodeConfig(json, path)
    const expected = yield* checkTensors(path, header.tensors, base, config)
    const decoded = yield* Safetensors.decode(bytes, path)
    const tensors = new Map<string, Safetensors.Tensor>()
    for (const spec of expected) tensors.set(spec.name, decoded.get(PEFT_KEY_PREFIX + spec.name)!)
    return { config, tensors, baseModel }
  })

/** Options for {@link save}. */
export interface SaveOptions {
  /** Stored dtype; default F32 (exact). BF16 rounds to nearest even, as PEFT saves a bf16 adapter. */
  readonly dtype?: "F32" | "BF16"
}

/**
 * Save an adapter as PEFT does: `adapter_config.json` and `adapter_model.safetensors` with PEFT's key names.
 */
export const save = (
  dir: string,
  adapter: Adapter,
  options: SaveOptions = {}
): Effect.Effect<void, AdapterFileError | Safetensors.SafetensorsIoError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const fail = (e: { message: string }) => new AdapterFileError({ path: dir, problem: e.message })
    yield* fs.makeDirectory(dir, { recursive: true }).pipe(Effect.mapError(fail))
    const prefixed = new Map<string, Safetensors.Tensor>()
    for (const [name, t] of adapter.tensors) prefixed.set(PEFT_KEY_PREFIX + name, t)
    yield* Safetensors.writeFile(path.join(dir, WEIGHTS_FILE), prefixed, { dtype: options.dtype ?? "F32" })
    const json = toConfigJson(adapter.config, adapter.baseModel)
    yield* fs.writeFileString(path.join(dir, CONFIG_FILE), JSON.stringify(json, null, 2) + "\n").pipe(
      Effect.mapError(fail)
    )
  })

/**
 * Fold an adapter into base weights: every adapted projection becomes `W + scaling · B·A`, summed in f64 and rounded
 * once to `dtype` (the base's stored dtype, so saving in it is exact); every other tensor is passed through. Dropout
 * does not apply (it is a training-time mask). The adapter must have been loaded for this base's config.
 */
export const merge = (
  base: ModelConfig.Config,
  weights: Safetensors.Tensors,
  adapter: Adapter,
  dtype: Safetensors.WriteDtype
): Map<string, Safetensors.Tensor> => {
  const out = new Map(weights)
  const s = scaling(adapter.config)
  const r = adapter.config.r
  for (const p of adaptedProjections(base, adapter.config)) {
    const w = weights.get(p.base)
    const a = adapter.tensors.get(p.a.name)?.data
    const b = adapter.tensors.get(p.b.name)?.data
    if (w === undefined || a === undefined || b === undefined) {
      throw new Error(`merge: "${p.base}" or its adapter tensors are missing; load both for the same config`)
    }
    const [rows, cols] = [p.b.shape[0], p.a.shape[1]]
    const data = new Float32Array(rows * cols)
    // Row by row, B·A accumulated over k into an f64 row (A read sequentially), then W + s·(B·A) rounded once.
    const delta = new Float64Array(cols)
    for (let o = 0; o < rows; o++) {
      delta.fill(0)
      for (let k = 0; k < r; k++) {
        const c = b[o * r + k]
        const off = k * cols
        for (let i = 0; i < cols; i++) delta[i] += c * a[off + i]
      }
      const row = o * cols
      for (let i = 0; i < cols; i++) data[row + i] = roundToDtype(w.data[row + i] + s * delta[i], dtype)
    }
    out.set(p.base, { shape: w.shape, data })
  }
  return out
}

/** Options for {@link mergeDirectory}. */
export interface MergeOptions {
  /** A Hugging Face Qwen3 model directory. */
  readonly base: string
  /** A PEFT LoRA adapter directory made for that base. */
  readonly adapter: string
  /** The directory to write: a full checkpoint in the base's dtype. */
  readonly out: string
}

/** What {@link mergeDirectory} wrote. */
export interface MergeResult {
  readonly out: string
  readonly dtype: Safetensors.WriteDtype
  readonly mergedTensors: number
  readonly files: ReadonlyArray<string>
}

const WEIGHT_FILE = /^model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?$/

/**
 * `envtrain merge --base DIR --adapter DIR --out DIR`: the base with the adapter folded in, saved as a full Hugging
 * Face checkpoint in the base's dtype. Every other file of the base (config.json, tokenizer, chat template,
 * generation config) is copied unchanged, so the result loads wherever the base did, without PEFT.
 */
export const mergeDirectory = (
  options: MergeOptions
): Effect.Effect<
  MergeResult,
  | LoadError
  | ModelConfig.ModelConfigError
  | Checkpoint.UnexpectedTensors
  | MergeTargetError,
  FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    if (path.resolve(options.out) === path.resolve(options.base)) {
      return yield* new MergeTargetError({
        path: options.out,
        problem: "it is the base directory; write the merged model to a new directory"
      })
    }
    const fail = (file: string) => (e: { message: string }) => new AdapterFileError({ path: file, problem: e.message })
    const configPath = path.join(options.base, "config.json")
    const text = yield* fs.readFileString(configPath).pipe(Effect.mapError(fail(configPath)))
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => new AdapterFileError({ path: configPath, problem: `not valid JSON (${(e as Error).message})` })
    })
    const config = yield* ModelConfig.decode(json, configPath)
    const adapter = yield* load(options.adapter, config)
    const weights = yield* Checkpoint.loadWeights(options.base, config)
    const dtype = Checkpoint.storedDtype(config.torch_dtype)
    const merged = merge(config, weights, adapter, dtype)
    yield* fs.makeDirectory(options.out, { recursive: true }).pipe(Effect.mapError(fail(options.out)))
    for (const name of yield* fs.readDirectory(options.out).pipe(Effect.mapError(fail(options.out)))) {
      // A stale shard from an earlier save into the same directory would be read as part of this model.
      if (WEIGHT_FILE.test(name)) yield* fs.remove(path.join(options.out, name)).pipe(Effect.mapError(fail(name)))
    }
    const copied: Array<string> = []
    for (const name of yield* fs.readDirectory(options.base).pipe(Effect.mapError(fail(options.base)))) {
      const from = path.join(options.base, name)
      const info = yield* fs.stat(from).pipe(Effect.mapError(fail(from)))
      if (info.type !== "File" || WEIGHT_FILE.test(name)) continue
      yield* fs.copyFile(from, path.join(options.out, name)).pipe(Effect.mapError(fail(from)))
      copied.push(name)
    }
    const written = yield* Safetensors.writeCheckpoint(options.out, merged, { dtype })
    return {
      out: options.out,
      dtype,
      mergedTensors: adaptedProjections(config, adapter.config).length,
      files: [...copied, ...written].sort()
    }
  })

/** The merge's output directory is not usable. */
export class MergeTargetError extends Data.TaggedError("MergeTargetError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Cannot write the merged model to ${this.path}: ${this.problem}`
  }
}
