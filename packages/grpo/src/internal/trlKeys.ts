/**
 * TRL's `GRPOConfig` keys (and the transformers `TrainingArguments` it inherits) that have no envtrain field of
 * their own: each is accepted where its value asks for nothing envtrain does differently (TRL's default, or a
 * setting TRL itself ignores in that configuration), and refused otherwise with what envtrain does instead.
 * Never "unknown key" for a TRL key. (The keys with an envtrain field are in `Config.GRPOConfig`; the renamed
 * `vllm_importance_sampling_*` ones are aliases there.)
 *
 * Checked against trl/trainer/grpo_config.py, trl/trainer/base_config.py and transformers' training_args.py.
 */

import { LoraAdapter, type LoraConfig } from "@envtrain/gpu"
import { Effect, Either } from "effect"

/** `undefined`: accepted (it changes nothing envtrain computes); else the problem, saying what to do instead. */
export type Check = (value: unknown, get: (snakeKey: string) => unknown) => string | undefined

const nullish = (v: unknown) => v === null || v === undefined
const empty = (v: unknown) =>
  nullish(v) || (typeof v === "object" && v !== null && Object.keys(v).length === 0) || v === "{}"
const accept: Check = () => undefined
const only = (ok: (v: unknown) => boolean, problem: string): Check => (v) => ok(v) ? undefined : problem
const falseOr = (problem: string) => only((v) => v === false || nullish(v), problem)
const nullOr = (problem: string) => only(nullish, problem)
const emptyOr = (problem: string) => only(empty, problem)
const zeroOr = (problem: string) => only((v) => v === 0 || nullish(v), problem)
const boolean: Check = only((v) => typeof v === "boolean" || nullish(v), "must be true or false")

const inProcess = "envtrain generates with the model it trains, in the training process (batched KV-cache " +
  "decoding, the sampler's logprobs kept for the importance-sampling correction)"

/** The vLLM keys that only matter with `use_vllm: true` (TRL ignores them otherwise, and so does envtrain). */
const vllmSettings = [
  "vllm_model_impl",
  "vllm_enable_sleep_mode",
  "vllm_structured_outputs_regex",
  "vllm_server_base_url",
  "vllm_server_host",
  "vllm_server_port",
  "vllm_group_port",
  "vllm_gpu_memory_utilization",
  "vllm_max_model_length",
  "vllm_tensor_parallel_size"
]

/**
 * `use_vllm`: false (or unset) is in-process generation (`undefined`); true with `vllm_mode: server` is generation
 * on one policy server, at `vllm_server_base_url`, else `http://{vllm_server_host}:{vllm_server_port}` (TRL's
 * defaults 0.0.0.0 and 8000), returned as the `policyServers` list; anything else is the problem.
 */
export const vllmServers = (
  v: unknown,
  get: (snakeKey: string) => unknown
): ReadonlyArray<string> | string | undefined => {
  if (v === false || nullish(v)) return undefined
  if (v !== true) return "must be true or false"
  if (get("vllm_mode") === "server") {
    const base = get("vllm_server_base_url")
    if (typeof base === "string" && base !== "") return [base.replace(/\/+$/, "")]
    if (!nullish(base)) return "vllm_server_base_url must be a URL, e.g. http://127.0.0.1:8000"
    const host = get("vllm_server_host") ?? "0.0.0.0"
    const port = get("vllm_server_port") ?? 8000
    if (typeof host !== "string" || !Number.isInteger(port)) {
      return "vllm_server_host must be a host name and vllm_server_port a port number"
    }
    return [`http://${host}:${port}`]
  }
  const set = vllmSettings.filter((k) => get(k) !== undefined)
  return `envtrain has no colocated vLLM: ${inProcess}, which is what vllm_mode: colocate is for. Remove use_vllm` +
    `${set.length > 0 ? ` and ${set.join(", ")}` : ""} (the same as TRL's use_vllm: false), or generate on a ` +
    "policy server (envtrain serve-policy) with vllm_mode: server and vllm_server_base_url, or policyServers."
}

const sampler = "envtrain's sampler takes temperature, top_p, top_k, min_p and repetition_penalty as keys of " +
  "their own"

/** Per TRL key: how envtrain reads it. */
export const checks: Readonly<Record<string, Check>> = {
  // --- generation: vLLM (use_vllm itself is read by Config: vllmServers) ---
  vllm_mode: only(
    (v) => v === "server" || v === "colocate" || nullish(v),
    `must be "server" or "colocate" (TRL's values); it only matters with use_vllm: true`
  ),
  ...Object.fromEntries(vllmSettings.map((k) => [k, accept])),
  // --- generation: transformers ---
  cache_implementation: nullOr("envtrain's generation keeps its own KV cache: remove cache_implementation"),
  use_transformers_continuous_batching: boolean, // envtrain's generation always batches continuously
  use_transformers_paged: boolean,
  transformers_continuous_batching_config: emptyOr(
    "envtrain's generation always batches continuously and takes no settings for it: remove " +
      "transformers_continuous_batching_config"
  ),
  // --- the model ---
  model_init_kwargs: emptyOr(
    "envtrain loads the model directory given as `model` (config.json and safetensors; bf16/f16 weights are " +
      "widened to f32) and takes no loading arguments: remove model_init_kwargs"
  ),
  trust_remote_code: falseOr("envtrain runs its own Qwen3 implementation and never loads model code: remove it"),
  router_aux_loss_coef: nullOr("envtrain's model is a dense Qwen3 (no mixture of experts): remove it"),
  disable_dropout: boolean, // envtrain's model has no dropout: either value means the same
  cast_lm_head_to_fp32: boolean, // envtrain's LM head and logits are float32 already
  gradient_checkpointing_kwargs: accept,
  ds3_gather_for_generation: boolean, // DeepSpeed ZeRO-3 only
  bf16: falseOr("envtrain trains with float32 weights, gradients and optimizer state: remove bf16 or set it false"),
  fp16: falseOr("envtrain trains with float32 weights, gradients and optimizer state: remove fp16 or set it false"),
  use_liger_kernel: falseOr("envtrain runs its own WGSL kernels (no Liger kernels): remove use_liger_kernel"),
  torch_empty_cache_steps: accept, // no torch allocator
  // --- data ---
  remove_unused_columns: falseOr(
    "envtrain passes every dataset column to the reward functions, and to reset those the environment's columns " +
      "Schema declares (TRL's remove_unused_columns: false; others are warned about once, or refused with " +
      "strictColumns): remove it"
  ),
  pad_to_multiple_of: accept, // padding changes no result; envtrain pads nothing
  // --- the reference model ---
  sync_ref_model: falseOr(
    "envtrain's KL reference (beta > 0) is the model as it was at the start; syncing it (TR-DPO) is not " +
      "implemented: remove sync_ref_model"
  ),
  ref_model_mixup_alpha: accept, // only with sync_ref_model
  ref_model_sync_steps: accept,
  // --- entropy ---
  entropy_coef: zeroOr("envtrain's loss has no entropy bonus (its terms: the loss type and the k3 KL): remove it"),
  use_adaptive_entropy: falseOr("envtrain's loss has no entropy bonus: remove use_adaptive_entropy"),
  entropy_coef_min: accept, // only with use_adaptive_entropy
  entropy_coef_max: accept,
  entropy_coef_delta: accept,
  entropy_target: accept,
  // --- logging, saving ---
  log_multimodal: boolean, // envtrain's completions are text
  log_completions_hub_repo: nullOr(
    "envtrain writes completions to <outputDir>/completions.jsonl (logCompletions) and uploads nothing: remove it"
  ),
  logging_strategy: only(
    (v) => v === "steps" || nullish(v),
    "envtrain logs every loggingSteps steps: use logging_steps"
  ),
  save_strategy: only((v) => v === "steps" || nullish(v), "envtrain saves every saveSteps steps: use save_steps"),
  eval_strategy: only(
    (v) => v === "steps" || v === "no" || nullish(v),
    "envtrain evaluates the evalDataset every evalSteps steps: use eval_steps"
  ),
  save_total_limit: nullOr("envtrain keeps every checkpoint: remove save_total_limit"),
  push_to_hub: falseOr("envtrain uploads nothing; checkpoints are Hugging Face directories under outputDir"),
  lr_scheduler_kwargs: emptyOr(
    "envtrain's schedules (lrSchedulerType: constant, constant_with_warmup, linear, cosine) take no extra " +
      "arguments: remove lr_scheduler_kwargs"
  ),
  optim: only(
    (v) => nullish(v) || v === "adamw_torch" || v === "adamw_torch_fused" || v === "adamw_hf",
    "envtrain's optimizer is AdamW (adamBeta1, adamBeta2, adamEpsilon, weightDecay): set optim to adamw_torch or " +
      "remove it"
  ),
  do_train: accept,
  do_eval: accept
  // run_name, report_to and project are GRPOConfig fields (runName, reportTo, project).
}

/**
 * `generation_kwargs` entries envtrain's sampler has, and their fields. TRL lets them override the top-level keys;
 * here a value given both ways is refused (keep one).
 */
export const generationKwargFields: Readonly<Record<string, string>> = {
  temperature: "temperature",
  top_p: "topP",
  top_k: "topK",
  min_p: "minP",
  repetition_penalty: "repetitionPenalty"
}

/** The problem of a `generation_kwargs` entry envtrain's sampler does not have. */
export const generationKwargProblem = (key: string) =>
  `generation_kwargs.${key}: ${sampler}; it has no ${key}: remove it`

/**
 * The other transformers `TrainingArguments` keys (distributed training, precision, the hub, dataloaders, ...):
 * envtrain implements none of them, so each is refused by name, never as an unknown key.
 */
export const trainingArguments: ReadonlySet<string> = new Set([
  "accelerator_config",
  "activation_checkpointing",
  "activation_checkpointing_kwargs",
  "auto_find_batch_size",
  "average_tokens_across_devices",
  "batch_eval_metrics",
  "bf16_full_eval",
  "data_seed",
  "dataloader_drop_last",
  "dataloader_in_order",
  "dataloader_multiprocessing_context",
  "dataloader_num_workers",
  "dataloader_persistent_workers",
  "dataloader_pin_memory",
  "dataloader_prefetch_factor",
  "ddp_backend",
  "ddp_broadcast_buffers",
  "ddp_bucket_cap_mb",
  "ddp_find_unused_parameters",
  "ddp_static_graph",
  "ddp_timeout",
  "debug",
  "deepspeed",
  "disable_tqdm",
  "do_predict",
  "enable_jit_checkpoint",
  "eval_accumulation_steps",
  "eval_delay",
  "eval_do_concat_batches",
  "eval_on_start",
  "eval_use_gather_object",
  "fp16_full_eval",
  "fsdp",
  "fsdp_config",
  "full_determinism",
  "greater_is_better",
  "hub_always_push",
  "hub_model_id",
  "hub_private_repo",
  "hub_revision",
  "hub_strategy",
  "hub_token",
  "ignore_data_skip",
  "include_for_metrics",
  "include_num_input_tokens_seen",
  "label_names",
  "label_smoothing_factor",
  "length_column_name",
  "liger_kernel_config",
  "load_best_model_at_end",
  "local_rank",
  "log_level",
  "log_level_replica",
  "log_on_each_node",
  "logging_first_step",
  "logging_nan_inf_filter",
  "metric_for_best_model",
  "neftune_noise_alpha",
  "optim_args",
  "optim_target_modules",
  "parallelism_config",
  "prediction_loss_only",
  "project",
  "restore_callback_states_from_checkpoint",
  "resume_from_checkpoint",
  "save_on_each_node",
  "save_only_model",
  "skip_memory_metrics",
  "tf32",
  "torch_compile",
  "torch_compile_backend",
  "torch_compile_mode",
  "trackio_bucket_id",
  "trackio_space_id",
  "trackio_static_space_id",
  "train_sampling_strategy",
  "use_cache",
  "use_cpu"
])

/**
 * TRL's LoRA keys (its `ModelConfig`: `use_peft`, `lora_*`, `use_rslora`, `use_dora`) and the `peft_config` block
 * (PEFT `LoraConfig` field names, what TRL's trainers take as `peft_config`): read together by {@link loraOf}.
 */
export const loraKeys: ReadonlySet<string> = new Set([
  "use_peft",
  "lora_r",
  "lora_alpha",
  "lora_dropout",
  "lora_target_modules",
  "lora_target_parameters",
  "lora_modules_to_save",
  "lora_task_type",
  "use_rslora",
  "use_dora",
  "peft_config"
])

/** PEFT 0.21's `LoraConfig` fields: anything else in `peft_config` is a typo PEFT itself would refuse. */
const peftFields: ReadonlySet<string> = new Set([
  "task_type",
  "peft_type",
  "auto_mapping",
  "peft_version",
  "base_model_name_or_path",
  "revision",
  "inference_mode",
  "r",
  "target_modules",
  "exclude_modules",
  "lora_alpha",
  "lora_dropout",
  "fan_in_fan_out",
  "bias",
  "use_rslora",
  "modules_to_save",
  "init_lora_weights",
  "layers_to_transform",
  "layers_pattern",
  "rank_pattern",
  "alpha_pattern",
  "megatron_config",
  "megatron_core",
  "trainable_token_indices",
  "loftq_config",
  "eva_config",
  "corda_config",
  "lora_ga_config",
  "use_dora",
  "velora_config",
  "alora_invocation_tokens",
  "use_qalora",
  "qalora_group_size",
  "monteclora_config",
  "layer_replication",
  "runtime_config",
  "lora_bias",
  "target_parameters",
  "use_bdlora",
  "arrow_config",
  "kasa_config",
  "ensure_weight_tying"
])

/** PEFT's default targets for Qwen2/Qwen3 when `target_modules` is None. */
const qwenDefaultTargets = ["q_proj", "v_proj"]

/**
 * The run's LoRA from TRL's keys: `peft_config` (PEFT's defaults r 8, alpha 8, dropout 0) or `use_peft: true` with
 * `lora_*` (TRL's defaults r 16, alpha 32, dropout 0.05); targets default to PEFT's for Qwen3 (q_proj, v_proj),
 * `"all-linear"` is all seven projections. Both checked as PEFT's `adapter_config.json` is (`LoraAdapter
 * .decodeConfig`): what envtrain cannot honour (bias, DoRA, modules_to_save, layer selection, rank patterns,
 * other targets, ...) is a problem naming the key. `undefined`: no LoRA (TRL ignores `lora_*` without use_peft).
 */
export const loraOf = (
  get: (snakeKey: string) => unknown
): { readonly lora?: LoraConfig.LoraConfig; readonly problem?: string } | undefined => {
  const block = get("peft_config")
  const usePeft = get("use_peft")
  if (!nullish(usePeft) && typeof usePeft !== "boolean") return { problem: "use_peft: must be true or false" }
  const trlKeys = [...loraKeys].filter((k) => k !== "peft_config" && k !== "use_peft" && get(k) !== undefined)
  let peft: Record<string, unknown>
  let source: string
  if (!nullish(block)) {
    const fields = typeof block === "string" ? parseObject(block) : block
    if (typeof fields !== "object" || fields === null || Array.isArray(fields)) {
      return { problem: "peft_config: must be a mapping of PEFT LoraConfig fields (or a JSON object string)" }
    }
    if (usePeft === true || trlKeys.length > 0) {
      return {
        problem: `peft_config and ${["use_peft", ...trlKeys].filter((k) => get(k) !== undefined).join(", ")} ` +
          "both configure LoRA: keep one (peft_config's fields are PEFT LoraConfig's)"
      }
    }
    const unknown = Object.keys(fields).filter((k) => !peftFields.has(k))
    if (unknown.length > 0) {
      return { problem: `peft_config: ${unknown.join(", ")} is not a PEFT LoraConfig field: remove it` }
    }
    peft = { peft_type: "LORA", r: 8, ...fields as Record<string, unknown> }
    source = "peft_config"
  } else {
    if (usePeft !== true) return undefined
    peft = {
      peft_type: "LORA",
      task_type: get("lora_task_type") ?? "CAUSAL_LM",
      r: get("lora_r") ?? 16,
      lora_alpha: get("lora_alpha") ?? 32,
      lora_dropout: get("lora_dropout") ?? 0.05,
      target_modules: get("lora_target_modules"),
      use_rslora: get("use_rslora") ?? false,
      use_dora: get("use_dora"),
      modules_to_save: get("lora_modules_to_save"),
      target_parameters: get("lora_target_parameters")
    }
    source = "use_peft"
  }
  if (nullish(peft.target_modules)) peft.target_modules = qwenDefaultTargets
  const decoded = Effect.runSync(Effect.either(LoraAdapter.decodeConfig(peft, source)))
  if (Either.isLeft(decoded)) {
    const e = decoded.left
    // TRL's key names where TRL's keys were given.
    const field = source === "use_peft" ? trlName[e.field] ?? e.field : `peft_config.${e.field}`
    return { problem: `${field} ${e.problem}: ${e.fix}` }
  }
  return { lora: decoded.right.config }
}

const trlName: Readonly<Record<string, string>> = {
  r: "lora_r",
  lora_alpha: "lora_alpha",
  lora_dropout: "lora_dropout",
  target_modules: "lora_target_modules",
  task_type: "lora_task_type",
  modules_to_save: "lora_modules_to_save",
  target_parameters: "lora_target_parameters"
}

const parseObject = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}
