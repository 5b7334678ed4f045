// PolicyRequest over real loopback sockets: an HTTP server behind a small TCP relay that cuts connections the way
// a policy server's idle keep-alive close looks to a client that could not notice it (the request is written, the
// connection ends with no answer byte), or cuts them in other ways that must not be resent. Live clock.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Metric } from "effect"
import * as PolicyRequest from "../src/PolicyRequest.js"
import { relay, upstream } from "./Relay.js"

const post = (url: string, options: Partial<PolicyRequest.SendOptions> = {}) =>
  PolicyRequest.sendResending(url, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }, {
    timeout: "10 seconds",
    ...options
  })

const resent = Effect.map(Metric.value(PolicyRequest.resends), (s) => s.count)

describe("PolicyRequest", () => {
  it.scopedLive("a request that a closed kept-alive connection drops before any answer byte is sent again, once", () =>
    Effect.gen(function*() {
      const server = yield* upstream
      const proxy = yield* relay(server.port, "reused")
      const before = yield* resent
      assert.strictEqual(JSON.parse((yield* post(`${proxy.url}/a`)).text).n, 1)
      // The second request goes out on the kept-alive connection of the first, which the relay cuts.
      const second = yield* post(`${proxy.url}/b`)
      assert.strictEqual(second.status, 200)
      assert.strictEqual(JSON.parse(second.text).n, 2)
      assert.strictEqual(proxy.cuts(), 1)
      // The dropped send never reached the server: two answers, two requests.
      assert.strictEqual(server.requests(), 2)
      assert.strictEqual((yield* resent) - before, 1)
    }))

  it.scopedLive("the classification: a drop on a reused socket before any answer byte, and nothing else", () =>
    Effect.sync(() => {
      for (const code of ["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"]) {
        assert.isTrue(PolicyRequest.isDroppedBeforeAnswer({ code, reusedSocket: true, answerBytes: 0 }), code)
        assert.isFalse(PolicyRequest.isDroppedBeforeAnswer({ code, reusedSocket: false, answerBytes: 0 }), code)
        assert.isFalse(PolicyRequest.isDroppedBeforeAnswer({ code, reusedSocket: true, answerBytes: 1 }), code)
      }
      for (const code of ["ECONNREFUSED", "ETIMEDOUT", undefined]) {
        assert.isFalse(PolicyRequest.isDroppedBeforeAnswer({ code, reusedSocket: true, answerBytes: 0 }), code)
      }
    }))

  it.scopedLive("a connection lost after answer bytes arrived is not resent", () =>
    Effect.gen(function*() {
      const server = yield* upstream
      const proxy = yield* relay(server.port, "midAnswer")
      const before = yield* resent
      const failed = yield* Effect.either(post(`${proxy.url}/a`))
      assert.isTrue(Either.isLeft(failed))
      if (Either.isLeft(failed)) assert.strictEqual(failed.left.reason, "connect")
      assert.strictEqual(server.requests(), 1)
      assert.strictEqual((yield* resent) - before, 0)
    }))

  it.scopedLive("a fresh connection reset before any answer (a server gone) is not resent", () =>
    Effect.gen(function*() {
      const server = yield* upstream
      const proxy = yield* relay(server.port, "fresh")
      const failed = yield* Effect.either(post(`${proxy.url}/a`))
      assert.isTrue(Either.isLeft(failed))
      if (Either.isLeft(failed)) assert.strictEqual(failed.left.reason, "connect")
      assert.strictEqual(proxy.cuts(), 1)
      assert.strictEqual(server.requests(), 0)
    }))

  it.scopedLive("a timeout is not resent, and names the option that sets it", () =>
    Effect.gen(function*() {
      const server = yield* upstream
      const url = `http://127.0.0.1:${server.port}`
      yield* post(`${url}/a`) // a kept-alive connection for the next one
      const before = yield* resent
      const failed = yield* Effect.either(post(`${url}/slow`, { timeout: "300 millis", limit: "requestTimeout" }))
      assert.isTrue(Either.isLeft(failed))
      if (Either.isLeft(failed)) {
        assert.strictEqual(failed.left.reason, "timeout")
        assert.include(failed.left.message, "(requestTimeout)")
      }
      assert.strictEqual(server.requests(), 2)
      assert.strictEqual((yield* resent) - before, 0)
    }))
})
