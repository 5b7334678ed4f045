// mini-swe-agent (the PyPI package in .venv), unmodified, inside envtrain's bubblewrap sandbox, reaching the model
// only through the sandbox's one endpoint. Against a real loopback server replying with fixed OpenAI responses that
// call the task's solver commands and then its submit command, it executes them and the verifier gives 1; against
// envtrain's own policy server over a tiny model (which solves nothing), it starts, makes its calls, and exits.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint } from "@envtrain/gpu"
import { HarborTask, MiniSweAgent, PolicyServerProcess, Sandbox, ScriptedEndpoint } from "@envtrain/harness"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Python from "../src/Python.js"

const venv = `${Python.root}.venv`

const trajectory = (sandbox: Sandbox.Sandbox) =>
  JSON.parse(Fs.readFileSync(`${sandbox.workspace}/../logs/agent/mini-swe-agent.traj.json`, "utf8")) as {
    info: { exit_status: string; model_stats: { api_calls: number } }
  }

describe("mini-swe-agent in envtrain's sandbox", () => {
  it.scopedLive("executes the tool calls it is given and submits; the verifier gives 1", () =>
    Effect.gen(function*() {
      const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
      const task = suite.train.find((t) => t.name === "fix-config-typo")!
      // A real HTTP server speaking chat completions: the n-th call (n = assistant messages so far) runs the n-th
      // command, the last submits.
      const server = yield* ScriptedEndpoint.make(MiniSweAgent.solverScript(task.solverCommands))
      const sandbox = yield* Sandbox.make({
        task,
        endpoint: { url: server.url },
        readOnlyBinds: yield* MiniSweAgent.binds(venv)
      })
      const r = yield* MiniSweAgent.run(sandbox, {
        task,
        model: "scripted",
        apiKey: "capture-session-7",
        stepLimit: 10
      })
      assert.strictEqual(r.exitCode, 0, r.stderr)
      assert.strictEqual(server.exchanges.length, task.solverCommands.length + 1)
      for (const q of server.exchanges) {
        assert.strictEqual(q.path, "/v1/chat/completions")
        assert.strictEqual(q.authorization, "Bearer capture-session-7")
        assert.strictEqual(q.request.model, "scripted")
        const tools = q.request.tools as ReadonlyArray<{ function: { name: string } }> | undefined
        assert.deepStrictEqual(tools?.map((t) => t.function.name), ["bash"])
      }
      // Each later request carries the previous command's observation back.
      assert.isTrue(server.exchanges.at(-1)!.request.messages.some((m) => m.role === "tool"))
      assert.strictEqual(trajectory(sandbox).info.exit_status, "Submitted")
      const verdict = yield* sandbox.verify
      assert.deepStrictEqual(verdict.reward, { _tag: "Scored", reward: 1, rewards: { reward: 1 } })
    }).pipe(Effect.provide(NodeContext.layer)), 180_000)

  it.scopedLive(
    "against envtrain serve-policy over a tiny model: starts, calls the model, exits at its step limit",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* Checkpoint.save(dir, yield* Checkpoint.makeModel("tiny", 3))
        const server = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
        const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
        const task = suite.heldOut[0]
        const sandbox = yield* Sandbox.make({
          task,
          endpoint: { url: server.url },
          readOnlyBinds: yield* MiniSweAgent.binds(venv)
        })
        // Greedy: a sampled answer's command output could push the second call past the tiny model's 2,048-token
        // context (the server refuses it with 400), so the run would depend on the draw.
        const r = yield* MiniSweAgent.run(sandbox, {
          task,
          model: "tiny",
          apiKey: "none",
          stepLimit: 2,
          maxTokens: 16,
          temperature: 0
        })
        assert.strictEqual(r.exitCode, 0, r.stderr)
        const t = trajectory(sandbox)
        assert.strictEqual(t.info.model_stats.api_calls, 2)
        assert.strictEqual(t.info.exit_status, "LimitsExceeded")
        const verdict = yield* sandbox.verify
        assert.deepStrictEqual(verdict.reward, { _tag: "Scored", reward: 0, rewards: { reward: 0 } })
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )
})
