/**
 * The rollout-group entity: one persisted message per group of a generation batch. The message is small (which run,
 * step, micro-batch, round and group, the batch's seed and the policy version); the batch's rows and settings are a
 * row of `envtrain_cluster_batches`, and the reply is a reference to the group's records, a row of
 * `envtrain_cluster_groups` (see store.ts for why rows and not files or the reply itself).
 */
import * as ClusterSchema from "@effect/cluster/ClusterSchema"
import * as Entity from "@effect/cluster/Entity"
import * as Rpc from "@effect/rpc/Rpc"
import { Schema } from "effect"

/** Which group of which batch of which run. */
export const GroupMessage = Schema.Struct({
  runId: Schema.String,
  step: Schema.Int,
  microBatch: Schema.Int,
  round: Schema.Int,
  group: Schema.Int,
  /** The batch's seed: episode g of prompt i samples with mixSeed(seed, i, g). */
  seed: Schema.Int,
  policyVersion: Schema.Int
})
export type GroupMessage = typeof GroupMessage.Type

/** The reply: where the group's records are (its key in envtrain_cluster_groups) and what the runner saw. */
export const GroupDone = Schema.Struct({
  group: Schema.Int,
  episodes: Schema.Int,
  bytes: Schema.Int,
  runner: Schema.String
})
export type GroupDone = typeof GroupDone.Type

/** The runner could not roll the group out (its environment or model did not load, the batch row is missing). */
export class GroupFailed extends Schema.TaggedError<GroupFailed>()("GroupFailed", {
  problem: Schema.String
}) {}

export const RunGroup = Rpc.make("RunGroup", {
  payload: GroupMessage.fields,
  success: GroupDone,
  error: GroupFailed,
  // One message per entity: a trainer that sends the same group again (after a restart) meets the stored one.
  primaryKey: () => "group"
}).annotate(ClusterSchema.Persisted, true)

export const RolloutGroup = Entity.make("envtrain/RolloutGroup", [RunGroup])

/** The batch's key within its run: step, micro-batch, dynamic-sampling round. */
export const batchKey = (m: { readonly step: number; readonly microBatch: number; readonly round: number }) =>
  `${m.step}.${m.microBatch}.${m.round}`

/** The entity of one group: the run, the batch and the group index. */
export const entityId = (runId: string, batch: string, group: number) => `${runId}/${batch}/${group}`
