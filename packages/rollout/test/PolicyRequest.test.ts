// PolicyRequest over real loopback sockets: an HTTP server behind a small TCP relay that cuts connections the way
// a policy server's idle keep-alive close looks to a client that could not notice it (the request is written, the
// connection ends with no answer byte), or cuts them in other ways that must not be resent. Live clock.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Metric } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Net from "node:net"
import * as PolicyRequest from "../src/PolicyRequest.js"

// An upstream that counts the requests reaching it and answers each with its number; /slow never answers.
const upstream = Effect.acquireRelease(
  Effect.async<{ readonly port: number; readonly requests: () => number; readonly server: Http.Server }>((resume) => {
    let requests = 0
    const server = Http.createServer((req, res) => {
      requests++
      req.resume()
      if (req.url === "/slow") return
      req.on("end", () => res.end(JSON.stringify({ n: requests })))
    })
    server.listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed({ port: (server.address() as AddressInfo).port, requests: () => requests, server }))
    )
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
)

/**
 * How the relay treats a client connection:
 * - `reused`: a request arriving on a connection that has already carried an answer is cut unforwarded (an idle
 *   keep-alive connection the server had closed);
 * - `fresh`: the first request of every connection is cut unforwarded (a server gone mid-request);
 * - `midAnswer`: requests are forwarded, and the connection is cut after the first 20 bytes of the answer.
 */
type Cut = "reused" | "fresh" | "midAnswer"

const relay = (port: number, cut: Cut) =>
  Effect.acquireRelease(
    Effect.async<{ readonly url: string; readonly cuts: () => number; readonly server: Net.Server }>((resume) => {
      let cuts = 0
      const sockets = new Set<Net.Socket>()
      const server = Net.createServer((client) => {
        const up = Net.connect(port, "127.0.0.1")
        sockets.add(client).add(up)
        let answered = false
        const kill = () => {
          cuts++
          client.destroy()
          up.destroy()
        }
        client.on("data", (chunk) => {
          if (cut === "fresh" || (cut === "reused" && answered)) return kill()
          up.write(chunk)
        })
        up.on("data", (chunk) => {
          if (cut === "midAnswer") {
            client.write(chunk.subarray(0, 20))
            return kill()
          }
          answered = true
          client.write(chunk)
        })
        client.on("error", () => up.destroy())
        up.on("error", () => client.destroy())
        client.on("close", () => up.destroy())
        up.on("close", () => client.destroy())
      })
      server.on("close", () => sockets.forEach((s) => s.destroy()))
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          cuts: () => cuts,
          server
        })))
    }),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

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
