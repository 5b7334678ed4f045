/**
 * Echo, both variants of OpenEnv's `echo_env`:
 *
 * - {@link openEnv}: the legacy environment (`EchoAction{message}` → `EchoObservation{echoed_message,
 *   message_length}`, reward = 0.1 × length), still served by the Space TRL's echo example uses.
 * - {@link openEnvMcp}: the current pure-MCP environment with tools `echo_message` and `echo_with_length`.
 * - {@link environment}: TRL's `EchoToolEnv`: one tool `echo(message)`, reward state = last echo's reward.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Echo, Environment } from "@envtrain/env"
 *
 * const result = Environment.run(Echo.environment, {}, (episode) => episode.call("echo", { message: "Hi" }))
 * // result.state.reward === 0.2
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Client from "./Client.js"
import * as Environment from "./Environment.js"
import { actionStruct, BaseState, defaultMetadata, episodeIdFrom } from "./internal/openEnvSupport.js"
import type { McpCallToolResult, McpToolDescriptor, McpTools, OpenEnvDefinition, StepResult } from "./OpenEnv.js"
import { McpAction, McpObservation, mcpStep, McpToolError } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

/** Python's `len(str)`: code points, not UTF-16 units. */
const pyLen = (s: string) => [...s].length

/** The legacy echo reward: `len(message) * 0.1` (same IEEE arithmetic as Python). */
export const rewardOf = (message: string): number => pyLen(message) * 0.1

// ---------------------------------------------------------------------------------------------------------------
// Legacy OpenEnv echo
// ---------------------------------------------------------------------------------------------------------------

/** `EchoAction{message: str (min_length 1)}`. */
export const Action = actionStruct({ message: Schema.String.pipe(Schema.minLength(1)) }, "EchoAction")
/** A decoded `EchoAction` (a non-empty `message`). */
export type Action = typeof Action.Type

/** `EchoObservation`. */
export const Observation = Schema.Struct({
  echoed_message: Schema.String,
  message_length: Schema.Int
}).annotations({ identifier: "EchoObservation" })

// What both echo variants share: the app's settings, and OpenEnv's base State (an episode id set by reset, and a
// step count that every step bumps).
const echoApp = {
  name: "echo_env",
  metadata: defaultMetadata("EchoEnvironment"),
  state: BaseState,
  supportsConcurrentSessions: true,
  pythonFloats: true,
  defaultMaxConcurrentEnvs: 8
} as const

const episodeCounter = () => {
  let episodeId: string = crypto.randomUUID()
  let stepCount = 0
  return {
    reset: (options: Readonly<Record<string, unknown>>) =>
      Effect.map(episodeIdFrom(options, true), (id) => {
        episodeId = id
        stepCount = 0
      }),
    step: () => {
      stepCount += 1
    },
    state: Effect.sync(() => ({ episode_id: episodeId, step_count: stepCount }))
  }
}

/** The legacy echo environment (`echo_env` before OpenEnv PR #321). */
export const openEnv: OpenEnvDefinition<Action> = {
  ...echoApp,
  action: Action,
  observation: Observation,
  make: Effect.sync(() => {
    const counter = episodeCounter()
    return {
      reset: (options) =>
        Effect.as(
          counter.reset(options),
          {
            observation: { echoed_message: "Echo environment ready!", message_length: 0 },
            reward: 0.0,
            done: false
          } satisfies StepResult
        ),
      step: (action) =>
        Effect.sync(() => {
          counter.step()
          return {
            observation: { echoed_message: action.message, message_length: pyLen(action.message) },
            reward: rewardOf(action.message),
            done: false
          } satisfies StepResult
        }),
      state: counter.state
    }
  })
}

// ---------------------------------------------------------------------------------------------------------------
// MCP OpenEnv echo
// ---------------------------------------------------------------------------------------------------------------

// OpenEnv's MCP actions and observation (they live in OpenEnv.ts; kept here under their old names).
export { CallToolAction, ListToolsAction, McpAction, McpObservation } from "./OpenEnv.js"

const messageSchema = {
  additionalProperties: false,
  properties: { message: { type: "string", description: "The message to echo back" } },
  required: ["message"],
  type: "object"
} as const

/** FastMCP 3's listing of the two tools (the docstring's summary; its Args section describes the parameter). */
export const mcpTools: ReadonlyArray<McpToolDescriptor> = [
  {
    name: "echo_message",
    title: null,
    description: "Echo back the provided message.",
    inputSchema: messageSchema,
    outputSchema: {
      properties: { result: { type: "string" } },
      required: ["result"],
      type: "object",
      "x-fastmcp-wrap-result": true
    },
    icons: null,
    annotations: null,
    meta: { fastmcp: { tags: [] } },
    execution: null
  },
  {
    name: "echo_with_length",
    title: null,
    description: "Echo back the message with its length.",
    inputSchema: messageSchema,
    outputSchema: { additionalProperties: true, type: "object" },
    icons: null,
    annotations: null,
    meta: { fastmcp: { tags: [] } },
    execution: null
  }
]

const callMcp = (name: string, args: Readonly<Record<string, unknown>>) =>
  Effect.suspend((): Effect.Effect<McpCallToolResult, McpToolError> => {
    if (name !== "echo_message" && name !== "echo_with_length") {
      return Effect.fail(new McpToolError({ kind: "tool_not_found", message: `Unknown tool: '${name}'` }))
    }
    const extra = Object.keys(args).filter((k) => k !== "message")
    const message = args.message
    if (typeof message !== "string" || extra.length > 0) {
      return Effect.fail(
        new McpToolError({
          // FastMCP reports a missing or unexpected argument as invalid_args, a wrongly typed one as execution_error.
          kind: message === undefined || extra.length > 0 ? "invalid_args" : "execution_error",
          message: typeof message !== "string"
            ? `Invalid arguments for tool '${name}': 'message' is required and must be a string`
            : `Invalid arguments for tool '${name}': unexpected argument(s) ${extra.join(", ")}`
        })
      )
    }
    if (name === "echo_message") {
      return Effect.succeed({
        content: [{ type: "text", text: message, annotations: null, meta: null }],
        structured_content: { result: message },
        meta: { fastmcp: { wrap_result: true } },
        data: message,
        is_error: false
      })
    }
    const value = { message, length: pyLen(message) }
    return Effect.succeed({
      content: [{ type: "text", text: JSON.stringify(value), annotations: null, meta: null }],
      structured_content: value,
      meta: null,
      data: value,
      is_error: false
    })
  })

/** The current, pure-MCP echo environment (tools `echo_message`, `echo_with_length`). */
export const openEnvMcp: OpenEnvDefinition<McpAction> = {
  ...echoApp,
  action: McpAction,
  observation: McpObservation,
  make: Effect.sync(() => {
    const counter = episodeCounter()
    const tools: McpTools = { list: Effect.succeed(mcpTools), call: callMcp }
    return {
      // Observation(metadata={"status": "ready", ...}): metadata never goes on the wire.
      reset: (options) =>
        Effect.as(counter.reset(options), { observation: {}, reward: 0.0, done: false } satisfies StepResult),
      step: (action) =>
        Effect.suspend(() => {
          // Every step, list_tools included, counts.
          counter.step()
          return mcpStep(action, tools)
        }),
      state: counter.state,
      tools
    }
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's EchoToolEnv)
// ---------------------------------------------------------------------------------------------------------------

/** `echo(message)`. */
export const Echo = Tool.make("echo", {
  description: "Echo the message back from the environment.",
  parameters: { message: Schema.String.annotations({ description: "The message to echo" }) },
  success: Schema.String,
  returns: "The echoed message."
})

/** TRL's reward state: the reward of the last echo (0 before any). */
export interface State {
  readonly reward: number
  readonly echoes: number
}

/** The Echo tool service. */
export class EchoTools extends Context.Tag("@envtrain/env/Echo/EchoTools")<EchoTools, {
  readonly echo: (params: { readonly message: string }) => Effect.Effect<string, Tool.InvalidMove>
  readonly state: Effect.Effect<State>
}>() {
  static readonly layer = Layer.sync(EchoTools, () => {
    let reward = 0
    let echoes = 0
    return EchoTools.of({
      echo: ({ message }) =>
        Effect.suspend(() => {
          // EchoAction requires min_length 1: the legacy server answers a 422-style validation error.
          if (message.length === 0) {
            return Effect.fail(
              new Tool.InvalidMove({ message: "message: String should have at least 1 character" })
            )
          }
          reward = rewardOf(message)
          echoes += 1
          return Effect.succeed(message)
        }),
      state: Effect.sync(() => ({ reward, echoes }))
    })
  })
}

/** The definition over a layer of its tools: in-process (`environment`) or on a server (`remote`). */
const environmentWith = (layer: Layer.Layer<EchoTools>) =>
  Environment.make({
    name: "echo",
    description: "Echo: the environment echoes the message back; longer messages earn more (0.1 per character).",
    tag: EchoTools,
    layer,
    columns: Environment.SeedColumns,
    tools: [Echo],
    handlers: (service) => ({ echo: service.echo }),
    reset: () => Effect.succeed(Option.none()),
    state: (service) => service.state,
    openEnv
  })

/** Echo as an environment (TRL's `EchoToolEnv`): `reset` returns no observation. */
export const environment = environmentWith(EchoTools.layer)

// ---------------------------------------------------------------------------------------------------------------
// Remote: the same tools on a served legacy echo_env (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

/** `EchoTools` backed by a remote legacy `echo_env` session (`EchoAction{message}`). */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    EchoTools,
    Effect.gen(function*() {
      const client = yield* Client.make({
        ...options,
        url,
        action: Schema.Struct({ message: Schema.String }),
        observation: Schema.Struct({ echoed_message: Schema.String, message_length: Schema.Number })
      })
      yield* Effect.orDie(client.reset())
      let reward = 0
      let echoes = 0
      return EchoTools.of({
        // Combinators, not a `function*` per call (see `Wordle.remoteLayer`).
        echo: ({ message }) =>
          client.step({ message }).pipe(
            Effect.catchTag("ServerError", (e) =>
              e.code === "VALIDATION_ERROR"
                ? Effect.fail(new Tool.InvalidMove({ message: "message: String should have at least 1 character" }))
                : Effect.die(e)),
            Effect.catchIf((e) => e._tag !== "InvalidMove", (e) => Effect.die(e)),
            Effect.map((r) => {
              reward = typeof r.reward === "number" ? r.reward : 0
              echoes += 1
              return r.observation.echoed_message
            })
          ),
        state: Effect.sync(() => ({ reward, echoes }))
      })
    })
  )

/** Echo as an environment whose tool runs on a remote (legacy echo) server. */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
