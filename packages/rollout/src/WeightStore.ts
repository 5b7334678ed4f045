/**
 * The weight store: where a trainer publishes each step's weights once, and where policy servers pull them from,
 * instead of the trainer pushing the bytes to every server. On a directory every machine sees at the same path
 * (NFS, a cluster file system, a shared volume):
 *
 * ```
 * DIR/manifest.json                  the newest version, replaced atomically and written last
 * DIR/weights/v00000042.safetensors  the newest `keep` versions (f32 safetensors, HF tensor names)
 * DIR/servers/<url>.json             policy servers following the store, touched every few seconds (discovery)
 * ```
 *
 * The manifest names the policy version (publications counted from 1, continued across trainer restarts), the
 * trainer's optimizer step, the file, its sha256 and byte size, its dtype and the model's config hash. A reader
 * checks all of them and refuses, naming the file and the mismatch, weights that are partial, corrupt or for another
 * model. `envtrain serve-policy --weights-from DIR` follows a store (`PolicyServer`'s `weightStore` option): it loads
 * the newest version before it starts serving and each new one as it appears, and reports the manifest's version as
 * its `policy_version`, which is how the trainer learns which server holds what.
 *
 * An S3-compatible store is the natural next backend (a manifest object written after the weights object); it is
 * not implemented here.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { WeightStore } from "@envtrain/rollout"
 *
 * const program = Effect.gen(function*() {
 *   const store = yield* WeightStore.WeightStore
 *   const manifest = yield* store.publish({ bytes, step: 1, configHash: WeightStore.configHash(configJson) })
 *   console.log(`published version ${manifest.policy_version}`)
 * }).pipe(Effect.provide(WeightStore.WeightStore.layer("/shared/run-1/weights")))
 * ```
 *
 * @since 0.0.0
 */
import type { Duration, Option, Scope } from "effect"
import { Context, Effect, Layer } from "effect"
import * as internal from "./internal/weightStore.js"

/**
 * One published version, as `manifest.json` holds it.
 *
 * @since 0.0.0
 */
export type Manifest = internal.Manifest

/**
 * The store cannot be read or written, or a version failed its checks; `problem` names the file and the mismatch.
 *
 * @since 0.0.0
 */
export const WeightStoreError = internal.WeightStoreError
/** @since 0.0.0 */
export type WeightStoreError = internal.WeightStoreError

/** @since 0.0.0 */
export type PublishOptions = internal.PublishOptions
/** @since 0.0.0 */
export type ReadOptions = internal.ReadOptions
/** @since 0.0.0 */
export type Registration = internal.Registration

/**
 * The manifest's `format`.
 *
 * @since 0.0.0
 */
export const FORMAT = internal.FORMAT

/**
 * The sha256 of a model's `config.json` fields that fix its tensors and arithmetic (not its storage dtype), so that a
 * server refuses weights published for another model. Give it the config.json object (`ModelConfig.toJson`).
 *
 * @since 0.0.0
 */
export const configHash = internal.configHash

/**
 * A store, as the trainer and the servers use it.
 *
 * @since 0.0.0
 */
export interface Store {
  /** Where it is (a directory). */
  readonly location: string
  /** Publishes the next version: the weights, then the manifest; older versions beyond `keep` are deleted. */
  readonly publish: (options: PublishOptions) => Effect.Effect<Manifest, WeightStoreError>
  /** The newest version; none before the first publication. */
  readonly latest: Effect.Effect<Option.Option<Manifest>, WeightStoreError>
  /** The bytes of a version, checked (size, sha256, config hash). */
  readonly read: (manifest: Manifest, options?: ReadOptions) => Effect.Effect<Uint8Array, WeightStoreError>
  /** Registers a server's URL until the scope closes (refreshed every `heartbeat`). */
  readonly register: (
    url: string,
    heartbeat: Duration.DurationInput
  ) => Effect.Effect<void, WeightStoreError, Scope.Scope>
  /** The registered servers seen alive within `freshWithin`. */
  readonly registered: (freshWithin: Duration.DurationInput) => Effect.Effect<ReadonlyArray<Registration>>
}

/**
 * A store on a shared directory.
 *
 * @since 0.0.0
 */
export const directory = (path: string): Store => ({
  location: path,
  publish: (options) => internal.publish(path, options),
  latest: internal.latest(path),
  read: (manifest, options) => internal.read(path, manifest, options),
  register: (url, heartbeat) => Effect.asVoid(internal.register(path, url, heartbeat)),
  registered: (freshWithin) => internal.registered(path, freshWithin)
})

/**
 * The store as a service.
 *
 * @since 0.0.0
 */
export class WeightStore extends Context.Tag("@envtrain/rollout/WeightStore")<WeightStore, Store>() {
  /** A store on a shared directory. */
  static readonly layer = (path: string) => Layer.succeed(WeightStore, directory(path))
}
