/**
 * Issue 17, check 5b: envtrain's tool definitions (Schema → function definition, `Tool.make`) are what transformers'
 * `get_json_schema` makes for the equivalent Python function with a Google-style docstring, compared as the exact
 * text a chat template's `tojson` writes into the prompt (`Tool.pythonJson`: Python's separators, insertion key
 * order). The Python twins are in interop/python/tool_schemas.py.
 *
 * One difference is kept on purpose: a parameter that is an object with fields of its own (a nested `Schema.Struct`)
 * gets its `properties` and `required` from envtrain, while `get_json_schema` cannot describe one at all (a
 * TypedDict, dataclass or pydantic class raises `TypeHintParsingException`; only `dict` / `dict[str, X]` map).
 */
import { assert, describe, it } from "@effect/vitest"
import { Catch, Echo, Sudoku, Tool, Wordle } from "@envtrain/env"
import { Effect, Schema } from "effect"
import * as Python from "../src/Python.js"

enum Color {
  Red = "red",
  Green = "green"
}
enum Size {
  Small = 1,
  Large = 2
}

const tools: ReadonlyArray<Tool.Any> = [
  Catch.Move,
  Catch.Stay,
  Echo.Echo,
  Sudoku.Place,
  Wordle.Guess,
  Tool.make("configure", {
    description: "Configure the run; every parameter but the name has a default.",
    parameters: {
      name: Schema.String.annotations({ description: "The run's name (unicode is fine: température °C, 日本語, 🎯)." }),
      level: Schema.optionalWith(Schema.Int, { default: () => 3 }).annotations({
        description: "How hard to try, from 1 to 5. The description wraps over two lines."
      }),
      ratio: Schema.optionalWith(Schema.Number, { default: () => 0.5 }).annotations({
        description: "A fraction between 0 and 1."
      }),
      verbose: Schema.optionalWith(Schema.Boolean, { default: () => false }).annotations({
        description: "Print more."
      }),
      mode: Schema.optionalWith(Schema.Literal("fast", "slow"), { default: () => "fast" as const }).annotations({
        description: "How to run."
      }),
      unit: Schema.optionalWith(Schema.Literal("c", "f"), { default: () => "c" as const }).annotations({
        description: "The temperature unit."
      })
    },
    returns: "A confirmation."
  }),
  Tool.make("mixed", {
    description: "Unions, literals, enums and optional values.",
    parameters: {
      choice: Schema.Literal("two", 1, 3).annotations({ description: "A literal of mixed types." }),
      code: Schema.Union(Schema.Int, Schema.String).annotations({ description: "An integer or a string." }),
      many: Schema.Union(Schema.Array(Schema.Int), Schema.String).annotations({
        description: "A list of integers, or one string."
      }),
      flag: Schema.NullOr(Schema.Union(Schema.Boolean, Schema.Int)).annotations({
        description: "A boolean, an integer or null."
      }),
      color: Schema.Enums(Color).annotations({ description: "A colour." }),
      size: Schema.Enums(Size).annotations({ description: "A size." }),
      maybe: Schema.optionalWith(Schema.NullOr(Schema.Literal("a", "b")), { default: () => null }).annotations({
        description: "One of two letters, or null."
      }),
      label: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null }).annotations({
        description: "A label, or null."
      }),
      anything: Schema.optional(Schema.Unknown).annotations({ description: "Any JSON value." })
    },
    returns: "What happened."
  }),
  Tool.make("collections", {
    description: "Arrays, tuples and objects, nested.",
    parameters: {
      tags: Schema.Array(Schema.String).annotations({ description: "Some tags." }),
      grid: Schema.Array(Schema.Array(Schema.Int)).annotations({ description: "Rows of integers." }),
      items: Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Int })).annotations({
        description: "Objects of integer values."
      }),
      lookup: Schema.Record({ key: Schema.String, value: Schema.Array(Schema.String) }).annotations({
        description: "Lists of strings by key."
      }),
      scores: Schema.Record({ key: Schema.String, value: Schema.Number }).annotations({
        description: "Numbers by key."
      }),
      extra: Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
        description: "Anything by key."
      }),
      point: Schema.Tuple(Schema.Int, Schema.String).annotations({ description: "An integer and a string." }),
      plain: Schema.Array(Schema.Unknown).annotations({ description: "A list of anything." }),
      mapping: Schema.Object.annotations({ description: "An object of anything." })
    },
    returns: "A summary."
  })
]

const judge = Python.run(["interop/python/tool_schemas.py"]).pipe(
  Effect.map((out) => JSON.parse(out) as Readonly<Record<string, string>>)
)

describe("transformers' get_json_schema as the judge of Tool.make", () => {
  it.effect("every tool's definition is the text get_json_schema gives its Python twin", () =>
    Effect.gen(function*() {
      const python = yield* judge
      for (const tool of tools) {
        assert.isDefined(python[tool.name], `no Python twin for ${tool.name}`)
        assert.strictEqual(Tool.pythonJson(tool.definition), python[tool.name], tool.name)
      }
    }), 120_000)

  it.effect(
    "a nested object parameter: envtrain describes its fields, get_json_schema cannot",
    () =>
      Effect.gen(function*() {
        const python = yield* judge
        assert.strictEqual(python.nested, "TypeHintParsingException")
        const nested = Tool.make("nested", {
          description: "A parameter that is an object with its own fields.",
          parameters: {
            point: Schema.Struct({ x: Schema.Int, y: Schema.Int }).annotations({ description: "A point." })
          }
        })
        assert.deepStrictEqual(nested.definition.function.parameters.properties.point, {
          type: "object",
          properties: { x: { type: "integer" }, y: { type: "integer" } },
          required: ["x", "y"],
          description: "A point."
        })
      }),
    120_000
  )
})
