/**
 * OpenEnv's wire messages as Schemas: the `/ws` frames in both directions, the error codes and their exact texts,
 * JSON-RPC 2.0 for the MCP paths, and pydantic-style validation errors.
 *
 * Frames are plain JSON text with a `type` discriminator; there are no request ids, so a socket carries strictly one
 * request and one reply at a time.
 *
 * @example
 * ```ts
 * import { Wire } from "@envtrain/env"
 *
 * Wire.encodeFrame(Wire.errorFrame("UNKNOWN_TYPE", "Unknown message type: jump"))
 * // '{"type":"error","data":{"message":"Unknown message type: jump","code":"UNKNOWN_TYPE"}}'
 * ```
 *
 * @since 0.0.0
 */
import { Array as Arr, Either, Option, ParseResult, Schema, SchemaAST } from "effect"
import { plainStructDecoder } from "./internal/plainStruct.js"
import * as PyJson from "./internal/pyJson.js"
import type { StepResult } from "./OpenEnv.js"

/** A JSON object (the `data` of most frames). */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** `{"type":"reset","data":{...kwargs}}`; `data` defaults to `{}`. */
export const ResetMessage = Schema.Struct({
  type: Schema.Literal("reset"),
  data: Schema.optionalWith(JsonObject, { default: () => ({}) })
})
/** `{"type":"step","data":{...action}}`. */
export const StepMessage = Schema.Struct({ type: Schema.Literal("step"), data: JsonObject })
/** `{"type":"state"}` — carrying `data` is a VALIDATION_ERROR. */
export const StateMessage = Schema.Struct({ type: Schema.Literal("state") })
/** `{"type":"close"}` — the server ends the session without a reply. */
export const CloseMessage = Schema.Struct({ type: Schema.Literal("close") })
/** `{"type":"mcp","data":<JSON-RPC request>}`. */
export const McpMessage = Schema.Struct({ type: Schema.Literal("mcp"), data: JsonObject })

/** Every client → server `/ws` message. */
export const ClientMessage = Schema.Union(ResetMessage, StepMessage, StateMessage, CloseMessage, McpMessage)
/** A decoded client message. */
export type ClientMessage = typeof ClientMessage.Type

/** The message Schema for each known `type`, as OpenEnv dispatches on `type` before validating. */
export const clientMessageByType: Readonly<Record<string, Schema.Schema<any, any>>> = {
  reset: ResetMessage,
  step: StepMessage,
  state: StateMessage,
  close: CloseMessage,
  mcp: McpMessage
}

/** OpenEnv's `WSErrorCode`. */
export const ErrorCode = Schema.Literal(
  "INVALID_JSON",
  "UNKNOWN_TYPE",
  "VALIDATION_ERROR",
  "EXECUTION_ERROR",
  "CAPACITY_REACHED",
  "FACTORY_ERROR",
  "SESSION_ERROR"
)
/** One of OpenEnv's WebSocket error codes. */
export type ErrorCode = typeof ErrorCode.Type

/** The observation envelope: `reward` and `done` live only here; `metadata` is never sent. */
export const Envelope = Schema.Struct({
  observation: JsonObject,
  reward: Schema.NullOr(Schema.Union(Schema.Number, Schema.Boolean)),
  done: Schema.Boolean
})

/** Every server → client `/ws` frame. */
export const ServerMessage = Schema.Union(
  Schema.Struct({ type: Schema.Literal("observation"), data: Envelope }),
  Schema.Struct({ type: Schema.Literal("state"), data: JsonObject }),
  Schema.Struct({ type: Schema.Literal("mcp"), data: JsonObject }),
  Schema.Struct({
    type: Schema.Literal("error"),
    data: Schema.Struct({ message: Schema.String, code: Schema.String }, { key: Schema.String, value: Schema.Unknown })
  })
)
/** A decoded server message. */
export type ServerMessage = typeof ServerMessage.Type

/** A server frame as sent (field order matters for byte-level transcripts: `type` first, then `data`). */
export type Frame = { readonly type: string; readonly data: unknown }

/** The Schemas that say which numbers of an environment's frames are Python floats (its observation and state). */
export interface FrameSchemas {
  readonly observation: Schema.Schema.Any
  readonly state: Schema.Schema.Any
}

/** The envelope's Schema for `observation`: `reward` is a Python float (or bool/null), as OpenEnv's `Observation`. */
export const envelopeSchema = (observation: Schema.Schema.Any) =>
  Schema.Struct({
    observation,
    reward: Schema.NullOr(Schema.Union(Schema.Boolean, Schema.Number)),
    done: Schema.Boolean
  })

/** What {@link encodeFrame} remembers between one session's frames (the last long string and its escaped text). */
export type StringCache = PyJson.StringCache

/** A fresh {@link StringCache}, one per session. */
export const stringCache: () => StringCache = PyJson.stringCache

/**
 * Serialises a frame compactly, byte for byte as the Python twin: numbers typed `Schema.Number` in the environment's
 * observation/state Schemas (and every envelope `reward`) are written as Python floats (`0.0`, `1e-05`). A session
 * may pass its own `cache` ({@link stringCache}): a transcript that grows from frame to frame is then escaped only for
 * its new part; the text is the same either way.
 */
export const encodeFrame = (
  frame: Frame | JsonRpcResponse,
  schemas?: FrameSchemas,
  cache?: StringCache
): string => {
  if (schemas === undefined || !("type" in frame)) return PyJson.stringify(frame, undefined, cache)
  let built = frameSchemas.get(schemas)
  if (built === undefined) {
    built = {
      observation: Schema.Struct({ type: Schema.String, data: envelopeSchema(schemas.observation) }),
      state: Schema.Struct({ type: Schema.String, data: schemas.state })
    }
    frameSchemas.set(schemas, built)
  }
  return PyJson.stringify(
    frame,
    frame.type === "observation" ? built.observation : frame.type === "state" ? built.state : undefined,
    cache
  )
}

// Built once per environment, not per frame (frames are the hot path).
const frameSchemas = new WeakMap<FrameSchemas, { observation: Schema.Schema.Any; state: Schema.Schema.Any }>()

/** `{"type":"error","data":{"message","code",...extra}}`. */
export const errorFrame = (code: ErrorCode, message: string, extra?: Readonly<Record<string, unknown>>): Frame => ({
  type: "error",
  data: { message, code, ...extra }
})

/** Builds the envelope from what an instance returned, dropping any `reward`/`done`/`metadata` from the observation. */
export const envelope = (result: StepResult): Frame => {
  const given = result.observation as Record<string, unknown>
  // The usual observation (a plain object without those keys) goes out as is: a copy would have the same JSON.
  const observation = isBareObservation(given) ? given : withoutEnvelopeKeys(given)
  return { type: "observation", data: { observation, reward: result.reward ?? null, done: result.done } }
}

// (A `toJSON`, even a non-enumerable one the copy would lose, also takes the copy.)
const isBareObservation = (o: Record<string, unknown>): boolean =>
  Object.getPrototypeOf(o) === Object.prototype && !Object.hasOwn(o, "done") && !Object.hasOwn(o, "metadata") &&
  !Object.hasOwn(o, "reward") && !Object.hasOwn(o, "toJSON")

const withoutEnvelopeKeys = (o: Record<string, unknown>): Record<string, unknown> => {
  const { done: _done, metadata: _metadata, reward: _reward, ...observation } = o
  return observation
}

/** OpenEnv's capacity error text. */
export const capacityMessage = (active: number, max: number): string =>
  `Server at capacity: ${active}/${max} sessions active. Cannot accept new connections.`

/** OpenEnv's factory error text. */
export const factoryMessage = (factoryName: string): string =>
  `Environment factory '${factoryName}' failed to create instance.`

/** OpenEnv's refusal to serve a non-concurrent environment with more than one session. */
export const concurrencyRefusalMessage = (name: string, max: number): string =>
  `Environment '${name}' is not marked as SUPPORTS_CONCURRENT_SESSIONS. Cannot run with max_concurrent_envs=${max}. ` +
  "Either set max_concurrent_envs=1 or ensure the environment properly isolates session state and set " +
  "SUPPORTS_CONCURRENT_SESSIONS=True."

// ---------------------------------------------------------------------------------------------------------------
// pydantic-style validation errors
// ---------------------------------------------------------------------------------------------------------------

/** One entry of pydantic's `ValidationError.errors()`, keys in pydantic's order. */
export interface PydanticError {
  readonly type: string
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly input?: unknown
  readonly ctx?: Readonly<Record<string, unknown>>
  /** `https://errors.pydantic.dev/<version>/v/<type>`: present where OpenEnv sends `e.errors()` as is (the `/ws` path). */
  readonly url?: string
}

/** The pydantic minor version in the error `url`s (OpenEnv's textarena and openspiel images lock pydantic 2.13). */
export const PYDANTIC_VERSION = "2.13"

/** pydantic's documentation link for an error type, as `ValidationError.errors()` includes it. */
export const pydanticUrl = (type: string): string => `https://errors.pydantic.dev/${PYDANTIC_VERSION}/v/${type}`

/** One pydantic error with its `url` (the `/ws` form). */
export const pydanticError = (
  type: string,
  loc: ReadonlyArray<string | number>,
  msg: string,
  input: unknown
): PydanticError => ({ type, loc, msg, input, url: pydanticUrl(type) })

const typeNameOf = (ast: SchemaAST.AST): Option.Option<[string, string]> => {
  switch (ast._tag) {
    case "StringKeyword":
      return Option.some(["string_type", "Input should be a valid string"])
    case "NumberKeyword":
      return Option.some(["float_type", "Input should be a valid number"])
    case "BooleanKeyword":
      return Option.some(["bool_type", "Input should be a valid boolean"])
    case "TypeLiteral":
      return Option.some(
        ast.indexSignatures.length > 0 && ast.propertySignatures.length === 0
          ? ["dict_type", "Input should be a valid dictionary"]
          : ["model_type", "Input should be a valid dictionary or instance of the model"]
      )
    case "TupleType":
      return Option.some(["list_type", "Input should be a valid list"])
    case "Literal":
      return Option.some(["literal_error", `Input should be ${JSON.stringify(ast.literal)}`])
    case "Refinement": {
      const id = Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast))
      if (id === Schema.IntSchemaId) return Option.some(["int_type", "Input should be a valid integer"])
      return typeNameOf(ast.from)
    }
    case "Transformation":
      return typeNameOf(ast.from)
    default:
      return Option.none()
  }
}

/**
 * Converts an Effect `ParseError` into pydantic-style errors (`missing`, `extra_forbidden`, `*_type`, ...), with
 * `loc` as the path into the validated value (optionally prefixed).
 */
export const pydanticErrors = (
  error: ParseResult.ParseError,
  prefix: ReadonlyArray<string | number> = [],
  options: { readonly url?: boolean } = {}
): Array<PydanticError> => {
  const raw: Array<PydanticError> = []
  const out = {
    push: (e: PydanticError) => {
      raw.push(options.url === true ? { ...e, url: pydanticUrl(e.type) } : e)
    }
  }
  // `parent` is the object a missing field was looked up in: pydantic reports it as the error's `input`.
  let parent: unknown = undefined
  const walk = (issue: ParseResult.ParseIssue, path: ReadonlyArray<string | number>): void => {
    switch (issue._tag) {
      case "Pointer": {
        const keys = Arr.isArray(issue.path) ? issue.path : [issue.path]
        return walk(issue.issue, [...path, ...keys.map((k) => typeof k === "number" ? k : String(k))])
      }
      case "Composite": {
        const issues = (Arr.isArray(issue.issues) ? issue.issues : [issue.issues]) as ReadonlyArray<
          ParseResult.ParseIssue
        >
        const outer = parent
        parent = issue.actual
        for (const i of issues) walk(i, path)
        parent = outer
        return
      }
      case "Missing":
        out.push(
          options.url === true
            ? { type: "missing", loc: [...prefix, ...path], msg: "Field required", input: parent }
            : { type: "missing", loc: [...prefix, ...path], msg: "Field required" }
        )
        return
      case "Unexpected":
        out.push({
          type: "extra_forbidden",
          loc: [...prefix, ...path],
          msg: "Extra inputs are not permitted",
          input: issue.actual
        })
        return
      case "Refinement": {
        const isInt = Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(issue.ast)) === Schema.IntSchemaId
        if (issue.kind === "From") {
          if (isInt && issue.issue._tag === "Type") {
            out.push({
              type: "int_type",
              loc: [...prefix, ...path],
              msg: "Input should be a valid integer",
              input: issue.actual
            })
            return
          }
          return walk(issue.issue, path)
        }
        if (isInt) {
          out.push({
            type: "int_from_float",
            loc: [...prefix, ...path],
            msg: "Input should be a valid integer, got a number with a fractional part",
            input: issue.actual
          })
          return
        }
        out.push({ type: "value_error", loc: [...prefix, ...path], msg: messageOf(issue), input: issue.actual })
        return
      }
      case "Transformation":
        return walk(issue.issue, path)
      case "Type": {
        const [type, msg] = Option.getOrElse(typeNameOf(issue.ast), () => ["value_error", messageOf(issue)] as const)
        out.push({ type, loc: [...prefix, ...path], msg, input: issue.actual })
        return
      }
      case "Forbidden":
        out.push({ type: "value_error", loc: [...prefix, ...path], msg: messageOf(issue), input: issue.actual })
        return
    }
  }
  walk(error.issue, [])
  return raw
}

const messageOf = (issue: ParseResult.ParseIssue): string => {
  const formatted = ParseResult.ArrayFormatter.formatIssueSync(issue)
  return formatted.length > 0 ? formatted[0].message : "Invalid value"
}

/**
 * Decodes with unknown keys rejected (pydantic's `extra="forbid"`), reporting every issue. A plain Struct (the usual
 * action) is checked directly when the value fits it; Schema decodes everything else and reports the errors.
 */
export const decodeForbid = <A, I>(
  schema: Schema.Schema<A, I>
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const decode = Schema.decodeUnknownEither(schema, { onExcessProperty: "error", errors: "all" })
  const plain = plainStructDecoder(schema.ast)
  if (plain === undefined) return decode
  return (u) => {
    const value = plain(u)
    return value === undefined ? decode(u) : Either.right(value as A)
  }
}

/** What a `/ws` frame's JSON object is: a message, an unknown `type`, or a message that fails validation. */
export type DecodedClientMessage =
  | { readonly _tag: "Message"; readonly message: ClientMessage }
  | { readonly _tag: "UnknownType"; readonly type: unknown }
  | { readonly _tag: "Invalid"; readonly errors: ReadonlyArray<PydanticError> }

const isPlainObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The well-formed frames (nearly all of them), recognised without Schema decoding. */
const wellFormed = (type: string, message: Readonly<Record<string, unknown>>): ClientMessage | undefined => {
  const keys = Object.keys(message)
  if (keys.length > 2 || (keys.length === 2 && !Object.hasOwn(message, "data"))) return undefined
  const data = message.data
  switch (type) {
    case "reset":
      if (keys.length === 1) return { type: "reset", data: {} }
      return isPlainObject(data) ? { type: "reset", data } : undefined
    case "step":
      return keys.length === 2 && isPlainObject(data) ? { type: "step", data } : undefined
    case "mcp":
      return keys.length === 2 && isPlainObject(data) ? { type: "mcp", data } : undefined
    case "state":
      return keys.length === 1 ? { type: "state" } : undefined
    case "close":
      return keys.length === 1 ? { type: "close" } : undefined
  }
  return undefined
}

/**
 * Dispatches a `/ws` frame's object on its `type` (absent reads as `""`, as OpenEnv's `.get("type", "")`) and
 * validates it like OpenEnv's message models; errors are pydantic's, with their `url`s.
 */
export const decodeClientMessage = (message: Readonly<Record<string, unknown>>): DecodedClientMessage => {
  const type = Object.hasOwn(message, "type") ? message.type : ""
  if (typeof type !== "string" || !Object.hasOwn(clientMessageByType, type)) return { _tag: "UnknownType", type }
  const fast = wellFormed(type, message)
  if (fast !== undefined) return { _tag: "Message", message: fast }
  const decoded = decodeForbid(clientMessageByType[type])(message)
  return decoded._tag === "Left"
    ? { _tag: "Invalid", errors: pydanticErrors(decoded.left, [], { url: true }) }
    : { _tag: "Message", message: decoded.right as ClientMessage }
}

// ---------------------------------------------------------------------------------------------------------------
// JSON-RPC 2.0 (MCP paths)
// ---------------------------------------------------------------------------------------------------------------

/** JSON-RPC error codes used by OpenEnv. */
export const JsonRpcErrorCode = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  SERVER_ERROR: -32000
} as const

/** Default messages (`JsonRpcError.from_code`). */
export const jsonRpcDefaultMessage: Readonly<Record<number, string>> = {
  [-32700]: "Parse error",
  [-32600]: "Invalid Request",
  [-32601]: "Method not found",
  [-32602]: "Invalid params",
  [-32603]: "Internal error",
  [-32000]: "Server error"
}

/** A JSON-RPC request as OpenEnv validates it (`jsonrpc` exactly "2.0", unknown keys rejected). */
export const JsonRpcRequest = Schema.Struct({
  jsonrpc: Schema.Literal("2.0"),
  method: Schema.String,
  params: Schema.optionalWith(Schema.Unknown, { default: () => ({}) }),
  id: Schema.optionalWith(Schema.NullOr(Schema.Union(Schema.String, Schema.Int)), { default: () => null })
})
/** A decoded JSON-RPC 2.0 request. */
export type JsonRpcRequest = typeof JsonRpcRequest.Type

/** A JSON-RPC response: always `jsonrpc` and `id`, then exactly one of `result` / `error`. */
export type JsonRpcResponse =
  | { readonly jsonrpc: "2.0"; readonly id: string | number | null; readonly result: unknown }
  | {
    readonly jsonrpc: "2.0"
    readonly id: string | number | null
    readonly error: { readonly code: number; readonly message: string; readonly data: unknown }
  }

/** A success response. */
export const rpcResult = (id: string | number | null, result: unknown): JsonRpcResponse => ({
  jsonrpc: "2.0",
  id,
  result
})

/** An error response; `message` defaults to the code's standard text. */
export const rpcError = (
  id: string | number | null,
  code: number,
  message?: string,
  data: unknown = null
): JsonRpcResponse => ({
  jsonrpc: "2.0",
  id,
  error: { code, message: message ?? jsonRpcDefaultMessage[code] ?? "Error", data }
})

/** OpenEnv's client-side URL rule: strip `/`, http→ws, https→wss, no scheme→ws, then append `/ws`. */
export const toWebSocketUrl = (baseUrl: string, path = "/ws"): string => {
  let url = baseUrl.replace(/\/+$/, "")
  if (url.startsWith("http://")) url = "ws://" + url.slice("http://".length)
  else if (url.startsWith("https://")) url = "wss://" + url.slice("https://".length)
  else if (!url.startsWith("ws://") && !url.startsWith("wss://")) url = "ws://" + url
  return url + path
}
