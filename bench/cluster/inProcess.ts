// The cluster benches' baseline: a batch rolled out in this process, every group at once, generating on the same
// policy server request by request (as a runner does), so the difference to a runner's time is the cluster's own.
import { NodeHttpClient } from "@effect/platform-node"
import { Environment } from "@envtrain/env"
import type { Checkpoint } from "@envtrain/gpu"
import { RolloutGroups } from "@envtrain/grpo"
import { Episode, Policy } from "@envtrain/rollout"
import { Effect, Layer } from "effect"

/** Rolls out a whole batch in process on the policy server at `url` (serving `model` under the name "tiny"). */
export const inProcessBatches = (
  url: string,
  model: Checkpoint.Model,
  environment: Environment.Environment<any, any>
) =>
  Effect.map(
    Effect.provide(
      Policy.Policy,
      Policy.openAiCompatible({ baseUrl: url, model: "tiny" }).pipe(Layer.provide(NodeHttpClient.layerUndici))
    ),
    (policy) => (batch: RolloutGroups.Batch) =>
      Effect.forEach(batch.rows, (_, g) =>
        RolloutGroups.runGroup(batch, g, {
          model: {
            tokenizer: model.tokenizer,
            chatTemplate: model.chatTemplate,
            maxBatchSize: batch.groupSize,
            generate: () => Effect.die("per request"),
            generateEach: (r) => policy.generate(r)
          },
          open: (row) => Effect.map(Effect.orDie(Environment.episode(environment, row)), Episode.fromEnvironment)
        }), { concurrency: "unbounded" })
  )
