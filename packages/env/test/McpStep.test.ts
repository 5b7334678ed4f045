import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Echo, OpenEnv } from "../src/index.js"

// The one MCP step envelope every MCP definition answers with (Echo's, Definition's, the harness's Harbor server).
const tools: OpenEnv.McpTools = {
  list: Effect.succeed(Echo.mcpTools),
  call: (name, args) =>
    name === "boom"
      ? Effect.fail(new OpenEnv.McpToolError({ kind: "execution_error", message: "it broke" }))
      : Echo.openEnvMcp.make.pipe(
        Effect.flatMap((instance) => instance.tools!.call(name, args)),
        Effect.orDie,
        Effect.scoped
      )
}

describe("OpenEnv.mcpStep", () => {
  it.effect("list_tools lists name, description and input_schema only", () =>
    Effect.gen(function*() {
      const listed = yield* OpenEnv.mcpStep({ type: "list_tools" }, tools)
      assert.deepStrictEqual(listed, {
        observation: {
          tools: Echo.mcpTools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }))
        },
        reward: null,
        done: false
      })
      // The descriptors carry more (title, outputSchema, meta …); the envelope does not.
      assert.isTrue(Echo.mcpTools.every((t) => "outputSchema" in t))
    }))

  it.effect("call_tool answers the result, and a failed tool as an error observation", () =>
    Effect.gen(function*() {
      const called = yield* OpenEnv.mcpStep(
        { type: "call_tool", tool_name: "echo_message", arguments: { message: "Hi" } },
        tools
      )
      assert.deepStrictEqual(called.observation.error, null)
      assert.strictEqual(called.observation.tool_name, "echo_message")
      assert.strictEqual((called.observation.result as OpenEnv.McpCallToolResult).data, "Hi")
      assert.deepStrictEqual([called.reward, called.done], [null, false])
      const failed = yield* OpenEnv.mcpStepObservation({ type: "call_tool", tool_name: "boom", arguments: {} }, tools)
      assert.deepStrictEqual(failed, {
        tool_name: "boom",
        result: null,
        error: { error_type: "execution_error", message: "it broke" }
      })
    }))
})
