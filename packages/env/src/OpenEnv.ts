/**
 * The OpenEnv-level contract: what one OpenEnv environment session does, independent of transport.
 *
 * This is the TypeScript counterpart of OpenEnv's Python `Environment` class (`reset`, `step`, `state`,
 * optional MCP tools) plus what `create_app` needs to serve it (name, metadata, action/observation/state
 * Schemas, concurrency). Built-in environments provide an `OpenEnvDefinition`; the server (`Server.ts`)
 * serves any definition over OpenEnv's wire protocol, and the client (`Client.ts`) talks to any OpenEnv
 * server through the same shapes.
 *
 * @since 0.0.0
 */
import type { Effect, Scope } from "effect"
import { Data, Schema } from "effect"
import { actionStruct } from "./internal/openEnvSupport.js"
import type { TaskProvider } from "./TaskApi.js"

/** The observation envelope `{observation, reward, done}` sent for reset and step (metadata is never sent). */
export interface StepResult {
  readonly observation: Readonly<Record<string, unknown>>
  readonly reward: number | boolean | null
  readonly done: boolean
}

/** OpenEnv's `EnvironmentMetadata`, as served on `GET /metadata`. */
export interface EnvironmentMetadata {
  readonly name: string
  readonly description: string
  readonly readme_content: string | null
  readonly version: string
  readonly author: string | null
  readonly documentation_url: string | null
}

/** An MCP tool as listed by `tools/list`. */
export interface McpToolDescriptor {
  readonly name: string
  readonly description: string
  readonly inputSchema: Readonly<Record<string, unknown>>
  /** What FastMCP 3 lists besides (`mcp.types.Tool.model_dump()`), when the environment mirrors one. */
  readonly title?: string | null
  readonly outputSchema?: Readonly<Record<string, unknown>> | null
  readonly icons?: null
  readonly annotations?: null
  readonly meta?: Readonly<Record<string, unknown>> | null
  readonly execution?: null
}

/** The JSON-ified MCP `CallToolResult` (field names as OpenEnv sends them). */
export interface McpCallToolResult {
  readonly content: ReadonlyArray<
    { readonly type: "text"; readonly text: string; readonly annotations?: null; readonly meta?: null }
  >
  readonly structured_content: Readonly<Record<string, unknown>> | null
  /** FastMCP 3 marks a result it wrapped as `{"result": …}`: `{"fastmcp": {"wrap_result": true}}`. */
  readonly meta: Readonly<Record<string, unknown>> | null
  readonly data: unknown
  readonly is_error: boolean
}

/** `reset`, `step` or `state` raised: becomes an `EXECUTION_ERROR` frame with `message` as its text. */
export class OpenEnvExecutionError extends Data.TaggedError("OpenEnvExecutionError")<{
  readonly message: string
}> {}

/** The factory failed to create an instance: becomes `FACTORY_ERROR` and closes the session. */
export class OpenEnvFactoryError extends Data.TaggedError("OpenEnvFactoryError")<{
  readonly factoryName: string
  readonly cause: unknown
}> {
  override get message() {
    return `Environment factory '${this.factoryName}' failed to create instance.`
  }
}

/** An MCP tool call failed: `kind` picks the JSON-RPC code (-32602 for unknown tool / bad args, else -32603). */
export class McpToolError extends Data.TaggedError("McpToolError")<{
  readonly kind: "tool_not_found" | "invalid_args" | "execution_error"
  readonly message: string
}> {}

/** MCP tools of an instance (only for environments that have tools). */
export interface McpTools {
  readonly list: Effect.Effect<ReadonlyArray<McpToolDescriptor>>
  readonly call: (
    name: string,
    args: Readonly<Record<string, unknown>>
  ) => Effect.Effect<McpCallToolResult, McpToolError>
}

/** One live environment instance, owned by one session. Calls on it are never concurrent. */
export interface OpenEnvInstance<Action = unknown> {
  /** `options` are the reset kwargs (`seed`, `episode_id`, env-specific columns). */
  readonly reset: (options: Readonly<Record<string, unknown>>) => Effect.Effect<StepResult, OpenEnvExecutionError>
  /** `action` has already been decoded with the definition's `action` Schema. */
  readonly step: (action: Action) => Effect.Effect<StepResult, OpenEnvExecutionError>
  /** The full state (`episode_id`, `step_count`, and env-specific fields). */
  readonly state: Effect.Effect<Readonly<Record<string, unknown>>, OpenEnvExecutionError>
  readonly tools?: McpTools
}

/** Everything needed to serve an environment: what OpenEnv's `create_app(factory, Action, Observation)` takes. */
export interface OpenEnvDefinition<Action = any> {
  /** `env_name`, e.g. "echo_env", "textarena_env", "openspiel_env". Used as the factory name in errors. */
  readonly name: string
  readonly metadata: EnvironmentMetadata
  /** Decodes the `data` of a step message (unknown keys rejected, as pydantic's extra="forbid"). */
  readonly action: Schema.Schema<Action, any>
  /** For `/schema` only. */
  readonly observation: Schema.Schema<any, any>
  /** For `/schema` only (OpenEnv always serves the base `State` schema). */
  readonly state: Schema.Schema<any, any>
  /** OpenEnv's SUPPORTS_CONCURRENT_SESSIONS. */
  readonly supportsConcurrentSessions: boolean
  /**
   * Writes frames byte for byte as a Python twin: `Schema.Number` values of the observation/state Schemas and the
   * envelope's numeric `reward` go out as Python floats (`0.0`, `1e-05`). Off (default), numbers are written as
   * JavaScript writes them, as an environment without a Python twin has no int/float distinction to reproduce.
   */
  readonly pythonFloats?: boolean
  /** The `MAX_CONCURRENT_ENVS` default of the Python twin's app (8 for the built-ins). */
  readonly defaultMaxConcurrentEnvs: number
  /** Creates a fresh instance; it is closed when the scope closes. */
  readonly make: Effect.Effect<OpenEnvInstance<Action>, OpenEnvFactoryError, Scope.Scope>
  /**
   * The tasks it offers, served as OpenEnv's plain-HTTP Task API (`/<name>/splits`, `/<name>/task_range`, …; see
   * `TaskApi`). Without them those routes answer 501, as OpenEnv's do for an environment without task methods.
   */
  readonly tasks?: TaskProvider
}

/** `ListToolsAction`. */
export const ListToolsAction = actionStruct({ type: Schema.Literal("list_tools") }, "ListToolsAction")
/** `CallToolAction`. */
export const CallToolAction = actionStruct({
  type: Schema.Literal("call_tool"),
  tool_name: Schema.String,
  arguments: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}, "CallToolAction")
/** The MCP echo's action: a tool listing or a tool call. */
export const McpAction = Schema.Union(ListToolsAction, CallToolAction)
/** A decoded MCP action: `list_tools` or `call_tool`. */
export type McpAction = typeof McpAction.Type

/** `CallToolObservation` / `ListToolsObservation` (only for `/schema`). */
export const McpObservation = Schema.Union(
  Schema.Struct({ tool_name: Schema.String, result: Schema.Unknown, error: Schema.NullOr(Schema.Unknown) }),
  Schema.Struct({ tools: Schema.Array(Schema.Unknown) })
).annotations({ identifier: "CallToolObservation" })

/**
 * One MCP step's observation and envelope, as OpenEnv's `MCPEnvironment` answers: `list_tools` →
 * `{tools: [{name, description, input_schema}]}`; `call_tool` → `{tool_name, result, error}` with a failed tool as
 * `error: {error_type, message}`. `mcpStep` wraps it with `reward: null, done: false`.
 */
export { mcpStep, mcpStepObservation } from "./internal/mcpStep.js"
