/**
 * The GRPO loss on the CPU, in plain TypeScript with f64 accumulation: the specification the GPU step program is
 * checked against (TRL reference §3.4–§3.11, `GRPOTrainer._compute_loss`). For one micro-batch it returns the
 * scalar loss, its analytic gradient with respect to every per-token policy logprob `l_{i,t}`, and TRL's loss-side
 * metrics.
 *
 * Tensors are row-major `rows × length` (right-padded completions); per-row values have `rows` entries.
 *
 * Per token, with `w` the policy/old ratio (per token, or per sequence for GSPO) and `A` the row's advantage:
 *
 * | lossType | per-token loss P |
 * | --- | --- |
 * | grpo, bnpo, dr_grpo, dapo, luspo | `−min(c1·A, clip(w, 1−ε_lo, 1+ε_hi)·A)`, `c1 = w` (or `min(w, delta)`) |
 * | cispo | `−sg(min(w, ε_hi))·A·l` |
 * | sapo | `−(4/τ)·σ(τ(w−1))·A`, τ = sapoTemperaturePos if A > 0 else sapoTemperatureNeg |
 * | vespo | `−sg(φ_i)·A·l` (gamma weight of the sequence ratio) |
 *
 * then `L = P × offPolicyMask × entropyMask × ρ_IS (not vespo) + β·KL_k3`, aggregated per loss type:
 * grpo/sapo sequence-mean then batch-mean / GA; bnpo token-mean / GA; dr_grpo sum / (B·maxCompletionLength) / GA;
 * dapo/cispo/vespo sum / (tokens of the whole generation batch / processes × GA / stepsPerGeneration in training);
 * luspo `mean_i(Σ_t m·L)` / GA (with a sequence-level ratio and nothing per token, `L_i·|o_i|`).
 *
 * Gradients follow torch's conventions at the kinks: `clamp` passes the gradient on its closed interval, and
 * `min(a, b)` splits it evenly when `a == b` (so the on-policy case `w = 1` gets the full gradient).
 *
 * @example
 * ```ts
 * const mask = Loss.lossMask({ rows: 2, length: 3, completionMask, toolMask, truncated, maskTruncatedCompletions: false,
 *   rowMask: advantages.rowMask })
 * const { loss, gradient, metrics } = Loss.compute(
 *   { rows: 2, length: 3, logprobs, mask, advantages: advantages.advantages, numItemsInBatch: Loss.countTokens(mask) },
 *   Loss.optionsFromConfig(config)
 * )
 * ```
 *
 * @since 0.0.0
 */
import type { ImportanceSamplingLevel, ImportanceSamplingMode, LossType, ResolvedGRPOConfig } from "./Config.js"
import { nanmax, nanmin, quantile } from "./internal/stats.js"

type Numbers = ArrayLike<number>

/**
 * Everything the loss needs from the configuration.
 *
 * @since 0.0.0
 */
export interface LossOptions {
  readonly lossType: LossType
  /** ε_low. */
  readonly epsilon: number
  /** ε_high (already defaulted to ε). For cispo, the ratio cap itself. */
  readonly epsilonHigh: number
  readonly delta: number | null
  readonly beta: number
  readonly importanceSamplingLevel: ImportanceSamplingLevel
  readonly useBiasCorrectionKl: boolean
  readonly sapoTemperaturePos: number
  readonly sapoTemperatureNeg: number
  readonly vespoKPos: number
  readonly vespoLambdaPos: number
  readonly vespoKNeg: number
  readonly vespoLambdaNeg: number
  readonly topEntropyQuantile: number
  readonly offPolicyMaskThreshold: number | null
  readonly gradientAccumulationSteps: number
  /**
   * Micro-steps per generation batch; in training dapo/cispo/vespo divide by the generation batch's tokens scaled
   * to one accumulation window (× GA / stepsPerGeneration), as TRL does. Default: gradientAccumulationSteps.
   */
  readonly stepsPerGeneration?: number
  readonly maxCompletionLength: number
  /** Eval mode divides by 1 instead of the gradient-accumulation steps. Default "train". */
  readonly mode?: "train" | "eval"
  /** Data-parallel processes; dapo/cispo/vespo divide the global token count by it. Default 1. */
  readonly numProcesses?: number
}

/**
 * TRL's defaults for every loss option, for tests and tools that need a starting point.
 *
 * @since 0.0.0
 */
export const defaultOptions: LossOptions = {
  lossType: "dapo",
  epsilon: 0.2,
  epsilonHigh: 0.2,
  delta: null,
  beta: 0,
  importanceSamplingLevel: "token",
  useBiasCorrectionKl: true,
  sapoTemperaturePos: 1,
  sapoTemperatureNeg: 1.05,
  vespoKPos: 2,
  vespoLambdaPos: 3,
  vespoKNeg: 3,
  vespoLambdaNeg: 2,
  topEntropyQuantile: 1,
  offPolicyMaskThreshold: null,
  gradientAccumulationSteps: 1,
  maxCompletionLength: 512
}

/**
 * The loss options of a resolved configuration.
 *
 * @since 0.0.0
 */
export const optionsFromConfig = (config: ResolvedGRPOConfig): LossOptions => ({
  lossType: config.lossType,
  epsilon: config.epsilon,
  epsilonHigh: config.epsilonHigh,
  delta: config.delta,
  beta: config.beta,
  importanceSamplingLevel: config.importanceSamplingLevel,
  useBiasCorrectionKl: config.useBiasCorrectionKl,
  sapoTemperaturePos: config.sapoTemperaturePos,
  sapoTemperatureNeg: config.sapoTemperatureNeg,
  vespoKPos: config.vespoKPos,
  vespoLambdaPos: config.vespoLambdaPos,
  vespoKNeg: config.vespoKNeg,
  vespoLambdaNeg: config.vespoLambdaNeg,
  topEntropyQuantile: config.topEntropyQuantile,
  offPolicyMaskThreshold: config.offPolicyMaskThreshold,
  gradientAccumulationSteps: config.gradientAccumulationSteps,
  stepsPerGeneration: config.stepsPerGeneration,
  maxCompletionLength: config.maxCompletionLength,
  numProcesses: config.numProcesses
})

// ---------------------------------------------------------------------------------------------------------------
// Masks
// ---------------------------------------------------------------------------------------------------------------

/**
 * The loss mask `m = completionMask × toolMask × (0 for truncated rows when maskTruncatedCompletions) × rowMask`.
 * `toolMask` is 0 on tool-result tokens; `truncated[i]` means row i's last token is neither EOS nor PAD; `rowMask`
 * is 0 for unscoreable episodes (`Advantage.compute`).
 *
 * @since 0.0.0
 */
export const lossMask = (input: {
  readonly rows: number
  readonly length: number
  readonly completionMask: Numbers
  readonly toolMask?: Numbers | undefined
  readonly truncated?: ArrayLike<boolean> | undefined
  readonly maskTruncatedCompletions?: boolean | undefined
  readonly rowMask?: Numbers | undefined
}): Float64Array => {
  const { length: T, rows } = input
  const out = new Float64Array(rows * T)
  for (let i = 0; i < rows; i++) {
    const drop = (input.maskTruncatedCompletions === true && input.truncated?.[i] === true) ||
      (input.rowMask !== undefined && input.rowMask[i] === 0)
    for (let t = 0; t < T; t++) {
      const j = i * T + t
      out[j] = drop ? 0 : input.completionMask[j] * (input.toolMask === undefined ? 1 : input.toolMask[j])
    }
  }
  return out
}

/**
 * Number of loss tokens (`num_items_in_batch` when given the whole generation batch's mask).
 *
 * @since 0.0.0
 */
export const countTokens = (mask: Numbers): number => {
  let n = 0
  for (let j = 0; j < mask.length; j++) n += mask[j]
  return n
}

// ---------------------------------------------------------------------------------------------------------------
// Sampler importance-sampling correction (§3.7)
// ---------------------------------------------------------------------------------------------------------------

/**
 * Importance weights correcting for the sampler's logprobs differing from the trainer's (`ρ`, broadcast to every
 * token; per sequence in `sequence_*` modes), with TRL's `sampling/*` metrics.
 *
 * @since 0.0.0
 */
export interface SamplerCorrection {
  readonly ratio: Float64Array
  readonly level: "token" | "sequence"
  readonly metrics: Record<string, number>
}

/**
 * Computes `ρ` from the trainer's old logprobs `l^old` and the sampler's `l^samp` over the loss mask:
 * `d = (l^old − l^samp)·m`; token modes `ρ_t = exp(d_t)`, sequence modes `ρ_i = exp(Σ_t d_t)` (a product of token
 * ratios); `*_truncate` clamps to [clipMin, clipMax] (a null bound is not applied), `*_mask` sets ρ to 0 outside.
 *
 * @since 0.0.0
 */
export const samplerCorrection = (input: {
  readonly rows: number
  readonly length: number
  readonly oldLogprobs: Numbers
  readonly samplerLogprobs: Numbers
  readonly mask: Numbers
  readonly mode: ImportanceSamplingMode
  readonly clipMin: number | null
  readonly clipMax: number | null
}): SamplerCorrection => {
  const { length: T, rows } = input
  const sequence = input.mode === "sequence_mask" || input.mode === "sequence_truncate"
  const truncate = input.mode === "token_truncate" || input.mode === "sequence_truncate"
  const lo = input.clipMin ?? -Infinity
  const hi = input.clipMax ?? Infinity
  const apply = (r: number) => truncate ? Math.min(Math.max(r, lo), hi) : (r < lo || r > hi ? 0 : r)
  const ratio = new Float64Array(rows * T)
  let diffSum = 0
  let diffMax = 0
  let tokens = 0
  let rMin = Infinity
  let rMax = -Infinity
  let rSum = 0
  let rCount = 0
  const see = (r: number) => {
    rMin = Math.min(rMin, r)
    rMax = Math.max(rMax, r)
    rSum += r
    rCount++
  }
  for (let i = 0; i < rows; i++) {
    let seq = 0
    for (let t = 0; t < T; t++) {
      const j = i * T + t
      const d = (input.oldLogprobs[j] - input.samplerLogprobs[j]) * input.mask[j]
      seq += d
      if (!sequence) ratio[j] = apply(Math.exp(d))
      if (input.mask[j] !== 0) {
        const abs = Math.abs(input.oldLogprobs[j] - input.samplerLogprobs[j])
        diffSum += abs
        diffMax = Math.max(diffMax, abs)
        tokens++
        if (!sequence) see(ratio[j])
      }
    }
    if (sequence) {
      const r = apply(Math.exp(seq))
      ratio.fill(r, i * T, (i + 1) * T)
      see(r)
    }
  }
  return {
    ratio,
    level: sequence ? "sequence" : "token",
    metrics: {
      "sampling/sampling_logp_difference/mean": tokens === 0 ? 0 : diffSum / tokens,
      "sampling/sampling_logp_difference/max": diffMax,
      "sampling/importance_sampling_ratio/min": rCount === 0 ? 0 : rMin,
      "sampling/importance_sampling_ratio/mean": rCount === 0 ? 0 : rSum / rCount,
      "sampling/importance_sampling_ratio/max": rCount === 0 ? 0 : rMax
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The loss
// ---------------------------------------------------------------------------------------------------------------

/**
 * One micro-batch.
 *
 * @since 0.0.0
 */
export interface LossBatch {
  readonly rows: number
  readonly length: number
  /** `l`: the current policy's tempered logprobs of the completion tokens (`rows × length`). */
  readonly logprobs: Numbers
  /** `m`: the loss mask (see {@link lossMask}). */
  readonly mask: Numbers
  /** One advantage per row. */
  readonly advantages: Numbers
  /** `l^old`; omitted means `sg(l)` (ratio exactly 1, as TRL when old logprobs are not needed). */
  readonly oldLogprobs?: Numbers | undefined
  /** `l^ref` of the frozen reference model; required when beta > 0. */
  readonly refLogprobs?: Numbers | undefined
  /** `l^samp`, used by the off-policy sequence mask (falls back to `l^old`). */
  readonly samplerLogprobs?: Numbers | undefined
  /** The sampler correction (from {@link samplerCorrection}), applied when present. */
  readonly importanceSampling?: SamplerCorrection | undefined
  /** Per-token entropies (for the `entropy` metric and the top-entropy token mask). */
  readonly entropies?: Numbers | undefined
  /** Loss tokens in the whole generation batch (all processes); required by dapo, cispo and vespo. */
  readonly numItemsInBatch?: number | undefined
}

/**
 * The loss of one micro-batch, `d loss / d l_{i,t}` for every token, and TRL's loss-side metrics
 * (`kl`, `entropy`, `clip_ratio/low_mean`, `clip_ratio/low_min`, `clip_ratio/high_mean`, `clip_ratio/high_max`,
 * `clip_ratio/region_mean`, `cispo_clip_ratio`, `vespo/phi_seq_mean`), each present when TRL logs it.
 *
 * @since 0.0.0
 */
export interface LossResult {
  readonly loss: number
  readonly gradient: Float64Array
  readonly metrics: Record<string, number>
}

const clippedTypes: ReadonlySet<LossType> = new Set(["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
const logTiny = Math.log(1e-8)
const clamp = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi)
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/**
 * Computes the loss, its gradient with respect to the policy logprobs, and the metrics.
 *
 * @since 0.0.0
 */
export const compute = (batch: LossBatch, options: LossOptions): LossResult => {
  const { length: T, rows: B } = batch
  const size = B * T
  const type = options.lossType
  const l = batch.logprobs
  const m = batch.mask
  const beta = options.beta
  const sequenceLevel = options.importanceSamplingLevel === "sequence"
  const training = (options.mode ?? "train") === "train"
  const gaNorm = training ? options.gradientAccumulationSteps : 1
  const P = options.numProcesses ?? 1
  // dapo/cispo/vespo: the generation batch's tokens per process, scaled in training to one accumulation window.
  const windowScale = training
    ? options.gradientAccumulationSteps / (options.stepsPerGeneration ?? options.gradientAccumulationSteps)
    : 1
  for (
    const [name, arr, n] of [["logprobs", l, size], ["mask", m, size], ["advantages", batch.advantages, B]] as const
  ) {
    if (arr.length !== n) throw new RangeError(`Loss.compute: ${name} has ${arr.length} entries, expected ${n}`)
  }
  if (beta !== 0 && batch.refLogprobs === undefined) {
    throw new RangeError("Loss.compute: beta > 0 needs refLogprobs (the frozen reference model's logprobs)")
  }
  if ((type === "dapo" || type === "cispo" || type === "vespo") && batch.numItemsInBatch === undefined) {
    throw new RangeError(`Loss.compute: ${type} needs numItemsInBatch (loss tokens of the whole generation batch)`)
  }
  const old = (j: number) => (batch.oldLogprobs === undefined ? l[j] : batch.oldLogprobs[j])

  // Per-row token counts and (GSPO) per-sequence ratios.
  const count = new Float64Array(B)
  const seqRatio = new Float64Array(B)
  for (let i = 0; i < B; i++) {
    let n = 0
    let s = 0
    for (let t = 0; t < T; t++) {
      const j = i * T + t
      n += m[j]
      s += (l[j] - old(j)) * m[j]
    }
    count[i] = n
    seqRatio[i] = Math.exp(s / Math.max(1, n))
  }
  const ratio = (i: number, j: number) => (sequenceLevel ? seqRatio[i] : Math.exp(l[j] - old(j)))

  // Top-entropy token mask (threshold over the micro-batch's loss tokens, torch.quantile semantics).
  let entropyMask: Float64Array | undefined
  if (options.topEntropyQuantile < 1) {
    if (batch.entropies === undefined) throw new RangeError("Loss.compute: topEntropyQuantile < 1 needs entropies")
    const H = batch.entropies
    const values: Array<number> = []
    for (let j = 0; j < size; j++) if (m[j] !== 0) values.push(H[j])
    entropyMask = new Float64Array(size)
    if (values.length > 0) {
      const threshold = quantile(values, 1 - options.topEntropyQuantile)
      for (let j = 0; j < size; j++) entropyMask[j] = m[j] !== 0 && H[j] * m[j] >= threshold ? 1 : 0
    }
  }

  // Off-policy sequence mask: keep row i iff A_i >= 0 or mean_t(l^samp − sg(l)) <= δ.
  const offPolicy = new Float64Array(B).fill(1)
  if (options.offPolicyMaskThreshold !== null) {
    for (let i = 0; i < B; i++) {
      let s = 0
      for (let t = 0; t < T; t++) {
        const j = i * T + t
        const samp = batch.samplerLogprobs !== undefined ? batch.samplerLogprobs[j] : old(j)
        s += (samp - l[j]) * m[j]
      }
      const keep = batch.advantages[i] >= 0 || s / Math.max(1, count[i]) <= options.offPolicyMaskThreshold
      offPolicy[i] = keep ? 1 : 0
    }
  }

  // VESPO's detached gamma weight per sequence.
  const phi = new Float64Array(B)
  if (type === "vespo") {
    for (let i = 0; i < B; i++) {
      let s = 0
      for (let t = 0; t < T; t++) {
        const j = i * T + t
        s += clamp(l[j] - old(j), -20, 20) * m[j]
        // TRL sums the log of the token-level sampler ratio over every position (1 where nothing was corrected).
        if (batch.importanceSampling !== undefined && batch.importanceSampling.level === "token") {
          s += clamp(Math.log(batch.importanceSampling.ratio[j]), logTiny, 20)
        }
      }
      if (batch.importanceSampling !== undefined && batch.importanceSampling.level === "sequence" && T > 0) {
        s += clamp(Math.log(batch.importanceSampling.ratio[i * T]), logTiny, 20)
      }
      const logW = clamp(s, logTiny, 20)
      const nonNeg = batch.advantages[i] >= 0
      const k = nonNeg ? options.vespoKPos : options.vespoKNeg
      const lam = Math.max(nonNeg ? options.vespoLambdaPos : options.vespoLambdaNeg, 1e-4)
      const value = Math.exp(lam + k * logW - lam * Math.exp(logW))
      phi[i] = Number.isFinite(value) ? value : 0
    }
  }

  const isWeights = type !== "vespo" ? batch.importanceSampling : undefined
  let tokenTotal = 0
  for (let j = 0; j < size; j++) tokenTotal += m[j]
  const coefficient = (i: number, j: number): number => {
    switch (type) {
      case "grpo":
      case "sapo":
        return m[j] / Math.max(1, count[i]) / B / gaNorm
      case "bnpo":
        return m[j] / Math.max(1, tokenTotal) / gaNorm
      case "dr_grpo":
        return m[j] / (B * options.maxCompletionLength) / gaNorm
      case "dapo":
      case "cispo":
      case "vespo":
        return m[j] / (Math.max(1, batch.numItemsInBatch ?? 0) / P * windowScale)
      case "luspo":
        // TRL: (L·m).sum(-1).mean(); a per-sequence L_i gives L_i·|o_i|.
        return m[j] / B / gaNorm
    }
  }

  const epsLo = options.epsilon
  const epsHi = options.epsilonHigh
  const gradient = new Float64Array(size)
  const chain = new Float64Array(B) // Σ_t ∂loss/∂w_i for sequence-level ratios
  let loss = 0
  let klSum = 0
  let low = 0
  let high = 0
  let region = 0
  let cispoClipped = 0
  const lowPerRow = new Float64Array(B)
  const highPerRow = new Float64Array(B)
  for (let i = 0; i < B; i++) {
    const A = batch.advantages[i]
    for (let t = 0; t < T; t++) {
      const j = i * T + t
      const w = ratio(i, j)
      // Policy term value, its derivative through w, and its direct derivative in l (detached-weight losses).
      let policy: number
      let dPdw = 0
      let dPdl = 0
      let clipW = w
      if (clippedTypes.has(type)) {
        const c2 = clamp(w, 1 - epsLo, 1 + epsHi)
        const c1 = options.delta === null ? w : Math.min(w, options.delta)
        clipW = c1
        const a = c1 * A
        const b = c2 * A
        policy = -Math.min(a, b)
        const ga = a < b ? 1 : a === b ? 0.5 : 0
        const gb = 1 - ga
        const dc1 = options.delta === null || w <= options.delta ? 1 : 0
        const dc2 = w >= 1 - epsLo && w <= 1 + epsHi ? 1 : 0
        dPdw = -(ga * A * dc1 + gb * A * dc2)
      } else if (type === "cispo") {
        const capped = Math.min(w, epsHi)
        policy = -capped * A * l[j]
        dPdl = -capped * A
      } else if (type === "sapo") {
        const tau = A > 0 ? options.sapoTemperaturePos : options.sapoTemperatureNeg
        const s = sigmoid(tau * (w - 1))
        policy = -s * (4 / tau) * A
        dPdw = -4 * s * (1 - s) * A
      } else {
        policy = -phi[i] * A * l[j]
        dPdl = -phi[i] * A
      }
      let factor = offPolicy[i]
      if (entropyMask !== undefined) factor *= entropyMask[j]
      if (isWeights !== undefined) factor *= isWeights.ratio[j]

      let kl = 0
      let dKLdl = 0
      let dKLdw = 0
      if (beta !== 0) {
        const diff = batch.refLogprobs![j] - l[j]
        const k3 = Math.exp(diff) - diff - 1
        const dk3 = 1 - Math.exp(diff)
        if (options.useBiasCorrectionKl) {
          kl = k3 * w
          dKLdl = dk3 * w
          dKLdw = k3
        } else {
          kl = k3
          dKLdl = dk3
        }
        klSum += kl * m[j]
      }

      const c = coefficient(i, j)
      loss += c * (policy * factor + beta * kl)
      gradient[j] += c * (factor * dPdl + beta * dKLdl)
      const viaW = c * (factor * dPdw + beta * dKLdw)
      if (sequenceLevel) chain[i] += viaW
      else gradient[j] += viaW * w

      if (!sequenceLevel && m[j] !== 0) {
        // Token-level clip statistics (sequence level counts once per row, below).
        const isLow = clipW < 1 - epsLo && A < 0 ? 1 : 0
        const isHigh = clipW > 1 + epsHi && A > 0 ? 1 : 0
        low += isLow * m[j]
        high += isHigh * m[j]
        region += (isLow || isHigh ? 1 : 0) * m[j]
        lowPerRow[i] += isLow * m[j]
        highPerRow[i] += isHigh * m[j]
        cispoClipped += (w > epsHi && A > 0 ? 1 : 0) * m[j]
      }
    }
    if (sequenceLevel) {
      const w = seqRatio[i]
      const scale = chain[i] * w / Math.max(1, count[i])
      for (let t = 0; t < T; t++) gradient[i * T + t] += scale * m[i * T + t]
      const clipW = options.delta === null ? w : Math.min(w, options.delta)
      const isLow = clipW < 1 - epsLo && A < 0 ? 1 : 0
      const isHigh = clipW > 1 + epsHi && A > 0 ? 1 : 0
      low += isLow
      high += isHigh
      region += isLow || isHigh ? 1 : 0
      lowPerRow[i] = isLow
      highPerRow[i] = isHigh
      cispoClipped += w > epsHi && A > 0 ? 1 : 0
    } else {
      // masked_seq_mean: NaN for a row without loss tokens (ignored by nanmin / nanmax).
      lowPerRow[i] /= count[i]
      highPerRow[i] /= count[i]
    }
  }

  // TRL's global_masked_mean: over loss tokens, or over rows for (B,1) sequence-level tensors.
  const denominator = sequenceLevel ? Math.max(1, B) : Math.max(1, tokenTotal)
  const metrics: Record<string, number> = {}
  if (beta !== 0) metrics["kl"] = klSum / Math.max(1, tokenTotal)
  if (batch.entropies !== undefined) {
    let s = 0
    for (let j = 0; j < size; j++) s += batch.entropies[j] * m[j]
    metrics["entropy"] = s / Math.max(1, tokenTotal)
  }
  if (clippedTypes.has(type)) {
    metrics["clip_ratio/low_mean"] = low / denominator
    metrics["clip_ratio/high_mean"] = high / denominator
    metrics["clip_ratio/region_mean"] = region / denominator
    metrics["clip_ratio/low_min"] = nanmin(lowPerRow)
    metrics["clip_ratio/high_max"] = nanmax(highPerRow)
  } else if (type === "cispo") {
    metrics["cispo_clip_ratio"] = cispoClipped / denominator
  } else if (type === "vespo") {
    let s = 0
    for (let i = 0; i < B; i++) s += phi[i]
    metrics["vespo/phi_seq_mean"] = s / Math.max(1, B)
  }
  return { loss, gradient, metrics }
}
