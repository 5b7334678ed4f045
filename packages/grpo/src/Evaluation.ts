/**
 * Evaluation on held-out rows with greedy decoding: every row is played (numGenerations times, 1 by default since
 * greedy decoding repeats itself unless the environment is stochastic), scored by the run's reward functions, and
 * summarised per environment — success rate, mean reward, completion length, tool calls and failures, unscoreable
 * episodes — as a table and as `eval.jsonl` records (one per evaluation) plus `eval.json` (the latest).
 *
 * @example
 * ```ts
 * import { Evaluation } from "@envtrain/grpo"
 * const result = yield* Evaluation.evaluate({ model, dataset: heldOut, open, rewardFunctions: [catchReward],
 *   maxCompletionLength: 256, step: 0 })
 * console.log(Evaluation.formatTable(result))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import { Effect } from "effect"
import type { Dataset } from "./Dataset.js"
import type { TrainableModel } from "./internal/model.js"
import { environmentOf, modelTokens, type OpenSession, rewardEpisode, runBatch } from "./internal/rollouts.js"
import { nanmean, nanstd } from "./internal/stats.js"
import * as Metrics from "./Metrics.js"
import * as Reward from "./Reward.js"

/**
 * One environment's results (or all environments together).
 *
 * @since 0.0.0
 */
export interface EnvironmentRow {
  readonly environment: string
  readonly episodes: number
  /** Fraction of scoreable episodes judged a success (default: reward > 0). */
  readonly successRate: number | null
  readonly meanReward: number | null
  readonly rewardStd: number | null
  /** Model tokens per episode. */
  readonly meanLength: number | null
  readonly toolCallsPerEpisode: number | null
  /** Failures per tool call (0 without calls). */
  readonly toolFailureFrequency: number | null
  readonly unscoreable: number
}

/**
 * One evaluation.
 *
 * @since 0.0.0
 */
export interface EvaluationResult {
  readonly step: number
  readonly label: string
  readonly rows: ReadonlyArray<EnvironmentRow>
  readonly overall: EnvironmentRow
  /** Flat metrics: `eval/<env>/success_rate`, `eval/<env>/mean_reward`, …, and `eval/success_rate` etc. overall. */
  readonly metrics: Readonly<Record<string, number | null>>
  /** Per reward function mean (`eval/rewards/<name>/mean`) is in `metrics` too. */
  readonly seconds: number
}

/**
 * Options of {@link evaluate}.
 *
 * @since 0.0.0
 */
export interface EvaluateOptions<State, E, R, RE = never, RR = never> {
  readonly model: TrainableModel
  readonly dataset: Dataset
  readonly open: OpenSession<State, E, R>
  readonly rewardFunctions: ReadonlyArray<Reward.RewardFunction<State, any, any, RE, RR>>
  readonly rewardWeights?: ReadonlyArray<number> | null
  readonly maxCompletionLength: number
  readonly maxToolCallingIterations?: number | null
  /** Episodes per row; default 1. */
  readonly numGenerations?: number
  /** Episodes in flight; default all. */
  readonly concurrency?: number
  readonly enableThinking?: boolean
  /** Other chat-template variables (the config's `chatTemplateKwargs` besides enable_thinking). */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>>
  /** Render with the model's own template even when it is not prefix-preserving (the config's keepModelTemplate). */
  readonly keepModelTemplate?: boolean
  readonly step: number
  readonly label?: string
  readonly seed?: number
  /** Whether a scored episode counts as a success; default reward > 0. */
  readonly success?: (episode: EpisodeRecord<State>, reward: number) => boolean
}

const summarise = (
  environment: string,
  records: ReadonlyArray<EpisodeRecord<unknown>>,
  rewards: ReadonlyArray<number>,
  successes: ReadonlyArray<boolean | undefined>
): EnvironmentRow => {
  const n = records.length
  let calls = 0
  let failures = 0
  let unscoreable = 0
  let scored = 0
  let won = 0
  for (let i = 0; i < n; i++) {
    calls += records[i].toolCallCount
    failures += records[i].toolFailureCount
    if (Number.isNaN(rewards[i])) unscoreable++
    else {
      scored++
      if (successes[i] === true) won++
    }
  }
  const finite = (x: number) => (Number.isFinite(x) ? x : null)
  return {
    environment,
    episodes: n,
    successRate: scored === 0 ? null : won / scored,
    meanReward: finite(nanmean(rewards)),
    rewardStd: finite(nanstd(rewards)),
    meanLength: n === 0 ? null : records.reduce((s, r) => s + modelTokens(r), 0) / n,
    toolCallsPerEpisode: n === 0 ? null : calls / n,
    toolFailureFrequency: calls === 0 ? 0 : failures / calls,
    unscoreable
  }
}

const flatten = (prefix: string, row: EnvironmentRow): Record<string, number | null> => ({
  [`${prefix}success_rate`]: row.successRate,
  [`${prefix}mean_reward`]: row.meanReward,
  [`${prefix}reward_std`]: row.rewardStd,
  [`${prefix}mean_length`]: row.meanLength,
  [`${prefix}tools/call_frequency`]: row.toolCallsPerEpisode,
  [`${prefix}tools/failure_frequency`]: row.toolFailureFrequency,
  [`${prefix}unscoreable`]: row.unscoreable
})

/**
 * Runs the evaluation.
 *
 * @since 0.0.0
 */
export const evaluate = <State, E, R, RE = never, RR = never>(options: EvaluateOptions<State, E, R, RE, RR>) =>
  Effect.gen(function*() {
    const started = Date.now()
    const G = options.numGenerations ?? 1
    const records = yield* runBatch({
      model: options.model,
      rows: options.dataset.rows,
      groupSize: G,
      open: options.open,
      episode: {
        maxCompletionLength: options.maxCompletionLength,
        maxToolCallingIterations: options.maxToolCallingIterations ?? undefined,
        sampling: { temperature: 0 }
      },
      seed: options.seed ?? 0,
      concurrency: options.concurrency ?? Math.max(1, options.dataset.rows.length * G),
      enableThinking: options.enableThinking ?? false,
      ...(options.chatTemplateKwargs === undefined ? {} : { chatTemplateKwargs: options.chatTemplateKwargs }),
      ...(options.keepModelTemplate === undefined ? {} : { keepModelTemplate: options.keepModelTemplate })
    })
    const table = yield* Reward.score(options.rewardFunctions, records.map(rewardEpisode), {
      weights: options.rewardWeights ?? null,
      trainerState: { globalStep: options.step, maxSteps: options.step, epoch: 0 }
    })
    const success = options.success ?? ((_e: EpisodeRecord<State>, reward: number) => reward > 0)
    const successes = records.map((r, i) => Number.isNaN(table.rewards[i]) ? undefined : success(r, table.rewards[i]))
    const envs = [...new Set(records.map(environmentOf))].sort()
    const rows = envs.map((env) => {
      const idx = records.flatMap((r, i) => (environmentOf(r) === env ? [i] : []))
      return summarise(env, idx.map((i) => records[i]), idx.map((i) => table.rewards[i]), idx.map((i) => successes[i]))
    })
    const overall = summarise("all", records, Array.from(table.rewards), successes)
    const metrics: Record<string, number | null> = { ...flatten("eval/", overall) }
    if (envs.length > 1) { for (const row of rows) Object.assign(metrics, flatten(`eval/${row.environment}/`, row)) }
    for (const [key, value] of Object.entries(Reward.metrics(table))) {
      if (key.startsWith("rewards/")) metrics[`eval/${key}`] = Number.isFinite(value) ? value : null
    }
    return {
      step: options.step,
      label: options.label ?? `step ${options.step}`,
      rows,
      overall,
      metrics,
      seconds: (Date.now() - started) / 1000
    } satisfies EvaluationResult
  }).pipe(Effect.withSpan("Evaluation.evaluate"))

/**
 * The result as a plain-text table (one line per environment).
 *
 * @since 0.0.0
 */
export const formatTable = (result: EvaluationResult): string => {
  const cell = (v: number | null, d = 3) => (v === null ? "-" : Number.isInteger(v) ? String(v) : v.toFixed(d))
  const header = [
    "environment",
    "episodes",
    "success",
    "mean reward",
    "length",
    "tool calls/ep",
    "tool fail",
    "unscoreable"
  ]
  const lines = [...result.rows, ...(result.rows.length > 1 ? [result.overall] : [])].map((r) => [
    r.environment,
    String(r.episodes),
    cell(r.successRate),
    cell(r.meanReward),
    cell(r.meanLength, 1),
    cell(r.toolCallsPerEpisode, 2),
    cell(r.toolFailureFrequency),
    String(r.unscoreable)
  ])
  const widths = header.map((h, j) => Math.max(h.length, ...lines.map((l) => l[j].length)))
  const fmt = (cells: ReadonlyArray<string>) => cells.map((c, j) => c.padEnd(widths[j])).join("  ")
  return [`evaluation (${result.label})`, fmt(header), ...lines.map(fmt)].join("\n")
}

/**
 * Appends the result to `<outputDir>/eval.jsonl` and writes it as `<outputDir>/eval.json`.
 *
 * @since 0.0.0
 */
export const write = Effect.fn("Evaluation.write")(function*(outputDir: string, result: EvaluationResult) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  yield* fs.makeDirectory(outputDir, { recursive: true }).pipe(Effect.ignore)
  yield* Metrics.append(path.join(outputDir, Metrics.files.evaluations), [result])
  const target = path.join(outputDir, "eval.json")
  yield* fs.writeFileString(target, JSON.stringify(result, null, 2) + "\n").pipe(
    Effect.mapError((e) => new Metrics.MetricsFileError({ path: target, problem: `cannot write (${e.message})` }))
  )
})
