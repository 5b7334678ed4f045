/**
 * Playing tools on an OpenEnv MCP server (`call_tool` steps): the remote twin of a `Definition`, and the generic
 * environment of a server whose kind is not known (`Registry.load("http://…")`).
 */
import { Effect, Option, Schema } from "effect"
import * as Client from "../Client.js"
import type * as Environment from "../Environment.js"
import { McpAction } from "../OpenEnv.js"
import type { RemoteOptions } from "../Remote.js"
import * as Tool from "../Tool.js"
import { callToolError, stepOrToolError } from "./serverToolErrors.js"

/** What a tool call after the episode's end answers (in process and remote alike). */
export const EPISODE_DONE = "Episode is done."

const CallObservation = Schema.Struct({
  tool_name: Schema.optional(Schema.String),
  result: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.NullOr(Schema.Struct({ error_type: Schema.String, message: Schema.String }))),
  text: Schema.optional(Schema.String)
})

const resultText = (result: unknown): string => {
  const data = typeof result === "object" && result !== null && "data" in result ? result.data : result
  return typeof data === "string" ? data : JSON.stringify(data)
}

/**
 * Tools played on an OpenEnv MCP server: each episode opens a session, resets with the row's columns (encoded with
 * `columns`) and sends each tool call as a `call_tool` step. The state is the server's `/state`; with `envelope` it
 * also carries the last step's `{reward, done}` (for servers whose reward is only in the envelope).
 */
export const mcpRemote = <State, Columns>(o: {
  readonly name: string
  readonly description: string
  readonly tools: ReadonlyArray<Tool.Any>
  readonly columns: Schema.Schema<Columns, any>
  readonly url: string
  readonly clientOptions: RemoteOptions
  readonly envelope?: boolean
}): Environment.Environment<State, Columns> => ({
  name: o.name,
  description: o.description,
  tools: o.tools,
  columns: o.columns,
  supportsConcurrentSessions: true,
  instance: Effect.gen(function*() {
    const client = yield* Client.make({
      ...o.clientOptions,
      url: o.url,
      action: McpAction,
      observation: CallObservation
    })
    const encode = Schema.encode(o.columns)
    let over = false
    let last: { readonly reward: number | boolean | null; readonly done: boolean } = { reward: null, done: false }
    const instance: Environment.Instance<State> = {
      reset: (columns) =>
        encode(columns as Columns).pipe(
          Effect.orDie,
          Effect.flatMap((kwargs) => Effect.orDie(client.reset(kwargs as Record<string, unknown>))),
          Effect.map((r) => {
            over = r.done
            last = { reward: r.reward, done: r.done }
            return Option.fromNullable(r.observation.text)
          })
        ),
      invoke: (tool, params) =>
        over
          ? Effect.fail(new Tool.GameOver({ message: EPISODE_DONE }))
          : client.step({ type: "call_tool", tool_name: tool, arguments: params as Record<string, unknown> }).pipe(
            stepOrToolError,
            Effect.flatMap((r) => {
              over = r.done
              last = { reward: r.reward, done: r.done }
              const error = r.observation.error
              return error === undefined || error === null
                ? Effect.succeed(resultText(r.observation.result))
                : Effect.fail(callToolError(tool, error))
            })
          ),
      state: Effect.map(
        Effect.orDie(client.state),
        (s) => (o.envelope === true ? { ...s, envelope: last } : s) as State
      )
    }
    return instance
  })
})
