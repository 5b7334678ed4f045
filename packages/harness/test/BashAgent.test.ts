// The built-in bash-tool agent. A real loopback HTTP server speaking OpenAI chat completions replies with fixed
// responses that call the task's solver commands as tool calls: the loop runs them in a real sandbox, stops on a
// reply with no tool call, and the verifier gives 1; a server that never stops calling tools meets the step limit.
// Then the real policy server over a tiny model (which solves nothing): the loop gets completions and ends cleanly.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import * as BashAgent from "../src/BashAgent.js"
import * as HarborTask from "../src/HarborTask.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import * as Sandbox from "../src/Sandbox.js"

type Body = { messages: Array<BashAgent.ChatMessage>; tools: Array<unknown>; model: string }

// Replies to the n-th call (n = assistant messages so far) with reply(n); keeps every request body.
const scriptedServer = (reply: (n: number) => { content: string | null; tool_calls?: Array<BashAgent.ToolCall> }) =>
  Effect.acquireRelease(
    Effect.async<{ url: string; requests: Array<{ body: Body; auth: string | undefined }>; close: Http.Server }>(
      (resume) => {
        const requests: Array<{ body: Body; auth: string | undefined }> = []
        const server = Http.createServer((req, res) => {
          let text = ""
          req.on("data", (c: Buffer) => (text += c.toString()))
          req.on("end", () => {
            const body = JSON.parse(text) as Body
            requests.push({ body, auth: req.headers.authorization })
            const n = body.messages.filter((m) => m.role === "assistant").length
            const message = { role: "assistant", ...reply(n) }
            res.setHeader("content-type", "application/json")
            res.end(JSON.stringify({
              id: `chatcmpl-${n}`,
              object: "chat.completion",
              created: 0,
              model: body.model,
              choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }]
            }))
          })
        })
        server.listen(0, "127.0.0.1", () =>
          resume(Effect.succeed({
            url: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}/v1`,
            requests,
            close: server
          })))
      }
    ),
    (s) =>
      Effect.async<void>((resume) => {
        s.close.close(() => resume(Effect.void))
      })
  )

const bashCall = (n: number, command: string): BashAgent.ToolCall => ({
  id: `call_${n}`,
  type: "function",
  function: { name: "bash", arguments: JSON.stringify({ command }) }
})

describe("BashAgent", () => {
  it.scopedLive(
    "runs the solver's commands given as tool calls, stops on no tool call, and the verifier gives 1",
    () =>
      Effect.gen(function*() {
        const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
        const task = suite.train.find((t) => t.name === "copy-file")!
        const commands = task.solverCommands
        const server = yield* scriptedServer((n) =>
          n < commands.length ? { content: null, tool_calls: [bashCall(n, commands[n])] } : { content: "Done." }
        )
        const sandbox = yield* Sandbox.make({ task })
        const run = yield* BashAgent.run(sandbox, {
          baseUrl: server.url,
          apiKey: "session-1",
          model: "scripted",
          instruction: task.instruction
        })
        assert.strictEqual(run.stopReason, "no_tool_call")
        assert.strictEqual(run.steps, commands.length + 1)
        assert.strictEqual(run.toolCalls, commands.length)
        assert.strictEqual(run.toolFailures, 0)
        // The requests are well-formed chat completions: the tool offered, the key sent, each result answering its call.
        const last = server.requests.at(-1)!
        assert.strictEqual(last.auth, "Bearer session-1")
        assert.deepStrictEqual(last.body.tools, [BashAgent.bashTool])
        const toolMessages = last.body.messages.filter((m) => m.role === "tool")
        assert.deepStrictEqual(toolMessages.map((m) => m.tool_call_id), commands.map((_, i) => `call_${i}`))
        assert.isTrue(toolMessages.every((m) => (m.content ?? "").startsWith("exit code 0")))
        const verdict = yield* sandbox.verify
        assert.deepStrictEqual(verdict.reward, { _tag: "Scored", reward: 1, rewards: { reward: 1 } })
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive("stops at the step limit, counting failed and malformed calls", () =>
    Effect.gen(function*() {
      const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
      const task = suite.train[0]
      const server = yield* scriptedServer((n) => ({
        content: null,
        tool_calls: [
          n === 0
            ? bashCall(n, "exit 3")
            : { id: `call_${n}`, type: "function", function: { name: "bash", arguments: "{not json" } }
        ]
      }))
      const sandbox = yield* Sandbox.make({ task })
      const run = yield* BashAgent.run(sandbox, {
        baseUrl: server.url,
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
      const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
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
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* Checkpoint.save(dir, yield* Checkpoint.makeModel("tiny", 3))
        const server = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
        const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
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
