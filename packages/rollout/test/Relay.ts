// Loopback servers for the resend tests: an HTTP upstream, and a TCP relay in front of it that cuts connections the
// way a policy server's idle keep-alive close looks to a client that could not notice it.
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Net from "node:net"

// An upstream that counts the requests reaching it and answers each with its number; /slow never answers.
export const upstream = Effect.acquireRelease(
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
export type Cut = "reused" | "fresh" | "midAnswer"

export const relay = (port: number, cut: Cut) =>
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
