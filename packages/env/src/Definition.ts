/**
 * An environment written once: a state made per episode, tools as functions of that state, a reward. Everything
 * else is derived from this one definition:
 *
 * - {@link Definition.environment}: the in-process environment the trainer plays (one fresh state per episode);
 * - {@link Definition.openEnv}: an OpenEnv MCP environment (`envtrain serve ./my-env.ts`), which OpenEnv's Python
 *   `MCPToolClient` / `GenericEnvClient` play: `list_tools`, `call_tool`, reset kwargs = the columns, `/state` =
 *   `episode_id`, `step_count` and the state's fields, each step's reward = `reward(state)`;
 * - {@link Definition.remote}: the same tools played on such a server (`envUrl` in a train config).
 *
 * TRL's `environment_factory` class in TypeScript: its methods are the tools, a thrown `Error` is the error text the
 * model sees (`{'error': message}`), and the reward function reads the state after the episode.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { Definition } from "@envtrain/env"
 *
 * export default Definition.make({
 *   name: "echo",
 *   start: () => ({ reward: 0 }),
 *   tools: {
 *     echo: {
 *       description: "Echo the message back.",
 *       parameters: { message: Schema.String.annotations({ description: "The message to echo" }) },
 *       run: (state, { message }) => {
 *         state.reward = message.length * 0.1
 *         return message
 *       }
 *     }
 *   },
 *   reward: (state) => state.reward
 * })
 * ```
 *
 * @since 0.0.0
 */
import { Effect, Option, Schema } from "effect"
import * as Environment from "./Environment.js"
import { EPISODE_DONE, mcpRemote } from "./internal/mcpRemote.js"
import { BaseState, episodeIdFrom } from "./internal/openEnvSupport.js"
import type {
  McpCallToolResult,
  McpToolDescriptor,
  McpTools,
  OpenEnvDefinition,
  OpenEnvInstance,
  StepResult
} from "./OpenEnv.js"
import { McpAction, McpObservation, mcpStepObservation, McpToolError, OpenEnvExecutionError } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

/** What a tool's `run` may return: text (shown as is), any JSON value (shown as JSON), or an Effect of either. */
export type ToolResult = string | number | boolean | object | null

/** One tool: its name is its key in `tools`. */
export interface ToolSpec<State, Fields extends Schema.Struct.Fields> {
  readonly description: string
  /** Schema fields; each field's `description` annotation is what the model reads. Default: no parameters. */
  readonly parameters?: Fields
  /** TRL's `"return"` entry of the tool schema. */
  readonly returns?: string
  /** Runs the tool on the episode's state. Throw an `Error` (or fail the Effect) to show the model an error. */
  readonly run: (
    state: State,
    params: Schema.Struct.Type<Fields>
  ) => ToolResult | Effect.Effect<ToolResult, Tool.ToolFailure>
}

/** What {@link make} takes. */
export interface Options<State extends object, Columns, CI, Tools extends Record<string, Schema.Struct.Fields>> {
  /** The environment's name (what `envtrain serve` and the reports print). */
  readonly name: string
  readonly description?: string
  /** The dataset row's columns this environment reads (reset kwargs on the wire). Default: an optional `seed`. */
  readonly columns?: Schema.Schema<Columns, CI>
  /** A fresh state for one episode, from the row's columns (TRL's `reset`). */
  readonly start: (columns: Columns) => State
  /** The first observation, appended to the prompt (TRL's `reset` return value). Default: none. */
  readonly observation?: (state: State) => string | undefined
  readonly tools: { readonly [K in keyof Tools]: ToolSpec<State, Tools[K]> }
  /** The episode's reward, read after the episode; `null` = unscoreable (left out of the group's baseline). */
  readonly reward: (state: State) => number | null
  /** Held-out success (default: reward > 0). */
  readonly success?: (state: State, reward: number) => boolean
  /** True once the episode is over: further tool calls fail with "Episode is done." (default: never). */
  readonly done?: (state: State) => boolean
  /** Sessions one server holds at once by default (`--max-concurrent-envs` overrides). Default 8. */
  readonly maxConcurrentSessions?: number
  /**
   * A scripted player, for an SFT warm-up on its transcripts (`envtrain sft` with `sftData: { seeds, errorRate }`,
   * or `SftData.collect`): it plays one episode through `episode.call(tool, args)`, making a wrong move with
   * probability `errorRate` (drawn from `seed`) so that the warmed-up policy leaves GRPO something to learn.
   */
  readonly solver?: Solver<State>
}

/** A scripted player made from an error rate and a seed (what the built-in games' solvers are). */
export type Solver<State> = (options: { readonly errorRate: number; readonly seed: number }) => (
  episode: Environment.Episode<State>
) => Effect.Effect<void>

/** The state a served definition reports: OpenEnv's base state plus the definition's fields. */
export type ServedState<State> = State & { readonly episode_id: string | null; readonly step_count: number }

/** One environment definition and everything derived from it. */
export interface Definition<State extends object = any, Columns = any> {
  readonly _tag: "EnvironmentDefinition"
  readonly name: string
  readonly description: string
  readonly tools: ReadonlyArray<Tool.Any>
  readonly columns: Schema.Schema<Columns, any>
  /** The in-process environment (a fresh state per episode). */
  readonly environment: Environment.Environment<State, Columns>
  /** The scripted player for SFT transcripts, if the definition gives one. */
  readonly solver?: Solver<State> | undefined
  /** The OpenEnv (MCP) environment `envtrain serve` serves. */
  readonly openEnv: OpenEnvDefinition<McpAction>
  /** The same environment played on a server that serves this definition. */
  readonly remote: (url: string, options?: RemoteOptions) => Environment.Environment<ServedState<State>, Columns>
  readonly reward: (state: State) => number | null
  readonly success: (state: State, reward: number) => boolean
}

/** Is `u` a {@link Definition} (checked by tag, so a module's own copy of this package still counts)? */
export const isDefinition = (u: unknown): u is Definition =>
  typeof u === "object" && u !== null && (u as { _tag?: unknown })._tag === "EnvironmentDefinition"

const textOf = (value: ToolResult): string => typeof value === "string" ? value : JSON.stringify(value)

const isToolFailure = (u: unknown): u is Tool.ToolFailure =>
  typeof u === "object" && u !== null && typeof (u as Tool.ToolFailure)._tag === "string" &&
  typeof (u as Tool.ToolFailure).message === "string"

/**
 * Runs one tool on a state: a thrown `Error` or a failed Effect becomes a `Tool.ToolError` (the model's fault, the
 * episode goes on); a defect inside an Effect stays a defect.
 */
const runTool = <State>(
  spec: ToolSpec<State, any>,
  state: State,
  params: unknown
): Effect.Effect<string, Tool.ToolFailure> =>
  Effect.suspend(() => {
    let out: ToolResult | Effect.Effect<ToolResult, Tool.ToolFailure>
    try {
      out = spec.run(state, params as never)
    } catch (e) {
      return Effect.fail(new Tool.ToolError({ message: e instanceof Error ? e.message : String(e) }))
    }
    return Effect.isEffect(out)
      ? Effect.map(
        Effect.mapError(
          out as Effect.Effect<ToolResult, unknown>,
          (e): Tool.ToolFailure => isToolFailure(e) ? e : new Tool.ToolError({ message: String(e) })
        ),
        textOf
      )
      : Effect.succeed(textOf(out))
  })

/** The definition's tools as typed tools (names written once: the keys of `tools`). */
const toolsOf = (specs: Readonly<Record<string, ToolSpec<any, any>>>): ReadonlyArray<Tool.Any> =>
  Object.entries(specs).map(([name, spec]) =>
    Tool.make(name, {
      description: spec.description,
      parameters: spec.parameters ?? {},
      success: Schema.String,
      ...(spec.returns === undefined ? {} : { returns: spec.returns })
    }) as unknown as Tool.Any
  )

/**
 * Defines an environment once; see the module's example. `tools`' keys are the tool names; each tool's parameters
 * are Schema fields, from which both the schema the model reads and the decoding of its arguments are derived.
 */
export const make = <
  State extends object,
  const Tools extends Record<string, Schema.Struct.Fields>,
  Columns = typeof Environment.SeedColumns.Type,
  CI = typeof Environment.SeedColumns.Encoded
>(options: Options<State, Columns, CI, Tools>): Definition<State, Columns> => {
  if (!/^[A-Za-z0-9_.-]+$/.test(options.name)) {
    throw new Error(
      `Definition.make: name '${options.name}' must be letters, digits, '_', '.' or '-' (it names the server and runs)`
    )
  }
  const specs = options.tools as unknown as Readonly<Record<string, ToolSpec<State, any>>>
  if (Object.keys(specs).length === 0) throw new Error(`Definition.make: environment '${options.name}' has no tools`)
  const columns = (options.columns ?? Environment.SeedColumns) as unknown as Schema.Schema<Columns, any>
  const tools = toolsOf(specs)
  const description = options.description ?? options.name
  const done = options.done ?? (() => false)
  const reward = options.reward
  const success = options.success ?? ((_state: State, r: number) => r > 0)

  const play = (state: State, name: string, params: unknown) =>
    done(state) ? Effect.fail(new Tool.GameOver({ message: EPISODE_DONE })) : runTool(specs[name], state, params)

  const environment: Environment.Environment<State, Columns> = {
    name: options.name,
    description,
    tools,
    columns,
    supportsConcurrentSessions: true,
    instance: Effect.sync(() => {
      let state: State | undefined
      const current = () => {
        if (state === undefined) throw new Error(`${options.name}: a tool was called before reset`)
        return state
      }
      const instance: Environment.Instance<State> = {
        reset: (row) =>
          Effect.sync(() => {
            state = options.start(row as Columns)
            return Option.fromNullable(options.observation?.(state))
          }),
        invoke: (name, params) => Effect.suspend(() => play(current(), name, params)),
        // A copy: the rewards read the state as it was when the episode ended.
        state: Effect.sync(() => ({ ...current() }))
      }
      return instance
    })
  }

  return {
    _tag: "EnvironmentDefinition",
    name: options.name,
    description,
    tools,
    columns,
    environment,
    openEnv: served({ ...options, description, done, reward, columns, specs, tools, play }),
    remote: (url, clientOptions = {}) =>
      mcpRemote<ServedState<State>, Columns>({ name: options.name, description, tools, columns, url, clientOptions }),
    reward,
    success,
    solver: options.solver
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Served: an OpenEnv MCP environment
// ---------------------------------------------------------------------------------------------------------------

interface ServedOptions<State, Columns> {
  readonly name: string
  readonly description: string
  readonly columns: Schema.Schema<Columns, any>
  readonly start: (columns: Columns) => State
  readonly observation?: ((state: State) => string | undefined) | undefined
  readonly reward: (state: State) => number | null
  readonly done: (state: State) => boolean
  readonly specs: Readonly<Record<string, ToolSpec<State, any>>>
  readonly tools: ReadonlyArray<Tool.Any>
  readonly play: (state: State, name: string, params: unknown) => Effect.Effect<string, Tool.ToolFailure>
  readonly maxConcurrentSessions?: number | undefined
}

// FastMCP's listing of a tool that returns text: the result is wrapped as {"result": text}.
const descriptorOf = (tool: Tool.Any): McpToolDescriptor => ({
  name: tool.name,
  description: tool.description,
  inputSchema: { ...tool.definition.function.parameters, additionalProperties: false },
  outputSchema: {
    properties: { result: { type: "string" } },
    required: ["result"],
    type: "object",
    "x-fastmcp-wrap-result": true
  }
})

const textResult = (text: string): McpCallToolResult => ({
  content: [{ type: "text", text }],
  structured_content: { result: text },
  meta: { fastmcp: { wrap_result: true } },
  data: text,
  is_error: false
})

const served = <State extends object, Columns>(o: ServedOptions<State, Columns>): OpenEnvDefinition<McpAction> => ({
  name: o.name,
  metadata: {
    name: o.name,
    description: o.description,
    readme_content: null,
    version: "1.0.0",
    author: null,
    documentation_url: null
  },
  action: McpAction,
  observation: McpObservation,
  state: BaseState,
  supportsConcurrentSessions: true,
  defaultMaxConcurrentEnvs: o.maxConcurrentSessions ?? 8,
  make: Effect.sync(() => {
    let state: State | undefined
    let episodeId: string | null = null
    let stepCount = 0
    const byName = new Map(o.tools.map((t) => [t.name, t]))
    const startWith = (kwargs: Readonly<Record<string, unknown>>) =>
      Schema.decodeUnknown(o.columns)(columnsOf(kwargs)).pipe(
        Effect.map((columns) => {
          state = o.start(columns)
          return state
        }),
        Effect.mapError((e) => new OpenEnvExecutionError({ message: `${o.name}: reset kwargs: ${e.message}` }))
      )
    // MCP clients may call a tool before any reset (OpenEnv's echo allows it): the episode starts with no columns.
    const live = Effect.suspend(() =>
      state === undefined
        ? Effect.mapError(startWith({}), (e) => new McpToolError({ kind: "execution_error", message: e.message }))
        : Effect.succeed(state)
    )
    const call = (name: string, args: Readonly<Record<string, unknown>>) =>
      Effect.gen(function*() {
        const tool = byName.get(name)
        if (tool === undefined) {
          return yield* new McpToolError({ kind: "tool_not_found", message: `Unknown tool: '${name}'` })
        }
        const params = yield* Effect.mapError(
          Tool.decodeArguments(tool, args),
          (e) => new McpToolError({ kind: "invalid_args", message: e.message })
        )
        const s = yield* live
        const text = yield* Effect.mapError(
          o.play(s, name, params),
          (e) => new McpToolError({ kind: "execution_error", message: e.message })
        )
        return textResult(text)
      })
    const envelope = (observation: Record<string, unknown>): StepResult => ({
      observation,
      reward: state === undefined ? null : o.reward(state),
      done: state === undefined ? false : o.done(state)
    })
    const tools: McpTools = { list: Effect.succeed(o.tools.map(descriptorOf)), call }
    const instance: OpenEnvInstance<McpAction> = {
      reset: (kwargs) =>
        Effect.gen(function*() {
          episodeId = yield* episodeIdFrom(kwargs, true)
          stepCount = 0
          const s = yield* startWith(kwargs)
          const text = o.observation?.(s)
          return { observation: text === undefined ? {} : { text }, reward: null, done: o.done(s) } satisfies StepResult
        }),
      step: (action) =>
        Effect.suspend(() => {
          stepCount += 1
          // The envelope is read after the call: a call before any reset starts the episode.
          return Effect.map(mcpStepObservation(action, tools), envelope)
        }),
      state: Effect.sync(() => ({ ...(state ?? {}), episode_id: episodeId, step_count: stepCount })),
      tools
    }
    return instance
  })
})

/** Reset kwargs → the row's columns: OpenEnv's own keys (`episode_id`) are not columns. */
const columnsOf = (kwargs: Readonly<Record<string, unknown>>) => {
  const { episode_id: _, ...rest } = kwargs
  return rest
}

// ---------------------------------------------------------------------------------------------------------------
// Remote: the definition's tools played on a server that serves it
// ---------------------------------------------------------------------------------------------------------------

/**
 * Runs a definition's environment on one row and returns what the trainer's reward would see (a quick check of a
 * new environment without a model).
 */
export const play = <State extends object, Columns>(
  definition: Definition<State, Columns>,
  row: Environment.Row,
  calls: ReadonlyArray<readonly [tool: string, args: Readonly<Record<string, unknown>>]>
): Effect.Effect<
  { readonly texts: ReadonlyArray<string>; readonly state: State; readonly reward: number | null },
  Environment.InvalidColumns
> =>
  Effect.scoped(
    Effect.gen(function*() {
      const episode = yield* Environment.episode(definition.environment, row)
      const texts: Array<string> = []
      for (const [tool, args] of calls) texts.push((yield* episode.call(tool, args)).text)
      const state = yield* episode.state
      return { texts, state, reward: definition.reward(state) }
    })
  )
