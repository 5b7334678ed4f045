/**
 * Pydantic-like JSON Schemas for `GET /schema`: Effect's JSON Schema output reshaped the way pydantic v2's
 * `model_json_schema()` writes it (a `title` on the model from its identifier and on each property from its key,
 * `additionalProperties` on objects, no `$schema` key), plus OpenEnv's fixed base `State` schema.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { JsonSchema } from "@envtrain/env"
 *
 * const Action = Schema.Struct({ action_id: Schema.Int }).annotations({ identifier: "OpenSpielAction" })
 * JsonSchema.pydantic(Action)
 * // { type: "object", title: "OpenSpielAction", properties: { action_id: { type: "integer", title: "Action Id" } }, ... }
 * ```
 *
 * @since 0.0.0
 */
import { JSONSchema } from "effect"
import type { Schema } from "effect"

/** `action_id` → `Action Id`, as pydantic titles fields. */
export const titleOf = (key: string): string =>
  key.split("_").filter((p) => p.length > 0).map((p) => p[0].toUpperCase() + p.slice(1)).join(" ")

type Json = Record<string, unknown>

const reshape = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(reshape)
  if (node === null || typeof node !== "object") return node
  const out: Json = {}
  for (const [k, v] of Object.entries(node as Json)) {
    if (k === "$schema") continue
    if (k === "properties" && v !== null && typeof v === "object") {
      const props: Json = {}
      for (const [name, prop] of Object.entries(v as Json)) {
        const shaped = reshape(prop) as Json
        props[name] = "title" in shaped || "$ref" in shaped ? shaped : { ...shaped, title: titleOf(name) }
      }
      out[k] = props
    } else {
      out[k] = reshape(v)
    }
  }
  return out
}

// Effect refinements such as `Schema.Int` become `$defs` with a lower-case title ("int") and a generic description;
// pydantic writes them inline (`{"type":"integer"}`), so those are inlined and stripped. Named models stay in `$defs`.
const isBuiltinDef = (def: Json): boolean =>
  typeof def.title === "string" && def.title.length > 0 && def.title[0] === def.title[0].toLowerCase()

const inlineBuiltins = (node: unknown, defs: Json, depth = 0): unknown => {
  if (Array.isArray(node)) return node.map((n) => inlineBuiltins(n, defs, depth))
  if (node === null || typeof node !== "object") return node
  const obj = node as Json
  if (typeof obj.$ref === "string" && depth < 32) {
    const def = defs[obj.$ref.replace("#/$defs/", "")] as Json | undefined
    if (def !== undefined && isBuiltinDef(def)) {
      const { $ref: _ref, ...rest } = obj
      const { description: _d, title: _t, ...inner } = def
      return inlineBuiltins({ ...inner, ...rest }, defs, depth + 1)
    }
  }
  const out: Json = {}
  for (const [k, v] of Object.entries(obj)) out[k] = inlineBuiltins(v, defs, depth)
  return out
}

/** The pydantic-style JSON Schema of an Effect Schema (the model's `identifier` annotation becomes its `title`). */
export const pydantic = (schema: Schema.Schema<any, any>): Record<string, unknown> => {
  const raw = JSONSchema.make(schema) as unknown as Json
  const allDefs = (raw.$defs ?? {}) as Json
  // A top-level identifier becomes `$ref` + `$defs`; inline it so `type`/`properties` sit at the top, as pydantic does.
  let root: Json = { ...raw }
  delete root.$defs
  if (typeof raw.$ref === "string") {
    const name = raw.$ref.replace("#/$defs/", "")
    const target = allDefs[name] as Json | undefined
    if (target !== undefined) root = { ...target, title: target.title ?? name }
  }
  root = inlineBuiltins(root, allDefs) as Json
  const kept: Json = {}
  for (const [name, def] of Object.entries(allDefs)) {
    if (!isBuiltinDef(def as Json) && name !== String(raw.$ref ?? "").replace("#/$defs/", "")) {
      kept[name] = inlineBuiltins(def, allDefs)
    }
  }
  if (Object.keys(kept).length > 0) root.$defs = kept
  const shaped = reshape(root) as Json
  if (shaped.type === "object" && !("additionalProperties" in shaped)) shaped.additionalProperties = false
  return shaped
}

/** OpenEnv's base `State` schema (served for every environment, never the env's own State subclass). */
export const baseStateSchema: Record<string, unknown> = {
  additionalProperties: true,
  description:
    "Base class for environment state.\n\nRepresents internal environment state, separate from observations.",
  properties: {
    episode_id: {
      anyOf: [{ type: "string" }, { type: "null" }],
      default: null,
      description: "Unique identifier for the current episode",
      title: "Episode Id"
    },
    step_count: {
      default: 0,
      description: "Number of steps taken in the current episode",
      minimum: 0,
      title: "Step Count",
      type: "integer"
    }
  },
  title: "State",
  type: "object"
}
