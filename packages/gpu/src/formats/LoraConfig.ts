/**
 * LoRA adapters as PEFT defines them: which projections get a low-rank update, its rank and scaling, and the
 * adapter tensors' names and shapes. One definition that the model (forward/backward), the trainer, and the
 * adapter files (PEFT's `adapter_config.json` + `adapter_model.safetensors`) all derive from.
 *
 * A adapted projection computes `y = x·Wᵀ + scaling · (dropout(x)·Aᵀ)·Bᵀ` with `A: [r, in]` (PEFT's `lora_A`)
 * and `B: [out, r]` (`lora_B`, zero at initialisation), `scaling = alpha / r`, or `alpha / √r` with rsLoRA.
 *
 * @since 0.0.0
 */
import { type Config, layerTensorNames, type TensorSpec } from "./ModelConfig.js"

/** The Qwen3 projections LoRA can adapt, by PEFT's module names. */
export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const

/** @since 0.0.0 */
export type LoraTarget = (typeof LORA_TARGETS)[number]

/** PEFT's `LoraConfig`, the fields envtrain honours (camelCase here; the file keeps PEFT's snake_case). */
export interface LoraConfig {
  readonly r: number
  readonly alpha: number
  readonly dropout: number
  readonly targetModules: ReadonlyArray<LoraTarget>
  /** rsLoRA: scale by alpha/√r instead of alpha/r. */
  readonly useRsLora: boolean
}

/** The factor on the low-rank product. */
export const scaling = (config: LoraConfig): number =>
  config.useRsLora ? config.alpha / Math.sqrt(config.r) : config.alpha / config.r

/** The base tensor each target adapts, in one layer. */
export const baseTensorName = (layer: number, target: LoraTarget): string => {
  const n = layerTensorNames(layer)
  switch (target) {
    case "q_proj":
      return n.q
    case "k_proj":
      return n.k
    case "v_proj":
      return n.v
    case "o_proj":
      return n.o
    case "gate_proj":
      return n.gate
    case "up_proj":
      return n.up
    case "down_proj":
      return n.down
  }
}

/** One adapted projection: its base tensor and the names of its two adapter tensors (envtrain's in-memory keys). */
export interface AdaptedProjection {
  readonly layer: number
  readonly target: LoraTarget
  readonly base: string
  /** `model.layers.{i}.self_attn.q_proj.lora_A.weight`, shape [r, in]. */
  readonly a: TensorSpec
  /** `….lora_B.weight`, shape [out, r]. */
  readonly b: TensorSpec
}

const projectionShape = (config: Config, target: LoraTarget): readonly [number, number] => {
  const h = config.hidden_size
  const q = config.num_attention_heads * config.head_dim
  const kv = config.num_key_value_heads * config.head_dim
  const ffn = config.intermediate_size
  switch (target) {
    case "q_proj":
      return [q, h]
    case "k_proj":
    case "v_proj":
      return [kv, h]
    case "o_proj":
      return [h, q]
    case "gate_proj":
    case "up_proj":
      return [ffn, h]
    case "down_proj":
      return [h, ffn]
  }
}

/**
 * Every adapted projection of a model, layer by layer in {@link LORA_TARGETS} order. In-memory keys are the base
 * tensor's name with `.weight` replaced by `.lora_A.weight` / `.lora_B.weight`; PEFT's file prefixes them with
 * `base_model.model.` ({@link PEFT_KEY_PREFIX}).
 */
export const adaptedProjections = (config: Config, lora: LoraConfig): ReadonlyArray<AdaptedProjection> => {
  const out: Array<AdaptedProjection> = []
  for (let layer = 0; layer < config.num_hidden_layers; layer++) {
    for (const target of LORA_TARGETS) {
      if (!lora.targetModules.includes(target)) continue
      const base = baseTensorName(layer, target)
      const [outDim, inDim] = projectionShape(config, target)
      const stem = base.slice(0, -".weight".length)
      out.push({
        layer,
        target,
        base,
        a: { name: `${stem}.lora_A.weight`, shape: [lora.r, inDim] },
        b: { name: `${stem}.lora_B.weight`, shape: [outDim, lora.r] }
      })
    }
  }
  return out
}

/** The prefix PEFT puts before a causal LM's tensor names in `adapter_model.safetensors`. */
export const PEFT_KEY_PREFIX = "base_model.model."
