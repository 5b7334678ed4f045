/**
 * One generation batch of episodes with the trainer's model as the policy: the rows' groups rolled out through
 * `Rollout.groups`, every episode seeded from (seed, prompt, generation) so its tokens do not depend on scheduling,
 * and the records returned in (prompt, generation) order.
 */
import { ChatRenderer } from "@envtrain/rollout/ChatRenderer"
import * as Episode from "@envtrain/rollout/Episode"
import * as Policy from "@envtrain/rollout/Policy"
import * as Rollout from "@envtrain/rollout/Rollout"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Chunk, Effect, Layer, type Scope, Stream } from "effect"
import { mixSeed } from "../Dataset.js"
import type * as Reward from "../Reward.js"
import type { TrainableModel } from "./model.js"

/**
 * How episodes meet their environment: open a fresh session for one dataset row (its columns, with `seed`), in
 * the episode's Scope.
 */
export type OpenSession<State, E, R> = (
  row: Readonly<Record<string, unknown>>
) => Effect.Effect<Episode.Session<State, E>, E, Scope.Scope | R>

/** What a batch's episodes need of a model: generation and the chat template (a cluster runner has only these). */
export type Generator = Pick<
  TrainableModel,
  "generate" | "generateEach" | "maxBatchSize" | "tokenizer" | "chatTemplate"
>

export interface BatchOptions<State, E, R> {
  readonly model: Generator
  readonly rows: ReadonlyArray<Rollout.PromptRow>
  /** The prompt index of `rows[0]` in its batch (a group rolled out alone keeps its seeds); default 0. */
  readonly firstPromptIndex?: number
  readonly groupSize: number
  readonly open: OpenSession<State, E, R>
  readonly episode: Episode.EpisodeConfig
  readonly seed: number
  readonly concurrency: number
  readonly enableThinking: boolean
  /** Other chat-template variables (`chat_template_kwargs` besides enable_thinking). */
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>>
  /** Render with the model's own template even when it is not prefix-preserving (no training-template swap). */
  readonly keepModelTemplate?: boolean
  readonly episodeTimeout?: Rollout.RolloutOptions<State, E, R>["episodeTimeout"]
  /** The user's episode code in place of the built-in loop (TRL's rollout_func). */
  readonly rolloutFunc?: RolloutFunc<State, E, R> | undefined
  /** What the user's episode code may read of the trainer. */
  readonly trainer?: TrainerHandle | undefined
}

/** What a rollout function may read of the trainer. */
export interface TrainerHandle {
  /** The optimizer step these episodes will train (0-based: the number of steps already taken). */
  readonly globalStep: number
  /** The tokenizer of the model being trained. */
  readonly tokenizer: TrainableModel["tokenizer"]
}

/** What a rollout function receives per episode. */
export interface RolloutInput<State, E, R> extends Rollout.EpisodeInput<State> {
  /** Opens the row's environment session (the same `open` the built-in loop uses), in the episode's Scope. */
  readonly open: Effect.Effect<Episode.Session<State, E>, E, Scope.Scope | R>
  /** The episode settings with this episode's seeded sampling (what the built-in loop would use). */
  readonly config: Episode.EpisodeConfig
  readonly trainer: TrainerHandle
}

/**
 * TRL's `rollout_func`: the user's own episode code, run per episode instead of the built-in loop, with the trainer's
 * policy (`Policy`) and chat renderer (`ChatRenderer`) in its context. It returns the episode's record: prompt and
 * completion token ids, the loss mask and the sampler's logprobs (`input.progress.finish()` after filling it in).
 */
export type RolloutFunc<State, E, R> = (
  input: RolloutInput<State, E, R>
) => Effect.Effect<
  Episode.EpisodeRecord<State>,
  E | Episode.RunError,
  Scope.Scope | R | Policy.Policy | ChatRenderer
>

/** The policy and renderer layers of a model (its own batching queue, or its per-request remote generation). */
export const layers = (
  model: Generator,
  enableThinking: boolean,
  extra: Readonly<Record<string, unknown>> = {},
  keepModelTemplate = false
) =>
  Layer.merge(
    model.generateEach === undefined
      ? Policy.batching({ maxBatchSize: model.maxBatchSize, generateBatch: (requests) => model.generate(requests) })
      : Layer.succeed(Policy.Policy, { generate: model.generateEach }),
    ChatRenderer.layer({
      tokenizer: model.tokenizer,
      template: model.chatTemplate,
      enableThinking,
      keepModelTemplate,
      ...(Object.keys(extra).length === 0 ? {} : { extra })
    })
  )

export const runBatch = <State, E, R>(options: BatchOptions<State, E, R>) =>
  Effect.gen(function*() {
    const groups = yield* Rollout.groups(Stream.fromIterable(options.rows), {
      groupSize: options.groupSize,
      concurrency: options.concurrency,
      config: options.episode,
      baseSeed: options.seed,
      ...(options.firstPromptIndex === undefined ? {} : { firstPromptIndex: options.firstPromptIndex }),
      open: options.open,
      ...(options.episodeTimeout === undefined ? {} : { episodeTimeout: options.episodeTimeout }),
      // Not a `function*` per episode (see docs/architecture.md, "Hot paths and the young generation").
      episode: (input) => {
        const config: Episode.EpisodeConfig = {
          ...options.episode,
          sampling: { ...options.episode.sampling, seed: mixSeed(options.seed, input.promptIndex, input.generation) }
        }
        const rolloutFunc = options.rolloutFunc
        if (rolloutFunc !== undefined) {
          return rolloutFunc({
            ...input,
            open: options.open(input.row),
            config,
            trainer: options.trainer ?? { globalStep: 0, tokenizer: options.model.tokenizer }
          })
        }
        return Effect.flatMap(
          options.open(input.row),
          (session) => Episode.run({ prompt: input.prompt, session, config, progress: input.progress })
        )
      }
    }).pipe(Stream.runCollect)
    const sorted = Chunk.toReadonlyArray(groups).slice().sort((a, b) => a.promptIndex - b.promptIndex)
    return sorted.flatMap((g) => g.episodes.slice().sort((a, b) => a.generation - b.generation))
  }).pipe(Effect.provide(
    layers(options.model, options.enableThinking, options.chatTemplateKwargs, options.keepModelTemplate)
  ))

/** A record as reward functions see it: prompt and completion messages, the environment's final state. */
export const rewardEpisode = <State>(
  record: Episode.EpisodeRecord<State>
): Reward.Episode<State, ReadonlyArray<ChatMessage>, ReadonlyArray<ChatMessage>> => ({
  prompt: record.messages.slice(0, record.promptMessageCount),
  completion: record.messages.slice(record.promptMessageCount),
  completionIds: record.completionIds,
  environment: record.state as State,
  columns: record.row,
  ...(record.unscoreable === undefined ? {} : { unscoreable: { reason: record.unscoreable.reason } })
})

/** Model tokens of a record (mask 1), over all its segments. */
export const modelTokens = (record: Episode.EpisodeRecord<unknown>): number => {
  let n = 0
  for (const segment of Episode.segmentsOf(record)) for (const m of segment.mask) n += m
  return n
}

/**
 * The environment an episode belongs to: the session's name, or for an episode that never got a session (lost
 * before reset) the row's router column (`env` or `environment`).
 */
export const environmentOf = (record: Episode.EpisodeRecord<unknown>): string => {
  if (record.environment !== "") return record.environment
  const column = record.row.env ?? record.row.environment
  return typeof column === "string" && column !== "" ? column : "(unknown)"
}
