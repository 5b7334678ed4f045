/**
 * Group-relative advantages (TRL reference §3.3). A generation batch holds groups of G = `numGenerations`
 * consecutive episodes sharing one prompt. For the default `sum_then_normalize`:
 *
 * ```
 * r_i   = nansum_k(w_k R[i,k])            NaN if episode i is unscoreable
 * A_i   = r_i − nanmean_group(r)
 * A_i  /= (σ_i + 1e-4)                    σ = group nanstd (Bessel) | batch nanstd | — for "none"
 * A_i   = 0 where NaN                     unscoreable episodes, groups with one scoreable member under "group"
 * ```
 *
 * Unscoreable episodes (flagged by the rollout, or declined by every reward function) leave their group's mean and
 * std, get advantage 0, **and are masked out of the loss** (`rowMask` = 0). The mask is our deliberate departure
 * from TRL, which keeps such rows in the loss with advantage 0: there they still count in the token normalisers and
 * the KL term, so a lost session would shrink everyone's gradient and pull the policy to the reference for tokens
 * that were never judged.
 *
 * @example
 * ```ts
 * const { advantages, rowMask, metrics } = Advantage.compute(table, { numGenerations: 4, scaleRewards: "group" })
 * ```
 *
 * @since 0.0.0
 */
import type { MultiObjectiveAggregation, ScaleRewards } from "./Config.js"
import { isCloseToZero, nanmean, nanstd } from "./internal/stats.js"

/** The 1e-4 TRL adds to the std before dividing. */
export const stdEpsilon = 1e-4

/**
 * The reward matrix the advantages are computed from (a `Reward.RewardTable` fits).
 *
 * @since 0.0.0
 */
export interface RewardMatrix {
  readonly episodes: number
  readonly weights: ReadonlyArray<number>
  /** Row-major `episodes × weights.length`, NaN = no value. */
  readonly values: ArrayLike<number>
  /** Per episode: a reason (or `true`) when unscoreable. An all-NaN row is unscoreable as well. */
  readonly unscoreable?: ReadonlyArray<string | boolean | undefined>
}

/** @since 0.0.0 */
export interface AdvantageOptions {
  readonly numGenerations: number
  readonly scaleRewards?: ScaleRewards
  readonly multiObjectiveAggregation?: MultiObjectiveAggregation
}

/**
 * Advantages and what was used to compute them.
 *
 * @since 0.0.0
 */
export interface Advantages {
  /** One advantage per episode (broadcast to every token of the episode in the loss). */
  readonly advantages: Float64Array
  /** The combined reward each advantage was computed from; NaN for unscoreable episodes. */
  readonly rewards: Float64Array
  /** The std each episode was compared against (group or batch; group for "none", used only by the metric). */
  readonly std: Float64Array
  /** 1 for episodes in the loss, 0 for unscoreable ones. Multiply into the loss mask. */
  readonly rowMask: Float64Array
  readonly unscoreable: ReadonlyArray<boolean>
  /**
   * `frac_reward_zero_std`: fraction of episodes whose std is ~0 (torch.isclose; TRL's metric, so a group with fewer
   * than two scoreable episodes, whose std is NaN, does not count). `frac_zero_advantage` (ours): fraction of
   * episodes whose advantage is 0, for whatever reason (zero or undefined std, unscoreable): 1 means the step had
   * nothing to learn from.
   */
  readonly metrics: Record<string, number>
}

/**
 * Computes TRL's advantages for a generation batch.
 *
 * @since 0.0.0
 */
export const compute = (matrix: RewardMatrix, options: AdvantageOptions): Advantages => {
  const n = matrix.episodes
  const k = matrix.weights.length
  const G = options.numGenerations
  const scale = options.scaleRewards ?? "group"
  if (matrix.values.length !== n * k) {
    throw new RangeError(`Advantage.compute: values has ${matrix.values.length} entries, expected ${n} × ${k}`)
  }
  if (G < 1 || n % G !== 0) {
    throw new RangeError(`Advantage.compute: ${n} episodes do not form whole groups of numGenerations = ${G}`)
  }
  const unscoreable: Array<boolean> = []
  for (let i = 0; i < n; i++) {
    let allNaN = true
    for (let j = 0; j < k; j++) if (!Number.isNaN(matrix.values[i * k + j])) allNaN = false
    const flag = matrix.unscoreable?.[i]
    unscoreable.push(allNaN || (flag !== undefined && flag !== false))
  }

  const rewards = new Float64Array(n)
  const std = new Float64Array(n)
  const advantages = new Float64Array(n)

  if ((options.multiObjectiveAggregation ?? "sum_then_normalize") === "sum_then_normalize") {
    for (let i = 0; i < n; i++) {
      let sum = 0
      for (let j = 0; j < k; j++) {
        const v = matrix.values[i * k + j]
        if (!Number.isNaN(v)) sum += matrix.weights[j] * v
      }
      rewards[i] = unscoreable[i] ? NaN : sum
    }
    const batchStd = n > 1 ? nanstd(rewards) : 0
    for (let g = 0; g < n; g += G) {
      const mean = nanmean(rewards, g, g + G)
      const groupStd = G > 1 ? nanstd(rewards, g, g + G) : 0
      for (let i = g; i < g + G; i++) {
        std[i] = scale === "batch" ? batchStd : groupStd
        const centred = rewards[i] - mean
        advantages[i] = scale === "none" ? centred : centred / (std[i] + stdEpsilon)
      }
    }
  } else {
    // GDPO: z-score each function within its group, then a weighted sum, then a batch z-score.
    const z = new Float64Array(n * k)
    for (let j = 0; j < k; j++) {
      const column = new Float64Array(n)
      for (let i = 0; i < n; i++) column[i] = matrix.values[i * k + j]
      for (let g = 0; g < n; g += G) {
        const mean = nanmean(column, g, g + G)
        const s = G > 1 ? nanstd(column, g, g + G) : 0
        for (let i = g; i < g + G; i++) z[i * k + j] = (column[i] - mean) / (s + stdEpsilon)
      }
    }
    for (let i = 0; i < n; i++) {
      let sum = 0
      for (let j = 0; j < k; j++) {
        const v = z[i * k + j]
        if (!Number.isNaN(v)) sum += matrix.weights[j] * v
      }
      rewards[i] = unscoreable[i] ? NaN : sum
    }
    const batchStd = n > 1 ? nanstd(rewards) : 0
    const batchMean = nanmean(rewards)
    for (let i = 0; i < n; i++) {
      std[i] = batchStd
      advantages[i] = (rewards[i] - batchMean) / (batchStd + stdEpsilon)
    }
  }

  const rowMask = new Float64Array(n)
  let zeroStd = 0
  let zeroAdvantage = 0
  for (let i = 0; i < n; i++) {
    if (Number.isNaN(advantages[i])) advantages[i] = 0
    if (unscoreable[i]) advantages[i] = 0
    rowMask[i] = unscoreable[i] ? 0 : 1
    if (isCloseToZero(std[i])) zeroStd++
    if (isCloseToZero(advantages[i])) zeroAdvantage++
  }
  return {
    advantages,
    rewards,
    std,
    rowMask,
    unscoreable,
    metrics: {
      frac_reward_zero_std: n === 0 ? NaN : zeroStd / n,
      frac_zero_advantage: n === 0 ? NaN : zeroAdvantage / n
    }
  }
}

/**
 * The flat steps of a run: steps with no advantage signal, so nothing was learnt. A step is flat when every episode's
 * advantage was 0 (`frac_zero_advantage` = 1: every group's rewards had zero variance, or too few scoreable
 * episodes to have one, or none was scoreable). Records written before that metric existed fall back to
 * `frac_reward_zero_std` = 1, or `null` / NaN. A step with no scoreable episode at all (`unscoreable_frac` = 1) is
 * listed in `unscoreable` too.
 *
 * @since 0.0.0
 */
export interface FlatSteps {
  /** Steps the records cover. */
  readonly steps: number
  /** The flat steps, ascending. */
  readonly flat: ReadonlyArray<number>
  /** The flat steps with no scoreable episode. */
  readonly unscoreable: ReadonlyArray<number>
}

/**
 * Counts the flat steps (see {@link FlatSteps}) over metric records in step order: each step's values (the trainer's
 * progress line) or metrics.jsonl's records (the report; a resumed run's file holds every step once). A record
 * covers the steps since the previous record (since `start`, default 0, for the first): with `loggingSteps` > 1 the
 * logged value is the mean over those steps, so the window counts as flat only when all of them were. A record
 * without the metric (`undefined`) covers its steps without counting them.
 *
 * @example
 * ```ts
 * import { Advantage } from "@envtrain/grpo"
 * Advantage.flatSteps([{ step: 1, frac_reward_zero_std: 1 }, { step: 2, frac_reward_zero_std: 0.5 }])
 * // { steps: 2, flat: [1], unscoreable: [] }
 * ```
 *
 * @since 0.0.0
 */
export const flatSteps = (
  records: ReadonlyArray<{
    readonly step: number
    readonly frac_zero_advantage?: number | null | undefined
    readonly frac_reward_zero_std?: number | null | undefined
    readonly unscoreable_frac?: number | null | undefined
  }>,
  options?: { readonly start?: number }
): FlatSteps => {
  const start = options?.start ?? 0
  const flat: Array<number> = []
  const unscoreable: Array<number> = []
  const missing = (x: number | null | undefined) => x === null || (x !== undefined && Number.isNaN(x))
  const one = (x: number | null | undefined) => x !== null && x !== undefined && Math.abs(x - 1) <= 1e-9
  let previous = start
  for (const record of records) {
    const current = record.frac_zero_advantage
    const legacy = record.frac_reward_zero_std
    const none = one(record.unscoreable_frac) || (current === undefined && missing(legacy))
    const isFlat = current !== undefined && !missing(current)
      ? one(current)
      : none || one(legacy)
    const covered = current !== undefined || legacy !== undefined || record.unscoreable_frac !== undefined
    if (covered && isFlat) {
      for (let s = previous + 1; s <= record.step; s++) {
        flat.push(s)
        if (none) unscoreable.push(s)
      }
    }
    previous = Math.max(previous, record.step)
  }
  return { steps: previous - start, flat, unscoreable }
}
