/**
 * GRPO configuration: TRL's `GRPOConfig` knobs (plus the `TrainingArguments` ones GRPO uses) in camelCase, with
 * TRL's defaults, as an Effect Schema. Load it from JSON or YAML, override it from `--key value` pairs (camelCase or
 * TRL's snake_case), then `resolve` it: invalid combinations are refused with a message saying what to change, and
 * derived values (generation batch size, steps per generation, ...) are computed the way TRL computes them.
 * Every other key of TRL's GRPOConfig (and of the TrainingArguments it inherits) is known too: `use_vllm`,
 * `vllm_*`, `bf16`, `report_to`, `generation_kwargs`, ... are accepted where they change nothing envtrain computes
 * and refused otherwise with what envtrain does instead (`internal/trlKeys.ts`); never as an unknown key.
 *
 * @example
 * ```ts
 * import { Config } from "@envtrain/grpo"
 * const program = Effect.gen(function*() {
 *   const config = yield* Config.load("grpo.yaml", ["--num_generations", "4", "--lossType=grpo"])
 *   const resolved = yield* Config.resolve(config, { remoteMaxConcurrentSessions: 64 })
 *   // resolved.generationBatchSize, resolved.stepsPerGeneration, resolved.epsilonHigh are all numbers now
 * })
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import { LoraConfig } from "@envtrain/gpu"
import { Data, Effect, Either, Option, ParseResult, Schema, SchemaAST as AST } from "effect"
import * as Yaml from "yaml"
import * as TrlKeys from "./internal/trlKeys.js"

// ---------------------------------------------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------------------------------------------

const PositiveInt = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
const NonNegativeInt = Schema.Int.pipe(Schema.greaterThanOrEqualTo(0))
const NonNegative = Schema.Finite.pipe(Schema.greaterThanOrEqualTo(0))
const Positive = Schema.Finite.pipe(Schema.greaterThan(0))

/** PEFT's LoraConfig as envtrain honours it (`LoraConfig.LoraConfig`, camelCase). */
const Lora = Schema.Struct({
  r: PositiveInt,
  alpha: Positive,
  dropout: Schema.Finite.pipe(Schema.greaterThanOrEqualTo(0), Schema.lessThan(1)),
  targetModules: Schema.Array(Schema.Literal(...LoraConfig.LORA_TARGETS)).pipe(Schema.minItems(1)),
  useRsLora: Schema.Boolean
})

const withDefault = <A, I>(schema: Schema.Schema<A, I, never>, value: A, description: string) =>
  Schema.optionalWith(schema.annotations({ description }), { default: () => value })

const trackerNames: ReadonlyArray<string> = ["trackio", "tensorboard"]

/**
 * TRL's `report_to`: one name or a list, read as a list; `"none"` (alone) is none. A name envtrain does not write is
 * refused naming the ones it does (`"all"` too: it would mean whatever happens to be installed).
 */
const ReportTo = Schema.transform(
  Schema.Union(Schema.String, Schema.Array(Schema.String)),
  Schema.Array(Schema.String),
  {
    strict: true,
    decode: (v) => (typeof v === "string" ? [v] : v).filter((n) => n !== "none"),
    encode: (v) => v
  }
).pipe(Schema.filter((names) => {
  const unknown = names.filter((n) => !trackerNames.includes(n))
  return unknown.length === 0 ||
    `report_to names ${unknown.map((n) => JSON.stringify(n)).join(", ")}, which envtrain does not write: it writes ` +
      `${trackerNames.join(", ")} (or "none"; metrics.jsonl and report.html are always written)`
}))

/** Loss variants (TRL `loss_type`). `dapo` is the default. */
export const LossType = Schema.Literal("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
/** @since 0.0.0 */
export type LossType = typeof LossType.Type

/** Reward scaling (TRL `scale_rewards`; `true` maps to `group`, `false` to `none`). */
export const ScaleRewards = Schema.Literal("group", "batch", "none")
/** @since 0.0.0 */
export type ScaleRewards = typeof ScaleRewards.Type

/** How several reward functions are combined (TRL `multi_objective_aggregation`). */
export const MultiObjectiveAggregation = Schema.Literal("sum_then_normalize", "normalize_then_sum")
/** @since 0.0.0 */
export type MultiObjectiveAggregation = typeof MultiObjectiveAggregation.Type

/** Level of the policy/old importance ratio (TRL `importance_sampling_level`; `sequence` is GSPO). */
export const ImportanceSamplingLevel = Schema.Literal("token", "sequence")
/** @since 0.0.0 */
export type ImportanceSamplingLevel = typeof ImportanceSamplingLevel.Type

/** Correction of the sampler/trainer mismatch (TRL `vllm_importance_sampling_mode`). */
export const ImportanceSamplingMode = Schema.Literal(
  "token_truncate",
  "token_mask",
  "sequence_truncate",
  "sequence_mask"
)
/** @since 0.0.0 */
export type ImportanceSamplingMode = typeof ImportanceSamplingMode.Type

/**
 * Learning-rate schedules, as transformers' `get_scheduler`. Note that plain `constant` ignores warmup there (use
 * `constant_with_warmup` for a warmup ramp); we keep that behaviour.
 */
export const LrSchedulerType = Schema.Literal("constant", "constant_with_warmup", "linear", "cosine")
/** @since 0.0.0 */
export type LrSchedulerType = typeof LrSchedulerType.Type

/**
 * The configuration schema. Decoding `{}` gives TRL's defaults. Each field's `description` annotation is its
 * documentation (also printed by {@link describeFields}).
 *
 * @since 0.0.0
 */
export const GRPOConfig = Schema.Struct({
  // --- run ---
  outputDir: withDefault(Schema.String, "trainer_output", "Directory for checkpoints, metrics and completions."),
  seed: withDefault(Schema.Int, 42, "Seed for sampling, shuffling and initialisation (TrainingArguments default)."),
  gradientCheckpointing: withDefault(
    Schema.Boolean,
    true,
    "Recompute each decoder layer's activations in the backward (TRL's default; backend cpu, the GPU and " +
      "reference backends keep them): the same gradients, one layer's activations held instead of all, about one " +
      "more forward per step. false keeps them all (faster where memory allows)."
  ),
  // --- LoRA ---
  lora: Schema.optional(
    Lora.annotations({
      description: "Train a LoRA adapter on the frozen base (r, alpha, dropout, targetModules, useRsLora). TRL's " +
        "use_peft with lora_r, lora_alpha, lora_dropout, lora_target_modules, use_rslora, or a peft_config block " +
        "(PEFT LoraConfig fields), are read into it. Every backend (cpu, gpu, reference)."
    })
  ),
  // --- batching ---
  numGenerations: withDefault(PositiveInt, 8, "G: completions (episodes) per prompt; must be >= 2."),
  numGenerationsEval: withDefault(
    Schema.NullOr(PositiveInt),
    null,
    "Completions per prompt during evaluation; null = numGenerations."
  ),
  perDeviceTrainBatchSize: withDefault(PositiveInt, 8, "Rows per micro-batch (one forward/backward)."),
  perDeviceEvalBatchSize: withDefault(PositiveInt, 8, "Rows per evaluation batch; must be divisible by the eval G."),
  gradientAccumulationSteps: withDefault(PositiveInt, 1, "Micro-batches per optimizer step."),
  generationBatchSize: withDefault(
    Schema.NullOr(PositiveInt),
    null,
    "Episodes generated at once; null = perDeviceTrainBatchSize × processes × stepsPerGeneration. " +
      "Exclusive with stepsPerGeneration."
  ),
  stepsPerGeneration: withDefault(
    Schema.NullOr(PositiveInt),
    null,
    "Micro-steps served by one generation batch; null = gradientAccumulationSteps. Exclusive with generationBatchSize."
  ),
  numIterations: withDefault(PositiveInt, 1, "μ: updates per generation batch (clipping only matters when > 1)."),
  maxCompletionLength: withDefault(
    PositiveInt,
    512,
    "Token budget of a whole episode: model and tool tokens over all turns."
  ),
  maxToolCallingIterations: withDefault(
    Schema.NullOr(NonNegativeInt),
    null,
    "Maximum tool-calling turns per episode; null = unlimited (the token budget still applies)."
  ),
  numTrainEpochs: withDefault(NonNegative, 3, "Epochs over the prompt dataset; ignored when maxSteps > 0."),
  maxSteps: withDefault(Schema.Int, -1, "Optimizer steps to run; > 0 overrides numTrainEpochs."),
  shuffleDataset: withDefault(Schema.Boolean, true, "Shuffle prompts (seeded) before cutting generation batches."),
  // --- optimizer and schedule ---
  learningRate: withDefault(NonNegative, 1e-6, "Peak AdamW learning rate (TRL's default, not transformers' 5e-5)."),
  lrSchedulerType: withDefault(LrSchedulerType, "linear", "Learning-rate schedule after warmup."),
  warmupSteps: withDefault(
    NonNegative,
    0,
    "Warmup: an integer >= 1 is a number of steps; a value in (0, 1) is a ratio of the total steps (transformers v5)."
  ),
  warmupRatio: withDefault(
    NonNegative.pipe(Schema.lessThanOrEqualTo(1)),
    0,
    "Legacy warmup ratio of the total steps; used only when warmupSteps is 0."
  ),
  adamBeta1: withDefault(NonNegative.pipe(Schema.lessThan(1)), 0.9, "AdamW β1."),
  adamBeta2: withDefault(NonNegative.pipe(Schema.lessThan(1)), 0.999, "AdamW β2."),
  adamEpsilon: withDefault(Positive, 1e-8, "AdamW ε."),
  weightDecay: withDefault(NonNegative, 0, "AdamW decoupled weight decay (never applied to biases and norms)."),
  maxGradNorm: withDefault(NonNegative, 1, "Global gradient-norm clip; 0 disables clipping."),
  // --- sampling ---
  temperature: withDefault(Positive, 1, "Sampling temperature; the trainer's logprobs use the same temperature."),
  topP: withDefault(Positive.pipe(Schema.lessThanOrEqualTo(1)), 1, "Nucleus sampling mass; 1 = off."),
  topK: withDefault(NonNegativeInt, 0, "Top-k sampling; 0 = off."),
  minP: withDefault(
    Schema.NullOr(NonNegative.pipe(Schema.lessThanOrEqualTo(1))),
    null,
    "Min-p sampling; null = off."
  ),
  repetitionPenalty: withDefault(Positive, 1, "Repetition penalty; 1 = off."),
  // --- dynamic sampling (DAPO's; not a TRL key) ---
  dynamicSampling: withDefault(
    Schema.Literal("off", "flat", "failed"),
    "off",
    "Re-roll groups whose rewards all agree (zero advantage, nothing learnt from them) with fresh sampling seeds and " +
      "keep the first re-roll that varies (DAPO's dynamic sampling): \"flat\" re-rolls every such group, " +
      "\"failed\" only those at the batch's lowest reward (where the policy needs exploring, not confirming); " +
      "\"off\" = TRL's behaviour."
  ),
  dynamicSamplingRounds: withDefault(
    PositiveInt,
    2,
    "Dynamic sampling: re-rolls per flat group at most; a group still flat after them is trained as it is (zero " +
      "advantage). Each round costs up to one more generation of those groups."
  ),
  // --- objective ---
  lossType: withDefault(LossType, "dapo", "Loss variant: grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo."),
  beta: withDefault(NonNegative, 0, "KL (k3) coefficient to the frozen reference model; 0 loads no reference."),
  epsilon: withDefault(NonNegative, 0.2, "Lower clipping range ε_low: ratios below 1 − ε are clipped."),
  epsilonHigh: withDefault(
    Schema.NullOr(NonNegative),
    null,
    "Upper clipping range ε_high (null = epsilon); for cispo it is the ratio cap itself (docs recommend 5.0)."
  ),
  delta: withDefault(
    Schema.NullOr(Positive),
    null,
    "Two-sided clipping (INTELLECT-2): the unclipped ratio is capped at delta; null = off."
  ),
  sapoTemperaturePos: withDefault(Positive, 1, "sapo: temperature for tokens with positive advantage."),
  sapoTemperatureNeg: withDefault(Positive, 1.05, "sapo: temperature for tokens with non-positive advantage."),
  vespoKPos: withDefault(Schema.Finite, 2, "vespo: gamma shape k for non-negative advantages."),
  vespoLambdaPos: withDefault(Schema.Finite, 3, "vespo: gamma rate λ for non-negative advantages."),
  vespoKNeg: withDefault(Schema.Finite, 3, "vespo: gamma shape k for negative advantages."),
  vespoLambdaNeg: withDefault(Schema.Finite, 2, "vespo: gamma rate λ for negative advantages."),
  importanceSamplingLevel: withDefault(
    ImportanceSamplingLevel,
    "token",
    "Policy/old ratio per token, or one per sequence (GSPO: exp of the masked mean log-ratio)."
  ),
  useBiasCorrectionKl: withDefault(
    Schema.Boolean,
    true,
    "Multiply the KL term by the importance ratio (TRL 1.16's default)."
  ),
  scaleRewards: withDefault(ScaleRewards, "group", "Divide advantages by the group std, the batch std, or nothing."),
  multiObjectiveAggregation: withDefault(
    MultiObjectiveAggregation,
    "sum_then_normalize",
    "sum_then_normalize: weighted sum then group-normalise; normalize_then_sum: GDPO, per-function z-scores first."
  ),
  rewardWeights: withDefault(
    Schema.NullOr(Schema.Array(Schema.Finite)),
    null,
    "One weight per user reward function (environment-owned rewards get weight 1); null = all 1."
  ),
  maskTruncatedCompletions: withDefault(
    Schema.Boolean,
    false,
    "Drop truncated episodes (last token neither EOS nor PAD) from the loss and its token counts."
  ),
  topEntropyQuantile: withDefault(
    Positive.pipe(Schema.lessThanOrEqualTo(1)),
    1,
    "Keep only the top fraction of loss tokens by entropy; 1 = all."
  ),
  offPolicyMaskThreshold: withDefault(
    Schema.NullOr(Schema.Finite),
    null,
    "Off-policy sequence mask δ (DeepSeek-V3.2): drop negative-advantage sequences whose mean sampler-minus-policy " +
      "logprob exceeds δ; null = off."
  ),
  importanceSamplingCorrection: withDefault(
    Schema.Boolean,
    true,
    "Correct the sampler/trainer logprob mismatch (TRL vllm_importance_sampling_correction)."
  ),
  importanceSamplingMode: withDefault(
    ImportanceSamplingMode,
    "sequence_mask",
    "token_* or sequence_* ratios (sequence = product of token ratios); *_truncate clamps, *_mask zeroes."
  ),
  importanceSamplingClipMax: withDefault(
    Schema.NullOr(Positive),
    3,
    "C_max of the sampler correction (TRL vllm_importance_sampling_clip_max, formerly _cap)."
  ),
  importanceSamplingClipMin: withDefault(
    Schema.NullOr(NonNegative),
    null,
    "C_min of the sampler correction; null = no lower bound."
  ),
  // --- logging, saving, evaluation ---
  loggingSteps: withDefault(PositiveInt, 10, "Log metrics (averaged) every this many optimizer steps."),
  saveSteps: withDefault(PositiveInt, 500, "Checkpoint every this many optimizer steps."),
  evalSteps: withDefault(
    Schema.NullOr(PositiveInt),
    null,
    "Evaluate every this many optimizer steps; null = loggingSteps (when evaluation is enabled)."
  ),
  logCompletions: withDefault(Schema.Boolean, false, "Record and print sample completions at every logging step."),
  numCompletionsToPrint: withDefault(
    Schema.NullOr(PositiveInt),
    null,
    "How many completions to print per logging step; null = all of the latest generation batch."
  ),
  logUniquePrompts: withDefault(Schema.Boolean, false, "Deduplicate the completions table by prompt."),
  reportTo: withDefault(
    ReportTo,
    [],
    "Trackers to log the metrics to besides metrics.jsonl and report.html (TRL report_to): trackio, tensorboard, " +
      "or none."
  ),
  runName: withDefault(
    Schema.NullOr(Schema.String),
    null,
    "The run's name in the trackers (TRL run_name); null = the report's title."
  ),
  project: withDefault(
    Schema.String,
    "huggingface",
    "Trackio's project (TrainingArguments project; the TRACKIO_PROJECT environment variable overrides it)."
  ),
  // --- rendering ---
  chatTemplateKwargs: withDefault(
    Schema.Record({ key: Schema.String, value: Schema.Unknown }),
    {},
    "Variables passed to the chat template at every render (TRL chat_template_kwargs), e.g. {enable_thinking: " +
      "false}; enable_thinking (a boolean) overrides the run's default (false). A JSON string is read as JSON."
  ),
  keepModelTemplate: withDefault(
    Schema.Boolean,
    false,
    "Render with the model's own chat template even when it is not prefix-preserving (by default Qwen3's is " +
      "swapped for its training template, as TRL does); a multi-turn run then fails at its first tool result."
  ),
  // --- generation on policy servers ---
  policyServers: withDefault(
    Schema.Array(Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/, {
      message: () => "a policy server is an http:// or https:// URL, e.g. http://127.0.0.1:8000"
    }))),
    [],
    "Generate on these policy servers (envtrain serve-policy, URLs) instead of in-process; the weights are pushed " +
      "to each after every step (TRL's use_vllm + vllm_mode: server + vllm_server_base_url map here)."
  ),
  policyServerTimeout: withDefault(
    Positive,
    240,
    "Seconds the policy servers may all stay unreachable (at the start or mid-run) before the run stops (TRL " +
      "vllm_server_timeout)."
  ),
  policyServerWeightDirectory: withDefault(
    Schema.NullOr(Schema.String),
    null,
    "Send the weights to the policy servers through this directory (shared with them; for vLLM its --model " +
      "directory) instead of in the request body; null = push the bytes."
  ),
  policyServerWeightStore: withDefault(
    Schema.NullOr(Schema.String),
    null,
    "Publish the weights once per step to this weight store (a directory the policy servers see; they follow it " +
      "with envtrain serve-policy --weights-from DIR and pull, verify and load each version) instead of sending " +
      "them to every server; null = send them."
  ),
  policyServerDiscover: withDefault(
    Schema.Boolean,
    false,
    "Also generate on the policy servers registered in policyServerWeightStore (each serve-policy --weights-from " +
      "registers itself there): read at the start and at every step, so servers may join or leave mid-run."
  ),
  // --- async GRPO (TRL's AsyncGRPOTrainer keys; off = the synchronous trainer) ---
  async: withDefault(
    Schema.Boolean,
    false,
    "Asynchronous GRPO: rollouts run ahead of the optimizer (bounded by maxInflightTasks and maxStaleness); " +
      "false = generate, then train (TRL's GRPOTrainer)."
  ),
  maxInflightTasks: withDefault(
    Schema.Int.pipe(Schema.greaterThanOrEqualTo(-1)),
    -1,
    "Async: episodes started and not yet trained on (being generated or queued), rounded down to whole " +
      "generation batches; -1 = (maxStaleness + 1) × one optimizer step's generation batches (TRL max_inflight_tasks)."
  ),
  maxStaleness: withDefault(
    NonNegativeInt,
    4,
    "Async: how many policy versions (optimizer steps) older than the trainer a sample may be when it is taken for " +
      "training; older ones are dropped and counted (TRL max_staleness). 0 = results equal synchronous GRPO."
  )
})

/**
 * The decoded configuration (every field present, TRL defaults filled in).
 *
 * @since 0.0.0
 */
export type GRPOConfig = typeof GRPOConfig.Type
/** What a file or command line may give (every field optional). */
export type GRPOConfigInput = typeof GRPOConfig.Encoded

/** Field names in camelCase, in schema order. */
export const fieldNames: ReadonlyArray<keyof GRPOConfig> = Object.keys(GRPOConfig.fields) as Array<keyof GRPOConfig>

/** Camel-case name → TRL's snake_case name. */
export const snakeCase = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

const camelCase = (name: string): string => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())

/** TRL names whose camelCase form differs from ours (we have no vLLM; the sampler is ours). */
const aliases: Readonly<Record<string, keyof GRPOConfig>> = {
  vllm_importance_sampling_correction: "importanceSamplingCorrection",
  vllm_importance_sampling_mode: "importanceSamplingMode",
  vllm_importance_sampling_clip_max: "importanceSamplingClipMax",
  vllm_importance_sampling_cap: "importanceSamplingClipMax",
  vllm_importance_sampling_clip_min: "importanceSamplingClipMin",
  vllm_server_timeout: "policyServerTimeout"
}

/** Fields whose command-line value is taken verbatim (never parsed as a number or boolean). */
const stringFields: ReadonlySet<string> = new Set(["outputDir"])

// ---------------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------------

/**
 * The configuration cannot be used. `problems` lists every problem found, each saying what to change.
 *
 * @since 0.0.0
 */
export class GRPOConfigError extends Data.TaggedError("GRPOConfigError")<{
  readonly source: string
  readonly problems: ReadonlyArray<string>
}> {
  override get message() {
    return `Invalid GRPO configuration (${this.source}):\n  - ${this.problems.join("\n  - ")}`
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Key normalisation, decoding
// ---------------------------------------------------------------------------------------------------------------

const levenshtein = (a: string, b: string): number => {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0]
    row[0] = i
    for (let j = 1; j <= b.length; j++) {
      const up = row[j]
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1))
      diag = up
    }
  }
  return row[b.length]
}

/** The closest known key (camelCase or snake_case, whichever the user wrote) if it is plausibly a typo. */
export const suggest = (key: string, extra: ReadonlyArray<string> = []): string | undefined => {
  const snake = key.includes("_")
  const candidates = snake
    ? [...fieldNames.map(snakeCase), ...Object.keys(aliases), ...extra.map(snakeCase)]
    : [...fieldNames, ...extra]
  const lower = key.toLowerCase()
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    const d = levenshtein(lower, candidate.toLowerCase())
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined
}

const canonicalKey = (key: string): keyof GRPOConfig | undefined => {
  if (key in GRPOConfig.fields) return key as keyof GRPOConfig
  if (key in aliases) return aliases[key]
  const camel = camelCase(key)
  return camel in GRPOConfig.fields && camel !== key ? camel as keyof GRPOConfig : undefined
}

/**
 * Maps camelCase / snake_case / TRL alias keys to our field names. Unknown keys and keys given twice (e.g. both
 * `numGenerations` and `num_generations`) are problems; `scaleRewards: true|false` maps to `group|none` as in TRL.
 */
const normaliseKeys = (
  raw: Readonly<Record<string, unknown>>
): { readonly value: Record<string, unknown>; readonly problems: Array<string> } => {
  const value: Record<string, unknown> = {}
  const from: Record<string, string> = {}
  const problems: Array<string> = []
  const get = (snake: string) => raw[snake] !== undefined ? raw[snake] : raw[camelCase(snake)]
  const set = (canonical: string, key: string, v: unknown) => {
    if (canonical in value) {
      problems.push(`"${key}" and "${from[canonical]}" set the same field ${canonical}: keep only one`)
      return
    }
    from[canonical] = key
    value[canonical] = v
  }
  for (const [key, v] of Object.entries(raw)) {
    const canonical = canonicalKey(key)
    if (canonical === undefined) {
      // TRL keys without a field of their own: their envtrain meaning, or what envtrain does instead.
      const snake = key.includes("_") ? key : snakeCase(key)
      // TRL's LoRA keys are read together after the loop.
      if (TrlKeys.loraKeys.has(snake)) continue
      if (snake === "use_vllm") {
        // TRL's server mode is generation on policy servers; its URL keys become policyServers.
        const mapped = TrlKeys.vllmServers(v, get)
        if (typeof mapped === "string") problems.push(`${key}: ${mapped}`)
        else if (mapped !== undefined) set("policyServers", key, mapped)
        continue
      }
      if (snake === "generation_kwargs") {
        const kwargs = v === null ? {} : jsonObject(v)
        if (kwargs === undefined) {
          problems.push(`${key}: must be a mapping (or a JSON object string) of sampling settings`)
          continue
        }
        for (const [k, x] of Object.entries(kwargs)) {
          const field = TrlKeys.generationKwargFields[k]
          if (field === undefined) problems.push(TrlKeys.generationKwargProblem(k))
          else set(field, `${key}.${k}`, x)
        }
        continue
      }
      const check = TrlKeys.checks[snake]
      if (check !== undefined) {
        const problem = check(v, get)
        if (problem !== undefined) problems.push(`${key}: ${problem}`)
        continue
      }
      if (TrlKeys.trainingArguments.has(snake)) {
        problems.push(
          `${key}: a transformers TrainingArguments setting that envtrain does not implement: remove it ` +
            "(see Config.describeFields() for the known keys)"
        )
        continue
      }
      const hint = suggest(key)
      problems.push(
        `unknown key "${key}"` + (hint !== undefined ? `: did you mean "${hint}"?` : ": remove it") +
          " (see Config.describeFields() for the known keys)"
      )
      continue
    }
    if (canonical === "chatTemplateKwargs") {
      const kwargs = v === null ? {} : jsonObject(v)
      if (kwargs === undefined) {
        problems.push(
          `${key}: must be a mapping of template variables (or a JSON object string), e.g. {"enable_thinking": false}`
        )
      } else set(canonical, key, kwargs)
      continue
    }
    set(canonical, key, canonical === "scaleRewards" && typeof v === "boolean" ? (v ? "group" : "none") : v)
  }
  const lora = TrlKeys.loraOf(get)
  if (lora?.problem !== undefined) problems.push(lora.problem)
  else if (lora?.lora !== undefined) {
    set("lora", get("peft_config") !== undefined ? "peft_config" : "use_peft", lora.lora)
  }
  return { value, problems }
}

/** A mapping, or a string holding a JSON object (TRL's dict-or-str keys); `undefined` otherwise. */
const jsonObject = (v: unknown): Record<string, unknown> | undefined => {
  let x = v
  if (typeof v === "string") {
    try {
      x = JSON.parse(v)
    } catch {
      return undefined
    }
  }
  return typeof x === "object" && x !== null && !Array.isArray(x) ? x as Record<string, unknown> : undefined
}

const decodeStruct = Schema.decodeUnknownEither(GRPOConfig, { errors: "all", onExcessProperty: "error" })

const decodeWith = (raw: unknown, source: string): Either.Either<GRPOConfig, GRPOConfigError> => {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return Either.left(
      new GRPOConfigError({ source, problems: ["the configuration must be a mapping of keys to values"] })
    )
  }
  const { problems, value } = normaliseKeys(raw as Record<string, unknown>)
  const decoded = decodeStruct(value)
  if (Either.isLeft(decoded)) {
    for (const issue of ParseResult.ArrayFormatter.formatErrorSync(decoded.left)) {
      const path = issue.path.map(String).join(".")
      problems.push(`${path === "" ? "value" : path}: ${issue.message}`)
    }
  }
  if (Either.isRight(decoded) && decoded.right.lora !== undefined) {
    const route = loraWeightsProblem({
      weightStore: decoded.right.policyServerWeightStore,
      weightDirectory: decoded.right.policyServerWeightDirectory
    })
    if (route !== undefined) problems.push(route)
  }
  if (problems.length > 0 || Either.isLeft(decoded)) {
    return Either.left(new GRPOConfigError({ source, problems }))
  }
  return Either.right(decoded.right)
}

/**
 * Why a LoRA run cannot send its weights to the policy servers this way, or undefined when it can: its adapter
 * travels in the request body (POST /update_weights; each server merges it into the base it holds), while a weight
 * store's followers and a directory reload load whole models. Config decoding refuses such a configuration, and
 * `PolicyServers.withPolicyServers` such options, before a run starts.
 *
 * @since 0.0.0
 */
export const loraWeightsProblem = (route: {
  readonly weightStore?: string | null | undefined
  readonly weightDirectory?: string | null | undefined
}): string | undefined =>
  route.weightStore != null
    ? `a LoRA run (lora / use_peft / peft_config) pushes its adapter in the request body; the weight store ` +
      `${route.weightStore} publishes whole models: drop policyServerWeightStore (weightStore, serve-policy ` +
      "--weights-from) for this run"
    : route.weightDirectory != null
    ? `a LoRA run (lora / use_peft / peft_config) pushes its adapter in the request body, which the weight ` +
      `directory ${route.weightDirectory} cannot carry: drop policyServerWeightDirectory (weightDirectory, ` +
      "--policy-server-weights) for this run"
    : undefined

/**
 * Decodes a plain object (e.g. parsed JSON) into a `GRPOConfig`, accepting camelCase and snake_case keys and
 * rejecting unknown keys with a "did you mean" hint.
 *
 * @since 0.0.0
 */
export const decode = (raw: unknown, source = "object"): Effect.Effect<GRPOConfig, GRPOConfigError> =>
  decodeWith(raw, source)

/**
 * Parses command-line style overrides: `--key value`, `--key=value`, or a bare `--flag` (= true). Values are read as
 * YAML scalars (`3`, `1e-6`, `true`, `null`, `[1, 0.5]`), except for string fields (`outputDir`), kept verbatim.
 *
 * @since 0.0.0
 */
export const parseOverrides = (
  argv: ReadonlyArray<string>
): Effect.Effect<Record<string, unknown>, GRPOConfigError> =>
  Effect.suspend(() => {
    const out: Record<string, unknown> = {}
    const problems: Array<string> = []
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]
      if (!arg.startsWith("--") || arg.length === 2) {
        problems.push(`unexpected argument "${arg}": overrides are written --key value or --key=value`)
        continue
      }
      const eq = arg.indexOf("=")
      const key = eq === -1 ? arg.slice(2) : arg.slice(2, eq)
      let text: string | undefined
      if (eq !== -1) text = arg.slice(eq + 1)
      else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) text = argv[++i]
      if (key in out) {
        problems.push(`--${key} is given twice: keep one`)
        continue
      }
      const canonical = canonicalKey(key)
      if (text === undefined) out[key] = true
      else if (canonical !== undefined && stringFields.has(canonical)) out[key] = text
      else {
        try {
          out[key] = Yaml.parse(text)
        } catch {
          // Not a YAML scalar (e.g. a path with a colon): keep the text; the schema says whether it fits.
          out[key] = text
        }
      }
    }
    return problems.length > 0
      ? Effect.fail(new GRPOConfigError({ source: "command line", problems }))
      : Effect.succeed(out)
  })

const normalisedOrFail = (raw: Record<string, unknown>, source: string) => {
  const { problems, value } = normaliseKeys(raw)
  return problems.length > 0 ? Effect.fail(new GRPOConfigError({ source, problems })) : Effect.succeed(value)
}

/**
 * Parses a configuration file's text: JSON for `.json`, YAML otherwise (YAML is a superset of JSON).
 *
 * @since 0.0.0
 */
export const parseText = (text: string, path: string): Effect.Effect<unknown, GRPOConfigError> =>
  Effect.try({
    try: () => (path.endsWith(".json") ? JSON.parse(text) : Yaml.parse(text)) as unknown,
    catch: (e) =>
      new GRPOConfigError({
        source: path,
        problems: [`cannot parse the file: ${e instanceof Error ? e.message : String(e)}`]
      })
  }).pipe(Effect.map((v) => (v === null || v === undefined ? {} : v)))

/**
 * Builds a configuration from an already-parsed file object and command-line overrides; overrides win.
 *
 * @since 0.0.0
 */
export const fromSources = Effect.fn("Config.fromSources")(function*(
  file: unknown,
  argv: ReadonlyArray<string> = [],
  source = "configuration"
) {
  if (typeof file !== "object" || file === null || Array.isArray(file)) {
    return yield* new GRPOConfigError({ source, problems: ["the file must hold a mapping of keys to values"] })
  }
  const base = yield* normalisedOrFail(file as Record<string, unknown>, source)
  const overrides = yield* normalisedOrFail(yield* parseOverrides(argv), "command line")
  return yield* decode({ ...base, ...overrides }, argv.length > 0 ? `${source} + command line` : source)
})

/**
 * Loads a JSON or YAML configuration file and applies command-line overrides.
 *
 * @since 0.0.0
 */
export const load = Effect.fn("Config.load")(function*(path: string, argv: ReadonlyArray<string> = []) {
  const fs = yield* FileSystem.FileSystem
  const text = yield* fs.readFileString(path).pipe(
    Effect.mapError((e) =>
      new GRPOConfigError({ source: path, problems: [`cannot read the file: ${e.message}; check the path`] })
    )
  )
  const raw = yield* parseText(text, path)
  return yield* fromSources(raw, argv, path)
})

/** One line per field: name, TRL name, default and description (for `--help`). */
export const describeFields = (): ReadonlyArray<string> => {
  const decoded = Schema.decodeUnknownSync(GRPOConfig)({})
  return fieldNames.map((name) => {
    // optionalWith wraps the annotated schema in a Union with undefined; the description sits on our member.
    const ast = GRPOConfig.fields[name].ast
    const type = ast._tag === "PropertySignatureTransformation" ? ast.from.type : undefined
    const members = type === undefined ? [] : type._tag === "Union" ? type.types : [type]
    const description = members
      .map((member) => Option.getOrUndefined(AST.getDescriptionAnnotation(member)))
      .find((d) => d !== undefined)
    return `--${name} (--${snakeCase(name)}) default ${JSON.stringify(decoded[name])}: ${description ?? ""}`
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Validation and derived values
// ---------------------------------------------------------------------------------------------------------------

/**
 * A configuration checked against itself and its run context, with TRL's derived values filled in.
 *
 * @since 0.0.0
 */
export interface ResolvedGRPOConfig extends
  Omit<
    GRPOConfig,
    "generationBatchSize" | "stepsPerGeneration" | "epsilonHigh" | "numGenerationsEval" | "evalSteps"
  >
{
  /** Episodes per generation batch (all processes). */
  readonly generationBatchSize: number
  /** Micro-steps served by one generation batch. */
  readonly stepsPerGeneration: number
  /** Upper clipping range (= epsilon when not set). */
  readonly epsilonHigh: number
  readonly numGenerationsEval: number
  readonly evalSteps: number
  /** Distinct prompts per generation batch: generationBatchSize / numGenerations. */
  readonly promptsPerGeneration: number
  readonly numProcesses: number
  /** Episodes that run at the same time (defaults to the whole generation batch, as TRL's sync trainer). */
  readonly episodesInFlight: number
  /** Non-fatal remarks, as TRL's logger warnings (e.g. luspo without sequence-level ratios). */
  readonly warnings: ReadonlyArray<string>
}

/** Whether two LoRA settings are the same (target order aside). */
const sameLora = (a: LoraConfig.LoraConfig | undefined, b: LoraConfig.LoraConfig | undefined): boolean =>
  a === undefined || b === undefined
    ? a === b
    : a.r === b.r && a.alpha === b.alpha && a.dropout === b.dropout && a.useRsLora === b.useRsLora &&
      [...a.targetModules].sort().join() === [...b.targetModules].sort().join()

/**
 * Why the configuration's `lora` cannot run on a model that trains `modelLora` (`TrainableModel.lora`; undefined:
 * every weight), or undefined when they agree. The model is made before the run, so a LoRA setting it was not made
 * with would otherwise be silently ignored: GRPO (`resolve`) and SFT both refuse it.
 *
 * @since 0.0.0
 */
export const loraProblem = (
  lora: LoraConfig.LoraConfig | undefined,
  modelLora: LoraConfig.LoraConfig | undefined
): string | undefined =>
  sameLora(lora, modelLora)
    ? undefined
    : lora === undefined
    ? "the model trains a LoRA adapter but the configuration sets no lora (use_peft / peft_config): set the " +
      "same LoRA in both, or make the model without one"
    : modelLora === undefined
    ? "lora (use_peft / peft_config) is set but the model trains every weight: make it with the same LoRA " +
      "(Trainer.cpuModel or Trainer.gpuModel(checkpoint, { …, lora: { config: config.lora, seed } }))"
    : `lora is ${JSON.stringify(lora)} but the model trains ${
      JSON.stringify(modelLora)
    }: make the model with the configuration's LoRA`

/**
 * What `resolve` needs to know about the run beyond the configuration itself.
 *
 * @since 0.0.0
 */
export interface ResolveContext {
  /** Data-parallel processes (1 here; kept so the formulas read as TRL's). */
  readonly numProcesses?: number
  /** The remote environment's maximum concurrent sessions (OpenEnv `MAX_CONCURRENT_ENVS`), if remote. */
  readonly remoteMaxConcurrentSessions?: number
  /** Episodes the rollout keeps in flight; defaults to the generation batch size. */
  readonly episodesInFlight?: number
  /** Number of user reward functions (to check `rewardWeights`). */
  readonly numRewardFunctions?: number
  /** The run's own `enableThinking` option, if given (checked against `chatTemplateKwargs.enable_thinking`). */
  readonly enableThinking?: boolean
  /** The LoRA the model trains (`TrainableModel.lora`), checked against `lora`; absent: it trains every weight. */
  readonly modelLora?: LoraConfig.LoraConfig | undefined
}

const clippedLosses: ReadonlySet<LossType> = new Set(["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])

/**
 * Checks the configuration and computes derived values as TRL's `GRPOConfig.__post_init__`. Every problem found is
 * reported at once, each saying what to change.
 *
 * @since 0.0.0
 */
export const resolve = (
  config: GRPOConfig,
  context: ResolveContext = {}
): Effect.Effect<ResolvedGRPOConfig, GRPOConfigError> =>
  Effect.suspend(() => {
    const problems: Array<string> = []
    const warnings: Array<string> = []
    const lora = "modelLora" in context ? loraProblem(config.lora, context.modelLora) : undefined
    if (lora !== undefined) problems.push(lora)
    const P = context.numProcesses ?? 1
    const G = config.numGenerations
    const globalBatch = config.perDeviceTrainBatchSize * P

    let stepsPerGeneration: number
    let generationBatchSize: number
    if (config.generationBatchSize !== null && config.stepsPerGeneration !== null) {
      problems.push(
        "generationBatchSize and stepsPerGeneration are both set: set only one (the other is derived from it)"
      )
      stepsPerGeneration = config.stepsPerGeneration
      generationBatchSize = config.generationBatchSize
    } else if (config.generationBatchSize !== null) {
      generationBatchSize = config.generationBatchSize
      if (generationBatchSize % globalBatch !== 0) {
        problems.push(
          `generationBatchSize (${generationBatchSize}) must be divisible by perDeviceTrainBatchSize × processes ` +
            `(${globalBatch}): use a multiple of ${globalBatch}, e.g. ${
              Math.max(1, Math.round(generationBatchSize / globalBatch)) * globalBatch
            }`
        )
      }
      stepsPerGeneration = Math.max(1, Math.floor(generationBatchSize / globalBatch))
    } else {
      stepsPerGeneration = config.stepsPerGeneration ?? config.gradientAccumulationSteps
      generationBatchSize = globalBatch * stepsPerGeneration
    }

    if (G < 2) {
      problems.push(
        `numGenerations is ${G}: group-relative advantages need at least 2 completions per prompt; set numGenerations >= 2`
      )
    }
    if (generationBatchSize % G !== 0) {
      const lcm = (globalBatch * G) / gcd(globalBatch, G)
      problems.push(
        `the generation batch (${generationBatchSize} episodes = perDeviceTrainBatchSize ${config.perDeviceTrainBatchSize} ` +
          `× processes ${P} × stepsPerGeneration ${stepsPerGeneration}) is not divisible by numGenerations (${G}): ` +
          `make it a multiple of ${G} (e.g. generationBatchSize ${lcm}, or numGenerations dividing ${generationBatchSize})`
      )
    }
    const numGenerationsEval = config.numGenerationsEval ?? G
    if ((config.perDeviceEvalBatchSize * P) % numGenerationsEval !== 0) {
      problems.push(
        `perDeviceEvalBatchSize × processes (${config.perDeviceEvalBatchSize * P}) must be divisible by the eval ` +
          `numGenerations (${numGenerationsEval}): change one of them`
      )
    }

    const epsilonHigh = config.epsilonHigh ?? config.epsilon
    if (clippedLosses.has(config.lossType) && epsilonHigh < config.epsilon) {
      problems.push(
        `epsilonHigh (${epsilonHigh}) is below epsilon (${config.epsilon}): the upper clipping range should be at ` +
          `least the lower one (DAPO's clip-higher uses e.g. epsilon 0.2, epsilonHigh 0.28); raise epsilonHigh or omit it`
      )
    }
    if (config.delta !== null && config.delta <= 1 + epsilonHigh && clippedLosses.has(config.lossType)) {
      // TRL accepts this; INTELLECT-2 uses delta > 1 + epsilonHigh, so say so without refusing.
      warnings.push(
        `delta (${config.delta}) is not above 1 + epsilonHigh (${1 + epsilonHigh}): it caps ratios the clip keeps`
      )
    }

    const clipMin = config.importanceSamplingClipMin
    const clipMax = config.importanceSamplingClipMax
    if (clipMin !== null && clipMax !== null && clipMin >= clipMax) {
      problems.push(
        `importanceSamplingClipMin (${clipMin}) must be less than importanceSamplingClipMax (${clipMax})`
      )
    }
    if (
      config.importanceSamplingCorrection &&
      (config.importanceSamplingMode === "token_truncate" || config.importanceSamplingMode === "sequence_truncate") &&
      clipMin === null && clipMax === null
    ) {
      problems.push(
        `importanceSamplingMode ${config.importanceSamplingMode} needs at least one of importanceSamplingClipMin or ` +
          `importanceSamplingClipMax; set importanceSamplingClipMax (TRL's default is 3)`
      )
    }
    if (
      config.lossType === "vespo" && config.importanceSamplingCorrection &&
      config.importanceSamplingMode !== "token_truncate" && config.importanceSamplingMode !== "token_mask"
    ) {
      problems.push(
        `the vespo loss needs a token-level sampler correction: set importanceSamplingMode to token_truncate or ` +
          `token_mask (it is ${config.importanceSamplingMode}), or importanceSamplingCorrection false`
      )
    }

    if (config.maxSteps <= 0 && config.numTrainEpochs <= 0) {
      problems.push("nothing to train: set maxSteps > 0 or numTrainEpochs > 0")
    }
    if (config.warmupSteps >= 1 && !Number.isInteger(config.warmupSteps)) {
      problems.push(
        `warmupSteps (${config.warmupSteps}) must be an integer number of steps, or a ratio in (0, 1)`
      )
    }
    if (config.rewardWeights !== null && context.numRewardFunctions !== undefined) {
      if (config.rewardWeights.length !== context.numRewardFunctions) {
        problems.push(
          `rewardWeights has ${config.rewardWeights.length} entries but there are ${context.numRewardFunctions} ` +
            `reward functions: give one weight per reward function (environment-owned rewards need none)`
        )
      }
    }

    const thinking = config.chatTemplateKwargs.enable_thinking
    if (thinking !== undefined && typeof thinking !== "boolean") {
      problems.push(`chatTemplateKwargs.enable_thinking must be true or false (it is ${JSON.stringify(thinking)})`)
    } else if (thinking !== undefined && context.enableThinking !== undefined && thinking !== context.enableThinking) {
      problems.push(
        `chatTemplateKwargs.enable_thinking (${thinking}) and the run's enableThinking (${context.enableThinking}) ` +
          "disagree: keep one of them"
      )
    }

    const episodesInFlight = context.episodesInFlight ?? generationBatchSize
    if (context.remoteMaxConcurrentSessions !== undefined && context.remoteMaxConcurrentSessions < episodesInFlight) {
      problems.push(
        `the remote environment allows ${context.remoteMaxConcurrentSessions} concurrent sessions but ` +
          `${episodesInFlight} episodes run at once (one session each): raise the server's MAX_CONCURRENT_ENVS to ` +
          `at least ${episodesInFlight}, or lower the generation batch (perDeviceTrainBatchSize × ` +
          `stepsPerGeneration, or generationBatchSize) or the rollout concurrency`
      )
    }

    if (config.async && config.maxInflightTasks !== -1) {
      const stepEpisodes = asyncBatchesPerStep({ ...config, generationBatchSize }) * generationBatchSize
      if (config.maxInflightTasks < stepEpisodes) {
        problems.push(
          `maxInflightTasks (${config.maxInflightTasks}) is less than one optimizer step's episodes ` +
            `(${stepEpisodes}, whole generation batches): set it to at least ${stepEpisodes}, or -1 for ` +
            `(maxStaleness + 1) × ${stepEpisodes}`
        )
      }
    }

    if (config.lossType === "luspo" && config.importanceSamplingLevel !== "sequence") {
      warnings.push("luspo expects importanceSamplingLevel \"sequence\" (the paper's setup)")
    }
    if (config.lossType === "vespo" && config.importanceSamplingLevel !== "token") {
      warnings.push("vespo computes sequence weights itself; importanceSamplingLevel should be \"token\"")
    }
    if (
      config.importanceSamplingLevel === "sequence" &&
      (config.lossType === "bnpo" || config.lossType === "dr_grpo" || config.lossType === "dapo" ||
        config.lossType === "cispo")
    ) {
      warnings.push(
        `with importanceSamplingLevel "sequence" the ${config.lossType} loss weights each sequence by its length; ` +
          `GSPO's setup is lossType "grpo"`
      )
    }
    if (config.lossType === "cispo" && epsilonHigh < 1) {
      warnings.push(
        `cispo caps every ratio at epsilonHigh (${epsilonHigh}) itself, not 1 + epsilonHigh; the docs recommend 5.0`
      )
    }

    if (problems.length > 0) return Effect.fail(new GRPOConfigError({ source: "validation", problems }))
    return Effect.succeed({
      ...config,
      generationBatchSize,
      stepsPerGeneration,
      epsilonHigh,
      numGenerationsEval,
      evalSteps: config.evalSteps ?? config.loggingSteps,
      promptsPerGeneration: generationBatchSize / G,
      numProcesses: P,
      episodesInFlight,
      warnings
    })
  })

/**
 * Async GRPO: the generation batches one optimizer step consumes (rounded up; a batch serves
 * ceil(generationBatchSize / perDeviceTrainBatchSize) × numIterations micro-batches).
 *
 * @since 0.0.0
 */
export const asyncBatchesPerStep = (
  config: Pick<
    ResolvedGRPOConfig,
    "generationBatchSize" | "perDeviceTrainBatchSize" | "numIterations" | "gradientAccumulationSteps"
  >
): number => Math.ceil(config.gradientAccumulationSteps / asyncMicroBatchesPerBatch(config))

/**
 * Async GRPO: micro-batches one generation batch serves.
 *
 * @since 0.0.0
 */
export const asyncMicroBatchesPerBatch = (
  config: Pick<ResolvedGRPOConfig, "generationBatchSize" | "perDeviceTrainBatchSize" | "numIterations">
): number => Math.ceil(config.generationBatchSize / config.perDeviceTrainBatchSize) * config.numIterations

/**
 * Async GRPO: generation batches that may be started and not yet trained on (maxInflightTasks in whole batches;
 * -1 = (maxStaleness + 1) × one step's batches, so the producer keeps up to maxStaleness steps ahead).
 *
 * @since 0.0.0
 */
export const asyncBatchesInFlight = (config: ResolvedGRPOConfig): number =>
  config.maxInflightTasks === -1
    ? (config.maxStaleness + 1) * asyncBatchesPerStep(config)
    : Math.max(asyncBatchesPerStep(config), Math.floor(config.maxInflightTasks / config.generationBatchSize))

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b))

/**
 * How a run renders its chat template: `enable_thinking` from `chatTemplateKwargs` when given, else the run's
 * `enableThinking`, else false (as every TRL OpenEnv example); every other kwarg as a template variable.
 *
 * @since 0.0.0
 */
export const templateOptions = (
  config: Pick<GRPOConfig, "chatTemplateKwargs">,
  enableThinking?: boolean
): { readonly enableThinking: boolean; readonly extra: Readonly<Record<string, unknown>> } => {
  const { enable_thinking, ...extra } = config.chatTemplateKwargs
  return { enableThinking: typeof enable_thinking === "boolean" ? enable_thinking : enableThinking ?? false, extra }
}

/**
 * Optimizer steps for a dataset of `datasetSize` prompts, as transformers computes `max_steps`: `maxSteps` when
 * > 0, else `ceil(numTrainEpochs × stepsPerEpoch)` where one epoch yields `floor(datasetSize / promptsPerGeneration)`
 * generation batches, each serving `stepsPerGeneration × numIterations` micro-steps.
 *
 * @since 0.0.0
 */
export const totalSteps = (config: ResolvedGRPOConfig, datasetSize: number): number => {
  if (config.maxSteps > 0) return config.maxSteps
  const generations = Math.floor(datasetSize / config.promptsPerGeneration)
  const microSteps = generations * config.stepsPerGeneration * config.numIterations
  const perEpoch = Math.max(1, Math.ceil(microSteps / config.gradientAccumulationSteps))
  return Math.ceil(config.numTrainEpochs * perEpoch)
}
