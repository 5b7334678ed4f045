// Qwen3-0.6B's shapes and numerics as transformers' config.json has them: the one definition the benches that
// measure at 0.6B's size derive their configs from (fewer layers, a smaller vocabulary).
import type { Config } from "../../packages/gpu/src/formats/ModelConfig.js"

export const qwen3_0_6b: Config = {
  vocab_size: 151936,
  hidden_size: 1024,
  intermediate_size: 3072,
  num_hidden_layers: 28,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 128,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  tie_word_embeddings: true
}
