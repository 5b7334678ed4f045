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
  const [mantissa, expText] = Math.abs(x).toExponential().split("e")
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

/** Strips wrappers down to what decides int vs float; `undefined` means "no Schema here". */
const resolve = (ast: SchemaAST.AST | undefined, value: unknown): SchemaAST.AST | undefined => {
  while (ast !== undefined) {
    const wire = ast.annotations[WireSchemaId]
    if (Schema.isSchema(wire)) ast = wire.ast
    else if (ast._tag === "Refinement") {
      if (Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast)) === Schema.IntSchemaId) return ast
      ast = ast.from
    } else if (ast._tag === "Transformation") ast = ast.to
    else if (ast._tag === "Suspend") ast = ast.f()
    else if (ast._tag === "Union") ast = ast.types.find((t) => Schema.is(Schema.make(t))(value))
    else return ast
  }
  return undefined
}

const fieldAst = (ast: SchemaAST.AST | undefined, key: string): SchemaAST.AST | undefined => {
  if (ast === undefined || ast._tag !== "TypeLiteral") return undefined
  const property = ast.propertySignatures.find((p) => p.name === key)
  if (property !== undefined) return property.type
  return ast.indexSignatures.find((s) => s.parameter._tag === "StringKeyword")?.type
}

const elementAst = (ast: SchemaAST.AST | undefined, i: number): SchemaAST.AST | undefined => {
  if (ast === undefined || ast._tag !== "TupleType") return undefined
  return i < ast.elements.length ? ast.elements[i].type : ast.rest[0]?.type
}

const write = (value: unknown, schema: SchemaAST.AST | undefined): string | undefined => {
  if (isObject(value) && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON: () => unknown }).toJSON()
  }
  const ast = resolve(schema, value)
  if (typeof value === "number") {
    return ast?._tag === "NumberKeyword" || !Number.isInteger(value) ? floatRepr(value) : JSON.stringify(value)
  }
  if (Array.isArray(value)) {
    return `[${value.map((v, i) => write(v, elementAst(ast, i)) ?? "null").join(",")}]`
  }
  if (isObject(value)) {
    const parts: Array<string> = []
    for (const [k, v] of Object.entries(value)) {
      const text = write(v, fieldAst(ast, k))
      if (text !== undefined) parts.push(`${JSON.stringify(k)}:${text}`)
    }
    return `{${parts.join(",")}}`
  }
  return JSON.stringify(value)
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
export const stringify = (value: unknown, schema?: Schema.Schema.Any): string => write(value, schema?.ast) ?? "null"
