import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import * as Server from "../src/Server.js"
import { counter } from "./fixtures/Counter.js"
import { eventually, http, raw } from "./fixtures/Raw.js"

const wsUrl = (s: Server.RunningServer, path = "/ws") => s.url.replace("http://", "ws://") + path
const zeroSessions = (s: Server.RunningServer) =>
  eventually(Effect.map(s.activeSessions, (n) => n === 0), "zero active sessions")

describe("Server /ws", () => {
  it.scopedLive("reset / step / state / close with the observation envelope (metadata never sent)", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0 })
      const c = yield* raw(wsUrl(s))
      yield* c.send({ type: "reset", data: { seed: 3, unknown_kwarg: 1 } })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"observation","data":{"observation":{"total":0,"secret":3},"reward":0,"done":false}}`
      )
      yield* c.send({ type: "step", data: { delta: 2 } })
      assert.deepStrictEqual(yield* c.next, {
        type: "observation",
        data: { observation: { total: 2, secret: 3 }, reward: 0, done: false }
      })
      yield* c.send({ type: "state" })
      assert.deepStrictEqual(yield* c.next, {
        type: "state",
        data: { episode_id: "episode-1", step_count: 1, total: 2 }
      })
      yield* c.send({ type: "step", data: { delta: 3 } })
      assert.deepStrictEqual((yield* c.next).data, { observation: { total: 5, secret: 3 }, reward: 1, done: true })
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* c.send({ type: "close" })
      assert.strictEqual(yield* c.closed, 1000)
      yield* zeroSessions(s)
    }))

  it.scopedLive("error frames: exact codes and texts, and the session continues", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0 })
      const c = yield* raw(wsUrl(s))
      // Python's json.loads texts, as OpenEnv sends them.
      yield* c.sendText("{nope")
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"error","data":{"message":"Invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)","code":"INVALID_JSON"}}`
      )
      yield* c.sendText(`{"type":"step",\n"data":}`)
      assert.strictEqual((yield* c.next).data.message, "Invalid JSON: Expecting value: line 2 column 8 (char 23)")
      // Python's json.loads reads NaN; pydantic's model_dump_json writes it back as null.
      yield* c.sendText(`{"type":"reset","data":{"seed":NaN}}`)
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"observation","data":{"observation":{"total":0,"secret":null},"reward":0,"done":false}}`
      )
      yield* c.send({ type: "jump" })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"error","data":{"message":"Unknown message type: jump","code":"UNKNOWN_TYPE"}}`
      )
      yield* c.send({ data: {} })
      assert.strictEqual((yield* c.next).data.message, "Unknown message type: ")
      // pydantic's `e.errors()` as OpenEnv sends them: `input` (for `missing`, the whole message) and `url`.
      yield* c.send({ type: "state", data: {} })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"error","data":{"message":"Invalid message","code":"VALIDATION_ERROR","errors":[{"type":"extra_forbidden","loc":["data"],"msg":"Extra inputs are not permitted","input":{},"url":"https://errors.pydantic.dev/2.13/v/extra_forbidden"}]}}`
      )
      yield* c.send({ type: "step" })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"error","data":{"message":"Invalid message","code":"VALIDATION_ERROR","errors":[{"type":"missing","loc":["data"],"msg":"Field required","input":{"type":"step"},"url":"https://errors.pydantic.dev/2.13/v/missing"}]}}`
      )
      yield* c.send({ type: "step", data: { delta: "x", extra: 1 } })
      const bad = yield* c.next
      assert.strictEqual(bad.data.code, "VALIDATION_ERROR")
      assert.sameDeepMembers(bad.data.errors, [
        {
          type: "int_type",
          loc: ["delta"],
          msg: "Input should be a valid integer",
          input: "x",
          url: "https://errors.pydantic.dev/2.13/v/int_type"
        },
        {
          type: "extra_forbidden",
          loc: ["extra"],
          msg: "Extra inputs are not permitted",
          input: 1,
          url: "https://errors.pydantic.dev/2.13/v/extra_forbidden"
        }
      ])
      yield* c.send({ type: "step", data: {} })
      assert.deepStrictEqual((yield* c.next).data.errors, [{
        type: "missing",
        loc: ["delta"],
        msg: "Field required",
        input: {},
        url: "https://errors.pydantic.dev/2.13/v/missing"
      }])
      // A non-string `type` is shown as Python formats it.
      yield* c.send({ type: null })
      assert.strictEqual((yield* c.next).data.message, "Unknown message type: None")
      yield* c.send({ type: ["a", 1, true] })
      assert.strictEqual((yield* c.next).data.message, "Unknown message type: ['a', 1, True]")
      // Valid JSON that is not an object fails outside OpenEnv's per-message handling: SESSION_ERROR, then close.
      for (const [frame, type] of [["[1, 2]", "list"], ["1.0", "float"], ["7", "int"], ["null", "NoneType"]]) {
        const other = yield* raw(wsUrl(s))
        yield* other.sendText(frame)
        assert.strictEqual(
          yield* other.nextText,
          `{"type":"error","data":{"message":"'${type}' object has no attribute 'get'","code":"SESSION_ERROR"}}`
        )
        assert.strictEqual(yield* other.closed, 1000)
      }
      yield* c.send({ type: "step", data: { delta: 13 } })
      assert.strictEqual(
        yield* c.nextText,
        `{"type":"error","data":{"message":"unlucky delta 13","code":"EXECUTION_ERROR"}}`
      )
      // Still serving this session.
      yield* c.send({ type: "reset" })
      assert.strictEqual((yield* c.next).type, "observation")
    }))

  it.scopedLive("N sessions are isolated, the N+1th gets CAPACITY_REACHED and close 1000, closing frees a slot at once", () =>
    Effect.gen(function*() {
      const n = 4
      const s = yield* Server.serve(counter({ target: 1000 }), { port: 0, maxConcurrentEnvs: n })
      const clients = yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), () => raw(wsUrl(s)))
      yield* Effect.forEach(clients, (c, i) =>
        Effect.gen(function*() {
          yield* c.send({ type: "reset", data: { seed: i } })
          yield* c.next
          for (let k = 0; k <= i; k++) {
            yield* c.send({ type: "step", data: { delta: 10 } })
            yield* c.next
          }
        }), { concurrency: "unbounded" })
      const states = yield* Effect.forEach(clients, (c) => Effect.zipRight(c.send({ type: "state" }), c.next))
      assert.deepStrictEqual(states.map((st) => [st.data.step_count, st.data.total]), [[1, 10], [2, 20], [3, 30], [
        4,
        40
      ]])
      assert.strictEqual(yield* s.activeSessions, n)

      const extra = yield* raw(wsUrl(s))
      assert.strictEqual(
        yield* extra.nextText,
        `{"type":"error","data":{"message":"Server at capacity: 4/4 sessions active. Cannot accept new connections.","code":"CAPACITY_REACHED","active_sessions":4,"max_sessions":4}}`
      )
      assert.strictEqual(yield* extra.closed, 1000)

      yield* clients[0].send({ type: "close" })
      yield* clients[0].closed
      assert.strictEqual(yield* s.activeSessions, n - 1)
      const replacement = yield* raw(wsUrl(s))
      yield* replacement.send({ type: "reset" })
      assert.strictEqual((yield* replacement.next).type, "observation")
    }))

  it.scopedLive("the idle timeout frees the slot and closes the socket", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, sessionTimeout: "300 millis" })
      const idle = yield* raw(wsUrl(s))
      const busy = yield* raw(wsUrl(s))
      yield* idle.send({ type: "reset" })
      yield* idle.next
      assert.strictEqual(yield* s.activeSessions, 2)
      // `busy` keeps stepping; `idle` does nothing.
      for (let i = 0; i < 8; i++) {
        yield* busy.send({ type: "reset" })
        yield* busy.next
        yield* Effect.sleep("100 millis")
      }
      const notice = yield* idle.next
      assert.strictEqual(notice.data.code, "SESSION_ERROR")
      assert.strictEqual(yield* idle.closed, 1000)
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* busy.send({ type: "state" })
      assert.strictEqual((yield* busy.next).type, "state")
    }))

  it.scopedLive("binary, oversized and abruptly abandoned sockets close only themselves and leak no slot", () =>
    Effect.gen(function*() {
      const live = { count: 0 }
      const s = yield* Server.serve(counter({ live, slowMs: 3000 }), { port: 0, maxFrameBytes: 1024 })
      const bystander = yield* raw(wsUrl(s))
      yield* bystander.send({ type: "reset" })
      yield* bystander.next

      const binary = yield* raw(wsUrl(s))
      yield* binary.sendText(Buffer.from(JSON.stringify({ type: "reset" })), true)
      assert.strictEqual((yield* binary.next).data.code, "SESSION_ERROR")
      assert.strictEqual(yield* binary.closed, 1000)

      const big = yield* raw(wsUrl(s))
      yield* big.sendText(JSON.stringify({ type: "step", data: { delta: 1, note: "x".repeat(4096) } }))
      assert.strictEqual(yield* big.closed, 1009)

      const abandoned = yield* raw(wsUrl(s))
      yield* abandoned.send({ type: "step", data: { delta: 99 } })
      yield* Effect.sleep("50 millis")
      abandoned.ws.terminate()

      // Freed well before the slow step (3 s) would have finished.
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 1), "only the bystander left")
      yield* eventually(Effect.sync(() => live.count === 1), "abandoned instances closed")
      yield* bystander.send({ type: "step", data: { delta: 1 } })
      assert.deepStrictEqual((yield* bystander.next).data.observation, { total: 1, secret: null })
    }))

  it.scopedLive("FACTORY_ERROR closes the session with OpenEnv's text", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter({ failFactory: true }), { port: 0 })
      const c = yield* raw(wsUrl(s))
      assert.deepStrictEqual(yield* c.next, {
        type: "error",
        data: {
          message: "Environment factory 'counter_env' failed to create instance.",
          code: "FACTORY_ERROR",
          factory_name: "counter_env"
        }
      })
      assert.strictEqual(yield* c.closed, 1000)
      yield* zeroSessions(s)
    }))

  it.scopedLive("MCP inside /ws and over WS /mcp", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0 })
      const c = yield* raw(wsUrl(s))
      yield* c.send({ type: "reset" })
      yield* c.next
      yield* c.send({
        type: "mcp",
        data: { jsonrpc: "2.0", method: "tools/call", params: { name: "add", arguments: { x: 4 } }, id: 1 }
      })
      assert.strictEqual((yield* c.next).data.result.data, 4)
      // Interleaves with step on the same instance.
      yield* c.send({ type: "step", data: { delta: 1 } })
      assert.strictEqual((yield* c.next).data.observation.total, 5)
      yield* c.send({ type: "mcp", data: { jsonrpc: "2.0", method: "openenv/session/create", id: 2 } })
      const own = (yield* c.next).data.result.session_id
      yield* c.send({
        type: "mcp",
        data: { jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: own }, id: 3 }
      })
      assert.deepStrictEqual((yield* c.next).data.error, {
        code: -32600,
        message: "Cannot close active WebSocket-managed session via MCP method",
        data: null
      })
      yield* c.send({ type: "mcp", data: { method: "tools/list" } })
      const invalid = yield* c.next
      assert.strictEqual(invalid.type, "mcp")
      assert.strictEqual(invalid.data.error.code, -32600)

      const m = yield* raw(wsUrl(s, "/mcp"))
      yield* m.send({ jsonrpc: "2.0", method: "tools/list", id: 7 })
      const listed = yield* m.next
      assert.strictEqual(listed.id, 7)
      assert.strictEqual(listed.result.tools[0].name, "add")
      yield* m.sendText("nope")
      assert.deepStrictEqual((yield* m.next).error, {
        code: -32700,
        message: "Parse error: Expecting value: line 1 column 1 (char 0)",
        data: null
      })
      // A binary frame ends the session as OpenEnv's "any other exception" does on WS /mcp: -32000, then close.
      yield* m.sendText(Buffer.from("{}"), true)
      assert.strictEqual((yield* m.next).error.code, -32000)
      assert.strictEqual(yield* m.closed, 1000)
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 1), "the binary-framed MCP session freed")
    }))

  it.scopedLive("/ws?session_id= attaches to an HTTP-MCP session (MCPToolClient's production mode), at capacity too", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, maxConcurrentEnvs: 1 })
      const rpc = (body: unknown) =>
        Effect.map(http(`${s.url}/mcp`, { method: "POST", body: JSON.stringify(body) }), (r) => r.body)
      const sid = (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 1 })).result.session_id
      const call = (id: number) =>
        rpc({ jsonrpc: "2.0", method: "tools/call", params: { name: "add", arguments: { x: 2 }, session_id: sid }, id })
      assert.strictEqual((yield* call(2)).result.data, 2)
      // The socket takes no slot of its own and drives the same instance as the HTTP calls.
      const c = yield* raw(`${wsUrl(s)}?session_id=${sid}`)
      yield* c.send({ type: "step", data: { delta: 1 } })
      assert.strictEqual((yield* c.next).data.observation.total, 3)
      assert.strictEqual((yield* call(3)).result.data, 5)
      assert.strictEqual(yield* s.activeSessions, 1)
      // One socket per session; unknown ids are refused with OpenEnv's texts, then the socket closes.
      const second = yield* raw(`${wsUrl(s)}?session_id=${sid}`)
      assert.deepStrictEqual((yield* second.next).data, {
        message: `Session ${sid} already has an attached WebSocket`,
        code: "SESSION_ERROR"
      })
      assert.strictEqual(yield* second.closed, 1000)
      const unknown = yield* raw(`${wsUrl(s)}?session_id=nope`)
      assert.strictEqual((yield* unknown.next).data.message, "Unknown session_id: nope")
      // A close while attached is deferred to the detach; the socket's own close does not end the session.
      assert.deepStrictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: sid }, id: 4 })).result,
        { session_id: sid, closed: false, closing: true }
      )
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* c.send({ type: "close" })
      assert.strictEqual(yield* c.closed, 1000)
      yield* zeroSessions(s)
      // Without a pending close the session outlives its socket.
      const kept = (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/create", id: 5 })).result.session_id
      const d = yield* raw(`${wsUrl(s)}?session_id=${kept}`)
      yield* d.send({ type: "close" })
      assert.strictEqual(yield* d.closed, 1000)
      assert.strictEqual(yield* s.activeSessions, 1)
      assert.deepStrictEqual(
        (yield* rpc({ jsonrpc: "2.0", method: "openenv/session/close", params: { session_id: kept }, id: 6 })).result,
        { session_id: kept, closed: true }
      )
      assert.strictEqual(yield* s.activeSessions, 0)
    }))

  it.scopedLive("keep-alive: a peer that stops answering pings is dropped and its slot freed", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, pingInterval: "100 millis" })
      const healthy = yield* raw(wsUrl(s))
      const dead = yield* raw(wsUrl(s))
      yield* dead.send({ type: "reset" })
      yield* dead.next
      // Stop reading: the peer never sees the pings, so it never answers them.
      dead.ws.pause()
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 1), "the silent peer was dropped")
      yield* healthy.send({ type: "reset" })
      assert.strictEqual((yield* healthy.next).type, "observation")
    }))

  it.scopedLive("idle HTTP-MCP sessions are reaped too", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, sessionTimeout: "200 millis" })
      const created = yield* http(`${s.url}/mcp`, {
        method: "POST",
        body: JSON.stringify({ jsonrpc: "2.0", method: "openenv/session/create", id: 1 })
      })
      assert.isString(created.body.result.session_id)
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* zeroSessions(s)
    }))

  it.scopedLive("an HTTP-MCP session with an attached socket is not reaped; once detached it is", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, sessionTimeout: "200 millis" })
      const created = yield* http(`${s.url}/mcp`, {
        method: "POST",
        body: JSON.stringify({ jsonrpc: "2.0", method: "openenv/session/create", id: 1 })
      })
      const c = yield* raw(`${wsUrl(s)}?session_id=${created.body.result.session_id}`)
      yield* Effect.sleep("700 millis")
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* c.send({ type: "step", data: { delta: 1 } })
      assert.strictEqual((yield* c.next).data.observation.total, 1)
      yield* c.send({ type: "close" })
      assert.strictEqual(yield* c.closed, 1000)
      yield* zeroSessions(s)
    }))

  it.scopedLive("graceful shutdown closes every session", () =>
    Effect.gen(function*() {
      const live = { count: 0 }
      const serverScope = yield* Scope.make()
      const s = yield* Server.serve(counter({ live }), { port: 0 }).pipe(Scope.extend(serverScope))
      const a = yield* raw(wsUrl(s))
      const b = yield* raw(wsUrl(s))
      yield* a.send({ type: "reset" })
      yield* a.next
      yield* b.send({ type: "reset" })
      yield* b.next
      yield* Scope.close(serverScope, Exit.void)
      assert.strictEqual(yield* a.closed, 1001)
      assert.strictEqual(yield* b.closed, 1001)
      assert.strictEqual(live.count, 0)
    }))
})
