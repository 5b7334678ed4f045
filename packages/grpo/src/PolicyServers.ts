/**
 * Generation on policy servers: a {@link TrainableModel} whose episodes sample on one or more `envtrain
 * serve-policy` processes (or any server of the vLLM dialect that takes pushed weights) while scoring, gradients,
 * the optimizer step and checkpoints stay on the local model. The rollout code is the same as in-process: the
 * episodes call the Policy, and only what answers it changes. After every optimizer step the new weights are pushed
 * to every server (`POST /update_weights`, one f32 safetensors file) and each must report the next
 * `policy_version` before it serves another request; or, with `weightStore`, published once to a weight store that
 * the servers pull from, each serving again once it reports the published version. Details:
 * `internal/policyServers.ts`.
 *
 * @example
 * ```ts
 * import { Checkpoint } from "@envtrain/gpu"
 * import { PolicyServers, Trainer } from "@envtrain/grpo"
 * import { Effect } from "effect"
 *
 * const model = Effect.gen(function*() {
 *   const local = Trainer.referenceModel(yield* Checkpoint.load("models/tiny-sft"))
 *   // After `envtrain serve-policy --model models/tiny-sft --backend cpu --port 8000`:
 *   return yield* PolicyServers.withPolicyServers(local, { urls: ["http://127.0.0.1:8000"] })
 * })
 * ```
 *
 * @since 0.0.0
 */
import { Duration, Effect } from "effect"
import type * as Config from "./Config.js"
import type { TrainableModel } from "./internal/model.js"
import * as internal from "./internal/policyServers.js"

/** @since 0.0.0 */
export type PolicyServersOptions = internal.PolicyServersOptions

/** @since 0.0.0 */
export const PolicyServerError = internal.PolicyServerError
/** @since 0.0.0 */
export type PolicyServerError = internal.PolicyServerError

/**
 * Wraps `model` so that its generation runs on the servers at `options.urls` (unchanged when there are none).
 * Fails with {@link PolicyServerError} when a server does not answer within `unreachableTimeout` at the start.
 *
 * @since 0.0.0
 */
export const withPolicyServers: (
  model: TrainableModel,
  options: PolicyServersOptions
) => Effect.Effect<TrainableModel, PolicyServerError> = internal.withPolicyServers

/**
 * The model for a configuration: `model` itself, or with `policyServers` set, the model generating on them (with
 * `policyServerTimeout`, `policyServerWeightDirectory`, `policyServerWeightStore` and `policyServerDiscover`: the
 * servers registered in the store).
 *
 * @since 0.0.0
 */
export const forConfig = (
  model: TrainableModel,
  config: Pick<
    Config.GRPOConfig,
    | "policyServers"
    | "policyServerTimeout"
    | "policyServerWeightDirectory"
    | "policyServerWeightStore"
    | "policyServerDiscover"
  >
): Effect.Effect<TrainableModel, PolicyServerError> =>
  config.policyServers.length === 0 && !config.policyServerDiscover
    ? config.policyServerWeightStore === null
      ? Effect.succeed(model)
      : Effect.fail(
        new PolicyServerError({
          url: "(none)",
          problem:
            `policyServerWeightStore (${config.policyServerWeightStore}) publishes weights for policy servers, ` +
            "but none are given: list them (policyServers), find them in the store (policyServerDiscover: true), " +
            "or drop policyServerWeightStore to generate in process"
        })
      )
    : withPolicyServers(model, {
      urls: config.policyServers,
      unreachableTimeout: Duration.seconds(config.policyServerTimeout),
      ...(config.policyServerWeightDirectory === null ? {} : { weightDirectory: config.policyServerWeightDirectory }),
      ...(config.policyServerWeightStore === null ? {} : { weightStore: config.policyServerWeightStore }),
      ...(config.policyServerDiscover ? { discoverServers: true } : {})
    })
