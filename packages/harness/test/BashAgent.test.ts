// The built-in bash-tool agent. A real loopback HTTP server speaking OpenAI chat completions replies with fixed
// responses that call the task's solver commands as tool calls: the loop runs them in a real sandbox, stops on a
// reply with no tool call, and the verifier gives 1; a server that never stops calling tools meets the step limit.
// Then the real policy server over a tiny model (which solves nothing): the loop gets completions and ends cleanly.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as BashAgent from "../src/BashAgent.js"
import * as Sandbox from "../src/Sandbox.js"
import * as ScriptedEndpoint from "../src/ScriptedEndpoint.js"
import { shippedSuite, tinyPolicy } from "./fixtures.js"

describe("BashAgent", () => {
  it.scopedLive(
    "runs the solver's commands given as tool calls, stops on no tool call, and the verifier gives 1",
    () =>
      Effect.gen(function*() {
        const suite = yield* shippedSuite
        const task = suite.train.find((t) => t.name === "copy-file")!
        const commands = task.solverCommands
        // The n-th call (n = assistant messages so far) runs the n-th command; then a reply with no tool call.
        const server = yield* ScriptedEndpoint.make([
          ...commands.map((command) => ScriptedEndpoint.bash(command, null)),
          { content: "Done." }
        ])
        const sandbox = yield* Sandbox.make({ task })
        const run = yield* BashAgent.run(sandbox, {
          baseUrl: `${server.url}/v1`,
          apiKey: "session-1",
          model: "scripted",
          instruction: task.instruction
        })
        assert.strictEqual(run.stopReason, "no_tool_call")
        assert.strictEqual(run.steps, commands.length + 1)
        assert.strictEqual(run.toolCalls, commands.length)
        assert.strictEqual(run.toolFailures, 0)
        // The requests are well-formed chat completions: the tool offered, the key sent, each result answering its call.
        const last = server.exchanges.at(-1)!
        assert.strictEqual(last.authorization, "Bearer session-1")
        assert.deepStrictEqual(last.request.tools, [BashAgent.bashTool])
        const toolMessages = (last.request.messages as unknown as ReadonlyArray<BashAgent.ChatMessage>).filter((m) =>
          m.role === "tool"
        )
        assert.deepStrictEqual(toolMessages.map((m) => m.tool_call_id), commands.map((_, i) => `call_${i}`))
        assert.isTrue(toolMessages.every((m) => (m.content ?? "").startsWith("exit code 0")))
        const verdict = yield* sandbox.verify
        assert.deepStrictEqual(verdict.reward, { _tag: "Scored", reward: 1, rewards: { reward: 1 } })
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive("stops at the step limit, counting failed and malformed calls", () =>
    Effect.gen(function*() {
      const suite = yield* shippedSuite
      const task = suite.train[0]
      // A failing command, then malformed arguments for ever (the last reply repeats).
      const server = yield* ScriptedEndpoint.make([
        ScriptedEndpoint.bash("exit 3", null),
        { content: null, toolCalls: [{ name: "bash", arguments: "{not json" }] }
      ])
      const sandbox = yield* Sandbox.make({ task })
      const run = yield* BashAgent.run(sandbox, {
        baseUrl: `${server.url}/v1`,
        apiKey: "k",
        model: "scripted",
        instruction: task.instruction,
        maxSteps: 3
      })
      assert.strictEqual(run.stopReason, "step_limit")
      assert.strictEqual(run.steps, 3)
      assert.strictEqual(run.toolCalls, 3)
      assert.strictEqual(run.toolFailures, 3)
      assert.include(run.messages.at(-1)!.content ?? "", "must be JSON")
      assert.strictEqual((yield* sandbox.verify).reward._tag, "Scored")
    }).pipe(Effect.provide(NodeContext.layer)), 60_000)

  it.scopedLive("a refused request is an AgentError naming the endpoint", () =>
    Effect.gen(function*() {
      const suite = yield* shippedSuite
      const sandbox = yield* Sandbox.make({ task: suite.train[0] })
      const error = yield* Effect.flip(BashAgent.run(sandbox, {
        baseUrl: "http://127.0.0.1:9/v1",
        apiKey: "k",
        model: "m",
        instruction: "x",
        requestTimeout: "5 seconds"
      }))
      assert.include(error.message, "http://127.0.0.1:9/v1")
    }).pipe(Effect.provide(NodeContext.layer)), 30_000)

  it.scopedLive(
    "against the real policy server over a tiny model: gets completions and ends cleanly",
    () =>
      Effect.gen(function*() {
        const { server } = yield* tinyPolicy(3)
        const suite = yield* shippedSuite
        const task = suite.heldOut[0]
        const sandbox = yield* Sandbox.make({ task })
        const run = yield* BashAgent.run(sandbox, {
          baseUrl: `${server.url}/v1`,
          apiKey: "none",
          model: "tiny",
          instruction: task.instruction,
          maxSteps: 2,
          maxTokens: 16
        })
        assert.isAtLeast(run.steps, 1)
        assert.isAtMost(run.steps, 2)
        assert.include(["no_tool_call", "step_limit"], run.stopReason)
        assert.strictEqual(run.messages[2].role, "assistant")
        const verdict = yield* sandbox.verify
        assert.deepStrictEqual(verdict.reward, { _tag: "Scored", reward: 0, rewards: { reward: 0 } })
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )
})
