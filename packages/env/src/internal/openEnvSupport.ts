/** Small pieces shared by the built-ins' OpenEnv definitions. */
import { Effect, Random, Schema } from "effect"
import type { EnvironmentMetadata } from "../OpenEnv.js"

/** Reset kwargs: `seed` is honoured (OpenEnv drops it; users asked for it), else a fresh random seed. */
export const seedFrom = (options: Readonly<Record<string, unknown>>): Effect.Effect<number> => {
  const seed = options.seed
  return typeof seed === "number" && Number.isFinite(seed)
    ? Effect.succeed(seed)
    : Random.nextIntBetween(0, 2 ** 31 - 1)
}

/** The given `episode_id` (when the twin honours it) or a fresh uuid4. */
export const episodeIdFrom = (options: Readonly<Record<string, unknown>>, honour: boolean): Effect.Effect<string> =>
  honour && typeof options.episode_id === "string" && options.episode_id.length > 0
    ? Effect.succeed(options.episode_id)
    : Effect.sync(() => crypto.randomUUID())

/** OpenEnv's default `EnvironmentMetadata` for an environment class. */
export const defaultMetadata = (className: string): EnvironmentMetadata => ({
  name: className,
  description: `${className} environment`,
  readme_content: null,
  version: "1.0.0",
  author: null,
  documentation_url: null
})

/** Pydantic's `Action` base: `metadata: Dict[str, Any] = {}` and `extra="forbid"`. */
export const actionStruct = <F extends Schema.Struct.Fields>(fields: F, identifier: string) =>
  Schema.Struct({
    metadata: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    ...fields
  }).annotations({ identifier, parseOptions: { onExcessProperty: "error" } })

/** OpenEnv's base `State`. */
export const BaseState = Schema.Struct({
  episode_id: Schema.NullOr(Schema.String),
  step_count: Schema.Int
})
