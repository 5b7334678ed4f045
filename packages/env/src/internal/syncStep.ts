// A fast path for environments whose `step` answers synchronously: the instance also carries the plain function
// behind its `step` effect, and the server calls it without starting a fiber per frame (one fiber costs about as
// much as a Wordle step). The effect stays the contract; this is only a shortcut to the same computation.
import type { OpenEnvInstance, StepResult } from "../OpenEnv.js"

/** Where an instance keeps its synchronous step (a plain function that may throw, as `Effect.sync` may die). */
export const SyncStep: unique symbol = Symbol.for("@envtrain/env/SyncStep")

export type SyncStepFn<Action> = (action: Action) => StepResult

/** The instance's synchronous step, if it has one. */
export const syncStepOf = <Action>(instance: OpenEnvInstance<Action>): SyncStepFn<Action> | undefined =>
  (instance as { readonly [SyncStep]?: SyncStepFn<Action> })[SyncStep]
