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

const toJson = (value: unknown): unknown =>
  isObject(value) && typeof (value as { toJSON?: unknown }).toJSON === "function"
    ? (value as { toJSON: () => unknown }).toJSON()
    : value

const intOrFloat = (n: number): string => Number.isInteger(n) ? JSON.stringify(n) : floatRepr(n)

// `"key":` for the keys seen so far (field names repeat on every frame); bounded, as Record keys are open-ended.
const quotedKeys = new Map<string, string>()
const quoted = (key: string): string => {
  let text = quotedKeys.get(key)
  if (text === undefined) {
    text = JSON.stringify(key) + ":"
    if (quotedKeys.size < 4096) quotedKeys.set(key, text)
  }
  return text
}

/** A writer from how its own numbers are written and the writers of its children. */
const node = (
  number: (n: number) => string,
  element: (i: number) => Writer,
  field: (key: string) => Writer
): Writer =>
(value) => {
  if (typeof value === "number") return number(value)
  if (Array.isArray(value)) {
    let out = "["
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ","
      out += element(i)(toJson(value[i])) ?? "null"
    }
    return out + "]"
  }
  if (isObject(value)) {
    let out = "{"
    let first = true
    for (const key of Object.keys(value)) {
      const text = field(key)(toJson(value[key]))
      if (text === undefined) continue
      out += (first ? "" : ",") + quoted(key) + text
      first = false
    }
    return out + "}"
  }
  return JSON.stringify(value)
}

/** No Schema, value by value: what JSON.stringify writes, except fractional numbers in Python's repr. */
const slowAnyWriter: Writer = node(intOrFloat, () => anyWriter, () => anyWriter)

// JavaScript and Python write a fractional number alike except below 1e-4: JS keeps fixed notation down to 1e-7
// (`0.00001` where Python writes `1e-05`) and writes one-digit exponents (`1e-7`, Python `1e-07`). Integers go through
// JSON.stringify on both paths. A match (possibly inside a string) only sends the value down the slow path.
// Two plain substring scans (faster than a regular expression over a whole frame) rule both out.
const mayHoldJsOnlyNumber = (text: string): boolean => text.includes("0.0000") || text.includes("e-")

/** No Schema: JSON.stringify in one native pass, unless its text may hold a number Python writes differently. */
const anyWriter: Writer = (value) => {
  if (typeof value === "string") return JSON.stringify(value)
  const text = JSON.stringify(value)
  return text === undefined || !mayHoldJsOnlyNumber(text) ? text : slowAnyWriter(value)
}
/** `Schema.Number`: every number is a float; its children have no Schema. */
const floatWriter: Writer = node(floatRepr, () => anyWriter, () => anyWriter)

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

const writerOf = (ast: SchemaAST.AST | undefined): Writer => {
  if (ast === undefined) return anyWriter
  let writer = writers.get(ast)
  if (writer === undefined) {
    // Children are compiled on first use, so recursive (Suspend) Schemas terminate.
    writer = floatFree(ast) ? anyWriter : compile(ast)
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
      const literal = ast
      const properties = new Map(literal.propertySignatures.map((p) => [p.name, p.type] as const))
      const index = literal.indexSignatures.find((s) => s.parameter._tag === "StringKeyword")?.type
      const byKey = new Map<string, Writer>()
      let indexWriter: Writer | undefined
      return node(intOrFloat, () => anyWriter, (key) => {
        const known = byKey.get(key)
        if (known !== undefined) return known
        const type = properties.get(key)
        if (type !== undefined) {
          // Only declared fields are remembered (a Record's keys are open-ended).
          const writer = writerOf(type)
          byKey.set(key, writer)
          return writer
        }
        return index === undefined ? anyWriter : (indexWriter ??= writerOf(index))
      })
    }
    case "TupleType": {
      const tuple = ast
      const rest = tuple.rest[0]?.type
      let restWriter: Writer | undefined
      return node(
        intOrFloat,
        (i) => i < tuple.elements.length ? writerOf(tuple.elements[i].type) : (restWriter ??= writerOf(rest)),
        () => anyWriter
      )
    }
    default:
      return anyWriter
  }
}

/**
 * Serialises `value` compactly, writing numbers typed `Schema.Number` by `schema` as Python floats.
 *
 * @example
 * ```ts
 * stringify({ reward: 0, step: 1 }, Schema.Struct({ reward: Schema.Number, step: Schema.Int }))
 * // '{"reward":0.0,"step":1}'
 * ```
 */
export const stringify = (value: unknown, schema?: Schema.Schema.Any): string =>
  writerOf(schema?.ast)(toJson(value)) ?? "null"

const reprString = (s: string): string => {
  const quote = s.includes("'") && !s.includes("\"") ? "\"" : "'"
  let out = quote
  for (const ch of s) {
    const code = ch.codePointAt(0)!
    if (ch === "\\" || ch === quote) out += "\\" + ch
    else if (ch === "\n") out += "\\n"
    else if (ch === "\r") out += "\\r"
    else if (ch === "\t") out += "\\t"
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0")
    else out += ch
  }
  return out + quote
}

/** Python's `repr` of a parsed JSON value (`None`, `True`, `'text'`, `[1, 2]`, `{'k': 0.5}`). */
export const pythonRepr = (value: unknown): string => {
  if (value === null || value === undefined) return "None"
  if (value === true) return "True"
  if (value === false) return "False"
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : floatRepr(value)
  if (typeof value === "string") return reprString(value)
  if (Array.isArray(value)) return `[${value.map(pythonRepr).join(", ")}]`
  if (isObject(value)) {
    return `{${Object.entries(value).map(([k, v]) => `${reprString(k)}: ${pythonRepr(v)}`).join(", ")}}`
  }
  return String(value)
}

/** Python's `str` of a parsed JSON value: a string as is, anything else as its `repr` (f-string formatting). */
export const pythonStr = (value: unknown): string => typeof value === "string" ? value : pythonRepr(value)
