// Compact JSON as the Python twin writes it: a number is a Python float where the value's Schema says
// `Schema.Number` (pydantic `float`), so 0 goes out as `0.0` and 1e-5 as `1e-05`; `Schema.Int` and numbers without a
// Schema stay as JavaScript writes them (an integral one is a Python int; a fractional one can only be a float).
import { Option, Schema, SchemaAST } from "effect"

/**
 * Annotation id for an encoding-only Schema: where a field's declared Schema is looser than the values the twin sends
 * (e.g. `info: Dict[str, Any]` carrying `reward_signals: Dict[str, float]`), `{ [WireSchemaId]: schema }` tells the
 * encoder which numbers are floats without changing the served `/schema`.
 */
export const WireSchemaId: unique symbol = Symbol.for("@envtrain/env/PyJson/WireSchema")

/** Python's `repr(float)`: shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16, else `d.ddde±XX`. */
export const floatRepr = (x: number): string => {
  // Non-finite floats: pydantic's default (`ser_json_inf_nan="null"`) and what a JSON parser can read.
  if (!Number.isFinite(x)) return "null"
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0"
  const magnitude = Math.abs(x)
  if (magnitude >= 1e-4 && magnitude < 1e16) {
    // Both languages write the shortest round-trip digits in fixed notation here; Python adds ".0" to integers.
    const text = String(x)
    return text.includes(".") ? text : text + ".0"
  }
  const [mantissa, expText] = magnitude.toExponential().split("e")
  const exp = Number(expText)
  const digits = mantissa.replace(".", "")
  const sign = x < 0 ? "-" : ""
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, "0")
  const frac = digits.slice(exp + 1)
  return `${sign}${whole}.${frac.length > 0 ? frac : "0"}`
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

// The encoder is compiled once per Schema node (frames are the hot path): each node's writer knows statically how its
// numbers are written and which writer each field or element gets; only unions are resolved per value.

/** Writes a value that has already been through `toJSON`; `undefined` means "omit" (as JSON.stringify). */
type Writer = (value: unknown) => string | undefined

/** How an object's key is written: its `"key":` prefix and its value's writer (one lookup per key). */
interface Field {
  readonly name: string
  readonly prefix: string
  readonly writer: Writer
}

const toJson = (value: unknown): unknown =>
  isObject(value) && typeof (value as { toJSON?: unknown }).toJSON === "function"
    ? (value as { toJSON: () => unknown }).toJSON()
    : value

const intOrFloat = (n: number): string => Number.isInteger(n) ? JSON.stringify(n) : floatRepr(n)

/**
 * The last long string written and its escaped text (the JSON without its quotes), per encoding (a session passes its
 * own): an observation that carries a growing transcript (TextArena's) is escaped only for what was appended since
 * the previous frame.
 */
export interface StringCache {
  raw: string
  escaped: string
}

/** An empty cache for one sequence of encodings (e.g. one session's frames). */
export const stringCache = (): StringCache => ({ raw: "", escaped: "" })

// Shorter strings are escaped directly: the prefix check would cost about as much as it saves.
const CACHED_MIN_LENGTH = 256

// The cache of the stringify call in progress (none outside one); stringify saves and restores it, as a toJSON may
// re-enter the encoder.
let activeCache: StringCache | undefined

const writeString = (s: string): string => {
  const cache = activeCache
  if (cache === undefined || s.length < CACHED_MIN_LENGTH) return JSON.stringify(s)
  const raw = cache.raw
  // Escaping is per character, so `raw + tail` escapes to the escaped `raw` followed by the escaped tail; except that
  // a high surrogate ending `raw` could pair with a low one starting the tail (two lone halves are written
  // differently), so then the whole string is escaped. (`slice` + `===` compares flat memory; `startsWith` goes
  // character by character, slower than escaping.)
  if (
    raw.length > 0 && s.length >= raw.length && s.slice(0, raw.length) === raw &&
    (raw.charCodeAt(raw.length - 1) & 0xfc00) !== 0xd800
  ) {
    if (s.length > raw.length) {
      const tail = JSON.stringify(s.slice(raw.length))
      cache.escaped += tail.slice(1, -1)
      cache.raw = s
    }
  } else {
    const json = JSON.stringify(s)
    cache.raw = s
    cache.escaped = json.slice(1, -1)
    return json
  }
  return "\"" + cache.escaped + "\""
}

// `"key":` for the keys seen so far (field names repeat on every frame); bounded, as Record keys are open-ended.
const anyFields = new Map<string, Field>()
const anyField = (key: string): Field => {
  let field = anyFields.get(key)
  if (field === undefined) {
    field = { name: key, prefix: JSON.stringify(key) + ":", writer: anyWriter }
    if (anyFields.size < 4096) anyFields.set(key, field)
  }
  return field
}

const noFields: ReadonlyArray<Field> = []

/** `declared` are a Struct's fields in order: keys in that order (the usual object) skip the lookup. */
const writeObject = (
  value: Record<string, unknown>,
  fieldOf: (key: string) => Field,
  declared: ReadonlyArray<Field>
): string => {
  let out = "{"
  let first = true
  const keys = Object.keys(value)
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]
    const field = i < declared.length && declared[i].name === key ? declared[i] : fieldOf(key)
    const text = field.writer(toJson(value[key]))
    if (text === undefined) continue
    out += first ? field.prefix + text : "," + field.prefix + text
    first = false
  }
  return out + "}"
}

/** A writer from how its own numbers are written and the writers of its children. */
const node = (
  number: (n: number) => string,
  element: (i: number) => Writer,
  fieldOf: (key: string) => Field,
  declared: ReadonlyArray<Field> = noFields
): Writer =>
(value) => {
  if (typeof value === "number") return number(value)
  if (typeof value === "string") return writeString(value)
  if (Array.isArray(value)) {
    let out = "["
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ","
      out += element(i)(toJson(value[i])) ?? "null"
    }
    return out + "]"
  }
  if (isObject(value)) return writeObject(value, fieldOf, declared)
  return JSON.stringify(value)
}

/** No Schema, value by value: what JSON.stringify writes, except fractional numbers in Python's repr. */
const slowAnyWriter: Writer = node(intOrFloat, () => anyWriter, anyField)

// JavaScript and Python write a fractional number alike except below 1e-4: JS keeps fixed notation down to 1e-7
// (`0.00001` where Python writes `1e-05`) and writes one-digit exponents (`1e-7`, Python `1e-07`). Integers go through
// JSON.stringify on both paths. A match (possibly inside a string) only sends the value down the slow path.
// Two plain substring scans (faster than a regular expression over a whole frame) rule both out.
const mayHoldJsOnlyNumber = (text: string): boolean => text.includes("0.0000") || text.includes("e-")

/** No Schema: JSON.stringify in one native pass, unless its text may hold a number Python writes differently. */
const anyWriter: Writer = (value) => {
  // Scalars directly (what the scan and its slow path would give: a number is an int or a float by its value).
  if (typeof value === "string") return writeString(value)
  if (typeof value === "number") return intOrFloat(value)
  if (typeof value === "boolean") return value ? "true" : "false"
  if (value === null) return "null"
  const text = JSON.stringify(value)
  return text === undefined || !mayHoldJsOnlyNumber(text) ? text : slowAnyWriter(value)
}
/** `Schema.Number`: every number is a float; its children have no Schema. */
const floatWriter: Writer = node(floatRepr, () => anyWriter, anyField)

const writers = new WeakMap<SchemaAST.AST, Writer>()

/**
 * True when no number under `ast` is declared a float, so its values write as with no Schema (one native
 * JSON.stringify instead of a writer per node). Recursive (Suspend) Schemas count as having floats.
 */
const floatFree = (ast: SchemaAST.AST): boolean => {
  const wire = ast.annotations[WireSchemaId]
  if (Schema.isSchema(wire)) return floatFree(wire.ast)
  switch (ast._tag) {
    case "Refinement":
      return Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast)) === Schema.IntSchemaId || floatFree(ast.from)
    case "Transformation":
      return floatFree(ast.to)
    case "Suspend":
    case "NumberKeyword":
      return false
    case "Union":
      return ast.types.every(floatFree)
    case "TypeLiteral":
      return ast.propertySignatures.every((p) => floatFree(p.type)) &&
        ast.indexSignatures.every((i) => floatFree(i.type))
    case "TupleType":
      return ast.elements.every((e) => floatFree(e.type)) && ast.rest.every((r) => floatFree(r.type))
    default:
      return true
  }
}

/**
 * True for a Struct that declares a string field, or an array of them (e.g. a list of chat messages): written node by
 * node, its strings skip the number scan over their text (and long ones use the string cache), which beats one
 * native pass plus that scan.
 */
const holdsTextFields = (ast: SchemaAST.AST): boolean => {
  switch (ast._tag) {
    case "TypeLiteral":
      return ast.propertySignatures.some((p) => p.type._tag === "StringKeyword")
    case "TupleType":
      return ast.elements.length === 0 && ast.rest.length === 1 && holdsTextFields(ast.rest[0].type)
    default:
      return false
  }
}

const writerOf = (ast: SchemaAST.AST | undefined): Writer => {
  if (ast === undefined) return anyWriter
  let writer = writers.get(ast)
  if (writer === undefined) {
    if (floatFree(ast) && !holdsTextFields(ast)) writer = anyWriter
    else {
      // A recursive (Suspend) Schema reaches this node again while it compiles: it gets this forwarder.
      const compiled: { writer?: Writer } = {}
      writers.set(ast, (value) => compiled.writer!(value))
      writer = compiled.writer = compile(ast)
    }
    writers.set(ast, writer)
  }
  return writer
}

/**
 * `Schema.is` for a union member, with the common cases (keywords, literals, a `Schema.Record` of those) checked
 * directly: a union is resolved per value, and `Schema.is` costs microseconds per call.
 */
const guardOf = (ast: SchemaAST.AST): (u: unknown) => boolean => {
  if (ast.annotations[WireSchemaId] === undefined) {
    switch (ast._tag) {
      case "NumberKeyword":
        return (u) => typeof u === "number"
      case "StringKeyword":
        return (u) => typeof u === "string"
      case "BooleanKeyword":
        return (u) => typeof u === "boolean"
      case "UndefinedKeyword":
        return (u) => u === undefined
      case "UnknownKeyword":
      case "AnyKeyword":
        return () => true
      case "Literal": {
        const literal = ast.literal
        return (u) => u === literal
      }
      case "Union": {
        // e.g. the envelope's reward, NullOr(Union(Boolean, Number)): a value fits a union if it fits a member.
        const members = ast.types.map(guardOf)
        return (u) => members.some((is) => is(u))
      }
      case "TypeLiteral": {
        const [index] = ast.indexSignatures
        if (ast.propertySignatures.length > 0 || ast.indexSignatures.length !== 1) break
        if (index.parameter._tag !== "StringKeyword") break
        const value = index.type._tag === "NumberKeyword" || index.type._tag === "StringKeyword" ||
            index.type._tag === "BooleanKeyword" || index.type._tag === "UnknownKeyword"
          ? guardOf(index.type)
          : undefined
        if (value === undefined) break
        return (u) => {
          if (typeof u !== "object" || u === null || Array.isArray(u)) return false
          for (const key of Object.keys(u)) if (!value((u as Record<string, unknown>)[key])) return false
          return true
        }
      }
    }
  }
  return Schema.is(Schema.make(ast))
}

/** Strips the wrappers that do not depend on the value down to what decides int vs float. */
const compile = (start: SchemaAST.AST): Writer => {
  let ast = start
  for (;;) {
    const wire = ast.annotations[WireSchemaId]
    if (Schema.isSchema(wire)) ast = wire.ast
    else if (ast._tag === "Refinement") {
      // `Schema.Int` writes like no Schema at all (an integral number is an int, a fractional one a float).
      if (Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast)) === Schema.IntSchemaId) return anyWriter
      ast = ast.from
    } else if (ast._tag === "Transformation") ast = ast.to
    else if (ast._tag === "Suspend") ast = ast.f()
    else break
  }
  switch (ast._tag) {
    case "Union": {
      const members = ast.types.map((t) => ({ is: guardOf(t), ast: t, writer: undefined as Writer | undefined }))
      return (value) => {
        for (const m of members) if (m.is(value)) return (m.writer ??= writerOf(m.ast))(value)
        return anyWriter(value)
      }
    }
    case "NumberKeyword":
      return floatWriter
    case "TypeLiteral": {
      // Declared fields get their writer and prefix once, here; other keys go to the index signature's writer.
      const declared = new Map<string, Field>()
      for (const p of ast.propertySignatures) {
        if (typeof p.name === "string") {
          declared.set(p.name, { name: p.name, prefix: JSON.stringify(p.name) + ":", writer: writerOf(p.type) })
        }
      }
      const inOrder = [...declared.values()]
      const index = ast.indexSignatures.find((s) => s.parameter._tag === "StringKeyword")?.type
      const indexed = new Map<string, Field>()
      let indexWriter: Writer | undefined
      return node(intOrFloat, () => anyWriter, (key) => {
        const known = declared.get(key)
        if (known !== undefined) return known
        if (index === undefined) return anyField(key)
        let field = indexed.get(key)
        if (field === undefined) {
          field = { name: key, prefix: JSON.stringify(key) + ":", writer: indexWriter ??= writerOf(index) }
          // Bounded: a Record's keys are open-ended.
          if (indexed.size < 4096) indexed.set(key, field)
        }
        return field
      }, inOrder)
    }
    case "TupleType": {
      const elements = ast.elements.map((e) => writerOf(e.type))
      const rest = ast.rest[0]?.type
      let restWriter: Writer | undefined
      return node(
        intOrFloat,
        (i) => i < elements.length ? elements[i] : (restWriter ??= writerOf(rest)),
        anyField
      )
    }
    default:
      return anyWriter
  }
}

/**
 * Serialises `value` compactly, writing numbers typed `Schema.Number` by `schema` as Python floats. With a `cache`
 * (one per sequence of related values, e.g. a session's frames), a long string that extends the previous one is
 * escaped only for its new part; the text is the same either way.
 *
 * @example
 * ```ts
 * stringify({ reward: 0, step: 1 }, Schema.Struct({ reward: Schema.Number, step: Schema.Int }))
 * // '{"reward":0.0,"step":1}'
 * ```
 */
export const stringify = (value: unknown, schema?: Schema.Schema.Any, cache?: StringCache): string => {
  const outer = activeCache
  activeCache = cache
  try {
    return writerOf(schema?.ast)(toJson(value)) ?? "null"
  } finally {
    activeCache = outer
  }
}
