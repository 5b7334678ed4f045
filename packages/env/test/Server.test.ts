import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer } from "effect"
import * as Server from "../src/Server.js"
import { counter } from "./fixtures/Counter.js"
import { http } from "./fixtures/Raw.js"

describe("Server HTTP", () => {
  it.scopedLive("serves health, metadata, schema, openapi and stateless reset/step/state", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0 })
      assert.deepStrictEqual((yield* http(`${s.url}/health`)).body, { status: "healthy" })
      assert.strictEqual((yield* http(`${s.url}/metadata`)).body.name, "CounterEnvironment")
      const schema = (yield* http(`${s.url}/schema`)).body
      assert.strictEqual(schema.action.title, "CounterAction")
      assert.strictEqual(schema.action.properties.delta.title, "Delta")
      assert.strictEqual(schema.action.additionalProperties, false)
      assert.deepStrictEqual(schema.action.required, ["delta"])
      assert.strictEqual(schema.state.title, "State")
      const openapi = (yield* http(`${s.url}/openapi.json`)).body
      assert.strictEqual(openapi.info.version, "1.0.0")
      assert.includeMembers(Object.keys(openapi.paths), ["/reset", "/step", "/state"])

      const reset = yield* http(`${s.url}/reset`, { method: "POST", body: JSON.stringify({ seed: 7 }) })
      assert.deepStrictEqual(reset, {
        status: 200,
        body: { observation: { total: 0, secret: 7 }, reward: 0, done: false }
      })
      const empty = yield* http(`${s.url}/reset`, { method: "POST" })
      assert.strictEqual(empty.status, 200)
      const badSeed = yield* http(`${s.url}/reset`, { method: "POST", body: JSON.stringify({ seed: -1 }) })
      assert.strictEqual(badSeed.status, 422)
      assert.deepStrictEqual(badSeed.body.detail[0].loc, ["body", "seed"])
      // Stateless: each step acts on a fresh, never-reset instance.
      for (let i = 0; i < 2; i++) {
        const step = yield* http(`${s.url}/step`, { method: "POST", body: JSON.stringify({ action: { delta: 2 } }) })
        assert.deepStrictEqual(step.body, { observation: { total: 2, secret: null }, reward: 0, done: false })
      }
      const bad = yield* http(`${s.url}/step`, { method: "POST", body: JSON.stringify({ action: { delta: "x" } }) })
      assert.strictEqual(bad.status, 422)
      assert.deepStrictEqual(bad.body.detail[0].loc, ["body", "action", "delta"])
      const failing = yield* http(`${s.url}/step`, { method: "POST", body: JSON.stringify({ action: { delta: 13 } }) })
      assert.strictEqual(failing.status, 500)
      assert.deepStrictEqual((yield* http(`${s.url}/state`)).body, { episode_id: null, step_count: 0, total: 0 })
      assert.strictEqual((yield* http(`${s.url}/nope`)).status, 404)
      assert.strictEqual((yield* http(`${s.url}/reset`)).status, 405)
    }))

  it.scopedLive("MCP over POST /mcp: tools, errors, sessions", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, maxConcurrentEnvs: 1 })
      const rpc = (body: unknown) =>
        Effect.map(
          http(`${s.url}/mcp`, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) }),
          (r) => r.body
        )
      const list = yield* rpc({ jsonrpc: "2.0", method: "tools/list", id: 1 })
      assert.deepStrictEqual(list.result.tools.map((t: any) => t.name), ["add"])
      assert.strictEqual(list.id, 1)
      assert.notProperty(list, "error")
      const call = yield* rpc({
        jsonrpc: "2.0",
        method: "tools/call",
        params: { name: "add", arguments: { x: 3 } },
        id: "a"
      })
      assert.deepStrictEqual(call, {
        jsonrpc: "2.0",
        id: "a",
        result: {
          content: [{ type: "text", text: "3" }],
          structured_content: { result: 3 },
          meta: null,
          data: 3,
          is_error: false
        }
      })
      assert.deepStrictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: { name: "nope" }, id: 2 })).error,
        { code: -32602, message: "Tool not found: nope", data: null }
      )
      assert.strictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "tools/call", params: {}, id: 2 })).error.message,
        "Missing 'name' in params"
      )
      assert.deepStrictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "x/y", id: 3 })).error.message,
        "Method not found: x/y"
      )
      assert.strictEqual((yield* rpc("{not json")).error.code, -32700)
      const invalid = yield* rpc({ jsonrpc: "1.0", method: "tools/list", id: 4 })
      assert.strictEqual(invalid.error.code, -32600)
      assert.isTrue(invalid.error.message.startsWith("Invalid request: "))
      assert.strictEqual((yield* rpc({})).jsonrpc, "2.0")
      assert.strictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "tools/list", params: [1], id: 5 })).error.message,
        "Params must be an object"
      )

      // Sessions: state persists across calls, the slot is held, close frees it.
      const created = yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 6 })
      const sid = created.result.session_id
      assert.strictEqual(yield* s.activeSessions, 1)
      const full = yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 7 })
      assert.deepStrictEqual(full.error, {
        code: -32000,
        message: "Server at capacity: 1/1 sessions active. Cannot accept new connections.",
        data: { active_sessions: 1, max_sessions: 1 }
      })
      yield* rpc({
        jsonrpc: "2.0",
        method: "tools/call",
        params: { name: "add", arguments: { x: 2 }, session_id: sid },
        id: 8
      })
      const again = yield* rpc({
        jsonrpc: "2.0",
        method: "tools/call",
        params: { name: "add", arguments: { x: 2 }, session_id: sid },
        id: 9
      })
      assert.strictEqual(again.result.data, 4)
      assert.deepStrictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: sid }, id: 10 })).result,
        { session_id: sid, closed: true }
      )
      assert.strictEqual(yield* s.activeSessions, 0)
      assert.strictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: sid }, id: 11 })).error
          .message,
        `Unknown session_id: ${sid}`
      )
      assert.strictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: {}, id: 12 })).error.message,
        "Invalid params - 'session_id' is required"
      )
    }))

  it.effect("refuses more than one session for a non-concurrent environment, with OpenEnv's message", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.either(
        Server.serve(counter({ concurrent: false }), { port: 0, maxConcurrentEnvs: 2 })
      )
      assert.isTrue(Either.isLeft(refused))
      if (Either.isLeft(refused)) {
        assert.strictEqual(
          refused.left.message,
          "Environment 'counter_env' is not marked as SUPPORTS_CONCURRENT_SESSIONS. Cannot run with max_concurrent_envs=2. Either set max_concurrent_envs=1 or ensure the environment properly isolates session state and set SUPPORTS_CONCURRENT_SESSIONS=True."
        )
      }
      // MAX_CONCURRENT_ENVS is read through Config; the default for a non-concurrent env is 1.
      const fromEnv = yield* Server.serve(counter(), { port: 0 }).pipe(
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["MAX_CONCURRENT_ENVS", "3"]])))
      )
      assert.strictEqual(fromEnv.maxConcurrentEnvs, 3)
      assert.strictEqual((yield* Server.serve(counter(), { port: 0 })).maxConcurrentEnvs, 8)
      assert.strictEqual((yield* Server.serve(counter({ concurrent: false }), { port: 0 })).maxConcurrentEnvs, 1)
    }).pipe(Effect.scoped, Effect.provide(Layer.empty)))
})
