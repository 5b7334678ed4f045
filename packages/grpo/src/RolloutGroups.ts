/**
 * Where the trainer's rollout groups run. By default the trainer rolls out each generation batch in its own process;
 * a {@link RolloutGroups} service in the trainer's context takes the batches instead, one group (a prompt and its G
 * episodes) at a time, and hands back the records in (prompt, generation) order: envtrain's cluster runners
 * (`@envtrain/harness/Cluster`) provide it. A {@link Batch} holds only data, so it can travel; each group is rolled
 * out by {@link runGroup} with the seeds it would have in process, so where it ran does not change its tokens.
 *
 * @example
 * ```ts
 * import { RolloutGroups, Trainer } from "@envtrain/grpo"
 * import { Effect, Layer } from "effect"
 *
 * // Every batch through a service of your own (the cluster's client is one):
 * const mine = Layer.succeed(RolloutGroups.RolloutGroups, { run: (batch) => Effect.succeed([]) })
 * const run = Trainer.train(options).pipe(Effect.provide(mine))
 * ```
 *
 * @since 0.0.0
 */
import type * as Episode from "@envtrain/rollout/Episode"
import type { PromptRow } from "@envtrain/rollout/Rollout"
import { Context, Data, type Effect } from "effect"
import { type Generator, type OpenSession, runBatch } from "./internal/rollouts.js"

/**
 * One generation batch as data: the trainer's step, micro-batch and dynamic-sampling round it is for, its seed
 * (episode g of prompt i samples with `mixSeed(seed, i, g)`), the policy version that must generate it, its rows
 * (prompt i is `rows[i]`) and the settings its episodes run with.
 *
 * @since 0.0.0
 */
export interface Batch {
  readonly step: number
  readonly microBatch: number
  readonly round: number
  readonly seed: number
  /** The trainer's optimizer steps applied when the batch was asked for (what the policy servers hold). */
  readonly policyVersion: number
  readonly rows: ReadonlyArray<PromptRow>
  readonly groupSize: number
  readonly episode: Episode.EpisodeConfig
  readonly enableThinking: boolean
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined
  readonly keepModelTemplate: boolean
  readonly episodeTimeout?: `${number} ${"seconds" | "minutes"}` | undefined
}

/**
 * A batch could not be rolled out where it was sent (the cluster lost its storage, a runner's reply was missing or
 * malformed, a watchdog saw due messages left unread); the message says what and what to do.
 *
 * @since 0.0.0
 */
export class RolloutGroupsError extends Data.TaggedError("RolloutGroupsError")<{
  readonly problem: string
}> {
  override get message() {
    return this.problem
  }
}

/**
 * The service that rolls out the trainer's batches elsewhere. Absent, the trainer rolls out in process.
 *
 * @since 0.0.0
 */
export class RolloutGroups extends Context.Tag("@envtrain/grpo/RolloutGroups")<RolloutGroups, {
  /** The batch's records in (prompt, generation) order, every group's G episodes. */
  readonly run: (batch: Batch) => Effect.Effect<ReadonlyArray<Episode.EpisodeRecord<unknown>>, RolloutGroupsError>
}>() {}

/**
 * What a group's episodes need of a model: generation (`generate`, or `generateEach` per request) and the tokenizer
 * and chat template.
 *
 * @since 0.0.0
 */
export type GroupModel = Generator

/**
 * Group `group` of `batch` (its prompt `batch.rows[group]` and G episodes), rolled out here with the trainer's
 * episode loop and the seeds it has in the whole batch.
 *
 * @since 0.0.0
 */
export const runGroup = <State, E, R>(
  batch: Batch,
  group: number,
  options: { readonly model: GroupModel; readonly open: OpenSession<State, E, R> }
) =>
  runBatch({
    model: options.model,
    rows: [batch.rows[group]],
    firstPromptIndex: group,
    groupSize: batch.groupSize,
    open: options.open,
    episode: batch.episode,
    seed: batch.seed,
    concurrency: batch.groupSize,
    enableThinking: batch.enableThinking,
    ...(batch.chatTemplateKwargs === undefined ? {} : { chatTemplateKwargs: batch.chatTemplateKwargs }),
    keepModelTemplate: batch.keepModelTemplate,
    ...(batch.episodeTimeout === undefined ? {} : { episodeTimeout: batch.episodeTimeout }),
    trainer: { globalStep: batch.step, tokenizer: options.model.tokenizer }
  })
