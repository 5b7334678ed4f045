/**
 * Typed tools: the actions a model can take in an environment.
 *
 * A tool is a name, a description, a parameter Schema struct (each field annotated with its description)
 * and a success Schema. The OpenAI/Qwen function-calling definition the model sees is derived from the
 * Schema (never written twice), and the arguments the model sends are decoded with the same Schema.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { Tool } from "@envtrain/env"
 *
 * const Place = Tool.make("place", {
 *   description: "Place a number on the Sudoku board.",
 *   parameters: {
 *     row: Schema.Int.annotations({ description: "Row number (1-9)." }),
 *     col: Schema.Int.annotations({ description: "Column number (1-9)." }),
 *     number: Schema.Int.annotations({ description: "Number to place (1-9)." })
 *   },
 *   success: Schema.String
 * })
 * Place.definition // {"type":"function","function":{"name":"place",...,"required":["row","col","number"]}}}
 * ```
 *
 * @since 0.0.0
 */
import type { ParseResult } from "effect"
import { Effect, Either, Schema, SchemaAST } from "effect"
import { argumentProblems } from "./internal/argumentsError.js"
import * as PythonText from "./internal/pythonText.js"

/** Any typed failure of a tool: its `message` is the text the model sees. */
export interface ToolFailure {
  readonly _tag: string
  readonly message: string
}

/** A move the rules forbid (e.g. an unknown direction); the episode continues. */
export class InvalidMove extends Schema.TaggedError<InvalidMove>()("InvalidMove", { message: Schema.String }) {}

/** The episode has ended; calling a tool again fails with the reference's text (e.g. "Game over."). */
export class GameOver extends Schema.TaggedError<GameOver>()("GameOver", { message: Schema.String }) {}

/** A tool's own error (a `Definition` tool threw, or a served tool answered with an error): `message` is shown. */
export class ToolError extends Schema.TaggedError<ToolError>()("ToolError", { message: Schema.String }) {}

/** The model sent arguments the parameter Schema rejects; the message names the parameter. */
export class InvalidArguments extends Schema.TaggedError<InvalidArguments>()("InvalidArguments", {
  tool: Schema.String,
  message: Schema.String
}) {}

/** The model called a tool the environment does not have (TRL's text: "Tool <name> not found."). */
export class UnknownTool extends Schema.TaggedError<UnknownTool>()("UnknownTool", {
  tool: Schema.String,
  message: Schema.String
}) {}

/** The OpenAI/Qwen function-calling definition of a tool. */
export interface ToolDefinition {
  readonly type: "function"
  readonly function: {
    readonly name: string
    readonly description: string
    readonly parameters: {
      readonly type: "object"
      readonly properties: Readonly<Record<string, JsonSchema>>
      readonly required?: ReadonlyArray<string>
    }
    readonly return?: JsonSchema
  }
}

/** The subset of JSON Schema that tool definitions use. */
export type JsonSchema = { readonly [key: string]: unknown }

/** A typed tool. `Fields` are the parameter fields, `Success` the result Schema. */
export interface Tool<
  Name extends string,
  Fields extends Schema.Struct.Fields,
  Success extends Schema.Schema.Any
> {
  readonly name: Name
  readonly description: string
  readonly parameters: Schema.Struct<Fields>
  readonly success: Success
  /** The function-calling definition, derived from `parameters`. */
  readonly definition: ToolDefinition
}

/** Any tool (for lists and lookups). */
export interface Any {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Schema<any, any, never>
  readonly success: Schema.Schema<any, any, never>
  readonly definition: ToolDefinition
}

/** The decoded parameters of a tool. */
export type Params<T> = T extends Tool<any, infer F, any> ? Schema.Struct.Type<F> : never
/** The success value of a tool. */
export type Success<T> = T extends Tool<any, any, infer S> ? Schema.Schema.Type<S> : never

/**
 * Makes a tool. Parameters without a default are `required`; `Schema.optionalWith(X, { default })` makes one
 * optional. Literal unions become `enum`. `returns` (optional) adds TRL's `"return"` entry.
 */
export const make = <
  const Name extends string,
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- a tool without parameters has the empty fields record
  Fields extends Schema.Struct.Fields = {},
  Success extends Schema.Schema<any, any, never> = typeof Schema.String
>(name: Name, options: {
  readonly description: string
  readonly parameters?: Fields
  readonly success?: Success
  readonly returns?: string
}): Tool<Name, Fields, Success> => {
  const parameters = Schema.Struct((options.parameters ?? {}) as Fields)
  const success = (options.success ?? Schema.String) as Success
  return {
    name,
    description: options.description,
    parameters,
    success,
    definition: definitionOf(name, options.description, parameters.ast, success.ast, options.returns)
  }
}

const definitionOf = (
  name: string,
  description: string,
  parametersAst: SchemaAST.AST,
  successAst: SchemaAST.AST,
  returns: string | undefined
): ToolDefinition => {
  const object = objectSchema(parametersAst)
  const fn: Record<string, unknown> = {
    name,
    description,
    parameters: {
      type: "object",
      properties: object.properties,
      ...(object.required.length > 0 ? { required: object.required } : {})
    }
  }
  if (returns !== undefined) fn.return = { ...jsonSchemaOf(successAst), description: returns }
  return { type: "function", function: fn as ToolDefinition["function"] }
}

// The model sends the *encoded* side, so transformations are described by their `from`, but refinements are kept
// (Schema.Int must read "integer").
const objectSchema = (ast: SchemaAST.AST): { properties: Record<string, JsonSchema>; required: Array<string> } => {
  const literal = SchemaAST.isTransformation(ast) ? ast.from : ast
  const properties: Record<string, JsonSchema> = {}
  const required: Array<string> = []
  if (!SchemaAST.isTypeLiteral(literal)) return { properties, required }
  // `Schema.optionalWith(X, { default }).annotations(...)` annotates the decoded side's property.
  const decoded = SchemaAST.isTransformation(ast) && SchemaAST.isTypeLiteral(ast.to) ? ast.to : undefined
  for (const ps of literal.propertySignatures) {
    const key = String(ps.name)
    const schema = { ...jsonSchemaOf(ps.type) }
    const own = SchemaAST.getDescriptionAnnotation(ps)
    const typeSide = decoded?.propertySignatures.find((p) => p.name === ps.name)
    const onTypeSide = typeSide === undefined ? own : SchemaAST.getDescriptionAnnotation(typeSide)
    const description = own._tag === "Some" ? own : onTypeSide._tag === "Some" ? onTypeSide : descriptionOf(ps.type)
    if (description._tag === "Some") schema.description = description.value
    properties[key] = schema
    if (!ps.isOptional) required.push(key)
  }
  return { properties, required }
}

const withoutUndefined = (ast: SchemaAST.AST): SchemaAST.AST => {
  if (SchemaAST.isUnion(ast)) {
    const members = ast.types.filter((t) => !SchemaAST.isUndefinedKeyword(t))
    return members.length === 1 ? members[0] : SchemaAST.Union.make(members)
  }
  return ast
}

// Effect's built-in schemas carry generic descriptions ("a string", "an integer"); only user-written ones count.
const builtIns: ReadonlySet<SchemaAST.AST> = new Set([
  SchemaAST.stringKeyword,
  SchemaAST.numberKeyword,
  SchemaAST.booleanKeyword,
  SchemaAST.bigIntKeyword,
  SchemaAST.unknownKeyword,
  SchemaAST.anyKeyword,
  SchemaAST.objectKeyword,
  Schema.Int.ast,
  Schema.NonNegativeInt.ast,
  Schema.Positive.ast,
  Schema.NonNegative.ast,
  Schema.Finite.ast,
  Schema.NonEmptyString.ast,
  Schema.Trim.ast,
  Schema.Trimmed.ast
])

const descriptionOf = (ast: SchemaAST.AST) => {
  const inner = withoutUndefined(ast)
  for (const candidate of [ast, inner]) {
    if (builtIns.has(candidate)) continue
    const own = SchemaAST.getDescriptionAnnotation(candidate)
    if (own._tag === "Some") return own
  }
  return { _tag: "None" as const }
}

const literalType = (value: unknown) =>
  typeof value === "string"
    ? "string"
    : typeof value === "boolean"
    ? "boolean"
    : typeof value === "number"
    ? Number.isInteger(value) ? "integer" : "number"
    : value === null
    ? "null"
    : "string"

const isNull = (ast: SchemaAST.AST) => SchemaAST.isLiteral(ast) && ast.literal === null

// Python's typing flattens nested unions; a union of literals stays one member (Python's `Literal[...]`).
const unionMembers = (ast: SchemaAST.Union, out: Array<SchemaAST.AST> = []): Array<SchemaAST.AST> => {
  for (const t of ast.types) {
    if (SchemaAST.isUnion(t) && !t.types.every(SchemaAST.isLiteral)) unionMembers(t, out)
    else out.push(t)
  }
  return out
}

const literalValues = (asts: ReadonlyArray<SchemaAST.AST>) => asts.map((t) => (t as SchemaAST.Literal).literal)

// transformers' enum: the JSON types of the values, each once, in the order they first appear.
const enumSchema = (values: ReadonlyArray<unknown>): JsonSchema => {
  const types = [...new Set(values.map(literalType))]
  return { type: types.length === 1 ? types[0] : types, enum: values }
}

/**
 * A union as transformers' `get_json_schema` writes `Union[...]`: null members make it `nullable` (so
 * `Schema.NullOr(X)` reads as `Optional[X]`); one other member is that member's schema; members that are plain
 * types become a sorted list of type names; anything else `anyOf`. A union of literals alone is an enum.
 */
const unionSchema = (ast: SchemaAST.Union): JsonSchema => {
  const members = unionMembers(ast)
  const rest = members.filter((t) => !isNull(t))
  if (rest.length === members.length && members.every(SchemaAST.isLiteral)) return enumSchema(literalValues(members))
  if (rest.length === 0) return { type: "null" }
  let schema: JsonSchema
  if (rest.every(SchemaAST.isLiteral)) schema = enumSchema(literalValues(rest))
  else {
    const schemas = rest.map(jsonSchemaOf)
    const plain = schemas.every((x) => Object.keys(x).length === 1 && typeof x.type === "string")
    const names = plain ? [...new Set(schemas.map((x) => x.type as string))].sort() : []
    schema = schemas.length === 1
      ? schemas[0]
      : plain
      ? { type: names.length === 1 ? names[0] : names }
      : { anyOf: schemas }
  }
  return rest.length < members.length ? { ...schema, nullable: true } : schema
}

const jsonSchemaOf = (input: SchemaAST.AST): JsonSchema => {
  const ast = withoutUndefined(input)
  switch (ast._tag) {
    case "StringKeyword":
    case "TemplateLiteral":
      return { type: "string" }
    case "NumberKeyword":
      return { type: "number" }
    case "BooleanKeyword":
      return { type: "boolean" }
    case "ObjectKeyword":
      return { type: "object" }
    case "Literal":
      return ast.literal === null ? { type: "null" } : enumSchema([ast.literal])
    case "Enums":
      return enumSchema(ast.enums.map(([, v]) => v))
    case "Union":
      return unionSchema(ast)
    case "Refinement": {
      const annotation = SchemaAST.getJSONSchemaAnnotation(ast)
      if (annotation._tag === "Some" && (annotation.value as JsonSchema).type === "integer") return { type: "integer" }
      return jsonSchemaOf(ast.from)
    }
    case "Transformation":
      return jsonSchemaOf(ast.from)
    case "TupleType": {
      if (ast.elements.length === 0 && ast.rest.length === 1) {
        return { type: "array", items: jsonSchemaOf(ast.rest[0].type) }
      }
      // A fixed-length tuple (Python's `tuple[A, B]`).
      if (ast.rest.length === 0 && ast.elements.length > 0) {
        return { type: "array", prefixItems: ast.elements.map((e) => jsonSchemaOf(e.type)) }
      }
      return { type: "array" }
    }
    case "TypeLiteral": {
      if (ast.propertySignatures.length === 0 && ast.indexSignatures.length === 1) {
        return { type: "object", additionalProperties: jsonSchemaOf(ast.indexSignatures[0].type) }
      }
      const object = objectSchema(ast)
      return {
        type: "object",
        properties: object.properties,
        ...(object.required.length > 0 ? { required: object.required } : {})
      }
    }
    case "VoidKeyword":
    case "UndefinedKeyword":
      return { type: "null" }
    case "Suspend":
      return jsonSchemaOf(ast.f())
    default:
      return {}
  }
}

/**
 * Decodes the raw arguments the model sent (parsed JSON) with the tool's parameter Schema. Unknown keys are
 * rejected, as Python rejects an unexpected keyword argument. The error message names the parameter and the rule it
 * broke ("parameter 'count' must be between 1 and 3, got 7").
 */
export const decodeArguments = <T extends Any>(
  tool: T,
  args: unknown
): Effect.Effect<Schema.Schema.Type<T["parameters"]>, InvalidArguments> =>
  Effect.suspend(() => {
    const input = args ?? {}
    if (typeof input !== "object" || Array.isArray(input)) {
      return Effect.fail(
        new InvalidArguments({
          tool: tool.name,
          message: `Invalid arguments for tool '${tool.name}': arguments must be a JSON object, got ${
            JSON.stringify(input)
          }`
        })
      )
    }
    // An empty Struct accepts anything, so unexpected keys are checked against the declared names first.
    const declared = Object.keys(tool.definition.function.parameters.properties)
    const unexpected = Object.keys(input).filter((k) => !declared.includes(k))
    if (unexpected.length > 0) {
      return Effect.fail(
        new InvalidArguments({
          tool: tool.name,
          message: `Invalid arguments for tool '${tool.name}': ${
            unexpected.map((k) => `unexpected parameter '${k}'`).join("; ")
          }`
        })
      )
    }
    const result = Schema.decodeUnknownEither(tool.parameters)(input, { onExcessProperty: "error" })
    if (Either.isRight(result)) return Effect.succeed(result.right)
    return Effect.fail(
      new InvalidArguments({ tool: tool.name, message: formatArgumentsError(tool.name, result.left) })
    )
  })

const formatArgumentsError = (toolName: string, error: ParseResult.ParseError) =>
  `Invalid arguments for tool '${toolName}': ${argumentProblems(error.issue).join("; ")}`

/** Encodes a tool's success value into the text the model sees (strings as is, anything else as JSON). */
export const encodeResult = <T extends Any>(tool: T, value: unknown): Effect.Effect<string> =>
  Schema.encodeUnknown(tool.success)(value).pipe(
    Effect.map((encoded) => typeof encoded === "string" ? encoded : JSON.stringify(encoded)),
    Effect.orDie
  )

/**
 * Serialises like Python's `json.dumps(x, ensure_ascii=False)` (separators `", "` and `": "`), which is what
 * transformers' `tojson` filter writes into chat templates; use it to render tool definitions byte-identically.
 */
export const pythonJson: (value: unknown) => string = PythonText.pythonJson
