import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, Scope } from "effect"
import * as Net from "node:net"
import { WebSocketServer } from "ws"
import * as Client from "../src/Client.js"
import * as Server from "../src/Server.js"
import * as Wire from "../src/Wire.js"
import { counter, CounterAction, CounterObservation } from "./fixtures/Counter.js"
import { eventually } from "./fixtures/Raw.js"

describe("Client", () => {
  it("follows OpenEnv's URL rules", () => {
    assert.strictEqual(Wire.toWebSocketUrl("http://localhost:8000/"), "ws://localhost:8000/ws")
    assert.strictEqual(Wire.toWebSocketUrl("https://openenv-wordle.hf.space"), "wss://openenv-wordle.hf.space/ws")
    assert.strictEqual(Wire.toWebSocketUrl("127.0.0.1:9"), "ws://127.0.0.1:9/ws")
    assert.strictEqual(Wire.toWebSocketUrl("ws://h/ws"), "ws://h/ws/ws")
  })

  it.scopedLive("typed reset/step/state/tools over one socket", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0 })
      const env = yield* Client.connect({ url: s.url, action: CounterAction, observation: CounterObservation })
      const first = yield* env.reset({ seed: 9 })
      assert.deepStrictEqual(first, { observation: { total: 0, secret: 9 }, reward: 0, done: false })
      assert.isTrue(yield* env.episodeActive)
      const next = yield* env.step({ delta: 5 })
      assert.deepStrictEqual(next, { observation: { total: 5, secret: 9 }, reward: 1, done: true })
      assert.isFalse(yield* env.episodeActive)
      assert.strictEqual((yield* env.state).step_count, 1)
      assert.deepStrictEqual((yield* env.listTools).map((t) => t.name), ["add"])
      assert.strictEqual((yield* env.callTool("add", { x: 2 })).data, 7)
      const missing = yield* Effect.flip(env.callTool("nope", {}))
      assert.strictEqual(missing._tag, "McpError")
      const failed = yield* Effect.flip(env.step({ delta: 13 }))
      assert.strictEqual(failed._tag, "ServerError")
      assert.strictEqual(failed.message, "Server error: unlucky delta 13 (code: EXECUTION_ERROR)")
      assert.strictEqual(yield* s.activeSessions, 1)
      yield* env.close
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 0), "session closed")
    }))

  it.scopedLive("CAPACITY_REACHED is its own retryable error", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter(), { port: 0, maxConcurrentEnvs: 1 })
      const a = yield* Client.connect({ url: s.url })
      yield* a.reset()
      // capacityWait 0: fail at the first refusal instead of waiting for a session.
      const b = yield* Client.make({ url: s.url, capacityWait: 0 })
      const refused = yield* Effect.flip(b.reset())
      assert.strictEqual(refused._tag, "CapacityReachedError")
      if (refused._tag === "CapacityReachedError") {
        assert.isTrue(refused.retryable)
        assert.strictEqual(refused.maxSessions, 1)
      }
      // `connect` sees the refusal at connect time: the server sends it right behind the handshake.
      const c = yield* Effect.flip(Client.connect({ url: s.url, capacityWait: 0 }))
      assert.strictEqual(c._tag, "CapacityReachedError")
      yield* a.close
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 0), "slot freed")
      assert.strictEqual((yield* b.reset()).done, false)
      assert.strictEqual(yield* s.activeSessions, 1)
      const d = yield* Client.connect({ url: s.url, capacityWait: 0 }).pipe(Effect.flip)
      assert.strictEqual(d._tag, "CapacityReachedError")
    }))

  it.scopedLive("a dropped socket mid-episode fails the next step with SessionLostError until reset", () =>
    Effect.gen(function*() {
      const serverScope = yield* Scope.make()
      const s = yield* Server.serve(counter({ target: 100 }), { port: 0 }).pipe(Scope.extend(serverScope))
      const env = yield* Client.make({ url: s.url, messageTimeout: "2 seconds" })
      yield* env.reset()
      yield* env.step({ delta: 1 })
      yield* Scope.close(serverScope, Exit.void)
      const lost = yield* Effect.flip(env.step({ delta: 1 }))
      assert.strictEqual(lost._tag, "SessionLostError")
      // Never continues silently: state fails the same way, and keeps failing.
      assert.strictEqual((yield* Effect.flip(env.state))._tag, "SessionLostError")
      assert.strictEqual((yield* Effect.flip(env.step({ delta: 1 })))._tag, "SessionLostError")
      // A new server on a new port: reset starts a fresh episode on a new socket.
      const s2 = yield* Server.serve(counter(), { port: 0 })
      const env2 = yield* Client.make({ url: s2.url })
      assert.strictEqual((yield* env2.reset()).done, false)
      // Reset on the old client tries a new socket (the old server is gone): a connect error, not a lost session.
      const reconnect = yield* Effect.flip(env.reset())
      assert.strictEqual(reconnect._tag, "ConnectError")
    }))

  it.scopedLive("a timed-out request discards the socket; the episode is lost, never resumed", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter({ target: 100, slowMs: 1500 }), { port: 0 })
      const env = yield* Client.make({ url: s.url, messageTimeout: "300 millis" })
      yield* env.reset()
      const timedOut = yield* Effect.flip(env.step({ delta: 99 }))
      assert.strictEqual(timedOut._tag, "RequestTimeoutError")
      // The late reply must never be read as the answer to this step.
      assert.strictEqual((yield* Effect.flip(env.step({ delta: 1 })))._tag, "SessionLostError")
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 0), "server freed the discarded session")
      const fresh = yield* env.reset()
      assert.deepStrictEqual(fresh.observation, { total: 0, secret: null })
      assert.strictEqual((yield* env.step({ delta: 1 })).observation.total, 1)
    }))

  it.scopedLive("an interrupted request discards the socket", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter({ target: 100, slowMs: 1500 }), { port: 0 })
      const env = yield* Client.make({ url: s.url })
      yield* env.reset()
      const r = yield* env.step({ delta: 99 }).pipe(Effect.timeout("200 millis"), Effect.either)
      assert.isTrue(Either.isLeft(r))
      assert.strictEqual((yield* Effect.flip(env.step({ delta: 1 })))._tag, "SessionLostError")
    }))

  it.scopedLive("concurrent calls on one client take turns; a caller interrupted while waiting strands no one", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(counter({ target: 1000, slowMs: 300 }), { port: 0 })
      const env = yield* Client.make({ url: s.url })
      yield* env.reset()
      const total = (r: Client.StepResult<Record<string, unknown>>) => r.observation.total as number
      // One request at a time on the socket: every step gets its own reply (each total once, none crossed).
      const totals = yield* Effect.forEach(
        Array.from({ length: 20 }, () => env.step({ delta: 1 })),
        (step) => Effect.map(step, total),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual([...totals].sort((a, b) => a - b), Array.from({ length: 20 }, (_, i) => i + 1))
      // A slow step holds the socket; a caller that gives up while waiting for its turn leaves the socket alone,
      // and the next caller gets its turn when the slow step is answered.
      const slow = yield* Effect.fork(env.step({ delta: 99 }))
      yield* Effect.sleep("30 millis")
      const gaveUp = yield* env.step({ delta: 5 }).pipe(Effect.timeout("50 millis"), Effect.either)
      assert.isTrue(Either.isLeft(gaveUp))
      const next = yield* env.step({ delta: 1 })
      assert.strictEqual(total(yield* Fiber.join(slow)), 20 + 99)
      assert.strictEqual(total(next), 20 + 99 + 1)
      assert.isTrue(yield* env.episodeActive)
    }))

  it.scopedLive("client keep-alive: a server that stops answering pings loses the session", () =>
    Effect.gen(function*() {
      // A minimal OpenEnv-speaking server that never answers pings.
      const wss = yield* Effect.acquireRelease(
        Effect.async<WebSocketServer>((resume) => {
          const w: WebSocketServer = new WebSocketServer(
            { host: "127.0.0.1", port: 0, autoPong: false },
            () => resume(Effect.succeed(w))
          )
          w.on(
            "connection",
            (ws) =>
              ws.on(
                "message",
                () =>
                  ws.send(JSON.stringify({ type: "observation", data: { observation: {}, reward: null, done: false } }))
              )
          )
        }),
        (w) => Effect.sync(() => w.close())
      )
      const port = (wss.address() as { port: number }).port
      const env = yield* Client.make({ url: `http://127.0.0.1:${port}`, pingInterval: "100 millis" })
      yield* env.reset()
      yield* Effect.sleep("500 millis")
      assert.strictEqual((yield* Effect.flip(env.step({})))._tag, "SessionLostError")
    }))

  it.scopedLive("the connect timeout bounds a handshake that never completes", () =>
    Effect.gen(function*() {
      const sockets: Array<Net.Socket> = []
      const server = yield* Effect.acquireRelease(
        Effect.async<Net.Server>((resume) => {
          const srv = Net.createServer((socket) => sockets.push(socket)) // accepts, never answers
          srv.listen(0, "127.0.0.1", () => resume(Effect.succeed(srv)))
        }),
        (srv) =>
          Effect.sync(() => {
            for (const socket of sockets) socket.destroy()
            srv.close()
          })
      )
      const port = (server.address() as Net.AddressInfo).port
      const error = yield* Effect.flip(Client.connect({ url: `127.0.0.1:${port}`, connectTimeout: "300 millis" }))
      assert.strictEqual(error._tag, "ConnectError")
      assert.include(error.message, "no handshake within 300 ms")
    }))

  it.scopedLive("connect fails clearly when nothing listens", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Client.connect({ url: "http://127.0.0.1:1", connectTimeout: "2 seconds" }))
      assert.strictEqual(error._tag, "ConnectError")
      assert.include(error.message, "Failed to connect to ws://127.0.0.1:1/ws")
    }))
})
