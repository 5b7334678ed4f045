/**
 * What an OpenEnv server said about a tool call, as the model would see it from TRL: the server's answer is the
 * tool's error text, counted as a tool failure. Python's client raises the server's error frame into the tool call
 * (`RuntimeError("Server error: … (code: …)")`) and TRL shows `str(e)`; an MCP server's `CallToolObservation.error`
 * (`invalid_args`, `tool_not_found`, `execution_error`, `timeout`, …) is the tool's error. A lost session, a timeout
 * of our own request or a failed connection is not an answer: it stays a defect carrying the client error, and the
 * episode ends unscoreable.
 */
import { Effect } from "effect"
import type { ClientError } from "../Client.js"
import * as Tool from "../Tool.js"

/** The server's error frame for a step (the environment raised, or refused the action) as the tool's error. */
export const stepOrToolError = <A, R>(step: Effect.Effect<A, ClientError, R>): Effect.Effect<A, Tool.ToolError, R> =>
  Effect.catchAll(
    step,
    (e) =>
      e._tag === "ServerError" && (e.code === "EXECUTION_ERROR" || e.code === "VALIDATION_ERROR")
        ? Effect.fail(new Tool.ToolError({ message: e.message }))
        : Effect.die(e)
  )

/** An MCP `CallToolObservation.error` as the tool failure the model reads (TRL: `{'error': '<message>'}`). */
export const callToolError = (
  tool: string,
  error: { readonly error_type: string; readonly message: string }
): Tool.ToolError | Tool.InvalidArguments | Tool.UnknownTool =>
  error.error_type === "invalid_args"
    ? new Tool.InvalidArguments({ tool, message: error.message })
    : error.error_type === "tool_not_found"
    ? new Tool.UnknownTool({ tool, message: error.message })
    : new Tool.ToolError({ message: error.message })
