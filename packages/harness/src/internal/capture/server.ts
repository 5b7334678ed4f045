// The capture proxy on node:http inside Effect: one handler for two surfaces. The loopback TCP listener serves the
// agent routes and the admin routes; the optional Unix socket (what sandboxes are given) serves the agent routes
// only. Every exchange is a fiber in the scope's FiberSet; a client that hangs up interrupts its exchange (and its
// upstream call); every failure is answered in the caller's dialect.
import type { Scope } from "effect"
import { Data, Duration, Effect, Exit, Fiber, FiberSet } from "effect"
import { randomBytes } from "node:crypto"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import type { TrainingTrace } from "../../TrainingTrace.js"
import { dialect as anthropic } from "./anthropicMessages.js"
import type { Dialect, ErrorKind, SseEvent } from "./dialect.js"
import { DialectError, isObject } from "./dialect.js"
import { Session, type SessionStatus } from "./graph.js"
import { dialect as chat } from "./openaiChat.js"
import { dialect as responses } from "./openaiResponses.js"
import { complete, type Upstream } from "./upstream.js"

export interface Rule {
  readonly name: string
  readonly matches: (messages: ReadonlyArray<Record<string, unknown>>) => boolean
}

export interface Resolved {
  readonly host: string
  readonly port: number
  readonly socketPath: string | undefined
  readonly adminKey: string | undefined
  readonly upstream: Upstream
  readonly rules: ReadonlyArray<Rule>
  readonly maxBodyBytes: number
}

export interface Running {
  readonly host: string
  readonly port: number
  readonly socketPath: string | undefined
  readonly open: (label: string | undefined) => string
  readonly session: (id: string) => Session | undefined
  readonly close: (id: string) => SessionStatus | undefined
}

type Answer =
  | { readonly _tag: "Json"; readonly status: number; readonly body: unknown }
  | { readonly _tag: "Sse"; readonly events: ReadonlyArray<SseEvent>; readonly done: boolean }

const json = (body: unknown, status = 200): Answer => ({ _tag: "Json", status, body })

class Refused extends Data.TaggedError("Refused")<{
  readonly status: number
  readonly message: string
  readonly kind: ErrorKind
}> {}

const refused = (status: number, message: string, kind: ErrorKind) => new Refused({ status, message, kind })

const dialects: Record<string, Dialect> = {
  "/v1/chat/completions": chat,
  "/chat/completions": chat,
  "/v1/responses": responses,
  "/responses": responses,
  "/v1/messages": anthropic,
  "/messages": anthropic
}

const keyOf = (req: Http.IncomingMessage): string | undefined => {
  const auth = req.headers.authorization
  if (typeof auth === "string" && /^bearer\s+/i.test(auth)) return auth.replace(/^bearer\s+/i, "").trim()
  const x = req.headers["x-api-key"]
  return typeof x === "string" ? x.trim() : undefined
}

export const make = (resolved: Resolved): Effect.Effect<Running, string, Scope.Scope> =>
  Effect.gen(function*() {
    const sessions = new Map<string, Session>()
    const openSession = (label: string | undefined) => {
      const id = `cap-${randomBytes(16).toString("hex")}`
      sessions.set(id, new Session(id, label))
      return id
    }
    const closeSession = (id: string) => {
      const session = sessions.get(id)
      if (session === undefined) return undefined
      session.open = false
      sessions.delete(id)
      return session.status()
    }

    const readBody = (req: Http.IncomingMessage) =>
      Effect.async<unknown, Refused>((resume) => {
        const chunks: Array<Buffer> = []
        let size = 0
        let done = false
        const tooBig = () => refused(413, `The request body exceeds ${resolved.maxBodyBytes} bytes.`, "invalid_request")
        req.on("data", (chunk: Buffer) => {
          if (done) return
          size += chunk.length
          if (size > resolved.maxBodyBytes) {
            done = true
            resume(Effect.fail(tooBig()))
          } else chunks.push(chunk)
        })
        req.on("end", () => {
          if (done) return
          const text = Buffer.concat(chunks).toString("utf8")
          try {
            resume(Effect.succeed(text.length === 0 ? {} : JSON.parse(text) as unknown))
          } catch (e) {
            resume(
              Effect.fail(
                refused(400, `The request body is not valid JSON: ${(e as Error).message}`, "invalid_request")
              )
            )
          }
        })
        req.on("error", (e) => {
          if (!done) resume(Effect.fail(refused(400, `Reading the request failed: ${e.message}`, "invalid_request")))
        })
      })

    const sessionOf = (req: Http.IncomingMessage) => {
      const key = keyOf(req)
      const session = key === undefined ? undefined : sessions.get(key)
      if (session === undefined || !session.open) {
        return Effect.fail(
          refused(
            401,
            key === undefined
              ? "No API key: give the capture session id as the API key (Authorization: Bearer ID or x-api-key)."
              : "Unknown API key: this key is not an open capture session (open one through the admin API first).",
            "auth"
          )
        )
      }
      return Effect.succeed(session)
    }

    const modelCall = (req: Http.IncomingMessage, dialect: Dialect) =>
      Effect.gen(function*() {
        const session = yield* sessionOf(req)
        const body = yield* readBody(req)
        const request = yield* Effect.try({
          try: () => dialect.read(body),
          catch: (e) =>
            e instanceof DialectError
              ? refused(e.status, e.message, "invalid_request")
              : refused(400, String(e), "invalid_request")
        })
        const messages = Array.isArray(request.chat.messages)
          ? request.chat.messages.filter(isObject)
          : []
        const auxiliary = resolved.rules.find((r) => r.matches(messages))?.name
        const captured = yield* complete(resolved.upstream, request.chat).pipe(
          Effect.catchAll((failure) => {
            if (failure.kind !== "rejected") session.fail(failure.kind, failure.message)
            return Effect.fail(
              refused(failure.status, failure.message, failure.kind === "rejected" ? "invalid_request" : "upstream")
            )
          }),
          // The agent hung up mid-call (its own timeout, or the sandbox killed at the rollout's time limit): noted,
          // but not a transport failure, so a timed-out rollout keeps its captured turns and its score.
          Effect.onInterrupt(() =>
            Effect.sync(() =>
              session.fail("abandoned", "the agent hung up before the answer; the call was not recorded")
            )
          )
        )
        if (session.open) session.add(dialect.name, request.chat, captured, auxiliary)
        return request.stream
          ? { _tag: "Sse", events: dialect.stream(captured, request), done: dialect.doneMarker } satisfies Answer
          : json(dialect.reply(captured, request))
      })

    const adminAllowed = (req: Http.IncomingMessage) =>
      resolved.adminKey === undefined || keyOf(req) === resolved.adminKey
        ? Effect.void
        : Effect.fail(refused(401, "The admin routes need the admin key (Authorization: Bearer KEY).", "auth"))

    const admin = (req: Http.IncomingMessage, method: string, parts: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        yield* adminAllowed(req)
        if (parts.length === 0) {
          if (method !== "POST") {
            return yield* refused(405, "Use POST /admin/sessions to open a session.", "invalid_request")
          }
          const body = yield* readBody(req)
          const label = isObject(body) && typeof body.label === "string" ? body.label : undefined
          const id = openSession(label)
          return json({ session_id: id, api_key: id }, 201)
        }
        const [id, what] = parts
        const session = sessions.get(id)
        if (session === undefined) {
          return yield* refused(404, `No capture session ${id} (closed, or never opened).`, "not_found")
        }
        if (what === "trace" && method === "GET") {
          return json(session.trace() satisfies TrainingTrace)
        }
        if (what === undefined && method === "GET") return json(session.status())
        if (what === undefined && method === "DELETE") return json(closeSession(id))
        return yield* refused(
          405,
          "Admin routes: POST /admin/sessions, GET /admin/sessions/ID, GET /admin/sessions/ID/trace, DELETE /admin/sessions/ID.",
          "invalid_request"
        )
      })

    const route = (req: Http.IncomingMessage, surface: "tcp" | "socket") => {
      const path = new URL(req.url ?? "/", "http://localhost").pathname.replace(/\/+$/, "") || "/"
      const method = req.method ?? "GET"
      const dialect = dialects[path]
      if (dialect !== undefined) {
        return {
          dialect,
          run: method === "POST"
            ? modelCall(req, dialect)
            : Effect.fail(refused(405, `Use POST on ${path}.`, "invalid_request"))
        }
      }
      if (path === "/v1/models" || path === "/models") {
        return {
          dialect: chat,
          run: Effect.map(sessionOf(req), () =>
            json({
              object: "list",
              data: [{ id: resolved.upstream.model ?? "policy", object: "model", owned_by: "envtrain" }]
            }))
        }
      }
      if (surface === "tcp" && path === "/health") return { dialect: chat, run: Effect.succeed(json({ ok: true })) }
      if (surface === "tcp" && (path === "/admin/sessions" || path.startsWith("/admin/sessions/"))) {
        const parts = path.split("/").slice(3)
        return { dialect: chat, run: admin(req, method, parts) }
      }
      return { dialect: chat, run: Effect.fail(refused(404, `Not Found: ${method} ${path}`, "not_found")) }
    }

    const send = (res: Http.ServerResponse, answer: Answer) => {
      if (answer._tag === "Sse") {
        res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" })
        for (const e of answer.events) {
          res.write(`${e.event === undefined ? "" : `event: ${e.event}\n`}data: ${JSON.stringify(e.data)}\n\n`)
        }
        res.end(answer.done ? "data: [DONE]\n\n" : undefined)
        return
      }
      const text = JSON.stringify(answer.body)
      res.writeHead(answer.status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
      res.end(text)
    }

    const handle = (req: Http.IncomingMessage, res: Http.ServerResponse, surface: "tcp" | "socket") => {
      const { dialect, run } = route(req, surface)
      return run.pipe(
        Effect.catchAll((e) => Effect.succeed(json(dialect.error(e.status, e.message, e.kind), e.status))),
        Effect.catchAllDefect((d) =>
          Effect.succeed(
            json(dialect.error(500, `Internal error: ${d instanceof Error ? d.message : String(d)}`, "upstream"), 500)
          )
        ),
        Effect.flatMap((answer) => Effect.sync(() => send(res, answer))),
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (Exit.isFailure(exit) && !res.headersSent) {
              send(res, json(dialect.error(503, "The proxy is closing.", "upstream"), 503))
            } else if (!res.writableEnded) {
              res.destroy()
            }
          })
        )
      )
    }

    const fiberSet = yield* FiberSet.make<unknown, unknown>()
    const runFork = yield* FiberSet.runtime(fiberSet)<never>()
    const serverFor = (surface: "tcp" | "socket") => {
      const server = Http.createServer((req, res) => {
        const fiber = runFork(handle(req, res, surface))
        res.on("close", () => {
          if (!res.writableEnded) runFork(Fiber.interrupt(fiber))
        })
      })
      server.headersTimeout = 60_000
      server.requestTimeout = Duration.toMillis(resolved.upstream.timeout) + 60_000
      server.on("clientError", (_err, socket) => socket.destroy())
      return server
    }

    const listen = (server: Http.Server, target: { port: number; host: string } | { path: string }, name: string) =>
      Effect.acquireRelease(
        Effect.async<AddressInfo | string, string>((resume) => {
          const onError = (e: Error) => resume(Effect.fail(`Cannot listen on ${name}: ${e.message}`))
          server.once("error", onError)
          const done = () => {
            server.off("error", onError)
            resume(Effect.succeed(server.address() as AddressInfo | string))
          }
          if ("path" in target) server.listen(target.path, done)
          else server.listen(target.port, target.host, done)
        }),
        () =>
          Effect.async<void>((resume) => {
            server.close(() => resume(Effect.void))
            server.closeAllConnections()
          })
      )

    const tcp = (yield* listen(serverFor("tcp"), resolved, `${resolved.host}:${resolved.port}`)) as AddressInfo
    if (resolved.socketPath !== undefined) {
      const path = resolved.socketPath
      // A socket left by a proxy that died is removed; anything else at the path is not ours to delete.
      const stale = yield* Effect.sync(() => {
        try {
          return Fs.statSync(path).isSocket() ? "socket" : "other"
        } catch {
          return "none"
        }
      })
      if (stale === "other") {
        return yield* Effect.fail(`Cannot listen on ${path}: something other than a socket is there`)
      }
      if (stale === "socket") yield* Effect.sync(() => Fs.rmSync(path, { force: true }))
      yield* listen(serverFor("socket"), { path }, path)
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(path, { force: true })))
    }
    yield* Effect.addFinalizer(() => FiberSet.clear(fiberSet))

    return {
      host: resolved.host,
      port: tcp.port,
      socketPath: resolved.socketPath,
      open: openSession,
      session: (id) => sessions.get(id),
      close: closeSession
    } satisfies Running
  })
