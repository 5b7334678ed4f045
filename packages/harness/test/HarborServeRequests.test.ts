// `envtrain harness serve` answers a request for a harness or sandbox it does not run with a refusal naming what it
// runs, not with its default agent or a bubblewrap sandbox; the operator's aliases (what OpenEnv's client defaults,
// opencode and e2b, need) map a name and each result says so. Env's real OpenEnv server on a loopback port, called
// over MCP by env's client. The capture proxy's upstream is a closed port, so an accepted rollout fails to generate:
// what is checked is what the result says ran.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client, Server } from "@envtrain/env"
import { Duration, Effect } from "effect"
import * as HarborServe from "../src/HarborServe.js"
import * as HarnessSession from "../src/HarnessSession.js"
import { captureProxy, shippedSuite } from "./fixtures.js"

const harbor = (aliases?: HarborServe.HarborServeOptions["aliases"]) =>
  Effect.gen(function*() {
    const definition = yield* HarborServe.definition({
      suite: yield* shippedSuite,
      proxy: yield* captureProxy("http://127.0.0.1:9"),
      llmUrl: "http://127.0.0.1:9",
      model: "tiny",
      agents: [HarnessSession.oracleAgent()],
      ...(aliases === undefined ? {} : { aliases })
    })
    const server = yield* Server.serve(definition, { port: 0 })
    const client = yield* Client.make({ url: server.url, messageTimeout: Duration.seconds(60) })
    yield* client.reset()
    return (args: Readonly<Record<string, unknown>>) =>
      Effect.map(
        client.callTool("run_rollout", { split: "train", task_index: 0, ...args }),
        (r) => JSON.parse(String((r.content[0] as { text: string }).text)) as Record<string, any>
      )
  })

describe("harness serve: what a rollout request asks for", () => {
  it.scopedLive(
    "a harness or sandbox the server does not run is refused, naming what it runs and the alias flag",
    () =>
      Effect.gen(function*() {
        const run = yield* harbor()
        // OpenEnv's client defaults.
        const opencode = yield* run({ harness: "opencode", sandbox: "bubblewrap" })
        assert.strictEqual(opencode.ok, false)
        assert.strictEqual(
          opencode.error,
          "harness \"opencode\" is not available: this server runs oracle (pass harness=\"oracle\", or the server's " +
            "operator maps the name with --harness-alias opencode=oracle)"
        )
        const e2b = yield* run({ harness: "oracle", sandbox: "e2b" })
        assert.strictEqual(e2b.ok, false)
        assert.strictEqual(
          e2b.error,
          "sandbox \"e2b\" is not available: envtrain runs bubblewrap sandboxes (pass sandbox=\"bubblewrap\", or the " +
            "server's operator maps the name with --sandbox-alias e2b=bubblewrap)"
        )
        // An argument of the wrong type is named, not read as the default (task 0, the default harness).
        const typed = yield* run({ task_index: "3", harness: 5 })
        assert.strictEqual(typed.ok, false)
        assert.strictEqual(typed.error, "task_index must be an integer, got \"3\"; harness must be a string, got 5")
        // What it runs, asked for by name or left to the server: nothing mapped.
        for (const args of [{ harness: "oracle", sandbox: "bubblewrap" }, { harness: "", sandbox: "" }]) {
          const ran = yield* run(args)
          assert.deepStrictEqual([ran.harness, ran.sandbox, ran.param_fixes], ["oracle", "bubblewrap", []])
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    { timeout: 120_000 }
  )

  it.scopedLive(
    "with the operator's aliases the names run as what they map to, and param_fixes says so",
    () =>
      Effect.gen(function*() {
        const run = yield* harbor({ harness: { opencode: "oracle" }, sandbox: { e2b: "bubblewrap" } })
        const mapped = yield* run({ harness: "opencode", sandbox: "e2b" })
        assert.deepStrictEqual([mapped.harness, mapped.sandbox], ["oracle", "bubblewrap"])
        assert.deepStrictEqual(mapped.param_fixes, [
          "harness \"opencode\" ran as \"oracle\" (the server's --harness-alias)",
          "sandbox \"e2b\" ran as \"bubblewrap\" (the server's --sandbox-alias)"
        ])
        // An alias cannot name what the server does not run.
        const bad = yield* Effect.flip(harbor({ harness: { opencode: "claude-code" } }))
        assert.strictEqual(
          bad.message,
          "--harness-alias opencode=claude-code: this server has no harness \"claude-code\" (it runs oracle)"
        )
      }).pipe(Effect.provide(NodeContext.layer)),
    { timeout: 120_000 }
  )
})
