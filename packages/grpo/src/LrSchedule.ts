/**
 * Learning-rate schedules, as transformers' `get_scheduler` (`optimization.py`): a multiplier of the peak learning
 * rate for each optimizer step `step = 0, 1, …, total − 1` (the LR used by the step-th update; with warmup the first
 * update runs at 0, as in transformers).
 *
 * | type | multiplier |
 * | --- | --- |
 * | constant | 1 (transformers ignores warmup here) |
 * | constant_with_warmup | step / warmup during warmup, then 1 |
 * | linear | step / warmup, then (total − step) / (total − warmup), floored at 0 |
 * | cosine | step / warmup, then ½(1 + cos(π · progress)), progress = (step − warmup) / (total − warmup) |
 *
 * @example
 * ```ts
 * const schedule = LrSchedule.fromConfig(config, totalSteps)
 * const lr = schedule(step) // learning rate for the optimizer step `step`
 * ```
 *
 * @since 0.0.0
 */
import type { GRPOConfig, LrSchedulerType } from "./Config.js"

/**
 * Warmup steps as transformers v5 computes them: `warmupSteps` when >= 1, `ceil(total × warmupSteps)` when it is a
 * ratio in (0, 1), otherwise the legacy `ceil(total × warmupRatio)`.
 *
 * @since 0.0.0
 */
export const warmupSteps = (
  config: Pick<GRPOConfig, "warmupSteps" | "warmupRatio">,
  totalSteps: number
): number => {
  if (config.warmupSteps >= 1) return Math.floor(config.warmupSteps)
  if (config.warmupSteps > 0) return Math.ceil(totalSteps * config.warmupSteps)
  return Math.ceil(totalSteps * config.warmupRatio)
}

/**
 * The LR multiplier of `type` at `step` (0-based optimizer step).
 *
 * @since 0.0.0
 */
export const multiplier = (type: LrSchedulerType, step: number, warmup: number, total: number): number => {
  if (type === "constant") return 1
  if (step < warmup) return step / Math.max(1, warmup)
  switch (type) {
    case "constant_with_warmup":
      return 1
    case "linear":
      return Math.max(0, (total - step) / Math.max(1, total - warmup))
    case "cosine": {
      const progress = (step - warmup) / Math.max(1, total - warmup)
      // transformers' num_cycles = 0.5: one half-cosine from 1 down to 0.
      return Math.max(0, 0.5 * (1 + Math.cos(Math.PI * 2 * 0.5 * progress)))
    }
  }
}

/**
 * The learning rate per optimizer step for a configuration and a run of `totalSteps` steps.
 *
 * @since 0.0.0
 */
export const fromConfig = (
  config: Pick<GRPOConfig, "learningRate" | "lrSchedulerType" | "warmupSteps" | "warmupRatio">,
  totalSteps: number
): (step: number) => number => {
  const warmup = warmupSteps(config, totalSteps)
  return (step) => config.learningRate * multiplier(config.lrSchedulerType, step, warmup, totalSteps)
}
