/**
 * Dataset columns an environment's `columns` Schema does not declare: decoding drops them, so `reset` never sees
 * them. That is said once per environment (or refused, under `Environment.StrictColumns`), not left silent.
 */
import type { SchemaAST } from "effect"
import type { Schema } from "effect"

const declared = new WeakMap<object, ReadonlySet<string> | null>()

/** The property names the schema's encoded side declares; null when it takes any key (a record) or is not a struct. */
const declaredNames = (ast: SchemaAST.AST): ReadonlySet<string> | null => {
  switch (ast._tag) {
    case "Transformation":
      return declaredNames(ast.from)
    case "Refinement":
      return declaredNames(ast.from)
    case "Suspend":
      return declaredNames(ast.f())
    case "TypeLiteral":
      return ast.indexSignatures.length > 0 ? null : new Set(ast.propertySignatures.map((p) => String(p.name)))
    default:
      return null
  }
}

/**
 * The row's keys the schema does not declare. `seed` is left out: the rollout adds it to every row (the episode's
 * seed), whether or not the dataset has it.
 */
export const undeclaredColumns = (schema: Schema.Schema<any, any>, row: Readonly<Record<string, unknown>>) => {
  let names = declared.get(schema)
  if (names === undefined) {
    names = declaredNames(schema.ast)
    declared.set(schema, names)
  }
  if (names === null) return []
  const out: Array<string> = []
  for (const key in row) if (key !== "seed" && !names.has(key)) out.push(key)
  return out
}

const warned = new WeakMap<object, Set<string>>()

/** The columns not yet warned about for this schema (marking them warned). */
export const firstSeen = (schema: Schema.Schema<any, any>, columns: ReadonlyArray<string>): Array<string> => {
  let seen = warned.get(schema)
  if (seen === undefined) {
    seen = new Set()
    warned.set(schema, seen)
  }
  const fresh = columns.filter((c) => !seen.has(c))
  for (const c of fresh) seen.add(c)
  return fresh
}
