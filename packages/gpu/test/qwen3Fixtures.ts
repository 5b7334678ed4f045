import { assert } from "@effect/vitest"
import type * as CpuModel from "../src/cpu/CpuModel.js"
import { adaptedProjections, LORA_TARGETS, type LoraConfig } from "../src/formats/LoraConfig.js"
import { expectedTensors, type ModelConfig } from "../src/formats/ModelConfig.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { maxRelError } from "./helpers.js"

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

/** A LoRA config for the CPU device's tests: r 4, alpha 8, no dropout, all seven projections, unless overridden. */
export const loraConfig = (o: Partial<LoraConfig> = {}): LoraConfig => ({
  r: 4,
  alpha: 8,
  dropout: 0,
  targetModules: LORA_TARGETS,
  useRsLora: false,
  ...o
})

/** PEFT's init leaves B = 0; B gets values here so every path carries a signal. */
export const adaptersWithSignal = (config: ModelConfig, l: LoraConfig) => {
  const adapters = Ref.initAdapters(config, l, { seed: 5 })
  adaptedProjections(config, l).forEach((p, i) => {
    const b = adapters[p.b.name]
    for (let j = 0; j < b.length; j++) b[j] = 0.2 * Math.sin(3 * j + i)
  })
  return adapters
}

/** Two packed rows of 9 tokens; the second holds two sequences (positions restart at 0). */
export const packedT = 9
export const packedTokens = Array.from({ length: 2 * packedT }, (_, i) => (i * 7 + 3) % 40)
export const packedPositions = [...Array.from({ length: packedT }, (_, t) => t), 0, 1, 2, 3, 0, 1, 2, 3, 4]

/**
 * KV-cache decode against the spec's no-cache forward: a batch of two caches (6 and 3 tokens, the first extended in
 * two calls) must give the spec's logits at each extended position, on `refWeights` (with `lora`'s adapters if
 * given). Returns the second call's logits (the last position of the 6-token sequence) and the two caches.
 */
export const assertDecodeMatchesSpec = (
  model: CpuModel.CpuModel,
  config: ModelConfig,
  refWeights: Ref.Weights,
  lora?: Ref.Lora
) => {
  const a = [1, 5, 9, 2, 7, 3]
  const b = [4, 4, 8]
  const ca = model.makeKvCache(16)
  const cb = model.makeKvCache(16)
  const first = Float32Array.from(model.extendBatch([ca, cb], [a.slice(0, 4), b]))
  const second = Float32Array.from(model.extendBatch([ca], [a.slice(4)]))
  const V = config.vocab_size
  const ref = (t: ReadonlyArray<number>) =>
    Ref.forward(config, refWeights, { tokens: t, batch: 1, seqLen: t.length }, lora === undefined ? {} : { lora })
      .logits
  assert.isBelow(maxRelError(first.subarray(0, V), ref(a.slice(0, 4)).subarray(3 * V, 4 * V)), 1e-5)
  assert.isBelow(maxRelError(first.subarray(V, 2 * V), ref(b).subarray(2 * V, 3 * V)), 1e-5)
  assert.isBelow(maxRelError(second, ref(a).subarray(5 * V, 6 * V)), 1e-5)
  return { second, caches: [ca, cb] as const }
}
