/**
 * The text a model reads when its tool arguments are rejected: each broken rule stated as a rule ("parameter 'count'
 * must be between 1 and 3, got 7"). Effect's own formatter says "Expected <description>", and a parameter's
 * description is written for the model's prompt ("How many dice to roll"), not as the rule it broke.
 */
import { Option, ParseResult, SchemaAST } from "effect"

const show = (u: unknown): string => {
  if (u === undefined) return "nothing"
  try {
    return JSON.stringify(u) ?? String(u)
  } catch {
    return String(u)
  }
}

/** The rule a refinement states, from the JSON Schema it contributes (what the model's schema says too). */
const refinementRule = (ast: SchemaAST.Refinement): string | undefined => {
  const j = Option.getOrUndefined(SchemaAST.getJSONSchemaAnnotation(ast)) as Record<string, unknown> | undefined
  if (j === undefined) return undefined
  const n = (k: string) => typeof j[k] === "number" ? j[k] as number : undefined
  const [min, max, xmin, xmax] = [n("minimum"), n("maximum"), n("exclusiveMinimum"), n("exclusiveMaximum")]
  if (min !== undefined && max !== undefined) return `between ${min} and ${max}`
  if (min !== undefined) return `at least ${min}`
  if (max !== undefined) return `at most ${max}`
  if (xmin !== undefined) return `greater than ${xmin}`
  if (xmax !== undefined) return `less than ${xmax}`
  const [minLength, maxLength] = [n("minLength"), n("maxLength")]
  if (minLength !== undefined && maxLength !== undefined) {
    return minLength === maxLength
      ? `exactly ${minLength} characters long`
      : `between ${minLength} and ${maxLength} characters long`
  }
  if (minLength !== undefined) return `at least ${minLength} character${minLength === 1 ? "" : "s"} long`
  if (maxLength !== undefined) return `at most ${maxLength} characters long`
  const [minItems, maxItems] = [n("minItems"), n("maxItems")]
  if (minItems !== undefined && maxItems !== undefined) return `a list of ${minItems} to ${maxItems} items`
  if (minItems !== undefined) return `a list of at least ${minItems} items`
  if (maxItems !== undefined) return `a list of at most ${maxItems} items`
  if (typeof j.pattern === "string") return `a string matching /${j.pattern}/`
  if (n("multipleOf") !== undefined) return `a multiple of ${n("multipleOf")}`
  if (j.type === "integer") return "an integer"
  return undefined
}

/** What a schema accepts, in words, without its description. */
const accepted = (ast: SchemaAST.AST): string => {
  switch (ast._tag) {
    case "NumberKeyword":
      return "a number"
    case "StringKeyword":
      return "a string"
    case "BooleanKeyword":
      return "a boolean (true or false)"
    case "Literal":
      return show(ast.literal)
    case "Enums":
      return `one of ${ast.enums.map(([, v]) => show(v)).join(", ")}`
    case "TupleType":
      return "a list"
    case "TypeLiteral":
      return "an object"
    case "Union": {
      // An optional parameter's union holds `undefined`, which JSON cannot send: left out of the rule.
      const types = ast.types.filter((t) => t._tag !== "UndefinedKeyword")
      if (types.length === 1) return accepted(types[0])
      return types.every((t) => t._tag === "Literal")
        ? `one of ${types.map(accepted).join(", ")}`
        : types.map(accepted).join(" or ")
    }
    case "Refinement":
      return refinementRule(ast) ?? accepted(ast.from)
    case "Transformation":
      return accepted(ast.from)
    case "Suspend":
      return accepted(ast.f())
    default:
      return String(ast)
  }
}

const pathName = (path: ReadonlyArray<PropertyKey>) => `parameter '${path.map(String).join(".")}'`

/** The default formatter's texts, for schemas that carry their own `message` annotation (the author's words). */
const ownMessage = (issue: ParseResult.ParseIssue): Array<string> | undefined =>
  "ast" in issue && Option.isSome(SchemaAST.getMessageAnnotation(issue.ast)) &&
    !(issue._tag === "Refinement" && issue.kind === "From")
    ? ParseResult.ArrayFormatter.formatIssueSync(issue).map((i) => i.message)
    : undefined

const membersOf = (c: ParseResult.Composite): ReadonlyArray<ParseResult.ParseIssue> =>
  Array.isArray(c.issues) ? c.issues as ReadonlyArray<ParseResult.ParseIssue> : [c.issues as ParseResult.ParseIssue]

/** One sentence per broken rule, each naming the parameter (`path`). */
export const argumentProblems = (
  issue: ParseResult.ParseIssue,
  path: ReadonlyArray<PropertyKey> = []
): Array<string> => {
  const own = ownMessage(issue)
  if (own !== undefined) return own.map((m) => path.length === 0 ? m : `${pathName(path)}: ${m}`)
  const at = (rule: string, actual: unknown) =>
    path.length === 0
      ? `arguments must be ${rule}, got ${show(actual)}`
      : `${pathName(path)} must be ${rule}, got ${show(actual)}`
  switch (issue._tag) {
    case "Pointer":
      return argumentProblems(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path])])
    case "Missing":
      return [`missing required ${pathName(path)}`]
    case "Unexpected":
      return [`unexpected ${pathName(path)}`]
    case "Refinement": {
      if (issue.kind === "From") return argumentProblems(issue.issue, path)
      const rule = refinementRule(issue.ast)
      if (rule !== undefined) return [at(rule, issue.actual)]
      // A custom check with neither a message nor a JSON Schema: its annotations are all there is to name it.
      const label = Option.getOrUndefined(SchemaAST.getDescriptionAnnotation(issue.ast)) ??
        Option.getOrUndefined(SchemaAST.getTitleAnnotation(issue.ast))
      const name = path.length === 0 ? "arguments" : pathName(path)
      return [
        `${name} ${label === undefined ? "fails its check" : `fails its check (${label})`}, got ${show(issue.actual)}`
      ]
    }
    case "Transformation":
      return argumentProblems(issue.issue, path)
    case "Type":
      return [at(accepted(issue.ast), issue.actual)]
    case "Composite":
      // A union: one sentence listing what it accepts, not one per member.
      if (issue.ast._tag === "Union" && path.length > 0) {
        // An optional parameter's union: the one real member's own problems.
        const members = issue.ast.types.filter((t) => t._tag !== "UndefinedKeyword")
        const real = membersOf(issue).filter((i) => !(i._tag === "Type" && i.ast._tag === "UndefinedKeyword"))
        if (members.length === 1 && real.length === 1) return argumentProblems(real[0], path)
        return [at(accepted(issue.ast), issue.actual)]
      }
      return membersOf(issue).flatMap((i) => argumentProblems(i, path))
    case "Forbidden":
      return ParseResult.ArrayFormatter.formatIssueSync(issue).map((i) => i.message)
  }
}
