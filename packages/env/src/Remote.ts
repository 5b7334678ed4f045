/**
 * The generic typed remote environment: tools played on any OpenEnv server from action/observation Schemas and a
 * mapping from tool calls to actions. The built-ins' remote twins live beside them (`Wordle.remote`, `Sudoku.remote`,
 * `Catch.remote`, `Echo.remote`: the wire formats of the real OpenEnv servers, which their tools cannot derive); a
 * `Definition`'s is derived (`definition.remote`), and a server of unknown kind is played by `Registry.discover`.
 *
 * Every episode opens its own session (one socket per episode). Infrastructure failures (session lost, timeouts,
 * capacity, connect) are not the model's fault: they are raised as defects carrying the typed `Client` error (never
 * as tool text that could be scored).
 *
 * @example
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { Environment, Remote, Tool } from "@envtrain/env"
 *
 * const Say = Tool.make("say", { description: "Say something.", parameters: { text: Schema.String } })
 * const env = Remote.environment({
 *   name: "echo", url: "http://127.0.0.1:8000", tools: [Say], columns: Environment.SeedColumns,
 *   action: Schema.Struct({ message: Schema.String }), observation: Schema.Struct({ echoed_message: Schema.String }),
 *   actionFor: (_tool, params) => ({ message: params.text }), render: (o) => o.echoed_message
 * })
 * ```
 *
 * @since 0.0.0
 */
import type { Schema } from "effect"
import { Effect, Option } from "effect"
import * as Client from "./Client.js"
import type * as Environment from "./Environment.js"
import { stepOrToolError } from "./internal/serverToolErrors.js"
import * as Tool from "./Tool.js"

/** Client options shared by the remote layers (the URL is given separately). */
export type RemoteOptions = Omit<Client.ClientOptions, "url" | "action" | "observation">

// ---------------------------------------------------------------------------------------------------------------
// Generic
// ---------------------------------------------------------------------------------------------------------------

/** The reward state of a generic remote environment. */
export interface RemoteState<O> {
  readonly done: boolean
  /** The last envelope's reward (null until the first step, or when the server sends none). */
  readonly reward: number | boolean | null
  readonly steps: number
  readonly observation: O | undefined
}

/** Options of {@link environment}. */
export interface RemoteEnvironmentOptions<A, AI, O, OI, Columns, CI> {
  readonly name: string
  readonly description?: string
  readonly url: string
  readonly action: Schema.Schema<A, AI>
  readonly observation: Schema.Schema<O, OI>
  readonly columns: Schema.Schema<Columns, CI>
  /** Tools whose success is the text `render` returns. */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The reset kwargs for a row (default: none). */
  readonly resetOptions?: (columns: Columns) => Readonly<Record<string, unknown>>
  /** The action a tool call sends. */
  readonly actionFor: (tool: string, params: any) => A
  /** What the model sees of an observation. */
  readonly render: (observation: O) => string
  readonly client?: RemoteOptions
}

/** A typed remote environment: each episode opens a session, `reset` with the row, and one step per tool call. */
export const environment = <A, AI, O, OI, Columns, CI>(
  options: RemoteEnvironmentOptions<A, AI, O, OI, Columns, CI>
): Environment.Environment<RemoteState<O>, Columns> => ({
  name: options.name,
  description: options.description ?? options.name,
  tools: options.tools,
  columns: options.columns,
  supportsConcurrentSessions: true,
  instance: Effect.gen(function*() {
    const client = yield* Client.make({
      ...options.client,
      url: options.url,
      action: options.action,
      observation: options.observation
    })
    let state: RemoteState<O> = { done: false, reward: null, steps: 0, observation: undefined }
    const instance: Environment.Instance<RemoteState<O>> = {
      reset: (columns) =>
        client.reset(options.resetOptions?.(columns as Columns) ?? {}).pipe(
          Effect.orDie,
          Effect.map((r) => {
            state = { done: r.done, reward: r.reward, steps: 0, observation: r.observation }
            return Option.some(options.render(r.observation))
          })
        ),
      invoke: (tool, params) =>
        state.done
          ? Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
          : client.step(options.actionFor(tool, params)).pipe(
            stepOrToolError,
            Effect.map((r) => {
              state = { done: r.done, reward: r.reward, steps: state.steps + 1, observation: r.observation }
              return options.render(r.observation)
            })
          ),
      state: Effect.sync(() => state)
    }
    return instance
  })
})
