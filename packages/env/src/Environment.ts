/**
 * Environments as Layers.
 *
 * An environment is a tool service (a `Context.Tag` with typed methods) plus the Layer that builds one
 * fresh instance of it. Every episode builds that Layer again in its own Scope, so nothing leaks between
 * episodes, and closing the scope (episode end or interruption) releases the instance. `reset` receives
 * the dataset row's columns (decoded with a Schema) and may return the first observation text; reward
 * functions read the environment's state after the episode.
 *
 * The rollout loop uses the untyped entry point of an {@link Episode}: `call(name, jsonArgs)` always
 * succeeds with a {@link ToolOutcome} whose `text` is what the model sees. Typed tool failures, bad
 * arguments, unknown tools and defects inside a tool all become error texts and are counted; none of them
 * crashes the run. Only interruption propagates.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Catch, Environment } from "@envtrain/env"
 *
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const episode = yield* Environment.episode(Catch.environment, { seed: 7 })
 *   const result = yield* episode.call("move", { direction: "left" })
 *   console.log(result.text, yield* episode.state)
 * }))
 * ```
 *
 * @since 0.0.0
 */
import type { Option, Scope } from "effect"
import { Cause, Context, Effect, Exit, Layer, Random, Ref, Schema } from "effect"
import { isClientError } from "./Client.js"
import * as PythonText from "./internal/pythonText.js"
import { firstSeen, undeclaredColumns as undeclared } from "./internal/undeclaredColumns.js"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import * as Tool from "./Tool.js"

/** The columns of a dataset row, as the trainer passes them to `reset`. */
export type Row = Readonly<Record<string, unknown>>

/**
 * Whether a dataset column that an environment's `columns` Schema does not declare is refused (`true`: the episode
 * fails with {@link InvalidColumns}) or said once per environment as a warning and left out of `reset` (`false`,
 * the default; reward functions still receive every column). `strictColumns: true` in a command file sets it.
 */
export class StrictColumns extends Context.Reference<StrictColumns>()("@envtrain/env/Environment/StrictColumns", {
  defaultValue: () => false
}) {}

/**
 * Decodes a dataset row with an environment's columns Schema. Columns the Schema does not declare are dropped by
 * decoding; each is warned about once (naming the environment, the columns and the fix), or refused under
 * {@link StrictColumns}.
 */
export const decodeColumns = <Columns>(
  environment: string,
  schema: Schema.Schema<Columns, any>,
  row: Row
): Effect.Effect<Columns, InvalidColumns> => {
  const decoded = Schema.decodeUnknown(schema)(row).pipe(
    Effect.mapError((e) => new InvalidColumns({ environment, message: e.message }))
  )
  const extra = undeclared(schema, row)
  // The common case (every column declared) is the decode alone: this runs once per episode.
  if (extra.length === 0) return decoded
  return Effect.gen(function*() {
    const listed = (names: ReadonlyArray<string>) =>
      names.length === 1 ? `column ${names[0]} is` : `columns ${names.join(", ")} are`
    if (yield* StrictColumns) {
      return yield* new InvalidColumns({
        environment,
        message: `the dataset's ${listed(extra)} not in environment '${environment}''s columns Schema ` +
          "(strictColumns is set): declare them in the environment's columns, or remove them from the dataset"
      })
    }
    const fresh = firstSeen(schema, extra)
    if (fresh.length > 0) {
      yield* Effect.logWarning(
        `environment '${environment}': the dataset's ${listed(fresh)} not in its columns Schema, so reset does ` +
          "not receive them (reward functions do): declare them in columns to use them in start/reset; " +
          "strictColumns: true refuses such rows"
      )
    }
    return yield* decoded
  })
}

/** The row's columns that the environment's columns Schema does not declare (`seed`, which every row gets, aside). */
export const undeclaredColumns = (env: Environment<any, any>, row: Row): ReadonlyArray<string> =>
  undeclared(env.columns, row)

/** The row's columns did not match the environment's columns Schema. */
export class InvalidColumns extends Schema.TaggedError<InvalidColumns>()("InvalidColumns", {
  environment: Schema.String,
  message: Schema.String
}) {}

/** What happened when the model called a tool. `text` is exactly what goes back to the model. */
export type ToolOutcome =
  | {
    readonly _tag: "Success"
    readonly tool: string
    readonly text: string
  }
  | {
    readonly _tag: "Failure"
    readonly tool: string
    /** `failure`: a typed tool failure; `defect`: a bug inside the tool; the others: the model's call was wrong. */
    readonly reason: "failure" | "defect" | "unknown_tool" | "invalid_arguments"
    /** The raw error message. */
    readonly error: string
    /** TRL's rendering of a raised tool error: Python's `str({"error": message})`, e.g. `{'error': 'Game over.'}`. */
    readonly text: string
  }

/** Per-tool counters (TRL's `tool_call_count` / `tool_failure_count`, plus defects). */
export interface ToolCounts {
  readonly calls: number
  readonly failures: number
  readonly defects: number
}

/** Counters of one episode: totals and per tool name (unknown names included). */
export interface Counters {
  readonly calls: number
  readonly failures: number
  readonly defects: number
  readonly byTool: Readonly<Record<string, ToolCounts>>
}

/**
 * The untyped form of one live instance, shared by native environments, the multi-environment router and
 * remote sessions. `invoke` receives already-decoded parameters; typed failures go to the error channel and
 * defects are defects.
 */
export interface Instance<State> {
  readonly reset: (columns: unknown) => Effect.Effect<Option.Option<string>>
  readonly invoke: (tool: string, params: unknown) => Effect.Effect<unknown, Tool.ToolFailure>
  readonly state: Effect.Effect<State>
}

/** An environment definition: what the trainer's `environment_factory` is in TRL. */
export interface Environment<State, Columns = unknown> {
  readonly name: string
  readonly description: string
  /** Tools in the order they are shown to the model. */
  readonly tools: ReadonlyArray<Tool.Any>
  /** Decodes a dataset row into the columns `reset` receives. */
  readonly columns: Schema.Schema<Columns, any>
  /** OpenEnv's SUPPORTS_CONCURRENT_SESSIONS. */
  readonly supportsConcurrentSessions: boolean
  /** Builds a fresh instance; it is released when the scope closes. */
  readonly instance: Effect.Effect<Instance<State>, never, Scope.Scope>
  /** The OpenEnv-level twin (action/observation/state Schemas for the wire), when there is one. */
  readonly openEnv?: OpenEnvDefinition | undefined
}

/** The handlers an environment's service gives for a list of tools (matched by name). */
export type Handlers<Tools extends ReadonlyArray<Tool.Any>> = {
  readonly [T in Tools[number] as T["name"]]: (
    params: Schema.Schema.Type<T["parameters"]>
  ) => Effect.Effect<Schema.Schema.Type<T["success"]>, Tool.ToolFailure>
}

/** An environment made from a tool service Tag and its Layer; `tag` and `layer` also serve typed use. */
export interface Native<Self, Shape, State, Columns> extends Environment<State, Columns> {
  readonly tag: Context.Tag<Self, Shape>
  readonly layer: Layer.Layer<Self>
}

/**
 * Makes an environment from a tool service.
 *
 * - `layer` builds one instance of the service; it is built again (fresh) for every episode.
 * - `handlers` maps each tool to a service method.
 * - `reset` and `state` read the service: the first observation and the reward state.
 */
export const make = <Self, Shape, const Tools extends ReadonlyArray<Tool.Any>, Columns, ColumnsEncoded, State>(
  options: {
    readonly name: string
    readonly description?: string
    readonly tag: Context.Tag<Self, Shape>
    readonly layer: Layer.Layer<Self>
    readonly columns: Schema.Schema<Columns, ColumnsEncoded>
    readonly tools: Tools
    readonly handlers: (service: Shape) => Handlers<Tools>
    readonly reset: (service: Shape, columns: Columns) => Effect.Effect<Option.Option<string>>
    readonly state: (service: Shape) => Effect.Effect<State>
    readonly supportsConcurrentSessions?: boolean
    readonly openEnv?: OpenEnvDefinition
  }
): Native<Self, Shape, State, Columns> => {
  const names = new Set<string>()
  for (const tool of options.tools) {
    if (names.has(tool.name)) throw new Error(`Environment '${options.name}' lists tool '${tool.name}' twice.`)
    names.add(tool.name)
  }
  const instance = Effect.gen(function*() {
    const scope = yield* Effect.scope
    // Layer.fresh: v3 memoises layers per build only, but being explicit keeps "one instance per episode" true.
    const context = yield* Layer.buildWithScope(Layer.fresh(options.layer), scope)
    const service = Context.get(context, options.tag)
    const handlers = options.handlers(service) as unknown as Record<
      string,
      (params: unknown) => Effect.Effect<unknown, Tool.ToolFailure>
    >
    const self: Instance<State> = {
      reset: (columns) => options.reset(service, columns as Columns),
      invoke: (tool, params) => {
        const handler = handlers[tool]
        return handler === undefined
          ? Effect.dieMessage(`Environment '${options.name}' has no handler for tool '${tool}'.`)
          : handler(params)
      },
      state: options.state(service)
    }
    return self
  })
  return {
    name: options.name,
    description: options.description ?? options.name,
    tools: options.tools,
    columns: options.columns as Schema.Schema<Columns, any>,
    supportsConcurrentSessions: options.supportsConcurrentSessions ?? options.openEnv?.supportsConcurrentSessions ??
      true,
    instance,
    openEnv: options.openEnv,
    tag: options.tag,
    layer: options.layer
  }
}

/** The function-calling definitions of an environment's tools, for the chat template. */
export const toolDefinitions = <S, C>(env: Environment<S, C>): ReadonlyArray<Tool.ToolDefinition> =>
  env.tools.map((t) => t.definition)

/** One live episode, as the rollout loop sees it. */
export interface Episode<State> {
  readonly environment: string
  /** What `reset` returned (appended to the last prompt message by the trainer). */
  readonly observation: Option.Option<string>
  readonly tools: ReadonlyArray<Tool.Any>
  /**
   * Calls a tool by name with the model's parsed JSON arguments. Never fails: tool errors and defects come back as
   * the text the model sees. Only interruption, and a remote session's client error (`Client.isClientError`, as a
   * defect: the episode cannot go on), propagate.
   */
  readonly call: (name: string, args: unknown) => Effect.Effect<ToolOutcome>
  /** The environment's reward state, readable during and after the episode (while the scope is open). */
  readonly state: Effect.Effect<State>
  readonly counters: Effect.Effect<Counters>
}

/**
 * Starts an episode: builds a fresh instance in the current Scope, decodes `row` with the environment's
 * columns Schema and calls `reset`. Closing the scope ends the episode and releases the instance.
 */
export const episode = <State, Columns>(
  env: Environment<State, Columns>,
  row: Row = {}
): Effect.Effect<Episode<State>, InvalidColumns, Scope.Scope> =>
  Effect.gen(() => startEpisode(env, row)).pipe(
    Effect.withSpan("Environment.episode", { attributes: { environment: env.name }, captureStackTrace: false })
  )

// Module-level generator functions, not a `function*` per episode or call (see docs/architecture.md, "Hot paths and the young generation").
function* startEpisode<State, Columns>(env: Environment<State, Columns>, row: Row) {
  const columns = yield* decodeColumns(env.name, env.columns, row)
  const instance = yield* env.instance
  const observation = yield* instance.reset(columns)
  return fromInstance(env.name, env.tools, instance, observation)
}

/** Wraps a live instance with argument decoding, error texts and counters (used by `episode` and routers). */
export const fromInstance = <State>(
  name: string,
  tools: ReadonlyArray<Tool.Any>,
  instance: Instance<State>,
  observation: Option.Option<string>
): Episode<State> => {
  const byName = new Map(tools.map((t) => [t.name, t] as const))
  const counters = Ref.unsafeMake<Counters>({ calls: 0, failures: 0, defects: 0, byTool: {} })
  const count = (tool: string, outcome: ToolOutcome) =>
    Ref.update(counters, (c) => {
      const failed = outcome._tag === "Failure" ? 1 : 0
      const defect = outcome._tag === "Failure" && outcome.reason === "defect" ? 1 : 0
      const prev = c.byTool[tool] ?? { calls: 0, failures: 0, defects: 0 }
      return {
        calls: c.calls + 1,
        failures: c.failures + failed,
        defects: c.defects + defect,
        byTool: {
          ...c.byTool,
          [tool]: { calls: prev.calls + 1, failures: prev.failures + failed, defects: prev.defects + defect }
        }
      }
    })
  const call = (toolName: string, args: unknown): Effect.Effect<ToolOutcome> =>
    Effect.gen(() => callTool(name, byName, instance, toolName, args)).pipe(
      Effect.tap((outcome) => count(toolName, outcome)),
      Effect.withSpan("Environment.call", {
        attributes: { environment: name, tool: toolName },
        captureStackTrace: false
      })
    )
  return {
    environment: name,
    observation,
    tools,
    call,
    state: instance.state,
    counters: Ref.get(counters)
  }
}

const toolFailure = (tool: string, reason: Extract<ToolOutcome, { _tag: "Failure" }>["reason"], error: string) =>
  ({ _tag: "Failure", tool, reason, error, text: errorText(error) }) as const

function* callTool<State>(
  name: string,
  byName: ReadonlyMap<string, Tool.Any>,
  instance: Instance<State>,
  toolName: string,
  args: unknown
) {
  const tool = byName.get(toolName)
  if (tool === undefined) return toolFailure(toolName, "unknown_tool", `Tool ${toolName} not found.`)
  const decoded = yield* Effect.either(Tool.decodeArguments(tool, args))
  if (decoded._tag === "Left") return toolFailure(toolName, "invalid_arguments", decoded.left.message)
  const exit = yield* Effect.exit(instance.invoke(toolName, decoded.right))
  if (Exit.isSuccess(exit)) {
    const text = yield* Effect.exit(Tool.encodeResult(tool, exit.value))
    return Exit.isSuccess(text)
      ? ({ _tag: "Success", tool: toolName, text: text.value } as const)
      : toolFailure(toolName, "defect", `Tool '${toolName}' returned a value its success Schema rejects.`)
  }
  if (Cause.isInterruptedOnly(exit.cause)) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
  const typed = Cause.failureOption(exit.cause)
  if (typed._tag === "Some") {
    // A server's answer (`invalid_args`, `tool_not_found`) is counted as the same mistake made in process.
    const tag = (typed.value as { readonly _tag?: unknown })._tag
    const reason = tag === "InvalidArguments" ? "invalid_arguments" : tag === "UnknownTool" ? "unknown_tool" : "failure"
    return toolFailure(toolName, reason, typed.value.message)
  }
  // A remote-backed tool whose session was lost (or timed out, or its connection failed) has no answer for the
  // model: the episode cannot go on. It stays a defect carrying the client error, for the rollout to end the
  // episode as unscoreable; it is never shown to the model or counted as a tool failure.
  if (isClientError(Cause.squash(exit.cause))) return yield* Effect.failCause(exit.cause as Cause.Cause<never>)
  yield* Effect.logWarning(`Defect in tool '${toolName}' of environment '${name}'`, exit.cause)
  return toolFailure(toolName, "defect", defectMessage(toolName, exit.cause))
}

const defectMessage = (tool: string, cause: Cause.Cause<unknown>) => {
  const defect = Cause.squash(cause)
  const detail = defect instanceof Error ? defect.message : String(defect)
  return `Tool '${tool}' crashed: ${detail}`
}

/** Python's `str({"error": message})`, which is how TRL shows a raised tool error to the model. */
export const errorText: (message: string) => string = PythonText.errorText

/** One tool call made during an episode and what the model saw. */
export interface Step {
  readonly tool: string
  readonly args: unknown
  readonly outcome: ToolOutcome
}

/** The record of one finished episode. */
export interface EpisodeResult<State> {
  readonly observation: Option.Option<string>
  readonly steps: ReadonlyArray<Step>
  readonly state: State
  readonly counters: Counters
}

/**
 * Plays one whole episode with `player` and returns every call, the final reward state and the counters.
 * The instance is released before this returns.
 */
export const run = <State, Columns, E, R>(
  env: Environment<State, Columns>,
  row: Row,
  player: (episode: Episode<State>) => Effect.Effect<void, E, R>
): Effect.Effect<EpisodeResult<State>, E | InvalidColumns, R> =>
  Effect.scoped(Effect.gen(function*() {
    const live = yield* episode(env, row)
    const steps: Array<Step> = []
    const recording: Episode<State> = {
      ...live,
      call: (name, args) =>
        live.call(name, args).pipe(
          Effect.tap((outcome) => Effect.sync(() => steps.push({ tool: name, args, outcome })))
        )
    }
    yield* player(recording)
    return { observation: live.observation, steps, state: yield* live.state, counters: yield* live.counters }
  }))

/** The seed of an episode: the `seed` column when given, else a draw from Effect's `Random` service. */
export const seedOf = (seed: number | undefined): Effect.Effect<number> =>
  seed === undefined ? Random.nextIntBetween(0, 2 ** 31 - 1) : Effect.succeed(seed)

/** The columns Schema the built-ins share: an optional integer `seed` (other columns are ignored). */
export const SeedColumns = Schema.Struct({ seed: Schema.optional(Schema.Int) })
