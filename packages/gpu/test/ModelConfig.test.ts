import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ModelConfig from "../src/formats/ModelConfig.js"

// The config.json of Qwen/Qwen3-0.6B (values as published).
const qwen3_0_6b = {
  architectures: ["Qwen3ForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: "silu",
  hidden_size: 1024,
  initializer_range: 0.02,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: "qwen3",
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-06,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  transformers_version: "4.51.0",
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936
}

describe("ModelConfig", () => {
  it.effect("decodes Qwen3-0.6B and derives its tensors and parameter count", () =>
    Effect.gen(function*() {
      const c = yield* ModelConfig.decode(qwen3_0_6b)
      assert.strictEqual(c.head_dim, 128)
      assert.deepStrictEqual(c.eos_token_ids, [151645])
      assert.strictEqual(c.torch_dtype, "bfloat16")
      assert.deepStrictEqual(c.extra, {
        attention_dropout: 0,
        max_window_layers: 28,
        sliding_window: null,
        transformers_version: "4.51.0",
        use_cache: true
      })
      const tensors = ModelConfig.expectedTensors(c)
      assert.strictEqual(tensors.length, 1 + 28 * 11 + 1) // tied: no lm_head
      const byName = new Map(tensors.map((t) => [t.name, t.shape]))
      assert.deepStrictEqual(byName.get("model.embed_tokens.weight"), [151936, 1024])
      assert.deepStrictEqual(byName.get("model.layers.27.self_attn.q_proj.weight"), [2048, 1024])
      assert.deepStrictEqual(byName.get("model.layers.0.self_attn.k_proj.weight"), [1024, 1024])
      assert.deepStrictEqual(byName.get("model.layers.0.self_attn.o_proj.weight"), [1024, 2048])
      assert.deepStrictEqual(byName.get("model.layers.0.self_attn.q_norm.weight"), [128])
      assert.deepStrictEqual(byName.get("model.layers.0.mlp.down_proj.weight"), [1024, 3072])
      assert.isFalse(byName.has("lm_head.weight"))
      // Qwen3-0.6B has 596M parameters with tied embeddings (0.44B without the embedding).
      assert.strictEqual(ModelConfig.parameterCount(c), 596_049_920)
      // Written back, every key is kept.
      const json = ModelConfig.toJson(c)
      for (const [k, v] of Object.entries(qwen3_0_6b)) assert.deepStrictEqual(json[k], v, k)
    }))

  it.effect("untied embeddings add lm_head.weight; head_dim defaults to hidden/heads", () =>
    Effect.gen(function*() {
      const { head_dim: _, ...rest } = qwen3_0_6b
      const c = yield* ModelConfig.decode({ ...rest, tie_word_embeddings: false })
      assert.strictEqual(c.head_dim, 64)
      const last = ModelConfig.expectedTensors(c).at(-1)!
      assert.deepStrictEqual(last, { name: "lm_head.weight", shape: [151936, 1024] })
    }))

  it.effect("an unsupported architecture says which are supported", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(
        ModelConfig.decode({ ...qwen3_0_6b, architectures: ["LlamaForCausalLM"], model_type: "llama" }, "m/config.json")
      )
      assert.strictEqual(e._tag, "UnsupportedArchitecture")
      assert.include(e.message, `Unsupported architecture "LlamaForCausalLM" in m/config.json`)
      assert.include(e.message, "only Qwen3ForCausalLM")
    }))

  it.effect("inconsistent or unsupported values are named", () =>
    Effect.gen(function*() {
      const check = (patch: Record<string, unknown>, text: string) =>
        Effect.gen(function*() {
          const e = yield* Effect.flip(ModelConfig.decode({ ...qwen3_0_6b, ...patch }))
          assert.strictEqual(e._tag, "InvalidModelConfig")
          assert.include(e.message, text)
        })
      yield* check({ num_key_value_heads: 3 }, "num_attention_heads (16) must be a multiple of num_key_value_heads (3)")
      yield* check({ rope_scaling: { type: "yarn", factor: 4 } }, "only plain RoPE is supported")
      yield* check({ hidden_act: "gelu" }, `hidden_act is "gelu"`)
      yield* check({ eos_token_id: 200000 }, "eos_token_id 200000 is outside the vocabulary (vocab_size 151936)")
      yield* check({ torch_dtype: "int8" }, `torch_dtype "int8" is not one of float32, bfloat16, float16`)
      yield* check({ hidden_size: -1 }, "hidden_size")
      yield* check({ num_hidden_layers: undefined }, "num_hidden_layers")
    }))
})
