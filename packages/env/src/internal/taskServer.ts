/**
 * The loopback HTTP server that serves the task pages: `GET /miniwob/<task>.html?seed=N` renders the instance of an
 * envtrain task the seed picks, and `GET /suite/<n>/<path>` serves the files of the n-th real MiniWoB++ folder
 * registered with {@link suiteUrl} (pages, core JS/CSS, images), never a path outside it. One per process, started on
 * first use on a free port of 127.0.0.1; it does not keep the process alive.
 */
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as path from "node:path"
import { page, tasks } from "./miniwobTasks.js"
import * as Prng from "./prng.js"

const roots: Array<string> = []

const TYPES: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".png": "image/png",
  ".gif": "image/gif",
  ".jpg": "image/jpeg",
  ".svg": "image/svg+xml",
  ".txt": "text/plain; charset=utf-8"
}

const serveSuiteFile = (res: http.ServerResponse, root: string, rest: string) => {
  const file = path.resolve(root, decodeURIComponent(rest))
  if (!file.startsWith(root + path.sep)) {
    res.writeHead(403, { "content-type": "text/plain" }).end("outside the suite's folder")
    return
  }
  fs.readFile(file, (err, body) => {
    if (err) {
      res.writeHead(404, { "content-type": "text/plain" }).end(`no such file: ${rest}`)
      return
    }
    res.writeHead(200, {
      "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
      "cache-control": "no-store"
    }).end(body)
  })
}

const handler: http.RequestListener = (req, res) => {
  const url = new URL(req.url ?? "/", "http://127.0.0.1")
  const suite = /^\/suite\/(\d+)\/(.+)$/.exec(url.pathname)
  if (suite) {
    const root = roots[Number(suite[1])]
    if (root === undefined) res.writeHead(404, { "content-type": "text/plain" }).end("no such suite")
    else serveSuiteFile(res, root, suite[2])
    return
  }
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

/** The URL of a real MiniWoB++ folder's file `page` (the folder registered on first use). */
export const suiteUrl = async (dir: string, page: string): Promise<string> => {
  const root = path.resolve(dir)
  let n = roots.indexOf(root)
  if (n < 0) n = roots.push(root) - 1
  return `${await baseUrl()}/suite/${n}/${page}`
}
