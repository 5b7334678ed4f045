// A shortcut for decoding the common action: a Struct of strings, numbers, booleans and integers, with no excess
// keys. Schema decoding costs microseconds per frame; these checks cost nanoseconds. Anything else (a missing,
// wrongly typed, excess or otherwise typed property) returns undefined, and the caller decodes with Schema as before,
// which also produces the errors.
import { Option, Schema, SchemaAST } from "effect"

type Check = (u: unknown) => boolean

const checkOf = (ast: SchemaAST.AST): Check | undefined => {
  switch (ast._tag) {
    case "StringKeyword":
      return (u) => typeof u === "string"
    case "NumberKeyword":
      return (u) => typeof u === "number"
    case "BooleanKeyword":
      return (u) => typeof u === "boolean"
    case "Refinement":
      // `Schema.Int` exactly (Number.isSafeInteger, as its filter); other refinements go to Schema.
      return ast.from._tag === "NumberKeyword" &&
          Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast)) === Schema.IntSchemaId
        ? (u) => Number.isSafeInteger(u)
        : undefined
    default:
      return undefined
  }
}

/**
 * The decoder of a plain Struct (property signatures only, string keys), or undefined for any other Schema. It
 * returns the decoded value (declared keys, in declared order) only when Schema decoding with excess properties
 * forbidden would succeed with the same value.
 */
export const plainStructDecoder = (
  ast: SchemaAST.AST
): ((u: unknown) => Record<string, unknown> | undefined) | undefined => {
  if (ast._tag !== "TypeLiteral" || ast.indexSignatures.length > 0) return undefined
  const properties: Array<{ readonly name: string; readonly optional: boolean; readonly check: Check | undefined }> = []
  for (const p of ast.propertySignatures) {
    if (typeof p.name !== "string" || p.name === "__proto__") return undefined
    // An optional property whose Schema has no shortcut still allows the shortcut when the key is absent.
    properties.push({ name: p.name, optional: p.isOptional, check: checkOf(p.type) })
  }
  return (u) => {
    if (typeof u !== "object" || u === null || Array.isArray(u)) return undefined
    const input = u as Record<string, unknown>
    const out: Record<string, unknown> = {}
    let present = 0
    for (const p of properties) {
      if (Object.hasOwn(input, p.name)) {
        const value = input[p.name]
        if (p.check === undefined || !p.check(value)) return undefined
        out[p.name] = value
        present++
      } else if (!p.optional) return undefined
    }
    // An excess key: Schema reports it.
    return Object.keys(input).length === present ? out : undefined
  }
}
