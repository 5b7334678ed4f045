/**
 * The loopback HTTP server that serves the MiniWoB++-style task pages: `GET /miniwob/<task>.html?seed=N` renders
 * the instance the seed picks. One per process, started on first use on a free port of 127.0.0.1; it does not keep
 * the process alive.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { page, tasks } from "./miniwobTasks.js"
import * as Prng from "./prng.js"

const handler: http.RequestListener = (req, res) => {
  const url = new URL(req.url ?? "/", "http://127.0.0.1")
  const m = /^\/miniwob\/([\w-]+)\.html$/.exec(url.pathname)
  const task = m ? tasks.get(m[1]) : undefined
  if (task === undefined) {
    res.writeHead(404, { "content-type": "text/plain" }).end(
      `no such task; available: ${[...tasks.keys()].join(", ")}`
    )
    return
  }
  const seed = Number(url.searchParams.get("seed") ?? "0")
  const body = page(task.name, task.make(Prng.make(Number.isFinite(seed) ? seed : 0)))
  res.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" }).end(body)
}

let started: Promise<string> | undefined

/** The server's base URL (`http://127.0.0.1:PORT`), starting it the first time. */
export const baseUrl = (): Promise<string> => (started ??= new Promise((resolve, reject) => {
  const server = http.createServer(handler)
  server.once("error", reject)
  server.listen(0, "127.0.0.1", () => {
    server.unref()
    resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
  })
}))
