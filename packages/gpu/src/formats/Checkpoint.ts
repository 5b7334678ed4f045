/**
 * Hugging Face model directories: load one (config.json, safetensors in bf16/f16/f32, single or sharded,
 * tokenizer.json, the chat template) into f32 tensors by name, save one in the same format, and make a new
 * randomly initialised Qwen3-architecture model from a {@link Preset} (`envtrain init-model`).
 *
 * Loading checks every tensor name and shape against config.json from the safetensors headers before reading any
 * data, so a mismatched checkpoint fails in milliseconds with the tensor's name and both shapes.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { NodeContext } from "@effect/platform-node"
 * import { Checkpoint } from "@envtrain/gpu"
 *
 * const program = Effect.gen(function*() {
 *   yield* Checkpoint.initModel({ preset: "tiny", out: "models/tiny", seed: 1 })
 *   const model = yield* Checkpoint.load("models/tiny")
 *   const embed = model.tensors.get("model.embed_tokens.weight")! // { shape: [1024, 64], data: Float32Array }
 * }).pipe(Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { ChatTemplate, type ChatTemplateError, QWEN3_STYLE_TEMPLATE } from "@envtrain/text/ChatTemplate"
import { mulberry32 } from "@envtrain/text/Random"
import * as Tok from "@envtrain/text/Tokenizer"
import { Data, Effect } from "effect"
import * as Preset from "../model/Preset.js"
import * as ModelConfig from "./ModelConfig.js"
import * as Safetensors from "./Safetensors.js"

/** A model held in memory. */
export interface Model {
  readonly config: ModelConfig.ModelConfig
  /** Every tensor of {@link ModelConfig.expectedTensors}, f32, in that order. */
  readonly tensors: Safetensors.Tensors
  readonly tokenizer: Tok.Tokenizer
  readonly chatTemplate: ChatTemplate
  /** generation_config.json as read (empty if absent). */
  readonly generationConfig: Readonly<Record<string, unknown>>
}

/** The directory is not a loadable model (missing or unreadable files). */
export class CheckpointError extends Data.TaggedError("CheckpointError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Cannot use model directory ${this.path}: ${this.problem}`
  }
}

/** The safetensors hold tensors a Qwen3 model of this config does not have. */
export class UnexpectedTensors extends Data.TaggedError("UnexpectedTensors")<{
  readonly path: string
  readonly names: ReadonlyArray<string>
}> {
  override get message() {
    const shown = this.names.slice(0, 5).map((n) => `"${n}"`).join(", ")
    const more = this.names.length > 5 ? ` and ${this.names.length - 5} more` : ""
    return `${this.path} holds tensors a Qwen3 model of this config.json does not have: ${shown}${more}. ` +
      `The checkpoint is another architecture or has extra modules (e.g. unmerged LoRA adapters); merge or drop them.`
  }
}

/** Every way loading a checkpoint directory can fail. */
export type LoadError =
  | CheckpointError
  | UnexpectedTensors
  | ModelConfig.ModelConfigError
  | Safetensors.SafetensorsError
  | Tok.TokenizerError
  | ChatTemplateError

const readJson = (file: string, optional: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const fail = (problem: string) => new CheckpointError({ path: file, problem })
    const exists = yield* fs.exists(file).pipe(Effect.mapError((e) => fail(e.message)))
    if (!exists) {
      if (optional) return undefined
      return yield* fail(`the file does not exist; a Hugging Face model directory needs it`)
    }
    const text = yield* fs.readFileString(file).pipe(Effect.mapError((e) => fail(e.message)))
    return yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => fail(`not valid JSON (${(e as Error).message})`)
    })
  })

/**
 * Read and check a directory's weights against a config: every expected tensor present with its expected shape,
 * nothing unexpected (an `lm_head.weight` next to tied embeddings is ignored, as transformers does), then the
 * data converted to f32.
 */
export const loadWeights = (
  dir: string,
  config: ModelConfig.ModelConfig
): Effect.Effect<
  Map<string, Safetensors.Tensor>,
  Safetensors.SafetensorsError | UnexpectedTensors,
  FileSystem.FileSystem | Path.Path
> =>
  Effect.scoped(Effect.gen(function*() {
    const files = yield* Safetensors.openCheckpoint(dir)
    const expected = ModelConfig.expectedTensors(config)
    for (const spec of expected) {
      const info = files.info(spec.name)
      if (info === undefined) {
        return yield* new Safetensors.MissingTensor({ name: spec.name, path: dir, available: files.names.length })
      }
      if (info.shape.length !== spec.shape.length || info.shape.some((d, i) => d !== spec.shape[i])) {
        return yield* new Safetensors.TensorShapeMismatch({
          name: spec.name,
          path: dir,
          expected: spec.shape,
          found: info.shape
        })
      }
    }
    const wanted = new Set(expected.map((t) => t.name))
    const extra = files.names.filter((n) =>
      !wanted.has(n) && !(n === ModelConfig.LM_HEAD && config.tie_word_embeddings)
    )
    if (extra.length > 0) return yield* new UnexpectedTensors({ path: dir, names: extra })
    const out = new Map<string, Safetensors.Tensor>()
    for (const spec of expected) out.set(spec.name, { shape: spec.shape, data: yield* files.read(spec.name) })
    return out
  }))

/** Load a whole model directory. */
export const load = (dir: string): Effect.Effect<Model, LoadError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const configPath = path.join(dir, "config.json")
    const config = yield* ModelConfig.decode(yield* readJson(configPath, false), configPath)
    const tokenizer = yield* Tok.Tokenizer.load(dir)
    if (tokenizer.vocabSize > config.vocab_size) {
      return yield* new CheckpointError({
        path: dir,
        problem: `the tokenizer has ${tokenizer.vocabSize} tokens but config.json's vocab_size is ${config.vocab_size}`
      })
    }
    const chatTemplate = yield* ChatTemplate.load(dir)
    const generationConfig = (yield* readJson(path.join(dir, "generation_config.json"), true)) ?? {}
    const tensors = yield* loadWeights(dir, config)
    return { config, tensors, tokenizer, chatTemplate, generationConfig: generationConfig as Record<string, unknown> }
  })

/** Options for {@link save}. */
export interface SaveOptions {
  /**
   * Stored dtype. Default: the dtype config.json declares when every weight is exactly representable in it (a bf16
   * checkpoint that was loaded, or whose weights stayed frozen, is saved bf16 bit for bit, not widened), otherwise
   * F32, so trained f32 weights are never rounded unless asked. BF16/F16 round to nearest even.
   */
  readonly dtype?: Safetensors.WriteDtype
  /** Shard when the weights exceed this many bytes; default 5 GiB. */
  readonly maxShardBytes?: number
}

const writeJson = (file: string, value: unknown) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    yield* fs.writeFileString(file, JSON.stringify(value, null, 2) + "\n").pipe(
      Effect.mapError((e) => new CheckpointError({ path: file, problem: e.message }))
    )
  })

const DTYPE_NAMES: Record<Safetensors.WriteDtype, ModelConfig.CheckpointDtype> = {
  F32: "float32",
  BF16: "bfloat16",
  F16: "float16"
}

/** The safetensors dtype a config.json `torch_dtype` names. */
export const storedDtype = (dtype: ModelConfig.CheckpointDtype): Safetensors.WriteDtype =>
  dtype === "bfloat16" ? "BF16" : dtype === "float16" ? "F16" : "F32"

/**
 * {@link SaveOptions.dtype}'s default: the declared dtype if it holds every weight exactly, else F32. Storing in the
 * declared dtype is what transformers' `save_pretrained` does; refusing to round is what keeps training exact.
 */
export const defaultDtype = (model: Pick<Model, "config" | "tensors">): Safetensors.WriteDtype => {
  const declared = storedDtype(model.config.torch_dtype)
  if (declared === "F32") return "F32"
  for (const t of model.tensors.values()) if (!Safetensors.exactIn(t.data, declared)) return "F32"
  return declared
}

/**
 * Save a model as a Hugging Face directory: config.json, model.safetensors (or shards + index), tokenizer.json,
 * tokenizer_config.json (with the chat template), generation_config.json. Loadable by transformers and by
 * {@link load}.
 */
export const save = (
  dir: string,
  model: Model,
  options: SaveOptions = {}
): Effect.Effect<void, CheckpointError | Safetensors.SafetensorsIoError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    yield* fs.makeDirectory(dir, { recursive: true }).pipe(
      Effect.mapError((e) => new CheckpointError({ path: dir, problem: e.message }))
    )
    // A previous save with another shard count must not leave files that the index no longer names.
    for (const name of yield* fs.readDirectory(dir).pipe(Effect.orElseSucceed(() => [] as Array<string>))) {
      if (/^model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?$/.test(name)) {
        yield* fs.remove(path.join(dir, name)).pipe(
          Effect.mapError((e) => new CheckpointError({ path: dir, problem: e.message }))
        )
      }
    }
    const dtype = options.dtype ?? defaultDtype(model)
    const config = { ...model.config, torch_dtype: DTYPE_NAMES[dtype] }
    yield* writeJson(path.join(dir, "config.json"), ModelConfig.toJson(config))
    yield* Safetensors.writeCheckpoint(dir, model.tensors, {
      dtype,
      ...(options.maxShardBytes === undefined ? {} : { maxShardBytes: options.maxShardBytes })
    })
    yield* writeJson(path.join(dir, "tokenizer.json"), model.tokenizer.json)
    yield* writeJson(path.join(dir, "tokenizer_config.json"), {
      ...model.tokenizer.config,
      chat_template: model.chatTemplate.source
    })
    yield* writeJson(path.join(dir, "generation_config.json"), model.generationConfig)
  })

/**
 * HF-style random initialisation: every matrix ~ normal(0, initializer_range), every RMSNorm weight 1. Each tensor
 * draws from its own stream keyed by (seed, name), so the same seed gives the same weights.
 */
export const randomInit = (config: ModelConfig.ModelConfig, seed: number): Map<string, Safetensors.Tensor> => {
  const out = new Map<string, Safetensors.Tensor>()
  for (const spec of ModelConfig.expectedTensors(config)) {
    const n = spec.shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(n)
    if (spec.shape.length === 1) data.fill(1)
    else {
      let h = seed >>> 0
      for (let i = 0; i < spec.name.length; i++) h = Math.imul(h ^ spec.name.charCodeAt(i), 0x01000193) >>> 0
      const rand = mulberry32(h)
      // Box-Muller, two normals per pair of uniforms; 1 - u keeps log away from 0.
      for (let i = 0; i < n; i += 2) {
        const r = Math.sqrt(-2 * Math.log(1 - rand()))
        const t = 2 * Math.PI * rand()
        data[i] = config.initializer_range * r * Math.cos(t)
        if (i + 1 < n) data[i + 1] = config.initializer_range * r * Math.sin(t)
      }
    }
    out.set(spec.name, { shape: spec.shape, data })
  }
  return out
}

/** Options for {@link initModel}. */
export interface InitModelOptions {
  readonly preset: Preset.PresetName
  /** Directory to write (created if needed). */
  readonly out: string
  /** Weight seed; default 0. */
  readonly seed?: number
  /** Stored dtype; default F32. */
  readonly dtype?: Safetensors.WriteDtype
}

/** What {@link initModel} made. */
export interface InitModelResult {
  readonly dir: string
  readonly config: ModelConfig.ModelConfig
  readonly parameters: number
  readonly tokenizerVocabSize: number
}

/**
 * Build a model in memory from a preset: train the BPE tokenizer on the project's corpus, size the config,
 * draw the weights, attach the Qwen3-style chat template.
 */
export const makeModel = (
  preset: Preset.PresetName,
  seed = 0
): Effect.Effect<Model, Tok.TokenizerError | ChatTemplateError> =>
  Effect.gen(function*() {
    const spec = Preset.presets[preset]
    const json = Tok.train({ vocabSize: spec.tokenizerVocabSize })
    const tokenizerConfig = Tok.qwen3TokenizerConfig(json, QWEN3_STYLE_TEMPLATE)
    const tokenizer = yield* Tok.Tokenizer.fromJson(json, tokenizerConfig)
    const chatTemplate = yield* ChatTemplate.fromTokenizerConfig(tokenizerConfig)
    const config = Preset.configFor(spec, tokenizer)
    return {
      config,
      tensors: randomInit(config, seed),
      tokenizer,
      chatTemplate,
      generationConfig: {
        bos_token_id: config.bos_token_id,
        eos_token_id: tokenizer.eosTokenIds,
        pad_token_id: tokenizer.padTokenId,
        do_sample: true,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0
      }
    }
  })

/**
 * `envtrain init-model --preset tiny|small --out DIR`: write a new random Qwen3-architecture model directory.
 */
export const initModel = (
  options: InitModelOptions
): Effect.Effect<
  InitModelResult,
  Tok.TokenizerError | ChatTemplateError | CheckpointError | Safetensors.SafetensorsIoError,
  FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const model = yield* makeModel(options.preset, options.seed ?? 0)
    yield* save(options.out, model, options.dtype === undefined ? {} : { dtype: options.dtype })
    return {
      dir: options.out,
      config: model.config,
      parameters: ModelConfig.parameterCount(model.config),
      tokenizerVocabSize: model.tokenizer.vocabSize
    }
  })
