/**
 * The GRPO loss as a WGSL kernel inside the training step (TRL reference §3.4–§3.9): placed between the forward's
 * log-softmax/gather (`t.logp`) and the backward, it forms every token's loss and d loss / d logprob on the device,
 * so a step needs no scoring forward and no host round trip between forward and backward. The host uploads, with
 * each micro-batch, what is known before the step (loss mask, per-row advantages, old / reference / sampler
 * logprobs, the generation batch's token count); the kernel reduces per row what depends on the current policy
 * (GSPO's sequence ratio, the per-sequence means of grpo / sapo, the off-policy mask) and the sampler correction.
 * Only scalars come back: the summed loss and TRL's loss-side metrics (via `step.results`).
 *
 * Per token, with w the policy/old ratio (per token or, for `importanceSamplingLevel: "sequence"`, per row):
 * grpo / bnpo / dr_grpo / dapo `−min(w·A, clip(w, 1−ε_lo, 1+ε_hi)·A)` (with `delta`: `c1 = min(w, δ)`); cispo
 * `−sg(min(w, ε_hi))·A·l`; sapo `−(4/τ)·σ(τ(w−1))·A`; then `× offPolicyMask × ρ_IS + β·KL_k3` (k3 × w with the bias
 * correction) and each loss type's aggregation. The CPU specification is `@envtrain/grpo`'s `Loss.compute`
 * (tests check parity); luspo, vespo and the top-entropy token mask are not in the kernel.
 *
 * @example
 * ```ts
 * // Inside a model step: Qwen3 "grpo" mode.
 * const r = yield* model.step([{ tokens, targets, coef: [], grpo: { rows: 2, mask, advantages } }],
 *   { lr: 1e-6, step: 1, maxGradNorm: 1 }, { mode: "grpo", grpo: { ...GrpoLoss.defaults, lossType: "grpo" } })
 * console.log(r.grpo?.loss, r.grpo?.metrics["clip_ratio/region_mean"])
 * // Alone, on given logprobs (tests, benchmarks):
 * const kernel = yield* GrpoLoss.make({ batch: 2, seq: 8 })
 * const { loss, gradient, metrics } = yield* kernel.evaluate(settings, inputs, logprobs)
 * ```
 *
 * @since 0.0.0
 */
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import * as Arena from "../runtime/Arena.js"
import { Gpu } from "../runtime/Gpu.js"
import type {
  GpuDeviceLost,
  GpuLimitExceeded,
  GpuOutOfMemory,
  GpuShaderError,
  GpuUncapturedError
} from "../runtime/GpuError.js"
import * as Program from "../runtime/Program.js"
import * as K from "./internal/grpoLossKernel.js"
import * as Ops from "./Ops.js"
import type { Op } from "./Ops.js"

/** The loss types the kernel computes. */
export type LossType = keyof typeof K.LossCode

/** TRL's sampler importance-sampling correction modes (§3.7). */
export type SamplerCorrectionMode = Exclude<keyof typeof K.IsCode, "off">

/** The loss's hyper-parameters (TRL's GRPOConfig names, camelCase). */
export interface Settings {
  readonly lossType: LossType
  /** ε_low. */
  readonly epsilon: number
  /** ε_high (for cispo, the ratio cap itself). */
  readonly epsilonHigh: number
  /** INTELLECT-2 two-sided clip: c1 = min(w, delta); null for none. */
  readonly delta: number | null
  readonly beta: number
  readonly useBiasCorrectionKl: boolean
  readonly importanceSamplingLevel: "token" | "sequence"
  readonly sapoTemperaturePos: number
  readonly sapoTemperatureNeg: number
  /** Keep row i iff A_i ≥ 0 or mean_t(l^samp − l) ≤ threshold; null for no mask. */
  readonly offPolicyMaskThreshold: number | null
  readonly gradientAccumulationSteps: number
  /** Default gradientAccumulationSteps (in training dapo / cispo scale their divisor by GA / stepsPerGeneration). */
  readonly stepsPerGeneration?: number
  readonly maxCompletionLength: number
  /** Default "train" (eval divides by 1 instead of the accumulation steps). */
  readonly mode?: "train" | "eval"
  /** Default 1 (dapo / cispo divide the generation batch's tokens by it). */
  readonly numProcesses?: number
  /** The sampler correction, computed on the device from the old and sampler logprobs; absent for none. */
  readonly samplerCorrection?: {
    readonly mode: SamplerCorrectionMode
    readonly clipMin: number | null
    readonly clipMax: number | null
  }
}

/** TRL's defaults (dapo, ε 0.2, β 0, token-level ratio, no sampler correction). */
export const defaults: Settings = {
  lossType: "dapo",
  epsilon: 0.2,
  epsilonHigh: 0.2,
  delta: null,
  beta: 0,
  useBiasCorrectionKl: true,
  importanceSamplingLevel: "token",
  sapoTemperaturePos: 1,
  sapoTemperatureNeg: 1.05,
  offPolicyMaskThreshold: null,
  gradientAccumulationSteps: 1,
  maxCompletionLength: 512
}

/**
 * One micro-batch's inputs in the model's packed layout (`batch × seq`, the value of the token at position j + 1
 * sits at j, where its logprob is): everything but the mask and the advantages is optional.
 */
export interface MicroBatchInputs {
  /** Real rows of the micro-batch (B of the aggregations); packed rows past it must have mask 0. */
  readonly rows: number
  /** Loss mask per position (0 where there is no loss). */
  readonly mask: ArrayLike<number>
  /** One advantage per row. */
  readonly advantages: ArrayLike<number>
  /** `l^old`; omitted means `sg(l)` (ratio 1). Required by the sampler correction. */
  readonly old?: ArrayLike<number> | undefined
  /** `l^ref`; required when β ≠ 0. */
  readonly ref?: ArrayLike<number> | undefined
  /** `l^samp` (sampler correction; the off-policy mask falls back to `l^old`). */
  readonly sampler?: ArrayLike<number> | undefined
  /** Loss tokens of the whole generation batch (all processes); required by dapo and cispo. */
  readonly numItemsInBatch?: number | undefined
}

/** Loss and TRL's loss-side metrics of the micro-batches of one step. */
export interface StepLoss {
  /** Σ over micro-batches of each micro-batch's loss. */
  readonly loss: number
  /**
   * Per-micro-batch values averaged over the micro-batches, by TRL name: `entropy`, `kl` (β ≠ 0), and
   * `clip_ratio/{low_mean,high_mean,region_mean,low_min,high_max}` (clipped types) or `cispo_clip_ratio`.
   */
  readonly metrics: Record<string, number>
}

/** The inputs do not fit the settings or the shape; the message says what to give. */
export class GrpoLossInputError extends Data.TaggedError("GrpoLossInputError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** Shape of the packed batch. */
export interface Shape {
  readonly batch: number
  readonly seq: number
}

/** Tensor names of the kernel's inputs (per micro-batch) and its parameter block. */
export const TOKENS = "grpo.tok"
/** The GRPO loss kernel's parameter block tensor. */
export const PARAMS = "grpo.prm"

/** The kernel's own tensors: per-token inputs [old, ref, sampler, mask] × n and the parameter block. */
export const specs = (shape: Shape): Record<string, Arena.TensorSpec> => ({
  [TOKENS]: { shape: [4, shape.batch * shape.seq] },
  [PARAMS]: { shape: [K.HEADER + shape.batch] }
})

/** The tensors the op reads the policy's logprobs and entropies from and writes d loss / d logprob to. */
export interface Names {
  readonly logp: string
  readonly entropy: string
  readonly dlogp: string
}

/** The model's names (`Qwen3`'s training graph). */
export const modelNames: Names = { logp: "t.logp", entropy: "t.entropy", dlogp: "t.dlogp" }

/** Most packed rows of one micro-batch (the row statistics live in 16 KiB of workgroup memory). */
export const MAX_ROWS = 512

/** The loss op (one workgroup): reads logp, entropy and the inputs; writes dlogp; adds to `step.results`. */
export const ops = (plan: Arena.ArenaPlan, shape: Shape, names: Names = modelNames): Array<Op> => {
  if (shape.batch > MAX_ROWS) {
    throw new RangeError(
      `GrpoLoss: ${shape.batch} rows per micro-batch; the kernel keeps at most ${MAX_ROWS} (split it)`
    )
  }
  const t = (name: string) => Arena.tensorOf(plan, name)
  const n = shape.batch * shape.seq
  return [Ops.custom({
    label: "grpo_loss",
    code: K.grpoLoss(shape.batch),
    bindings: [t(names.logp), t(names.entropy), t(TOKENS), t(PARAMS), t(names.dlogp), t(Arena.STEP_RESULTS)],
    params: [["u", n], ["u", shape.seq]],
    groups: [1, 1, 1],
    flops: 40 * n,
    bytes: 4 * 8 * n
  })]
}

/** A problem with the settings (a loss type or option the kernel does not compute), or undefined. */
export const unsupported = (settings: { readonly lossType: string; readonly topEntropyQuantile?: number }) =>
  !(settings.lossType in K.LossCode)
    ? `the device loss computes ${Object.keys(K.LossCode).join(", ")}, not ${settings.lossType}`
    : (settings.topEntropyQuantile ?? 1) < 1
    ? "the device loss has no top-entropy token mask (topEntropyQuantile < 1)"
    : undefined

const flag = (b: boolean) => (b ? 1 : 0)

/**
 * The per-micro-batch writes (`[name, data]` pairs for `StepProgram`): the token inputs and the parameter block.
 * `valid` (optional, per position) zeroes the mask where the model has no target.
 */
export const pack = (
  shape: Shape,
  settings: Settings,
  inputs: MicroBatchInputs,
  valid?: ArrayLike<number>
): Array<readonly [string, Float32Array]> => {
  const n = shape.batch * shape.seq
  const fail = (problem: string): never => {
    throw new GrpoLossInputError({ problem })
  }
  const problem = unsupported(settings)
  if (problem !== undefined) fail(problem)
  if (!Number.isInteger(inputs.rows) || inputs.rows < 1 || inputs.rows > shape.batch) {
    fail(`GrpoLoss: rows is ${inputs.rows}; give 1 to ${shape.batch} (the packed batch's rows)`)
  }
  for (
    const [name, x] of [["mask", inputs.mask], ["old", inputs.old], ["ref", inputs.ref], ["sampler", inputs.sampler]]
  ) {
    if (x !== undefined && (x as ArrayLike<number>).length > n) {
      fail(`GrpoLoss: ${name} has ${(x as ArrayLike<number>).length} values; the packed batch has ${n} positions`)
    }
  }
  if (inputs.advantages.length !== inputs.rows) {
    fail(`GrpoLoss: ${inputs.advantages.length} advantages for ${inputs.rows} rows; give one per row`)
  }
  if (settings.beta !== 0 && inputs.ref === undefined) {
    fail("GrpoLoss: beta ≠ 0 needs the reference model's logprobs (ref)")
  }
  if (settings.samplerCorrection !== undefined && (inputs.old === undefined || inputs.sampler === undefined)) {
    fail("GrpoLoss: the sampler correction needs old and sampler logprobs")
  }
  const needsItems = settings.lossType === "dapo" || settings.lossType === "cispo"
  if (needsItems && inputs.numItemsInBatch === undefined) {
    fail(`GrpoLoss: ${settings.lossType} needs numItemsInBatch (loss tokens of the whole generation batch)`)
  }
  const tok = new Float32Array(4 * n)
  const put = (k: number, x: ArrayLike<number> | undefined) => {
    if (x === undefined) return
    for (let j = 0; j < x.length; j++) tok[k * n + j] = x[j]
  }
  put(0, inputs.old)
  put(1, inputs.ref)
  put(2, inputs.sampler)
  for (let j = 0; j < inputs.mask.length; j++) {
    const m = inputs.mask[j]
    tok[3 * n + j] = valid !== undefined && !valid[j] ? 0 : m
  }
  for (let j = inputs.rows * shape.seq; j < n; j++) {
    if (tok[3 * n + j] !== 0) fail(`GrpoLoss: position ${j} is past the ${inputs.rows} real rows but has mask ≠ 0`)
  }
  const prm = new Float32Array(K.HEADER + shape.batch)
  const P = K.Prm
  const sc = settings.samplerCorrection
  prm[P.lossType] = K.LossCode[settings.lossType]
  prm[P.epsLo] = settings.epsilon
  prm[P.epsHi] = settings.epsilonHigh
  prm[P.hasDelta] = flag(settings.delta !== null)
  prm[P.delta] = settings.delta ?? 0
  prm[P.beta] = settings.beta
  prm[P.biasKl] = flag(settings.useBiasCorrectionKl)
  prm[P.sequenceLevel] = flag(settings.importanceSamplingLevel === "sequence")
  prm[P.sapoPos] = settings.sapoTemperaturePos
  prm[P.sapoNeg] = settings.sapoTemperatureNeg
  prm[P.isMode] = sc === undefined ? K.IsCode.off : K.IsCode[sc.mode]
  prm[P.clipMin] = sc?.clipMin ?? -3e38
  prm[P.clipMax] = sc?.clipMax ?? 3e38
  prm[P.hasOld] = flag(inputs.old !== undefined)
  prm[P.rows] = inputs.rows
  prm[P.gaNorm] = (settings.mode ?? "train") === "train" ? settings.gradientAccumulationSteps : 1
  // TRL: the generation batch's tokens per process, scaled in training to one accumulation window.
  prm[P.dapoNorm] = Math.max(1, inputs.numItemsInBatch ?? 0) / (settings.numProcesses ?? 1) *
    ((settings.mode ?? "train") === "train"
      ? settings.gradientAccumulationSteps / (settings.stepsPerGeneration ?? settings.gradientAccumulationSteps)
      : 1)
  prm[P.maxLen] = settings.maxCompletionLength
  prm[P.hasOffPolicy] = flag(settings.offPolicyMaskThreshold !== null)
  prm[P.offPolicyThreshold] = settings.offPolicyMaskThreshold ?? 0
  prm[P.hasSampler] = flag(inputs.sampler !== undefined)
  for (let i = 0; i < inputs.rows; i++) prm[K.HEADER + i] = inputs.advantages[i]
  return [[TOKENS, tok], [PARAMS, prm]]
}

/** Reads the loss and the metrics (TRL's names, averaged over micro-batches) from `step.results`. */
export const readResults = (results: ArrayLike<number>, settings: Pick<Settings, "lossType" | "beta">): StepLoss => {
  const R = K.Res
  const mbs = Math.max(1, results[R.microBatches])
  const metrics: Record<string, number> = { entropy: results[R.entropy] / mbs }
  if (settings.beta !== 0) metrics["kl"] = results[R.kl] / mbs
  if (settings.lossType === "cispo") metrics["cispo_clip_ratio"] = results[R.cispo] / mbs
  else if (settings.lossType !== "sapo") {
    metrics["clip_ratio/low_mean"] = results[R.lowMean] / mbs
    metrics["clip_ratio/high_mean"] = results[R.highMean] / mbs
    metrics["clip_ratio/region_mean"] = results[R.regionMean] / mbs
    metrics["clip_ratio/low_min"] = results[R.lowMinCount] > 0 ? results[R.lowMin] / results[R.lowMinCount] : NaN
    metrics["clip_ratio/high_max"] = results[R.highMaxCount] > 0 ? results[R.highMax] / results[R.highMaxCount] : NaN
  }
  return { loss: results[R.loss], metrics }
}

/** The kernel alone on given logprobs (tests and benchmarks of the loss without a model). */
export interface Evaluator {
  readonly evaluate: (
    settings: Settings,
    inputs: MicroBatchInputs,
    logprobs: ArrayLike<number>,
    entropies?: ArrayLike<number>
  ) => Effect.Effect<
    StepLoss & { readonly gradient: Float32Array },
    GrpoLossInputError | GpuDeviceLost | GpuUncapturedError
  >
}

/** Compiles the kernel on a small arena of its own (one micro-batch of the given shape). */
export const make = (
  shape: Shape
): Effect.Effect<Evaluator, GpuShaderError | GpuDeviceLost | GpuOutOfMemory | GpuLimitExceeded, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const n = shape.batch * shape.seq
    const names: Names = { logp: "logp", entropy: "entropy", dlogp: "dlogp" }
    const plan = Arena.plan({
      ...specs(shape),
      [names.logp]: { shape: [n] },
      [names.entropy]: { shape: [n] },
      [names.dlogp]: { shape: [n] }
    })
    const arena = yield* Arena.allocate(plan)
    const program = yield* Program.compile(arena, ops(plan, shape, names), "grpo_loss")
    const results = arena.tensor(Arena.STEP_RESULTS)
    const padded = (x: ArrayLike<number> | undefined) => {
      const out = new Float32Array(n)
      if (x !== undefined) out.set(Array.from(x).slice(0, n))
      return out
    }
    const evaluate = Effect.fn("GrpoLoss.evaluate")(
      function*(
        settings: Settings,
        inputs: MicroBatchInputs,
        logprobs: ArrayLike<number>,
        entropies?: ArrayLike<number>
      ) {
        const writes = yield* Effect.try({
          try: () => pack(shape, settings, inputs),
          catch: (e) => e instanceof GrpoLossInputError ? e : new GrpoLossInputError({ problem: String(e) })
        })
        for (const [name, data] of writes) arena.write(name, data)
        arena.write(names.logp, padded(logprobs))
        arena.write(names.entropy, padded(entropies))
        const encoder = gpu.device.createCommandEncoder({ label: "grpo_loss" })
        const r = arena.binding(results)
        encoder.clearBuffer(r.buffer, r.offset ?? 0, r.size)
        const pass = encoder.beginComputePass({ label: "grpo_loss" })
        program.encode(pass)
        pass.end()
        gpu.device.queue.submit([encoder.finish()])
        const gradient = yield* arena.read(names.dlogp)
        const out = yield* arena.read(Arena.STEP_RESULTS)
        return { ...readResults(out, settings), gradient }
      }
    )
    return { evaluate } satisfies Evaluator
  })
