/**
 * Sizes of the Qwen3-architecture models `envtrain init-model` makes. They are real Qwen3 configs (grouped-query
 * attention, q/k RMSNorm, SwiGLU, tied embeddings), small enough for a 2-core CPU running WebGPU on lavapipe
 * (~1 GFLOP/s):
 *
 * | preset | vocab | hidden | layers | heads / kv heads | head_dim | intermediate | context | parameters |
 * | --- | --- | --- | --- | --- | --- | --- | --- | --- |
 * | tiny  | 1024 | 64  | 2 | 4 / 2 | 16 | 192 | 2048 | ≈ 0.16 M (0.63 MB f32) |
 * | small | 2048 | 256 | 4 | 8 / 4 | 32 | 768 | 4096 | ≈ 3.7 M (15 MB f32) |
 *
 * `tiny` is for tests and CI (a training step is ~1 MFLOP per token); `small` is the CPU demo size (~22 MFLOP
 * per token for forward + backward, so tens of tokens per second on lavapipe). The vocabulary is the BPE
 * tokenizer trained from the project's own environment texts, padded up to a multiple of 64. RoPE theta is
 * 10000 rather than Qwen3's 1e6 because these models see contexts of a few thousand tokens at most.
 *
 * @example
 * ```ts
 * import { Preset } from "@envtrain/gpu"
 * const spec = Preset.presets.tiny // { hidden_size: 64, ... }
 * ```
 *
 * @since 0.0.0
 */
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import type { ModelConfig } from "../formats/ModelConfig.js"
import { SUPPORTED_ARCHITECTURE } from "../formats/ModelConfig.js"

/** The name of a model size made by envtrain itself (`init-model --preset`). */
export type PresetName = "tiny" | "small"

/** Every preset's name, smallest first. */
export const PRESET_NAMES: ReadonlyArray<PresetName> = ["tiny", "small"]

/** The size knobs of a preset. */
export interface PresetSpec {
  readonly name: PresetName
  /** Vocabulary size the BPE tokenizer is trained to (256 bytes + merges + added tokens). */
  readonly tokenizerVocabSize: number
  readonly hidden_size: number
  readonly intermediate_size: number
  readonly num_hidden_layers: number
  readonly num_attention_heads: number
  readonly num_key_value_heads: number
  readonly head_dim: number
  readonly max_position_embeddings: number
  readonly rope_theta: number
  readonly rms_norm_eps: number
}

/** Each preset's sizes (model and tokenizer). */
export const presets: Readonly<Record<PresetName, PresetSpec>> = {
  tiny: {
    name: "tiny",
    tokenizerVocabSize: 1024,
    hidden_size: 64,
    intermediate_size: 192,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    max_position_embeddings: 2048,
    rope_theta: 10000,
    rms_norm_eps: 1e-6
  },
  small: {
    name: "small",
    tokenizerVocabSize: 2048,
    hidden_size: 256,
    intermediate_size: 768,
    num_hidden_layers: 4,
    num_attention_heads: 8,
    num_key_value_heads: 4,
    head_dim: 32,
    max_position_embeddings: 4096,
    rope_theta: 10000,
    rms_norm_eps: 1e-6
  }
}

/** Round the vocabulary up to a multiple of 64, as Qwen pads its embedding table. */
export const paddedVocab = (n: number) => Math.ceil(n / 64) * 64

/**
 * The model config of a preset for a given tokenizer: vocab_size covers every token id, bos/pad is
 * `<|endoftext|>`, eos is `<|im_end|>`, as in Qwen3's config.json.
 */
export const configFor = (spec: PresetSpec, tokenizer: Tokenizer): ModelConfig => {
  const endOfText = tokenizer.tokenToId("<|endoftext|>") ?? null
  return {
    architecture: SUPPORTED_ARCHITECTURE,
    vocab_size: paddedVocab(tokenizer.vocabSize),
    hidden_size: spec.hidden_size,
    intermediate_size: spec.intermediate_size,
    num_hidden_layers: spec.num_hidden_layers,
    num_attention_heads: spec.num_attention_heads,
    num_key_value_heads: spec.num_key_value_heads,
    head_dim: spec.head_dim,
    rms_norm_eps: spec.rms_norm_eps,
    rope_theta: spec.rope_theta,
    max_position_embeddings: spec.max_position_embeddings,
    tie_word_embeddings: true,
    torch_dtype: "float32",
    bos_token_id: endOfText,
    eos_token_ids: tokenizer.eosTokenId === null ? [] : [tokenizer.eosTokenId],
    pad_token_id: tokenizer.padTokenId,
    initializer_range: 0.02,
    extra: {}
  }
}
