/**
 * Reward functions over finished episodes, combined as TRL does (§2 of the TRL reference): each function returns a
 * number or `null` per episode; `null` becomes NaN; a weighted NaN-aware sum gives each episode's reward; an episode
 * every function declined (or one the rollout flagged unscoreable) gets NaN and leaves its group's statistics —
 * it is never scored as 0.
 *
 * @example
 * ```ts
 * import type { Wordle } from "@envtrain/env"
 * import { Reward } from "@envtrain/grpo"
 * const solved = Reward.perEpisode("solved", (e: Reward.Episode<Wordle.State>) => e.environment.won ? 1 : 0)
 * const short = Reward.make("short", ({ completionIds }) => completionIds.map((ids) => -ids.length / 512))
 * const table = yield* Reward.score([solved, short], episodes, { weights: [1, 0.1], trainerState })
 * const metrics = Reward.metrics(table) // { "rewards/solved/mean": ..., reward: ..., reward_std: ... }
 * ```
 *
 * @since 0.0.0
 */
import { Data, Effect } from "effect"
import { nanmean, nanstd } from "./internal/stats.js"

/**
 * What the trainer tells reward functions about training progress (TRL passes HF's `TrainerState`), for curricula.
 *
 * @since 0.0.0
 */
export interface TrainerState {
  readonly globalStep: number
  readonly maxSteps: number
  readonly epoch: number
}

/**
 * Why an episode cannot be scored (session lost, transport failure, timeout). Such an episode is excluded from its
 * group's statistics, gets advantage 0 and is masked out of the loss.
 *
 * @since 0.0.0
 */
export interface Unscoreable {
  readonly reason: string
}

/**
 * One finished episode, as reward scoring sees it. `Env` is the episode's environment state (TRL's `environments`),
 * opaque to this module; `Prompt` / `Completion` are the rollout's message types.
 *
 * @since 0.0.0
 */
export interface Episode<Env = unknown, Prompt = unknown, Completion = unknown> {
  readonly prompt: Prompt
  readonly completion: Completion
  /** The whole completion's token ids (model and tool tokens). */
  readonly completionIds: ReadonlyArray<number>
  readonly environment: Env
  /** The dataset row's extra columns (everything except the prompt), e.g. `answer`, `env`. */
  readonly columns: Readonly<Record<string, unknown>>
  /** Set by the rollout when the episode ended without a scoreable outcome. */
  readonly unscoreable?: Unscoreable | undefined
}

/**
 * The keyword arguments of a TRL reward function, as parallel arrays over the scoreable episodes of a generation
 * batch.
 *
 * @since 0.0.0
 */
export interface RewardArgs<Env = unknown, Prompt = unknown, Completion = unknown> {
  readonly prompts: ReadonlyArray<Prompt>
  readonly completions: ReadonlyArray<Completion>
  readonly completionIds: ReadonlyArray<ReadonlyArray<number>>
  readonly environments: ReadonlyArray<Env>
  /** Per-episode dataset columns (already repeated G times, as TRL's sampler does). */
  readonly columns: ReadonlyArray<Readonly<Record<string, unknown>>>
  readonly trainerState: TrainerState
}

/** A reward function's result: plain or an Effect. */
export type RewardResult<A, E, R> = A | Effect.Effect<A, E, R>

/**
 * A named reward function. `environmentOwned` marks rewards provided by an environment (TRL's `get_reward`): they
 * take weight 1 and need no entry in `rewardWeights`.
 *
 * @since 0.0.0
 */
export interface RewardFunction<Env = unknown, Prompt = unknown, Completion = unknown, E = never, R = never> {
  readonly name: string
  readonly environmentOwned: boolean
  readonly score: (
    args: RewardArgs<Env, Prompt, Completion>
  ) => Effect.Effect<ReadonlyArray<number | null>, E, R>
}

const lift = <A, E, R>(result: RewardResult<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.isEffect(result) ? result as Effect.Effect<A, E, R> : Effect.succeed(result as A)

/**
 * A reward function called once per generation batch with TRL's keyword arguments, returning one value per episode.
 *
 * @since 0.0.0
 */
export const make = <Env = unknown, Prompt = unknown, Completion = unknown, E = never, R = never>(
  name: string,
  score: (args: RewardArgs<Env, Prompt, Completion>) => RewardResult<ReadonlyArray<number | null>, E, R>
): RewardFunction<Env, Prompt, Completion, E, R> => ({
  name,
  environmentOwned: false,
  score: (args) => Effect.suspend(() => lift(score(args)))
})

/**
 * The arguments of one episode, for {@link perEpisode}.
 *
 * @since 0.0.0
 */
export interface EpisodeArgs<Env = unknown, Prompt = unknown, Completion = unknown> {
  readonly prompt: Prompt
  readonly completion: Completion
  readonly completionIds: ReadonlyArray<number>
  readonly environment: Env
  readonly columns: Readonly<Record<string, unknown>>
  readonly trainerState: TrainerState
}

const perEpisodeScore = <Env, Prompt, Completion, E, R>(
  score: (episode: EpisodeArgs<Env, Prompt, Completion>) => RewardResult<number | null, E, R>,
  concurrency: number | "unbounded"
) =>
(args: RewardArgs<Env, Prompt, Completion>) =>
  Effect.forEach(
    args.prompts,
    (prompt, i) =>
      Effect.suspend(() =>
        lift(score({
          prompt,
          completion: args.completions[i],
          completionIds: args.completionIds[i],
          environment: args.environments[i],
          columns: args.columns[i],
          trainerState: args.trainerState
        }))
      ),
    { concurrency }
  )

/**
 * A reward function scoring one episode at a time (plain or Effect). `concurrency` bounds how many episodes are
 * scored at once when the function is an Effect (e.g. it queries a remote environment); default 1.
 *
 * @since 0.0.0
 */
export const perEpisode = <Env = unknown, Prompt = unknown, Completion = unknown, E = never, R = never>(
  name: string,
  score: (episode: EpisodeArgs<Env, Prompt, Completion>) => RewardResult<number | null, E, R>,
  options: { readonly concurrency?: number | "unbounded" } = {}
): RewardFunction<Env, Prompt, Completion, E, R> => ({
  name,
  environmentOwned: false,
  score: perEpisodeScore(score, options.concurrency ?? 1)
})

/**
 * An environment-owned reward (TRL's `get_reward`, §1.7): `get` scores episodes whose environment `owns` accepts
 * and returns `null` for every other episode (so in a multi-environment batch each environment scores only its
 * own). Weight 1, named after the environment.
 *
 * @since 0.0.0
 */
export const fromEnvironment = <Env, Own extends Env, E = never, R = never>(
  name: string,
  owns: (environment: Env) => environment is Own,
  get: (environment: Own) => RewardResult<number | null, E, R>,
  options: { readonly concurrency?: number | "unbounded" } = {}
): RewardFunction<Env, unknown, unknown, E, R> => ({
  name,
  environmentOwned: true,
  score: perEpisodeScore<Env, unknown, unknown, E, R>(
    (episode) => (owns(episode.environment) ? get(episode.environment) : null),
    options.concurrency ?? 1
  )
})

/**
 * A reward function failed, returned the wrong number of values, or returned an infinite value.
 *
 * @since 0.0.0
 */
export class RewardError extends Data.TaggedError("RewardError")<{
  readonly function: string
  readonly reason: string
  readonly cause?: unknown
}> {
  override get message() {
    return `Reward function "${this.function}" ${this.reason}`
  }
}

/**
 * The scored generation batch: the reward matrix (episodes × functions, NaN = null) and the combined rewards.
 *
 * @since 0.0.0
 */
export interface RewardTable {
  /** Function names, user functions first then environment-owned ones, as TRL orders them. */
  readonly names: ReadonlyArray<string>
  /** Weight per function (environment-owned ones: 1). */
  readonly weights: ReadonlyArray<number>
  readonly episodes: number
  /** Row-major `episodes × names.length`; NaN where a function returned null or the episode was not scored. */
  readonly values: Float64Array
  /** Weighted NaN-aware sum per episode; NaN for unscoreable episodes. */
  readonly rewards: Float64Array
  /** Per episode: why it is unscoreable, or undefined. */
  readonly unscoreable: ReadonlyArray<string | undefined>
}

/** Reason recorded for an episode that every reward function declined (TRL's all-NaN row). */
export const allNullReason = "every reward function returned null"

/**
 * Runs the reward functions on a generation batch and combines them (TRL `_calculate_rewards` + the weighted
 * `nansum`). Episodes flagged unscoreable are not shown to reward functions (their environment may be gone) and get
 * an all-NaN row. `weights` has one entry per user function (default all 1); environment-owned functions get 1.
 * Functions run concurrently up to `concurrency` (default: all at once, as TRL gathers async functions).
 *
 * @since 0.0.0
 */
export const score = <Env, Prompt, Completion, E, R>(
  functions: ReadonlyArray<RewardFunction<Env, Prompt, Completion, E, R>>,
  episodes: ReadonlyArray<Episode<Env, Prompt, Completion>>,
  options: {
    readonly weights?: ReadonlyArray<number> | null | undefined
    readonly trainerState: TrainerState
    readonly concurrency?: number | "unbounded"
  }
): Effect.Effect<RewardTable, E | RewardError, R> =>
  Effect.gen(function*() {
    const user = functions.filter((f) => !f.environmentOwned)
    const owned = functions.filter((f) => f.environmentOwned)
    const ordered = [...user, ...owned]
    const userWeights = options.weights ?? user.map(() => 1)
    if (userWeights.length !== user.length) {
      return yield* new RewardError({
        function: "(weights)",
        reason: `weights: ${userWeights.length} weights for ${user.length} user reward functions; ` +
          `give one weight per function passed by the user (environment-owned rewards take weight 1)`
      })
    }
    const weights = [...userWeights, ...owned.map(() => 1)]
    const n = episodes.length
    const k = ordered.length
    const scoreable: Array<number> = []
    for (let i = 0; i < n; i++) if (episodes[i].unscoreable === undefined) scoreable.push(i)
    const args: RewardArgs<Env, Prompt, Completion> = {
      prompts: scoreable.map((i) => episodes[i].prompt),
      completions: scoreable.map((i) => episodes[i].completion),
      completionIds: scoreable.map((i) => episodes[i].completionIds),
      environments: scoreable.map((i) => episodes[i].environment),
      columns: scoreable.map((i) => episodes[i].columns),
      trainerState: options.trainerState
    }
    const columns = yield* Effect.forEach(
      ordered,
      (f) =>
        scoreable.length === 0 ? Effect.succeed([] as ReadonlyArray<number | null>) : f.score(args).pipe(
          Effect.flatMap((out) => check(f.name, out, scoreable.length))
        ),
      { concurrency: options.concurrency ?? "unbounded" }
    )
    const values = new Float64Array(n * k).fill(NaN)
    for (let j = 0; j < k; j++) {
      const column = columns[j]
      for (let s = 0; s < scoreable.length; s++) {
        const v = column[s]
        values[scoreable[s] * k + j] = v === null ? NaN : v
      }
    }
    const rewards = new Float64Array(n)
    const unscoreable: Array<string | undefined> = []
    for (let i = 0; i < n; i++) {
      let sum = 0
      let any = false
      for (let j = 0; j < k; j++) {
        const v = values[i * k + j]
        if (!Number.isNaN(v)) {
          sum += weights[j] * v
          any = true
        }
      }
      const flagged = episodes[i].unscoreable?.reason
      const reason = flagged ?? (any ? undefined : allNullReason)
      unscoreable.push(reason)
      rewards[i] = reason === undefined ? sum : NaN
    }
    return { names: ordered.map((f) => f.name), weights, episodes: n, values, rewards, unscoreable }
  })

const check = (name: string, out: ReadonlyArray<number | null>, expected: number) => {
  if (!Array.isArray(out) || out.length !== expected) {
    return Effect.fail(
      new RewardError({
        function: name,
        reason: `returned ${Array.isArray(out) ? out.length : typeof out} values for ${expected} episodes: ` +
          `return one number or null per episode, in order`
      })
    )
  }
  for (let i = 0; i < out.length; i++) {
    const v = out[i]
    if (v !== null && (typeof v !== "number" || v === Infinity || v === -Infinity)) {
      return Effect.fail(
        new RewardError({
          function: name,
          reason: `returned ${String(v)} for episode ${i}: return a finite number, or null when it does not apply`
        })
      )
    }
  }
  return Effect.succeed(out)
}

/**
 * TRL's reward metrics for a scored batch: `rewards/<name>/mean` and `/std` (NaN-aware, Bessel std) per function,
 * `reward` and `reward_std` over the scoreable episodes. `frac_reward_zero_std` comes with the advantages
 * (`Advantage.compute`) because it depends on the scaling mode. A statistic with no values is NaN (TRL logs it as
 * `None` after averaging).
 *
 * @since 0.0.0
 */
export const metrics = (table: RewardTable): Record<string, number> => {
  const out: Record<string, number> = {}
  const k = table.names.length
  const column = new Float64Array(table.episodes)
  for (let j = 0; j < k; j++) {
    for (let i = 0; i < table.episodes; i++) column[i] = table.values[i * k + j]
    out[`rewards/${table.names[j]}/mean`] = nanmean(column)
    out[`rewards/${table.names[j]}/std`] = nanstd(column)
  }
  out["reward"] = nanmean(table.rewards)
  out["reward_std"] = nanstd(table.rewards)
  return out
}
