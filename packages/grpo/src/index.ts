/**
 * @envtrain/grpo — GRPO configuration, rewards, advantages, losses and schedules (TRL's semantics).
 *
 * @since 0.0.0
 */
export * as Advantage from "./Advantage.js"
export * as CommandFile from "./CommandFile.js"
export * as CompletionMetrics from "./CompletionMetrics.js"
export * as Config from "./Config.js"
export * as Dataset from "./Dataset.js"
export * as Evaluation from "./Evaluation.js"
export * as Loss from "./Loss.js"
export * as LrSchedule from "./LrSchedule.js"
export * as Metrics from "./Metrics.js"
export * as PolicyServers from "./PolicyServers.js"
export * as Progress from "./Progress.js"
export * as Recipe from "./Recipe.js"
export * as Report from "./Report.js"
export * as Reward from "./Reward.js"
export * as RolloutGroups from "./RolloutGroups.js"
export * as SftData from "./SftData.js"
export * as SftTrainer from "./SftTrainer.js"
export * as Trackers from "./Trackers.js"
export * as Trainer from "./Trainer.js"
export * as TrainerState from "./TrainerState.js"
