// JSON-RPC (MCP) dispatch shared by POST /mcp, WS /mcp and {"type":"mcp"} frames inside /ws — OpenEnv's
// `mcp_handler`, with the same method names, codes and texts.
import { Cause, Effect, Either, Exit, Scope } from "effect"
import type { OpenEnvDefinition, OpenEnvInstance } from "../OpenEnv.js"
import * as Wire from "../Wire.js"
import type { Session, SessionTable } from "./sessions.js"

export interface McpContext {
  readonly definition: OpenEnvDefinition
  readonly table: SessionTable
  /** Forks a fiber into the server's scope (from node callbacks and synchronous kills). */
  readonly fork: (effect: Effect.Effect<unknown>) => void
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Decodes a raw JSON-RPC object; an invalid one becomes `-32600 "Invalid request: …"` with id null. */
export const decodeRequest = (raw: unknown): Either.Either<Wire.JsonRpcRequest, Wire.JsonRpcResponse> =>
  Wire.decodeForbid(Wire.JsonRpcRequest)(raw).pipe(
    Either.mapLeft((e) =>
      Wire.rpcError(
        null,
        Wire.JsonRpcErrorCode.INVALID_REQUEST,
        `Invalid request: ${Wire.pydanticErrors(e).map((x) => `${x.loc.join(".") || "request"}: ${x.msg}`).join("; ")}`
      )
    )
  )

/** Creates an HTTP-MCP session (`openenv/session/create`): holds a slot until closed or reaped. */
const createHttpSession = (ctx: McpContext, id: Wire.JsonRpcRequest["id"]) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const reserved = ctx.table.reserve("http-mcp", () => {
      ctx.table.release(sessionId)
      ctx.fork(Scope.close(scope, Exit.void))
    })
    if (!("id" in reserved)) {
      yield* Scope.close(scope, Exit.void)
      return Wire.rpcError(
        id,
        Wire.JsonRpcErrorCode.SERVER_ERROR,
        Wire.capacityMessage(reserved.active, reserved.max),
        {
          active_sessions: reserved.active,
          max_sessions: reserved.max
        }
      )
    }
    const sessionId = reserved.id
    const made = yield* Effect.exit(Scope.extend(ctx.definition.make, scope))
    if (Exit.isFailure(made)) {
      ctx.table.release(sessionId)
      yield* Scope.close(scope, Exit.void)
      return Wire.rpcError(id, Wire.JsonRpcErrorCode.SERVER_ERROR, Wire.factoryMessage(ctx.definition.name), {
        factory_name: ctx.definition.name
      })
    }
    reserved.instance = made.value
    reserved.lastActivity = Date.now()
    return Wire.rpcResult(id, { session_id: sessionId })
  })

const toolsCall = (
  instance: OpenEnvInstance,
  request: Wire.JsonRpcRequest,
  params: Record<string, unknown>
): Effect.Effect<Wire.JsonRpcResponse> => {
  const tools = instance.tools
  if (tools === undefined) {
    return Effect.succeed(
      Wire.rpcError(request.id, Wire.JsonRpcErrorCode.INTERNAL_ERROR, "Environment does not support MCP")
    )
  }
  if (request.method === "tools/list") {
    return tools.list.pipe(Effect.map((list) => Wire.rpcResult(request.id, { tools: list })))
  }
  const name = params.name
  if (typeof name !== "string" || name.length === 0) {
    return Effect.succeed(
      Wire.rpcError(request.id, Wire.JsonRpcErrorCode.INVALID_PARAMS, "Missing 'name' in params")
    )
  }
  const args = params.arguments ?? {}
  if (!isObject(args)) {
    return Effect.succeed(
      Wire.rpcError(request.id, Wire.JsonRpcErrorCode.INVALID_PARAMS, "'arguments' must be an object")
    )
  }
  return tools.call(name, args).pipe(
    Effect.map((result) => Wire.rpcResult(request.id, result)),
    Effect.catchAll((e) =>
      Effect.succeed(
        Wire.rpcError(
          request.id,
          e.kind === "execution_error" ? Wire.JsonRpcErrorCode.INTERNAL_ERROR : Wire.JsonRpcErrorCode.INVALID_PARAMS,
          e.message
        )
      )
    )
  )
}

/**
 * Handles one JSON-RPC request. `own` is the WS-managed session the request arrived on (if any). Defects in tools
 * become `-32603` with the defect's message, as Python's `except Exception`.
 */
export const handle = (
  ctx: McpContext,
  request: Wire.JsonRpcRequest,
  own?: Session
): Effect.Effect<Wire.JsonRpcResponse> => {
  const { id, method } = request
  const params = request.params
  if (!isObject(params)) {
    return Effect.succeed(Wire.rpcError(id, Wire.JsonRpcErrorCode.INVALID_PARAMS, "Params must be an object"))
  }
  if (method === "openenv/session/create") {
    if (own !== undefined) return Effect.succeed(Wire.rpcResult(id, { session_id: own.id }))
    return createHttpSession(ctx, id)
  }
  if (method === "openenv/session/close") {
    const target = params.session_id
    if (typeof target !== "string" || target.length === 0) {
      return Effect.succeed(
        Wire.rpcError(id, Wire.JsonRpcErrorCode.INVALID_PARAMS, "Invalid params - 'session_id' is required")
      )
    }
    if (own !== undefined && target === own.id) {
      return Effect.succeed(
        Wire.rpcError(
          id,
          Wire.JsonRpcErrorCode.INVALID_REQUEST,
          "Cannot close active WebSocket-managed session via MCP method"
        )
      )
    }
    const session = ctx.table.get(target)
    if (session === undefined) {
      return Effect.succeed(Wire.rpcError(id, Wire.JsonRpcErrorCode.INVALID_PARAMS, `Unknown session_id: ${target}`))
    }
    if (session.attached) {
      // OpenEnv's answer while a `/ws?session_id=` socket is attached: closed when that socket detaches.
      session.closePending = true
      return Effect.succeed(Wire.rpcResult(id, { session_id: target, closed: false, closing: true }))
    }
    if (session.instance === null) {
      return Effect.succeed(
        Wire.rpcError(
          id,
          Wire.JsonRpcErrorCode.INVALID_REQUEST,
          `Session ${target} is still initializing; retry shortly`
        )
      )
    }
    session.kill("closed by openenv/session/close")
    return Effect.succeed(Wire.rpcResult(id, { session_id: target, closed: true }))
  }
  if (method !== "tools/list" && method !== "tools/call") {
    return Effect.succeed(Wire.rpcError(id, Wire.JsonRpcErrorCode.METHOD_NOT_FOUND, `Method not found: ${method}`))
  }
  const run = (instance: OpenEnvInstance, session?: Session) =>
    Effect.suspend(() => {
      if (session !== undefined) session.busy = true
      return toolsCall(instance, request, params)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.interrupt : Effect.succeed(
          Wire.rpcError(id, Wire.JsonRpcErrorCode.INTERNAL_ERROR, causeMessage(cause))
        )
      ),
      Effect.ensuring(Effect.sync(() => {
        if (session !== undefined) {
          session.busy = false
          ctx.table.touch(session.id)
        }
      }))
    )
  if (own !== undefined && own.instance !== null) return run(own.instance, own)
  const requested = params.session_id
  if (typeof requested === "string" && requested.length > 0) {
    const session = ctx.table.get(requested)
    if (session === undefined) {
      return Effect.succeed(Wire.rpcError(id, Wire.JsonRpcErrorCode.INVALID_PARAMS, `Unknown session_id: ${requested}`))
    }
    if (session.instance === null) {
      return Effect.succeed(
        Wire.rpcError(
          id,
          Wire.JsonRpcErrorCode.INVALID_REQUEST,
          `Session ${requested} is still initializing; retry shortly`
        )
      )
    }
    return run(session.instance, session)
  }
  // Stateless call: a temporary instance, closed afterwards (not counted against capacity, as OpenEnv).
  return Effect.scoped(
    ctx.definition.make.pipe(
      Effect.matchCauseEffect({
        onFailure: () =>
          Effect.succeed(
            Wire.rpcError(id, Wire.JsonRpcErrorCode.INTERNAL_ERROR, Wire.factoryMessage(ctx.definition.name))
          ),
        onSuccess: (instance) => run(instance)
      })
    )
  )
}

/** The text of a failure or defect (`str(exc)` in Python). */
export const causeMessage = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  if (failure instanceof Error) return failure.message
  if (typeof failure === "object" && failure !== null && "message" in failure) return String(failure.message)
  return String(failure)
}
