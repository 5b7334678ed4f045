/**
 * @envtrain/grpo — GRPO configuration, rewards, advantages, losses and schedules (TRL's semantics).
 *
 * @since 0.0.0
 */
export * as Advantage from "./Advantage.js"
export * as CompletionMetrics from "./CompletionMetrics.js"
export * as Config from "./Config.js"
export * as Loss from "./Loss.js"
export * as LrSchedule from "./LrSchedule.js"
export * as Reward from "./Reward.js"
