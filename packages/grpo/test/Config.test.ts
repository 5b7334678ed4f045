import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Config from "../src/Config.js"

const defaults = () => Config.decode({})

describe("Config: TRL defaults", () => {
  it.effect("decoding {} gives TRL's GRPOConfig defaults", () =>
    Effect.gen(function*() {
      const c = yield* defaults()
      assert.strictEqual(c.numGenerations, 8)
      assert.strictEqual(c.perDeviceTrainBatchSize, 8)
      assert.strictEqual(c.gradientAccumulationSteps, 1)
      assert.strictEqual(c.maxCompletionLength, 512)
      assert.strictEqual(c.learningRate, 1e-6)
      assert.strictEqual(c.lrSchedulerType, "linear")
      assert.strictEqual(c.lossType, "dapo")
      assert.strictEqual(c.beta, 0)
      assert.strictEqual(c.epsilon, 0.2)
      assert.strictEqual(c.epsilonHigh, null)
      assert.strictEqual(c.scaleRewards, "group")
      assert.strictEqual(c.importanceSamplingLevel, "token")
      assert.strictEqual(c.importanceSamplingMode, "sequence_mask")
      assert.strictEqual(c.importanceSamplingClipMax, 3)
      assert.strictEqual(c.importanceSamplingClipMin, null)
      assert.strictEqual(c.sapoTemperatureNeg, 1.05)
      assert.strictEqual(c.loggingSteps, 10)
      assert.strictEqual(c.seed, 42)
      assert.strictEqual(c.maxGradNorm, 1)
      assert.strictEqual(c.adamBeta2, 0.999)
      const r = yield* Config.resolve(c)
      assert.strictEqual(r.stepsPerGeneration, 1)
      assert.strictEqual(r.generationBatchSize, 8)
      assert.strictEqual(r.promptsPerGeneration, 1)
      assert.strictEqual(r.epsilonHigh, 0.2)
      assert.strictEqual(r.evalSteps, 10)
      assert.isTrue(
        Config.describeFields().includes(
          "--numGenerations (--num_generations) default 8: G: completions (episodes) per prompt; must be >= 2."
        )
      )
    }))
})

describe("Config: keys and overrides", () => {
  it.effect("accepts camelCase and snake_case, TRL's vllm_* names, and scale_rewards booleans", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({
        num_generations: 4,
        lossType: "grpo",
        vllm_importance_sampling_cap: 2,
        scale_rewards: false
      })
      assert.strictEqual(c.numGenerations, 4)
      assert.strictEqual(c.lossType, "grpo")
      assert.strictEqual(c.importanceSamplingClipMax, 2)
      assert.strictEqual(c.scaleRewards, "none")
    }))

  it.effect("rejects unknown keys with a did-you-mean, duplicates, and bad values", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Config.decode({ numGeneration: 4, learning_rte: 1, fooBarBaz: 1 }))
      assert.match(e.message, /unknown key "numGeneration": did you mean "numGenerations"\?/)
      assert.match(e.message, /unknown key "learning_rte": did you mean "learning_rate"\?/)
      assert.match(e.message, /unknown key "fooBarBaz": remove it/)
      const d = yield* Effect.flip(Config.decode({ numGenerations: 4, num_generations: 2 }))
      assert.match(d.message, /set the same field numGenerations/)
      const v = yield* Effect.flip(Config.decode({ lossType: "ppo", numGenerations: 2.5 }))
      assert.match(v.message, /lossType/)
      assert.match(v.message, /numGenerations/)
    }))

  it.effect("parses --key value, --key=value and bare flags", () =>
    Effect.gen(function*() {
      const o = yield* Config.parseOverrides([
        "--num_generations",
        "4",
        "--learningRate=1e-5",
        "--logCompletions",
        "--output_dir",
        "123",
        "--reward_weights",
        "[1, 0.5]",
        "--epsilon_high",
        "null"
      ])
      assert.deepStrictEqual(o, {
        num_generations: 4,
        learningRate: 1e-5,
        logCompletions: true,
        output_dir: "123",
        reward_weights: [1, 0.5],
        epsilon_high: null
      })
      const e = yield* Effect.flip(Config.parseOverrides(["stray"]))
      assert.match(e.message, /--key value or --key=value/)
    }))

  it.scoped("loads YAML and JSON files; command-line overrides win", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(`${dir}/c.yaml`, "num_generations: 4\nloss_type: grpo\nbeta: 0.04\n")
      const y = yield* Config.load(`${dir}/c.yaml`, ["--beta", "0.1", "--maxSteps=20"])
      assert.strictEqual(y.numGenerations, 4)
      assert.strictEqual(y.lossType, "grpo")
      assert.strictEqual(y.beta, 0.1)
      assert.strictEqual(y.maxSteps, 20)
      yield* fs.writeFileString(`${dir}/c.json`, JSON.stringify({ perDeviceTrainBatchSize: 4, scale_rewards: "batch" }))
      const j = yield* Config.load(`${dir}/c.json`)
      assert.strictEqual(j.perDeviceTrainBatchSize, 4)
      assert.strictEqual(j.scaleRewards, "batch")
      yield* fs.writeFileString(`${dir}/bad.yaml`, "numGenerashuns: 4\n")
      const e = yield* Effect.flip(Config.load(`${dir}/bad.yaml`))
      assert.match(e.message, /bad\.yaml/)
      assert.match(e.message, /did you mean "numGenerations"/)
      const missing = yield* Effect.flip(Config.load(`${dir}/nope.yaml`))
      assert.match(missing.message, /cannot read the file/)
    }).pipe(Effect.provide(NodeContext.layer)))
})

/**
 * Every key of TRL 1.16's GRPOConfig (grpo_config.py and base_config.py; not the TrainingArguments it inherits) at
 * its default, as `GRPOConfig()` has them (the deprecated vllm_importance_sampling_cap left out: it sets the same
 * field as vllm_importance_sampling_clip_max).
 */
const trlDefaults: Record<string, unknown> = {
  learning_rate: 1e-6,
  lr_scheduler_kwargs: null,
  bf16: null,
  gradient_checkpointing: true,
  use_liger_kernel: false,
  torch_empty_cache_steps: null,
  logging_steps: 10,
  remove_unused_columns: false,
  model_init_kwargs: null,
  trust_remote_code: false,
  router_aux_loss_coef: null,
  disable_dropout: false,
  cast_lm_head_to_fp32: false,
  num_generations: 8,
  num_generations_eval: null,
  max_completion_length: 512,
  ds3_gather_for_generation: true,
  shuffle_dataset: true,
  pad_to_multiple_of: "auto",
  generation_batch_size: null,
  steps_per_generation: null,
  temperature: 1.0,
  top_p: 1.0,
  top_k: 0,
  min_p: null,
  generation_kwargs: null,
  chat_template_kwargs: null,
  repetition_penalty: 1.0,
  cache_implementation: null,
  use_vllm: false,
  vllm_mode: "colocate",
  vllm_model_impl: "vllm",
  vllm_enable_sleep_mode: false,
  vllm_structured_outputs_regex: null,
  vllm_server_base_url: null,
  vllm_server_host: "0.0.0.0",
  vllm_server_port: 8000,
  vllm_server_timeout: 240.0,
  vllm_group_port: 51216,
  vllm_gpu_memory_utilization: 0.3,
  vllm_max_model_length: null,
  vllm_tensor_parallel_size: 1,
  beta: 0.0,
  num_iterations: 1,
  epsilon: 0.2,
  delta: null,
  epsilon_high: null,
  sapo_temperature_neg: 1.05,
  sapo_temperature_pos: 1.0,
  vespo_k_pos: 2.0,
  vespo_lambda_pos: 3.0,
  vespo_k_neg: 3.0,
  vespo_lambda_neg: 2.0,
  importance_sampling_level: "token",
  reward_weights: null,
  multi_objective_aggregation: "sum_then_normalize",
  scale_rewards: "group",
  loss_type: "dapo",
  mask_truncated_completions: false,
  sync_ref_model: false,
  ref_model_mixup_alpha: 0.6,
  ref_model_sync_steps: 512,
  top_entropy_quantile: 1.0,
  entropy_coef: 0.0,
  use_adaptive_entropy: false,
  entropy_coef_min: 0.0,
  entropy_coef_max: 1.0,
  entropy_coef_delta: 0.005,
  entropy_target: 0.2,
  max_tool_calling_iterations: null,
  vllm_importance_sampling_correction: true,
  vllm_importance_sampling_mode: "sequence_mask",
  vllm_importance_sampling_clip_max: 3.0,
  vllm_importance_sampling_clip_min: null,
  off_policy_mask_threshold: null,
  use_bias_correction_kl: true,
  log_completions: false,
  log_multimodal: true,
  num_completions_to_print: null,
  log_unique_prompts: false,
  log_completions_hub_repo: null,
  use_transformers_continuous_batching: false,
  transformers_continuous_batching_config: null,
  use_transformers_paged: false
}

describe("Config: TRL keys without an envtrain field", () => {
  it.effect("a config with every TRL GRPOConfig key at TRL's default decodes to envtrain's defaults", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode(trlDefaults)
      assert.deepStrictEqual(c, yield* defaults())
    }))

  it.effect("no TRL GRPOConfig key is ever an unknown key, whatever its value", () =>
    Effect.gen(function*() {
      for (const key of [...Object.keys(trlDefaults), "vllm_importance_sampling_cap"]) {
        for (const value of ["__not_a_value__", 12345, true]) {
          const result = yield* Effect.either(Config.decode({ [key]: value }))
          if (result._tag === "Left") assert.notMatch(result.left.message, /unknown key/, `${key}: ${value}`)
        }
      }
      // A transformers TrainingArguments key envtrain does not implement is refused by name.
      const e = yield* Effect.flip(Config.decode({ deepspeed: "ds.json", fsdp: "full_shard" }))
      assert.include(e.message, "deepspeed: a transformers TrainingArguments setting that envtrain does not implement")
      assert.notMatch(e.message, /unknown key/)
    }))

  it.effect("keep_model_template: envtrain's switch for the training-template swap, off by default", () =>
    Effect.gen(function*() {
      assert.isFalse((yield* defaults()).keepModelTemplate)
      assert.isTrue((yield* Config.decode({ keep_model_template: true })).keepModelTemplate)
      assert.isTrue((yield* Config.fromSources({}, ["--keepModelTemplate", "true"])).keepModelTemplate)
      const bad = yield* Effect.flip(Config.decode({ keep_model_template: "yes" }))
      assert.include(bad.message, "keepModelTemplate")
    }))

  it.effect("chat_template_kwargs: any template variables, as a mapping or a JSON string; enable_thinking from it", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({ chat_template_kwargs: { enable_thinking: true, custom_flag: "x", n: 2 } })
      assert.deepStrictEqual(c.chatTemplateKwargs, { enable_thinking: true, custom_flag: "x", n: 2 })
      assert.deepStrictEqual(Config.templateOptions(c), { enableThinking: true, extra: { custom_flag: "x", n: 2 } })
      // Without enable_thinking the run's option (default false) decides.
      const other = yield* Config.decode({ chatTemplateKwargs: { reasoning_effort: "low" } })
      assert.deepStrictEqual(Config.templateOptions(other), {
        enableThinking: false,
        extra: { reasoning_effort: "low" }
      })
      assert.deepStrictEqual(Config.templateOptions(other, true).enableThinking, true)
      // TRL's dict-or-str: a JSON string from a command line.
      const cli = yield* Config.fromSources({}, ["--chat_template_kwargs", `{"enable_thinking": false, "k": 1}`])
      assert.deepStrictEqual(cli.chatTemplateKwargs, { enable_thinking: false, k: 1 })
      const s = yield* Config.decode({ chat_template_kwargs: `{"enable_thinking": true}` })
      assert.deepStrictEqual(s.chatTemplateKwargs, { enable_thinking: true })
      const bad = yield* Effect.flip(Config.decode({ chat_template_kwargs: "enable_thinking" }))
      assert.include(bad.message, "chat_template_kwargs: must be a mapping of template variables")
      // enable_thinking must be a boolean, and must agree with the run's own option.
      const notBool = yield* Effect.flip(
        Config.resolve(yield* Config.decode({ chat_template_kwargs: { enable_thinking: "no" } }))
      )
      assert.include(notBool.message, "chatTemplateKwargs.enable_thinking must be true or false")
      const disagree = yield* Effect.flip(Config.resolve(c, { enableThinking: false }))
      assert.include(
        disagree.message,
        "chatTemplateKwargs.enable_thinking (true) and the run's enableThinking (false) disagree"
      )
    }))

  it.effect("use_vllm: false is in-process generation; server mode maps onto policyServers; colocate is refused", () =>
    Effect.gen(function*() {
      // TRL ignores the vllm_* settings without use_vllm: true, and so does envtrain.
      const off = yield* Config.decode({
        use_vllm: false,
        vllm_mode: "server",
        vllm_server_base_url: "http://127.0.0.1:8000"
      })
      assert.deepStrictEqual(off.policyServers, [])
      assert.strictEqual(off.policyServerTimeout, 240)
      // Server mode: vllm_server_base_url wins; else host and port (TRL's defaults 0.0.0.0 and 8000).
      const base = yield* Config.decode({
        use_vllm: true,
        vllm_mode: "server",
        vllm_server_base_url: "http://10.0.0.2:8001/",
        vllm_server_host: "ignored",
        vllm_server_timeout: 30
      })
      assert.deepStrictEqual([base.policyServers, base.policyServerTimeout], [["http://10.0.0.2:8001"], 30])
      const hostPort = yield* Config.decode({
        useVllm: true,
        vllmMode: "server",
        vllm_server_host: "10.0.0.2",
        vllm_server_port: 8001
      })
      assert.deepStrictEqual(hostPort.policyServers, ["http://10.0.0.2:8001"])
      const defaults = yield* Config.decode({ use_vllm: true, vllm_mode: "server" })
      assert.deepStrictEqual(defaults.policyServers, ["http://0.0.0.0:8000"])
      const several = yield* Config.decode({ policy_servers: ["http://a:1", "http://b:2"] })
      assert.deepStrictEqual(several.policyServers, ["http://a:1", "http://b:2"])
      assert.strictEqual(several.policyServerWeightDirectory, null)
      const shared = yield* Config.decode({ policy_servers: ["http://a:1"], policy_server_weight_directory: "/w" })
      assert.strictEqual(shared.policyServerWeightDirectory, "/w")
      const both = yield* Effect.flip(
        Config.decode({ use_vllm: true, vllm_mode: "server", policyServers: ["http://a:1"] })
      )
      assert.include(both.message, "set the same field policyServers")
      const notUrl = yield* Effect.flip(Config.decode({ policyServers: ["localhost:8000"] }))
      assert.include(notUrl.message, "a policy server is an http:// or https:// URL")
      const colocate = yield* Effect.flip(
        Config.decode({ useVllm: true, vllm_gpu_memory_utilization: 0.2, vllm_tensor_parallel_size: 1 })
      )
      assert.include(colocate.message, "useVllm: envtrain has no colocated vLLM")
      assert.include(colocate.message, "which is what vllm_mode: colocate is for")
      assert.include(colocate.message, "Remove use_vllm and vllm_gpu_memory_utilization, vllm_tensor_parallel_size")
      assert.include(colocate.message, "vllm_mode: server and vllm_server_base_url, or policyServers")
      const mode = yield* Effect.flip(Config.decode({ vllm_mode: "remote" }))
      assert.include(mode.message, `vllm_mode: must be "server" or "colocate"`)
      // The importance-sampling keys are envtrain's sampler correction.
      const is = yield* Config.decode({
        vllm_importance_sampling_correction: false,
        vllm_importance_sampling_mode: "token_truncate",
        vllm_importance_sampling_clip_max: 2,
        vllm_importance_sampling_clip_min: 0.5
      })
      assert.deepStrictEqual(
        [
          is.importanceSamplingCorrection,
          is.importanceSamplingMode,
          is.importanceSamplingClipMax,
          is.importanceSamplingClipMin
        ],
        [false, "token_truncate", 2, 0.5]
      )
    }))

  it.effect("generation_kwargs: the sampler's settings map onto their keys; others and duplicates are refused", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({ generation_kwargs: { top_k: 10, min_p: 0.05, repetition_penalty: 1.1 } })
      assert.deepStrictEqual([c.topK, c.minP, c.repetitionPenalty], [10, 0.05, 1.1])
      const e = yield* Effect.flip(Config.decode({ top_k: 5, generation_kwargs: { top_k: 10, num_beams: 4 } }))
      assert.include(e.message, "generation_kwargs.num_beams: envtrain's sampler takes temperature, top_p")
      assert.include(e.message, `"generation_kwargs.top_k" and "top_k" set the same field topK: keep only one`)
    }))

  it.effect("other TRL keys: accepted where they change nothing, refused with what envtrain does instead", () =>
    Effect.gen(function*() {
      yield* Config.decode({
        gradient_checkpointing: false,
        disable_dropout: true,
        pad_to_multiple_of: 64,
        report_to: "none",
        optim: "adamw_torch_fused",
        bf16: false,
        sync_ref_model: false,
        ref_model_sync_steps: 64
      })
      const e = yield* Effect.flip(Config.decode({
        bf16: true,
        report_to: "wandb",
        remove_unused_columns: true,
        entropy_coef: 0.01,
        sync_ref_model: true,
        lr_scheduler_kwargs: { num_cycles: 2 },
        optim: "sgd"
      }))
      for (
        const expected of [
          "bf16: envtrain trains with float32 weights, gradients and optimizer state",
          "report_to names \"wandb\", which envtrain does not write: it writes trackio, tensorboard",
          "remove_unused_columns: envtrain passes every dataset column",
          "entropy_coef: envtrain's loss has no entropy bonus",
          "sync_ref_model: envtrain's KL reference (beta > 0) is the model as it was at the start",
          "lr_scheduler_kwargs: envtrain's schedules",
          "optim: envtrain's optimizer is AdamW"
        ]
      ) assert.include(e.message, expected)
    }))
})

describe("Config.resolve: derived values and refused combinations", () => {
  it.effect("derives the generation batch from stepsPerGeneration and vice versa", () =>
    Effect.gen(function*() {
      const a = yield* Config.resolve(
        yield* Config.decode({ perDeviceTrainBatchSize: 8, gradientAccumulationSteps: 4, numGenerations: 4 })
      )
      assert.strictEqual(a.stepsPerGeneration, 4)
      assert.strictEqual(a.generationBatchSize, 32)
      assert.strictEqual(a.promptsPerGeneration, 8)
      const b = yield* Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, generationBatchSize: 16 }))
      assert.strictEqual(b.stepsPerGeneration, 4)
      const c = yield* Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, stepsPerGeneration: 3 }), {
        numProcesses: 2
      })
      assert.strictEqual(c.generationBatchSize, 24)
      // totalSteps: 100 prompts, 3 prompts per generation → 33 generations → 33×3/1 steps per epoch, 3 epochs
      const t = yield* Config.resolve(
        yield* Config.decode({ perDeviceTrainBatchSize: 6, numGenerations: 2, stepsPerGeneration: 1 })
      )
      assert.strictEqual(Config.totalSteps(t, 100), 3 * 33)
      const s = yield* Config.resolve(yield* Config.decode({ maxSteps: 7 }))
      assert.strictEqual(Config.totalSteps(s, 100), 7)
    }))

  it.effect("refuses a generation batch not divisible by numGenerations, saying what to change", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(
        Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 6, numGenerations: 4 }))
      )
      assert.match(e.message, /generation batch \(6 episodes .*not divisible by numGenerations \(4\)/)
      assert.match(e.message, /generationBatchSize 12/)
    }))

  it.effect("refuses a remote environment with fewer sessions than episodes in flight", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({ perDeviceTrainBatchSize: 8, gradientAccumulationSteps: 8, numGenerations: 4 })
      const e = yield* Effect.flip(Config.resolve(c, { remoteMaxConcurrentSessions: 32 }))
      assert.match(e.message, /allows 32 concurrent sessions but 64 episodes run at once/)
      assert.match(e.message, /MAX_CONCURRENT_ENVS to at least 64/)
      const ok = yield* Config.resolve(c, { remoteMaxConcurrentSessions: 32, episodesInFlight: 32 })
      assert.strictEqual(ok.episodesInFlight, 32)
    }))

  it.effect("refuses every other invalid combination at once", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Config.resolve(
        yield* Config.decode({
          numGenerations: 1,
          generationBatchSize: 8,
          stepsPerGeneration: 2,
          epsilon: 0.3,
          epsilonHigh: 0.2,
          importanceSamplingClipMin: 4,
          rewardWeights: [1, 2]
        }),
        { numRewardFunctions: 3 }
      ))
      assert.match(e.message, /both set: set only one/)
      assert.match(e.message, /at least 2 completions per prompt/)
      assert.match(e.message, /epsilonHigh \(0\.2\) is below epsilon \(0\.3\)/)
      assert.match(e.message, /importanceSamplingClipMin \(4\) must be less than importanceSamplingClipMax \(3\)/)
      assert.match(e.message, /rewardWeights has 2 entries but there are 3 reward functions/)
      const t = yield* Effect.flip(Config.resolve(
        yield* Config.decode({ importanceSamplingMode: "token_truncate", importanceSamplingClipMax: null })
      ))
      assert.match(t.message, /needs at least one of importanceSamplingClipMin or importanceSamplingClipMax/)
      const v = yield* Effect.flip(Config.resolve(yield* Config.decode({ lossType: "vespo" })))
      assert.match(v.message, /vespo loss needs a token-level sampler correction/)
      const g = yield* Effect.flip(
        Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, generationBatchSize: 10 }))
      )
      assert.match(g.message, /must be divisible by perDeviceTrainBatchSize × processes \(4\)/)
    }))

  it.effect("warns (without refusing) where TRL warns", () =>
    Effect.gen(function*() {
      const r = yield* Config.resolve(yield* Config.decode({ lossType: "cispo" }))
      assert.isTrue(r.warnings.some((w) => /caps every ratio at epsilonHigh/.test(w)))
      const l = yield* Config.resolve(yield* Config.decode({ lossType: "luspo" }))
      assert.isTrue(l.warnings.some((w) => /luspo expects importanceSamplingLevel "sequence"/.test(w)))
    }))
})
