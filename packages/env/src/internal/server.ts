// The OpenEnv server on node:http + ws, run inside Effect: every connection is a fiber in one FiberSet owned by the
// server's scope, so closing the scope ends every session (its instance's scope closes, its socket is closed).
import type { Schema } from "effect"
import { Cause, Deferred, Duration, Effect, Either, Exit, Fiber, FiberSet, Option, Runtime } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { WebSocket, WebSocketServer } from "ws"
import * as JsonSchema from "../JsonSchema.js"
import type { OpenEnvDefinition, OpenEnvInstance, StepResult } from "../OpenEnv.js"
import type { ResolvedServerOptions } from "../ServerOptions.js"
import * as Wire from "../Wire.js"
import * as Mcp from "./mcp.js"
import * as PyJson from "./pyJson.js"
import * as PyJsonParse from "./pyJsonParse.js"
import * as PythonText from "./pythonText.js"
import { type Session, SessionTable } from "./sessions.js"
import { syncStepOf } from "./syncStep.js"
import * as TaskRoutes from "./taskApi.js"

export interface Running {
  readonly host: string
  readonly port: number
  readonly url: string
  readonly activeSessions: Effect.Effect<number>
  readonly maxConcurrentEnvs: number
}

type Inbound = { readonly _tag: "Text"; readonly text: string } | { readonly _tag: "Binary" }

// Queued frames beyond this are held in the kernel (socket paused), so a flooding client cannot grow our memory.
const HIGH_WATER = 64
const LOW_WATER = 8

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const closeSocket = (ws: WebSocket, code: number, reason?: string): void => {
  if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(code, reason)
}

/** Runs an instance call; failures and defects become EXECUTION_ERROR frames with their message. */
const execute = <A>(effect: Effect.Effect<A, { readonly message: string }>, onSuccess: (a: A) => Wire.Frame) =>
  effect.pipe(
    Effect.map(onSuccess),
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause)
        ? Effect.interrupt
        : Effect.succeed(Wire.errorFrame("EXECUTION_ERROR", Mcp.causeMessage(cause)))
    )
  )

const validationFrame = (errors: ReadonlyArray<Wire.PydanticError>): Wire.Frame =>
  Wire.errorFrame("VALIDATION_ERROR", "Invalid message", { errors })

/** Python's type name of a parsed JSON value (`text` tells a float such as `1.0` from an int). */
const pythonTypeName = (value: unknown, text: string): string => {
  if (value === null) return "NoneType"
  if (typeof value === "boolean") return "bool"
  if (typeof value === "string") return "str"
  if (Array.isArray(value)) return "list"
  if (typeof value === "number") return Number.isInteger(value) && !/[.eEaI]/.test(text) ? "int" : "float"
  return "dict"
}

/** `json.loads` as OpenEnv's server runs it: NaN/Infinity accepted, Python's error text on failure. */
const parseJson = (text: string): Either.Either<unknown, string> => {
  const parsed = PyJsonParse.parse(text)
  return parsed._tag === "Value" ? Either.right(parsed.value) : Either.left(parsed.message)
}

export const make = (definition: OpenEnvDefinition, options: ResolvedServerOptions) =>
  Effect.gen(function*() {
    const table = new SessionTable(options.maxConcurrentEnvs)
    // Every frame and body goes through one encoder, which writes the twin's Python floats where asked.
    const floats = definition.pythonFloats === true ? definition : undefined
    const send = (ws: WebSocket, payload: Wire.Frame | Wire.JsonRpcResponse, cache?: Wire.StringCache): void => {
      if (ws.readyState === WebSocket.OPEN) ws.send(Wire.encodeFrame(payload, floats, cache))
    }
    const httpEnvelopeSchema = floats && Wire.envelopeSchema(floats.observation)
    // Created first so that its finalizer (interrupt whatever is left) runs last.
    const fiberSet = yield* FiberSet.make<unknown, unknown>()
    const run = yield* FiberSet.runtime(fiberSet)<never>()
    const fork = (effect: Effect.Effect<unknown>): void => {
      run(effect)
    }
    const mcpCtx: Mcp.McpContext = { definition, table, fork }
    let shuttingDown = false

    // ---- one /ws session -------------------------------------------------------------------------------------
    const decodeAction = Wire.decodeForbid(definition.action)
    // Per-frame work runs as a plain fiber (not in the FiberSet: the socket's finalizer interrupts it); started
    // immediately, so an environment that answers synchronously costs no scheduler hop.
    const runtime = yield* Effect.runtime<never>()
    const runNow = Runtime.runFork(runtime)

    type Reply = Wire.Frame | Wire.JsonRpcResponse | "close"
    /** A reply now, or the effect that computes it. */
    type Handled = Reply | Effect.Effect<Reply>

    const executed = (
      session: Session,
      effect: Effect.Effect<unknown, { readonly message: string }>,
      onSuccess: (a: any) => Wire.Frame,
      touch: boolean
    ): Effect.Effect<Reply> =>
      execute(effect, (a) => {
        if (touch) table.touch(session.id)
        return onSuccess(a)
      })

    const handleGymFrame = (session: Session, instance: OpenEnvInstance, text: string): Handled => {
      const parsed = parseJson(text)
      if (Either.isLeft(parsed)) return Wire.errorFrame("INVALID_JSON", `Invalid JSON: ${parsed.left}`)
      const message = parsed.right
      if (!isObject(message)) {
        // OpenEnv calls `message_dict.get("type", "")` outside its per-message error handling, so a frame that is
        // valid JSON but not an object ends the session with SESSION_ERROR and Python's AttributeError text.
        throw new Error(`'${pythonTypeName(message, text)}' object has no attribute 'get'`)
      }
      const decoded = Wire.decodeClientMessage(message)
      if (decoded._tag === "UnknownType") {
        return Wire.errorFrame("UNKNOWN_TYPE", `Unknown message type: ${PythonText.pythonStr(decoded.type)}`)
      }
      if (decoded._tag === "Invalid") return validationFrame(decoded.errors)
      const msg = decoded.message
      switch (msg.type) {
        case "close":
          return "close"
        case "state":
          return executed(session, instance.state, (data) => ({ type: "state", data }), false)
        case "reset":
          return executed(session, instance.reset(msg.data), Wire.envelope, true)
        case "step": {
          const action = decodeAction(msg.data)
          if (Either.isLeft(action)) return validationFrame(Wire.pydanticErrors(action.left, [], { url: true }))
          const stepNow = syncStepOf(instance)
          if (stepNow === undefined) return executed(session, instance.step(action.right), Wire.envelope, true)
          // The same computation as the step effect, without a fiber: a throw is the effect's defect.
          let result: StepResult
          try {
            result = stepNow(action.right)
          } catch (defect) {
            return Wire.errorFrame("EXECUTION_ERROR", Mcp.causeMessage(Cause.die(defect)))
          }
          table.touch(session.id)
          return Wire.envelope(result)
        }
        case "mcp": {
          const request = Mcp.decodeRequest(msg.data)
          if (Either.isLeft(request)) return { type: "mcp", data: request.left }
          return Effect.map(Mcp.handle(mcpCtx, request.right, session), (data): Wire.Frame => ({ type: "mcp", data }))
        }
      }
    }

    const handleMcpFrame = (session: Session, text: string): Handled => {
      const parsed = parseJson(text)
      if (Either.isLeft(parsed)) {
        return Wire.rpcError(null, Wire.JsonRpcErrorCode.PARSE_ERROR, `Parse error: ${parsed.left}`)
      }
      const request = Mcp.decodeRequest(parsed.right)
      return Either.isLeft(request) ? request.left : Mcp.handle(mcpCtx, request.right, session)
    }

    const capacityReply = (path: "/ws" | "/mcp", active: number, max: number): Wire.Frame | Wire.JsonRpcResponse => {
      const message = Wire.capacityMessage(active, max)
      const counts = { active_sessions: active, max_sessions: max }
      return path === "/ws"
        ? Wire.errorFrame("CAPACITY_REACHED", message, counts)
        : Wire.rpcError(null, Wire.JsonRpcErrorCode.SERVER_ERROR, message, counts)
    }

    const liveSockets = new Map<WebSocket, { alive: boolean }>()

    /** The session a `/ws?session_id=` socket attaches to, or why it cannot (OpenEnv's texts). */
    const attachable = (id: string): { session: Session; instance: OpenEnvInstance } | string => {
      const session = table.get(id)
      if (session === undefined) return `Unknown session_id: ${id}`
      if (session.instance === null) return `Session ${id} is still initializing`
      // A WS-managed session has its socket: only HTTP-MCP sessions (openenv/session/create) take one.
      if (session.attached || session.kind !== "http-mcp") return `Session ${id} already has an attached WebSocket`
      return { session, instance: session.instance }
    }

    /** Serves one socket: on a session of its own, or (`/ws?session_id=`) on an existing HTTP-MCP session. */
    const handleSocket = (ws: WebSocket, path: "/ws" | "/mcp", attachTo: string | undefined) =>
      Effect.gen(function*() {
        const ended = yield* Deferred.make<void>()
        let finished = false
        const end = () => {
          finished = true
          Deferred.unsafeDone(ended, Exit.void)
        }
        // Frames wait here until the one before has been answered: strictly in order, never concurrently.
        const queue: Array<Inbound> = []
        let paused = false
        // Set once the instance exists; frames that arrive earlier wait in the queue.
        const live: { ready?: { session: Session; instance: OpenEnvInstance } } = {}
        let current: Fiber.RuntimeFiber<Reply> | undefined
        const liveness = { alive: true }
        liveSockets.set(ws, liveness)
        // This session's replies: a transcript that grows from frame to frame is escaped only for its new part.
        const strings = Wire.stringCache()

        /** Sends the reply to the frame in hand; the next frame may start. */
        const reply = (answer: Reply): void => {
          current = undefined
          if (live.ready !== undefined) live.ready.session.busy = false
          if (answer === "close") return end()
          send(ws, answer, strings)
        }
        const settle = (fiber: Fiber.RuntimeFiber<Reply>, exit: Exit.Exit<Reply>): void => {
          if (Exit.isSuccess(exit)) return reply(exit.value)
          if (current === fiber) current = undefined
          if (!Cause.isInterruptedOnly(exit.cause)) {
            send(ws, Wire.errorFrame("SESSION_ERROR", Mcp.causeMessage(exit.cause)))
            end()
          }
        }
        /** Starts one frame; true if it was answered synchronously (the next one may start at once). */
        const start = (next: Inbound, session: Session, instance: OpenEnvInstance): boolean => {
          if (next._tag === "Binary") {
            // Starlette's receive_text fails on a binary frame, so OpenEnv ends the session with its "any other
            // exception" error (SESSION_ERROR on /ws, -32000 on /mcp); we say why instead of Python's "'text'".
            const message = "Binary frames are not supported: send each message as a JSON text frame"
            send(
              ws,
              path === "/ws"
                ? Wire.errorFrame("SESSION_ERROR", message)
                : Wire.rpcError(null, Wire.JsonRpcErrorCode.SERVER_ERROR, message)
            )
            end()
            return false
          }
          session.busy = true
          let handled: Handled
          try {
            handled = path === "/ws" ? handleGymFrame(session, instance, next.text) : handleMcpFrame(session, next.text)
          } catch (defect) {
            handled = Effect.die(defect)
          }
          if (!Effect.isEffect(handled)) {
            reply(handled)
            return true
          }
          const fiber = runNow(handled, { immediate: true })
          const settled = fiber.unsafePoll()
          if (settled !== null) {
            settle(fiber, settled)
            return true
          }
          current = fiber
          fiber.addObserver((exit) => {
            if (current !== fiber) return
            settle(fiber, exit)
            pump()
          })
          return false
        }
        // The hot path: frames answered synchronously (parse errors, environments that answer at once) are handled
        // in a loop without a scheduler hop; an asynchronous answer resumes the loop from its fiber's observer.
        const pump = (): void => {
          while (!finished && live.ready !== undefined && current === undefined && queue.length > 0) {
            const next = queue.shift()!
            if (paused && queue.length <= LOW_WATER) {
              paused = false
              ws.resume()
            }
            if (!start(next, live.ready.session, live.ready.instance)) return
          }
        }

        ws.on("message", (data, isBinary) => {
          queue.push(isBinary ? { _tag: "Binary" } : { _tag: "Text", text: data.toString() })
          if (!paused && queue.length >= HIGH_WATER) {
            paused = true
            ws.pause()
          }
          pump()
        })
        ws.on("pong", () => {
          liveness.alive = true
        })
        ws.on("close", () => {
          liveSockets.delete(ws)
          end()
        })
        ws.on("error", () => {
          // A protocol error (oversized frame, bad UTF-8) is followed by "close"; nothing else to do here.
        })
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            liveSockets.delete(ws)
            closeSocket(ws, shuttingDown ? 1001 : 1000)
            // A disconnect mid-request interrupts the request (its reply could never be read) before the
            // instance's scope closes.
            const inFlight = current
            current = undefined
            if (inFlight !== undefined) yield* Fiber.interrupt(inFlight)
          })
        )

        if (attachTo !== undefined) {
          // MCPToolClient's production mode: the socket drives the session its HTTP calls use; the session outlives
          // the socket (it ends with openenv/session/close, or at the detach if that close came meanwhile).
          const target = attachable(attachTo)
          if (typeof target === "string") {
            send(ws, Wire.errorFrame("SESSION_ERROR", target))
            return
          }
          const attached = target.session
          attached.attached = true
          table.touch(attached.id)
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              attached.attached = false
              if (attached.closePending) attached.kill("closed by openenv/session/close")
            })
          )
          live.ready = target
          pump()
          return yield* Deferred.await(ended)
        }

        const reserved = table.reserve(path === "/ws" ? "ws" : "ws-mcp", (reason) => {
          table.release(sessionId)
          // The idle reaper and session/close free the slot at once, tell the client why, and close its socket.
          send(ws, Wire.errorFrame("SESSION_ERROR", `Session ended by the server: ${reason}`))
          end()
        })
        if (!("id" in reserved)) {
          send(ws, capacityReply(path, reserved.active, reserved.max))
          return
        }
        const session = reserved
        const sessionId = session.id
        yield* Effect.addFinalizer(() => Effect.sync(() => table.release(sessionId)))

        const made = yield* Effect.exit(definition.make)
        if (Exit.isFailure(made)) {
          if (Cause.isInterruptedOnly(made.cause)) return yield* Effect.interrupt
          const message = Wire.factoryMessage(definition.name)
          send(
            ws,
            path === "/ws"
              ? Wire.errorFrame("FACTORY_ERROR", message, { factory_name: definition.name })
              : Wire.rpcError(null, Wire.JsonRpcErrorCode.SERVER_ERROR, message, { factory_name: definition.name })
          )
          return
        }
        session.instance = made.value
        session.lastActivity = Date.now()
        live.ready = { session, instance: made.value }
        pump()
        yield* Deferred.await(ended)
      }).pipe(
        Effect.scoped,
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause) ? Effect.void : Effect.sync(() => {
            send(ws, Wire.errorFrame("SESSION_ERROR", Mcp.causeMessage(cause)))
            closeSocket(ws, 1000)
          })
        )
      )

    // ---- HTTP ---------------------------------------------------------------------------------------------------
    const json = (res: Http.ServerResponse, status: number, body: unknown, schema?: Schema.Schema.Any) => {
      const text = PyJson.stringify(body, schema)
      res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
      res.end(text)
    }

    const readBody = (req: Http.IncomingMessage) =>
      Effect.async<string, string>((resume) => {
        const chunks: Array<Buffer> = []
        let size = 0
        req.on("data", (chunk: Buffer) => {
          size += chunk.length
          if (size > options.maxFrameBytes) {
            resume(Effect.fail(`Request body exceeds ${options.maxFrameBytes} bytes`))
            req.destroy()
            return
          }
          chunks.push(chunk)
        })
        req.on("end", () => resume(Effect.succeed(Buffer.concat(chunks).toString("utf8"))))
        req.on("error", (e) => resume(Effect.fail(e.message)))
      })

    const withFreshInstance = <A>(f: (instance: OpenEnvInstance) => Effect.Effect<A, unknown>) =>
      Effect.scoped(Effect.flatMap(definition.make, f))

    const httpEnvelope = (r: StepResult) => {
      const frame = Wire.envelope(r).data as { observation: unknown; reward: unknown; done: boolean }
      // The HTTP path coerces reward to float|null (pydantic `Optional[float]`).
      return { ...frame, reward: typeof frame.reward === "boolean" ? Number(frame.reward) : frame.reward }
    }

    const resetErrors = (body: Record<string, unknown>): Array<Wire.PydanticError> => {
      const errors: Array<Wire.PydanticError> = []
      const seed = body.seed
      if (seed !== undefined && seed !== null) {
        if (typeof seed !== "number" || !Number.isInteger(seed)) {
          errors.push({ type: "int_type", loc: ["body", "seed"], msg: "Input should be a valid integer", input: seed })
        } else if (seed < 0) {
          errors.push({
            type: "greater_than_equal",
            loc: ["body", "seed"],
            msg: "Input should be greater than or equal to 0",
            input: seed
          })
        }
      }
      const episodeId = body.episode_id
      if (episodeId !== undefined && episodeId !== null) {
        if (typeof episodeId !== "string") {
          errors.push({
            type: "string_type",
            loc: ["body", "episode_id"],
            msg: "Input should be a valid string",
            input: episodeId
          })
        } else if (episodeId.length > 255) {
          errors.push({
            type: "string_too_long",
            loc: ["body", "episode_id"],
            msg: "String should have at most 255 characters",
            input: episodeId
          })
        }
      }
      return errors
    }

    const openapi = {
      openapi: "3.1.0",
      info: { title: "OpenEnv Environment HTTP API", version: "1.0.0", description: definition.metadata.description },
      paths: Object.fromEntries(
        ([
          ["/health", "get"],
          ["/metadata", "get"],
          ["/schema", "get"],
          ["/reset", "post"],
          ["/step", "post"],
          ["/state", "get"],
          ["/mcp", "post"],
          ["/list_environments", "get"],
          ["/{env_name}/splits", "get"],
          ["/{env_name}/tasks", "post"],
          ["/{env_name}/num_tasks", "post"],
          ["/{env_name}/task", "post"],
          ["/{env_name}/task_range", "post"]
        ] as const).map(([p, m]) => [p, { [m]: { summary: p.slice(1), responses: { "200": { description: "OK" } } } }])
      )
    }
    const schemaBody = {
      action: JsonSchema.pydantic(definition.action),
      observation: JsonSchema.pydantic(definition.observation),
      state: JsonSchema.baseStateSchema
    }

    const internalError = (res: Http.ServerResponse) => {
      res.writeHead(500, { "content-type": "text/plain; charset=utf-8" })
      res.end("Internal Server Error")
    }

    const handleHttp = (req: Http.IncomingMessage, res: Http.ServerResponse) =>
      Effect.gen(function*() {
        const path = new URL(req.url ?? "/", "http://localhost").pathname
        const method = req.method ?? "GET"
        const route = `${method} ${path}`
        switch (route) {
          case "GET /health":
            return json(res, 200, { status: "healthy" })
          case "GET /metadata":
            return json(res, 200, definition.metadata)
          case "GET /schema":
            return json(res, 200, schemaBody)
          case "GET /openapi.json":
            return json(res, 200, openapi)
          case "GET /state": {
            const state = yield* Effect.either(withFreshInstance((i) => i.state))
            return Either.isRight(state) ? json(res, 200, state.right, floats?.state) : internalError(res)
          }
          case "POST /reset":
          case "POST /step":
          case "POST /mcp": {
            const body = yield* Effect.either(readBody(req))
            if (Either.isLeft(body)) return json(res, 413, { detail: body.left })
            const parsed = body.right.trim() === "" ? Either.right({}) : parseJson(body.right)
            if (path === "/mcp") {
              if (Either.isLeft(parsed)) {
                return json(res, 200, Wire.rpcError(null, Wire.JsonRpcErrorCode.PARSE_ERROR))
              }
              const request = Mcp.decodeRequest(parsed.right)
              const response = Either.isLeft(request) ? request.left : yield* Mcp.handle(mcpCtx, request.right)
              return json(res, 200, response)
            }
            if (Either.isLeft(parsed)) {
              return json(res, 422, {
                detail: [{ type: "json_invalid", loc: ["body", 0], msg: "JSON decode error", input: {} }]
              })
            }
            const value = parsed.right
            if (!isObject(value)) {
              return json(res, 422, {
                detail: [{ type: "model_attributes_type", loc: ["body"], msg: "Input should be a valid dictionary" }]
              })
            }
            if (path === "/reset") {
              const errors = resetErrors(value)
              if (errors.length > 0) return json(res, 422, { detail: errors })
              const result = yield* Effect.either(withFreshInstance((i) => i.reset(value)))
              return Either.isRight(result)
                ? json(res, 200, httpEnvelope(result.right), httpEnvelopeSchema)
                : internalError(res)
            }
            if (!isObject(value.action)) {
              return json(res, 422, {
                detail: [
                  value.action === undefined
                    ? { type: "missing", loc: ["body", "action"], msg: "Field required", input: value }
                    : {
                      type: "dict_type",
                      loc: ["body", "action"],
                      msg: "Input should be a valid dictionary",
                      input: value.action
                    }
                ]
              })
            }
            const action = Wire.decodeForbid(definition.action)(value.action)
            if (Either.isLeft(action)) {
              return json(res, 422, { detail: Wire.pydanticErrors(action.left, ["body", "action"]) })
            }
            // Stateless, as OpenEnv since PR #239: a fresh, never-reset instance per request.
            const result = yield* Effect.either(withFreshInstance((i) => i.step(action.right)))
            return Either.isRight(result)
              ? json(res, 200, httpEnvelope(result.right), httpEnvelopeSchema)
              : internalError(res)
          }
          case "GET /list_environments":
            return json(res, 200, [definition.name])
          default: {
            // OpenEnv's Task API, served for every environment (501 without tasks), as OpenEnv's server does.
            const task = TaskRoutes.match(path)
            if (task !== undefined) {
              if (method !== task.method) return json(res, 405, { detail: "Method Not Allowed" })
              if (task.method === "GET") {
                const answer = TaskRoutes.answer(definition, task, {})
                return json(res, answer.status, answer.body)
              }
              const body = yield* Effect.either(readBody(req))
              if (Either.isLeft(body)) return json(res, 413, { detail: body.left })
              if (body.right.trim() === "") {
                // FastAPI's answer to a required body that is absent.
                return json(res, 422, {
                  detail: [{ type: "missing", loc: ["body"], msg: "Field required", input: null }]
                })
              }
              const parsed = parseJson(body.right)
              if (Either.isLeft(parsed)) {
                return json(res, 422, {
                  detail: [{
                    type: "json_invalid",
                    loc: ["body", 0],
                    msg: "JSON decode error",
                    input: {},
                    ctx: { error: parsed.left }
                  }]
                })
              }
              if (!isObject(parsed.right)) {
                return json(res, 422, {
                  detail: [{
                    type: "model_attributes_type",
                    loc: ["body"],
                    msg: "Input should be a valid dictionary or object to extract fields from",
                    input: parsed.right
                  }]
                })
              }
              const answer = TaskRoutes.answer(definition, task, parsed.right)
              return json(res, answer.status, answer.body)
            }
            const known = [
              "/health",
              "/metadata",
              "/schema",
              "/openapi.json",
              "/state",
              "/reset",
              "/step",
              "/mcp",
              "/list_environments"
            ]
            return known.includes(path)
              ? json(res, 405, { detail: "Method Not Allowed" })
              : json(res, 404, { detail: "Not Found" })
          }
        }
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.sync(() => {
            if (!res.headersSent && !Cause.isInterruptedOnly(cause)) internalError(res)
            else if (!res.writableEnded) res.destroy()
          })
        )
      )

    // ---- wiring ---------------------------------------------------------------------------------------------------
    const wss = new WebSocketServer({ noServer: true, maxPayload: options.maxFrameBytes, perMessageDeflate: false })
    const server = Http.createServer((req, res) => {
      if (shuttingDown) {
        res.writeHead(503, { connection: "close" })
        res.end()
        return
      }
      fork(handleHttp(req, res))
    })
    server.on("upgrade", (req, socket, head) => {
      const url = new URL(req.url ?? "/", "http://localhost")
      const path = url.pathname
      if (shuttingDown || (path !== "/ws" && path !== "/mcp")) {
        socket.end("HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        return
      }
      // Only /ws attaches to an existing session (an empty id asks for a new one, as Python's truthiness).
      const attachTo = path === "/ws" ? url.searchParams.get("session_id") || undefined : undefined
      wss.handleUpgrade(req, socket, head, (ws) => {
        if (attachTo === undefined && table.size >= table.max) {
          // Full: accept, send the error, close 1000 (OpenEnv's order), in the same write burst as the handshake so
          // a client sees the refusal at connect. A race with a session reserved meanwhile is caught in handleSocket.
          ws.on("error", () => {})
          send(ws, capacityReply(path, table.size, table.max))
          ws.close(1000)
          return
        }
        fork(handleSocket(ws, path, attachTo))
      })
    })
    server.on("clientError", (_err, socket) => socket.destroy())

    const address = yield* Effect.acquireRelease(
      Effect.async<AddressInfo, Error>((resume) => {
        const onError = (e: Error) => resume(Effect.fail(e))
        server.once("error", onError)
        server.listen(options.port, options.host, () => {
          server.off("error", onError)
          resume(Effect.succeed(server.address() as AddressInfo))
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )

    // Graceful shutdown (runs before the listener closes): refuse new work, end every session, close HTTP-MCP sessions.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        shuttingDown = true
        for (const s of table.all()) if (s.kind === "http-mcp") s.kill("server shutting down")
        for (const ws of wss.clients) closeSocket(ws, 1001, "server shutting down")
        yield* FiberSet.clear(fiberSet)
        wss.close()
      })
    )

    // Keep-alive: ping every socket; one that has not answered the previous ping is terminated.
    if (Option.isSome(options.pingInterval)) {
      yield* Effect.sync(() => {
        for (const [ws, liveness] of liveSockets) {
          if (!liveness.alive) {
            ws.terminate()
            continue
          }
          liveness.alive = false
          ws.ping()
        }
      }).pipe(Effect.delay(options.pingInterval.value), Effect.forever, Effect.forkScoped)
    }

    // Idle reaper: frees the slot AND closes the socket (OpenEnv leaves the socket open with a dead env).
    if (Option.isSome(options.sessionTimeout)) {
      const timeoutMs = Duration.toMillis(options.sessionTimeout.value)
      const every = Math.min(Math.max(timeoutMs / 4, 10), 5000)
      yield* Effect.sync(() => {
        for (const s of table.stale(timeoutMs, Date.now())) {
          s.kill(`idle for more than ${timeoutMs / 1000}s (session timeout); reconnect and reset`)
        }
      }).pipe(Effect.delay(Duration.millis(every)), Effect.forever, Effect.forkScoped)
    }

    const running: Running = {
      host: options.host,
      port: address.port,
      url: `http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${address.port}`,
      activeSessions: Effect.sync(() => table.size),
      maxConcurrentEnvs: options.maxConcurrentEnvs
    }
    return running
  })
