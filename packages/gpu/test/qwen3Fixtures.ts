import { expectedTensors, type ModelConfig } from "../src/formats/ModelConfig.js"
import * as Ref from "../src/model/Qwen3Reference.js"

/** A tiny Qwen3 config (head_dim 16, GQA 4/2) for GPU tests. */
export const testConfig = (o: Partial<ModelConfig> = {}): ModelConfig => ({
  architecture: "Qwen3ForCausalLM",
  vocab_size: 40,
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  max_position_embeddings: 256,
  tie_word_embeddings: true,
  torch_dtype: "float32",
  bos_token_id: null,
  eos_token_ids: [],
  pad_token_id: null,
  initializer_range: 0.02,
  extra: {},
  ...o
})

export const testModel = (config: ModelConfig, seed: number) => {
  const w = Ref.randomWeights(config, { seed, std: 0.3, normJitter: 0.2 })
  const tensors = new Map(
    expectedTensors(config).map((s) => [s.name, { shape: s.shape, data: Float32Array.from(w[s.name]) }] as const)
  )
  return { config, tensors, weights: w }
}
