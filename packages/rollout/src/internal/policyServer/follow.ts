// A policy server following a weight store: its follower loads versions through the scheduler (so an update waits
// for the running sequences, as a pushed one does), watches the directory once the server listens, and registers
// the server's URL for discovery.
import type { Scope } from "effect"
import { Duration, Effect } from "effect"
import * as NodeFs from "node:fs/promises"
import type { FollowOptions } from "../../PolicyServer.js"
import * as WeightStore from "../weightStore.js"
import type { Scheduler } from "./scheduler.js"

export interface Follow {
  /** What `/v1/models` shows as `weight_store`. */
  readonly status: () => {
    readonly directory: string
    readonly policy_version: number | null
    readonly error: string | null
  }
  /** Watches the store and registers `url` (or `advertiseUrl`) until the server's scope closes. */
  readonly start: (url: string) => Effect.Effect<void, string, Scope.Scope>
}

export const make = (options: FollowOptions, scheduler: Scheduler): Effect.Effect<Follow, string> =>
  Effect.gen(function*() {
    const directory = options.directory
    // A server may start before the trainer first publishes: the directory is made, and watched from the start.
    yield* Effect.tryPromise({
      try: () => NodeFs.mkdir(directory, { recursive: true }),
      catch: (e) => `the weight store ${directory} cannot be created: ${(e as Error).message}`
    })
    const { check, state } = WeightStore.follower(directory, {
      ...(options.configHash === undefined ? {} : { configHash: options.configHash }),
      load: (bytes, manifest) =>
        scheduler.update({ _tag: "Safetensors", bytes, policyVersion: manifest.policy_version }),
      describe: (e) => e.message
    })
    yield* check
    return {
      status: () => ({ directory, policy_version: state.version ?? null, error: state.error ?? null }),
      start: (url) =>
        Effect.gen(function*() {
          yield* WeightStore.watch(directory, check, options.pollInterval ?? Duration.millis(250))
          yield* WeightStore.register(directory, options.advertiseUrl ?? url, options.heartbeat ?? Duration.seconds(2))
        }).pipe(Effect.mapError((e) => e.message))
    }
  })
