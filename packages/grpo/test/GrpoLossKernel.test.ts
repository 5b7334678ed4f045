import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gpu, GrpoLoss } from "@envtrain/gpu"
import { Effect } from "effect"
import { gpuModel } from "../src/internal/gpuModel.js"
import { batchOf, type LossInputs } from "../src/internal/model.js"
import * as Loss from "../src/Loss.js"

// The device loss kernel (`@envtrain/gpu/GrpoLoss`) against its CPU specification `Loss.compute`, and the whole GRPO
// step on the device against the weighted step fed `Loss.compute`'s coefficients (the same gradient).

/** Deterministic pseudo-random numbers (mulberry32). */
const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const B = 3
const T = 7
type Correction = NonNullable<LossInputs["samplerCorrection"]>

/** Random logprobs with per-token log-ratios in ±0.6 (every clipping region), tool tokens and a truncated row. */
const tensors = (seed: number, rows = B) => {
  const r = rng(seed)
  const lengths = [T, 4, 6].slice(0, rows)
  const completionMask = Array.from({ length: rows * T }, (_, j) => ((j % T) < lengths[Math.floor(j / T)] ? 1 : 0))
  const toolMask = completionMask.map((_, j) => (j % T === 2 ? 0 : 1))
  const mask = Loss.lossMask({
    rows,
    length: T,
    completionMask,
    toolMask,
    truncated: [false, true, false].slice(0, rows),
    maskTruncatedCompletions: seed % 2 === 0
  })
  const logprobs = Float64Array.from(mask, () => -0.1 - 3 * r())
  const at = (f: (l: number) => number) => Float64Array.from(logprobs, (l) => Math.fround(f(l)))
  return {
    mask,
    logprobs: at((l) => l),
    old: at((l) => l - (r() - 0.5) * 1.2),
    ref: at((l) => l + (r() - 0.5)),
    sampler: at((l) => l + (r() - 0.5) * 0.8),
    entropies: at(() => 2 * r()),
    advantages: Float64Array.from({ length: rows }, (_, i) => [1.2, -0.7, 0.4][i] * (0.5 + r()))
  }
}

interface Case {
  readonly name: string
  readonly options: Partial<Loss.LossOptions>
  readonly old?: boolean
  readonly correction?: Correction
  readonly rows?: number
}

const types: ReadonlyArray<Loss.LossOptions["lossType"]> = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"]
const cases: Array<Case> = [
  ...types.map((lossType): Case => ({ name: `${lossType} on-policy`, options: { lossType } })),
  ...types.map((lossType): Case => ({
    name: `${lossType} off-policy, ε_high 0.28, β 0.04, GA 2`,
    options: { lossType, epsilonHigh: lossType === "cispo" ? 1.1 : 0.28, beta: 0.04, gradientAccumulationSteps: 2 },
    old: true
  })),
  ...types.map((lossType): Case => ({
    name: `${lossType} sequence-level ratio (GSPO), sequence_mask correction`,
    options: { lossType, importanceSamplingLevel: "sequence" },
    old: true,
    correction: { mode: "sequence_mask", clipMin: null, clipMax: 1.5 }
  })),
  {
    name: "dapo token_truncate correction with both bounds",
    options: {},
    old: true,
    correction: { mode: "token_truncate", clipMin: 0.9, clipMax: 1.2 }
  },
  {
    name: "grpo token_mask correction, bias-corrected KL",
    options: { lossType: "grpo", beta: 0.1, useBiasCorrectionKl: true },
    old: true,
    correction: { mode: "token_mask", clipMin: 0.85, clipMax: 1.25 }
  },
  {
    name: "bnpo sequence_truncate correction, two rows of three",
    options: { lossType: "bnpo" },
    old: true,
    correction: { mode: "sequence_truncate", clipMin: null, clipMax: 1.1 },
    rows: 2
  },
  { name: "dapo with delta 1.3", options: { delta: 1.3, epsilonHigh: 0.5 }, old: true },
  {
    name: "cispo, four micro-steps per generation, GA 2",
    options: { lossType: "cispo", epsilonHigh: 1.1, gradientAccumulationSteps: 2, stepsPerGeneration: 4 },
    old: true
  },
  {
    name: "grpo with the off-policy sequence mask, eval mode",
    options: { lossType: "grpo", offPolicyMaskThreshold: 0.05, mode: "eval", gradientAccumulationSteps: 4 },
    old: true
  },
  {
    name: "sapo sequence-level, β 0.02",
    options: { lossType: "sapo", importanceSamplingLevel: "sequence", beta: 0.02 },
    old: true
  }
]

const close = (got: number, want: number, scale: number, what: string) =>
  assert.isTrue(
    Math.abs(got - want) <= 2e-5 * (scale + Math.abs(want)) || (Number.isNaN(got) && Number.isNaN(want)),
    `${what}: got ${got}, want ${want}`
  )

describe("GrpoLoss kernel = Loss.compute", () => {
  it.scoped(
    "every loss type, clipping, KL, sampler corrections, masks: loss, d loss / d logprob and metrics",
    () =>
      Effect.gen(function*() {
        const kernel = yield* GrpoLoss.make({ batch: B, seq: T })
        let seed = 1
        for (const c of cases) {
          const rows = c.rows ?? B
          const x = tensors(seed++, rows)
          const options: Loss.LossOptions = { ...Loss.defaultOptions, maxCompletionLength: 9, ...c.options }
          const numItemsInBatch = Loss.countTokens(x.mask) + 5
          const correction = c.correction === undefined ? undefined : Loss.samplerCorrection({
            rows,
            length: T,
            oldLogprobs: x.old,
            samplerLogprobs: x.sampler,
            mask: x.mask,
            ...c.correction
          })
          const want = Loss.compute({
            rows,
            length: T,
            logprobs: x.logprobs,
            mask: x.mask,
            advantages: x.advantages,
            oldLogprobs: c.old === true ? x.old : undefined,
            refLogprobs: x.ref,
            samplerLogprobs: x.sampler,
            importanceSampling: correction,
            entropies: x.entropies,
            numItemsInBatch
          }, options)
          const settings: GrpoLoss.Settings = {
            ...GrpoLoss.defaults,
            ...c.options,
            lossType: options.lossType as GrpoLoss.LossType,
            maxCompletionLength: 9,
            ...(c.correction === undefined ? {} : { samplerCorrection: c.correction })
          }
          const got = yield* kernel.evaluate(
            settings,
            {
              rows,
              mask: x.mask,
              advantages: x.advantages,
              old: c.old === true ? x.old : undefined,
              ref: x.ref,
              sampler: x.sampler,
              numItemsInBatch
            },
            x.logprobs,
            x.entropies
          )
          const scale = want.gradient.reduce((m, g) => Math.max(m, Math.abs(g)), 0)
          assert.isAbove(scale, 0, `${c.name}: a case with no gradient tests nothing`)
          close(got.loss, want.loss, Math.abs(want.loss) + scale, `${c.name}: loss`)
          for (let j = 0; j < rows * T; j++) {
            close(got.gradient[j], want.gradient[j], scale, `${c.name}: gradient[${j}]`)
          }
          assert.deepStrictEqual(Object.keys(got.metrics).sort(), Object.keys(want.metrics).sort(), c.name)
          for (const [k, v] of Object.entries(want.metrics)) {
            close(got.metrics[k], v, 1, `${c.name}: ${k}`)
          }
        }
      }).pipe(Effect.provide(Gpu.layer())),
    120_000
  )
})

describe("GrpoLoss kernel on rows longer than its 256 threads", () => {
  it.scoped(
    "several tokens per thread: grpo sequence-level with sequence_truncate, dapo with β, = Loss.compute",
    () =>
      Effect.gen(function*() {
        const rows = 2
        const L = 600
        const kernel = yield* GrpoLoss.make({ batch: rows, seq: L })
        const r = rng(99)
        const mask = Float64Array.from(
          { length: rows * L },
          (_, j) => (j % L < [L, 437][Math.floor(j / L)] && j % 7 !== 3 ? 1 : 0)
        )
        const logprobs = Float64Array.from(mask, () => Math.fround(-0.1 - 3 * r()))
        const old = Float64Array.from(logprobs, (l) => Math.fround(l - (r() - 0.5) * 0.02))
        const sampler = Float64Array.from(old, (l) => Math.fround(l + (r() - 0.5) * 0.002))
        const ref = Float64Array.from(logprobs, (l) => Math.fround(l + (r() - 0.5) * 0.5))
        const advantages = Float64Array.from([0.8, -1.3])
        const variants: Array<{ options: Partial<Loss.LossOptions>; correction: Correction }> = [
          {
            options: { lossType: "grpo", importanceSamplingLevel: "sequence" },
            correction: { mode: "sequence_truncate", clipMin: 0.9, clipMax: 1.02 }
          },
          {
            options: { lossType: "dapo", beta: 0.05 },
            correction: { mode: "token_mask", clipMin: null, clipMax: 1.0005 }
          }
        ]
        for (const v of variants) {
          const options: Loss.LossOptions = { ...Loss.defaultOptions, ...v.options }
          const numItemsInBatch = Loss.countTokens(mask)
          const want = Loss.compute({
            rows,
            length: L,
            logprobs,
            mask,
            advantages,
            oldLogprobs: old,
            refLogprobs: ref,
            samplerLogprobs: sampler,
            importanceSampling: Loss.samplerCorrection({
              rows,
              length: L,
              oldLogprobs: old,
              samplerLogprobs: sampler,
              mask,
              ...v.correction
            }),
            numItemsInBatch
          }, options)
          const got = yield* kernel.evaluate(
            {
              ...GrpoLoss.defaults,
              ...v.options,
              lossType: options.lossType as GrpoLoss.LossType,
              samplerCorrection: v.correction
            },
            { rows, mask, advantages, old, ref, sampler, numItemsInBatch },
            logprobs
          )
          const scale = want.gradient.reduce((m, g) => Math.max(m, Math.abs(g)), 0)
          assert.isAbove(scale, 0)
          const what = options.lossType
          close(got.loss, want.loss, Math.abs(want.loss) + scale, `${what}: loss`)
          for (let j = 0; j < rows * L; j++) close(got.gradient[j], want.gradient[j], scale, `${what}: gradient[${j}]`)
          for (const [k, x] of Object.entries(want.metrics)) {
            if (k !== "entropy") close(got.metrics[k], x, 1, `${what}: ${k}`)
          }
        }
      }).pipe(Effect.provide(Gpu.layer())),
    120_000
  )
})

describe("the GRPO step on the device", () => {
  it.scoped(
    "grpo mode (loss kernel inside the step) updates the weights as the weighted step fed Loss.compute's gradient",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const shape = { batch: 2, seq: 16, temperature: 1, slots: 2 }
        const deviceLoss = yield* gpuModel(checkpoint, shape)
        const weighted = yield* gpuModel(checkpoint, shape)
        const r = rng(7)
        const token = () => 5 + Math.floor(r() * 200)
        // Three rows in two micro-batches of the model's batch 2 (the last one short).
        const prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]].map((p) => p.map(() => token()))
        const completions = [9, 7, 10].map((n) => Array.from({ length: n }, token))
        const batch = batchOf(prompts, completions)
        const L = batch.length
        const scores = yield* weighted.score(batch, 1)
        const mask = Float64Array.from(
          { length: 3 * L },
          (_, j) => (j % L < completions[Math.floor(j / L)].length && j % L !== 3 ? 1 : 0)
        )
        const old = Float64Array.from(scores.logprobs, (l) => l - (r() - 0.5) * 0.8)
        const inputs: LossInputs = {
          mask,
          advantages: Float64Array.from([0.9, -1.1, 0.5]),
          oldLogprobs: old,
          refLogprobs: Float64Array.from(scores.logprobs, (l) => l + (r() - 0.5) * 0.4),
          samplerLogprobs: Float64Array.from(old, (l) => l + (r() - 0.5) * 0.2),
          samplerCorrection: { mode: "token_truncate", clipMin: null, clipMax: 1.05 },
          numItemsInBatch: 30
        }
        const options: Loss.LossOptions = {
          ...Loss.defaultOptions,
          lossType: "grpo",
          beta: 0.05,
          gradientAccumulationSteps: 2
        }
        const correction = Loss.samplerCorrection({
          rows: 3,
          length: L,
          oldLogprobs: old,
          samplerLogprobs: inputs.samplerLogprobs!,
          mask,
          ...inputs.samplerCorrection!
        })
        // Adam's first step moves each weight by lr·g / (|g| + eps): with eps ≫ |g| the move is linear in g.
        const step = { learningRate: 1, maxGradNorm: 0, beta1: 0.9, beta2: 0.999, epsilon: 1, weightDecay: 0 }
        let want: Loss.LossResult | undefined
        for (const rowsOf of [[0, 1], [2]]) {
          const part = batchOf(rowsOf.map((i) => prompts[i]), rowsOf.map((i) => completions[i]))
          const pick = (x: Float64Array) =>
            Float64Array.from({ length: rowsOf.length * part.length }, (_, j) =>
              x[rowsOf[Math.floor(j / part.length)] * L + (j % part.length)])
          const partInputs: LossInputs = {
            mask: pick(mask),
            advantages: Float64Array.from(rowsOf.map((i) =>
              inputs.advantages[i]
            )),
            oldLogprobs: pick(old),
            refLogprobs: pick(inputs.refLogprobs as Float64Array),
            samplerLogprobs: pick(inputs.samplerLogprobs as Float64Array),
            importanceSampling: { ratio: pick(correction.ratio), level: "token", metrics: {} },
            samplerCorrection: inputs.samplerCorrection,
            numItemsInBatch: 30
          }
          const deferred = yield* deviceLoss.accumulateLoss!(part, 1, partInputs, options)
          assert.isUndefined(deferred, "the loss is computed in the step program")
          yield* weighted.accumulate(part, 1, (s) => {
            const result = Loss.compute({
              ...partInputs,
              rows: rowsOf.length,
              length: part.length,
              logprobs: s.logprobs,
              entropies: s.entropies
            }, options)
            want = want === undefined ? result : {
              loss: want.loss + result.loss,
              gradient: result.gradient,
              metrics: Object.fromEntries(
                Object.entries(want.metrics).map(([k, v]) => [k, (v + result.metrics[k]) / 2])
              )
            }
            return result.gradient
          })
        }
        const before = (yield* weighted.exportState).weights
        const a = yield* deviceLoss.step(step)
        const b = yield* weighted.step(step)
        assert.closeTo(a.gradNorm, b.gradNorm, 1e-4 * b.gradNorm)
        assert.closeTo(a.loss!, want!.loss, 1e-5 * (1 + Math.abs(want!.loss)))
        for (const [k, v] of Object.entries(want!.metrics)) assert.closeTo(a.metrics![k], v, 1e-4, k)
        const wa = (yield* deviceLoss.exportState).weights
        const wb = (yield* weighted.exportState).weights
        let moved = 0
        let diff = 0
        for (const [name, t] of wb) {
          const x = before.get(name)!.data
          for (let i = 0; i < t.data.length; i++) {
            moved = Math.max(moved, Math.abs(t.data[i] - x[i]))
            diff = Math.max(diff, Math.abs(wa.get(name)!.data[i] - t.data[i]))
          }
        }
        assert.isAbove(moved, 1e-4, "the step moved the weights")
        assert.isBelow(diff, 2e-3 * moved, `grpo-mode and weighted steps differ by ${diff} (largest move ${moved})`)
      }).pipe(Effect.provide(Gpu.layer())),
    180_000
  )
})

describe("the GPU model's fallback", () => {
  it.scoped(
    "vespo (not in the kernel) is computed on the host with Loss.compute and returned at once",
    () =>
      Effect.gen(function*() {
        const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
        const model = yield* gpuModel(checkpoint, { batch: 2, seq: 12, temperature: 1, slots: 2 })
        const batch = batchOf([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15, 16]])
        const mask = Float64Array.from([1, 1, 0, 1, 1, 1, 1, 0])
        const inputs: LossInputs = { mask, advantages: Float64Array.from([0.7, -0.4]), numItemsInBatch: 6 }
        const options: Loss.LossOptions = { ...Loss.defaultOptions, lossType: "vespo" }
        const scores = yield* model.score(batch, 1)
        const want = Loss.compute({
          ...inputs,
          rows: 2,
          length: 4,
          logprobs: scores.logprobs,
          entropies: scores.entropies
        }, options)
        const now = yield* model.accumulateLoss!(batch, 1, inputs, options)
        assert.isDefined(now)
        assert.closeTo(now!.loss, want.loss, 1e-9)
        assert.closeTo(now!.metrics["vespo/phi_seq_mean"], want.metrics["vespo/phi_seq_mean"], 1e-9)
        const stepped = yield* model.step({
          learningRate: 1e-3,
          maxGradNorm: 1,
          beta1: 0.9,
          beta2: 0.999,
          epsilon: 1e-8,
          weightDecay: 0
        })
        assert.isUndefined(stepped.loss)
        assert.isAbove(stepped.gradNorm, 0)
      }).pipe(Effect.provide(Gpu.layer())),
    120_000
  )
})
