/**
 * Issue 17, check 5c: every loss type envtrain and TRL both have, with its gradient, equals TRL's own
 * implementation on identical inputs. TRL's side is interop/python/trl_loss.py: `GRPOTrainer.compute_loss` on a
 * trainer built from a real `GRPOConfig`, the policy logprobs a torch leaf with `requires_grad` (so its gradient
 * is autograd's), and the sampler correction run from TRL's own source. envtrain's side is `Loss.samplerCorrection`
 * and `Loss.compute`, the CPU specification the GPU kernel is tested against.
 */
import { assert, describe, it } from "@effect/vitest"
import { Loss } from "@envtrain/grpo"
import { Duration, Effect } from "effect"
import * as Python from "../src/Python.js"

type LossType = Loss.LossOptions["lossType"]
type SamplerMode = "token_truncate" | "token_mask" | "sequence_truncate" | "sequence_mask"

interface Variant {
  readonly name: string
  readonly options?: Partial<Loss.LossOptions>
  readonly sampler?: { readonly mode: SamplerMode; readonly clipMin: number | null; readonly clipMax: number | null }
  readonly noOld?: boolean
}

// Seeded inputs (mulberry32), so a failure names a case that reproduces.
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const ROWS = 4
const LENGTH = 7

const inputs = (seed: number) => {
  const r = random(seed)
  const n = ROWS * LENGTH
  const logprobs = Array.from({ length: n }, () => -0.05 - 3 * r())
  // l − l^old in ±0.45 (ratios from 0.64 to 1.57: inside and outside every clip range used here).
  const oldLogprobs = logprobs.map((l) => l - (r() - 0.5) * 0.9)
  const samplerLogprobs = oldLogprobs.map((l) => l - (r() - 0.5) * 0.3)
  const refLogprobs = logprobs.map((l) => l - (r() - 0.5) * 0.8)
  const entropies = Array.from({ length: n }, () => 3 * r())
  // Right-padded completions of lengths 7, 5, 3 and 0 (a row with no loss tokens), tool tokens masked out.
  const lengths = [7, 5, 3, 0]
  const completionMask = Array.from({ length: n }, (_, j) => (j % LENGTH < lengths[Math.floor(j / LENGTH)] ? 1 : 0))
  const toolMask = Array.from({ length: n }, (_, j) => (j % LENGTH === 2 || j % LENGTH === 3 ? 0 : 1))
  const advantages = [0.8 + r(), -0.6 - r(), r() - 0.5, 0.3]
  return { logprobs, oldLogprobs, samplerLogprobs, refLogprobs, entropies, completionMask, toolMask, advantages }
}

const lossTypes: ReadonlyArray<LossType> = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"]

const variants: ReadonlyArray<Variant> = [
  { name: "defaults" },
  { name: "on-policy (no old logprobs)", noOld: true },
  { name: "epsilon low/high", options: { epsilon: 0.1, epsilonHigh: 0.28 } },
  { name: "cispo-style high cap", options: { epsilon: 0.2, epsilonHigh: 1.3 } },
  { name: "delta", options: { delta: 1.25 } },
  { name: "k3 KL", options: { beta: 0.04 } },
  { name: "k3 KL, bias-corrected", options: { beta: 0.1, useBiasCorrectionKl: true } },
  { name: "sequence-level ratio", options: { importanceSamplingLevel: "sequence" } },
  { name: "sequence-level ratio with KL", options: { importanceSamplingLevel: "sequence", beta: 0.04 } },
  { name: "top-entropy tokens", options: { topEntropyQuantile: 0.4 } },
  { name: "off-policy mask", options: { offPolicyMaskThreshold: 0.05 } },
  {
    name: "sapo temperatures, vespo shape",
    options: {
      sapoTemperaturePos: 0.7,
      sapoTemperatureNeg: 1.6,
      vespoKPos: 1.5,
      vespoLambdaPos: 2.5,
      vespoKNeg: 2.5,
      vespoLambdaNeg: 1.5
    }
  },
  { name: "gradient accumulation", options: { gradientAccumulationSteps: 2 } },
  {
    name: "steps per generation ≠ gradient accumulation",
    options: { gradientAccumulationSteps: 2, stepsPerGeneration: 4 }
  },
  { name: "eval mode", options: { gradientAccumulationSteps: 2, stepsPerGeneration: 4, mode: "eval" } },
  { name: "sampler token_truncate", sampler: { mode: "token_truncate", clipMin: null, clipMax: 1.15 } },
  { name: "sampler token_mask", sampler: { mode: "token_mask", clipMin: 0.9, clipMax: 1.1 } },
  { name: "sampler sequence_truncate", sampler: { mode: "sequence_truncate", clipMin: 0.5, clipMax: 1.2 } },
  { name: "sampler sequence_mask", sampler: { mode: "sequence_mask", clipMin: 0.3, clipMax: 3 } },
  {
    name: "everything at once",
    options: {
      beta: 0.04,
      useBiasCorrectionKl: true,
      epsilon: 0.15,
      epsilonHigh: 0.25,
      delta: 1.4,
      offPolicyMaskThreshold: 0.02,
      topEntropyQuantile: 0.7,
      gradientAccumulationSteps: 2
    },
    sampler: { mode: "token_truncate", clipMin: 0.8, clipMax: 1.2 }
  }
]

interface Case {
  readonly name: string
  readonly options: Loss.LossOptions
  readonly variant: Variant
  readonly data: ReturnType<typeof inputs>
  readonly numItemsInBatch: number
}

const cases: Array<Case> = []
let seed = 17
for (const lossType of lossTypes) {
  for (const variant of variants) {
    // VESPO takes only token-level sampler corrections (TRL refuses the sequence modes for it).
    if (lossType === "vespo" && variant.sampler?.mode.startsWith("sequence")) continue
    const data = inputs(seed++)
    const options: Loss.LossOptions = {
      ...Loss.defaultOptions,
      maxCompletionLength: 16,
      lossType,
      ...variant.options
    }
    // The micro-batch is a part of its generation batch: TRL's num_items_in_batch counts the whole of it.
    const mask = Loss.lossMask({
      rows: ROWS,
      length: LENGTH,
      completionMask: data.completionMask,
      toolMask: data.toolMask
    })
    cases.push({
      name: `${lossType}: ${variant.name}`,
      options,
      variant,
      data,
      numItemsInBatch: 3 * Loss.countTokens(mask)
    })
  }
}

// GRPOConfig keys for LossOptions (TRL's names).
const trlConfig = (c: Case) => ({
  loss_type: c.options.lossType,
  epsilon: c.options.epsilon,
  epsilon_high: c.options.epsilonHigh,
  delta: c.options.delta,
  beta: c.options.beta,
  importance_sampling_level: c.options.importanceSamplingLevel,
  use_bias_correction_kl: c.options.useBiasCorrectionKl,
  sapo_temperature_pos: c.options.sapoTemperaturePos,
  sapo_temperature_neg: c.options.sapoTemperatureNeg,
  vespo_k_pos: c.options.vespoKPos,
  vespo_lambda_pos: c.options.vespoLambdaPos,
  vespo_k_neg: c.options.vespoKNeg,
  vespo_lambda_neg: c.options.vespoLambdaNeg,
  top_entropy_quantile: c.options.topEntropyQuantile,
  off_policy_mask_threshold: c.options.offPolicyMaskThreshold,
  gradient_accumulation_steps: c.options.gradientAccumulationSteps,
  steps_per_generation: c.options.stepsPerGeneration ?? c.options.gradientAccumulationSteps,
  max_completion_length: c.options.maxCompletionLength,
  ...(c.variant.sampler === undefined ? {} : {
    vllm_importance_sampling_mode: c.variant.sampler.mode,
    vllm_importance_sampling_clip_min: c.variant.sampler.clipMin,
    vllm_importance_sampling_clip_max: c.variant.sampler.clipMax
  })
})

interface TrlResult {
  readonly loss: number
  readonly gradient: ReadonlyArray<number>
  readonly ratio: ReadonlyArray<number> | null
  readonly metrics: Readonly<Record<string, number>>
}

const trl = Effect.suspend(() => {
  const payload = cases.map((c) => ({
    rows: ROWS,
    length: LENGTH,
    mode: c.options.mode ?? "train",
    config: trlConfig(c),
    samplerCorrection: c.variant.sampler === undefined ? null : {},
    logprobs: c.data.logprobs,
    oldLogprobs: c.variant.noOld === true ? null : c.data.oldLogprobs,
    samplerLogprobs: c.data.samplerLogprobs,
    refLogprobs: c.options.beta !== 0 ? c.data.refLogprobs : null,
    entropies: c.data.entropies,
    completionMask: c.data.completionMask,
    toolMask: c.data.toolMask,
    advantages: c.data.advantages,
    numItemsInBatch: c.numItemsInBatch
  }))
  return Python.run(["interop/python/trl_loss.py"], { stdin: JSON.stringify(payload), timeout: Duration.minutes(3) })
}).pipe(Effect.map((out) => JSON.parse(out) as ReadonlyArray<TrlResult>))

// 1e-6 relative (both sides compute in float64, so real agreement is ~1e-15). Every disagreement is collected, so
// a failure lists all the cases it touches.
const failures: Array<string> = []
const close = (got: number, want: number, what: string) => {
  if (!(Math.abs(got - want) <= 1e-6 * Math.abs(want) + 1e-12)) failures.push(`${what}: envtrain ${got}, TRL ${want}`)
}

const envtrain = (c: Case) => {
  const { data } = c
  const mask = Loss.lossMask({
    rows: ROWS,
    length: LENGTH,
    completionMask: data.completionMask,
    toolMask: data.toolMask
  })
  const correction = c.variant.sampler === undefined ? undefined : Loss.samplerCorrection({
    rows: ROWS,
    length: LENGTH,
    oldLogprobs: data.oldLogprobs,
    samplerLogprobs: data.samplerLogprobs,
    mask,
    ...c.variant.sampler
  })
  const result = Loss.compute({
    rows: ROWS,
    length: LENGTH,
    logprobs: data.logprobs,
    mask,
    advantages: data.advantages,
    oldLogprobs: c.variant.noOld === true ? undefined : data.oldLogprobs,
    refLogprobs: c.options.beta !== 0 ? data.refLogprobs : undefined,
    samplerLogprobs: c.variant.sampler === undefined ? undefined : data.samplerLogprobs,
    importanceSampling: correction,
    entropies: data.entropies,
    numItemsInBatch: c.numItemsInBatch
  }, c.options)
  return { ...result, ratio: correction?.ratio }
}

describe("TRL's GRPO loss as the judge of Loss.compute", () => {
  it.effect(
    `${cases.length} cases: loss, d loss / d logprobs, sampler ratios and metrics equal TRL's`,
    () =>
      Effect.gen(function*() {
        const results = yield* trl
        assert.strictEqual(results.length, cases.length)
        for (let k = 0; k < cases.length; k++) {
          const c = cases[k]
          const want = results[k]
          const got = envtrain(c)
          close(got.loss, want.loss, `${c.name}: loss`)
          if (!want.gradient.some((g) => g !== 0)) failures.push(`${c.name}: TRL's gradient is all zero (a weak case)`)
          for (let j = 0; j < want.gradient.length; j++) {
            close(got.gradient[j], want.gradient[j], `${c.name}: gradient[${j}]`)
          }
          if (want.ratio !== null) {
            assert.isDefined(got.ratio)
            for (let j = 0; j < want.ratio.length; j++) {
              close(got.ratio![j], want.ratio[j], `${c.name}: sampler ratio[${j}]`)
            }
          }
          for (const [key, value] of Object.entries(want.metrics)) {
            if (key in got.metrics) {
              close(got.metrics[key], value, `${c.name}: metric ${key}`)
            }
          }
        }
        const cases_ = new Set(failures.map((f) => f.split(":").slice(0, 2).join(":")))
        assert.deepStrictEqual(
          failures,
          [],
          `${failures.length} disagreements in ${cases_.size} cases:\n${[...cases_].join("\n")}\n${
            failures.slice(0, 40).join("\n")
          }`
        )
      }),
    240_000
  )
})
