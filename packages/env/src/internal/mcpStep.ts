// The step envelope of an MCP environment (OpenEnv's `MCPEnvironment.step`): what a `list_tools` or `call_tool`
// action observes. One place for it, as every MCP definition (Echo's, a user's `Definition`, Harbor's) answers the
// same way and OpenEnv's `MCPToolClient` reads exactly these keys.
import { Effect } from "effect"
import type { McpAction, McpTools, StepResult } from "../OpenEnv.js"

/**
 * The observation of one MCP step: `list_tools` → `{tools: [{name, description, input_schema}]}`; `call_tool` →
 * `{tool_name, result, error: null}`, or `{tool_name, result: null, error: {error_type, message}}` when the tool
 * failed (a failed tool is an observation, never a step error).
 */
export const mcpStepObservation = (
  action: McpAction,
  tools: McpTools
): Effect.Effect<Record<string, unknown>> =>
  action.type === "list_tools"
    ? Effect.map(tools.list, (list) => ({
      tools: list.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }))
    }))
    : Effect.map(Effect.either(tools.call(action.tool_name, action.arguments)), (result) =>
      result._tag === "Right"
        ? { tool_name: action.tool_name, result: result.right, error: null }
        : {
          tool_name: action.tool_name,
          result: null,
          error: { error_type: result.left.kind, message: result.left.message }
        })

/** {@link mcpStepObservation} in the envelope of an environment whose steps carry no reward and never end. */
export const mcpStep = (action: McpAction, tools: McpTools): Effect.Effect<StepResult> =>
  Effect.map(mcpStepObservation(action, tools), (observation) => ({ observation, reward: null, done: false }))
