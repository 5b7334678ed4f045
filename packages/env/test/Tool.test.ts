import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Catch, Echo, Sudoku, Tool, Wordle } from "../src/index.js"

/** transformers' function wrapper around a tool's parameters; every built-in tool returns a string. */
const definition = (
  name: string,
  description: string,
  parameters: Tool.ToolDefinition["function"]["parameters"],
  returns: string
): Tool.ToolDefinition => ({
  type: "function",
  function: { name, description, parameters, return: { type: "string", description: returns } }
})

describe("Tool definitions", () => {
  it("Wordle guess", () => {
    assert.deepStrictEqual(
      Wordle.Guess.definition,
      definition("guess", "Make a guess in the Wordle environment.", {
        type: "object",
        properties: { guess: { type: "string", description: "The guessed word, formatted as '[abcde]'" } },
        required: ["guess"]
      }, "The feedback message from the environment.")
    )
    // Byte-identical to transformers' get_json_schema output rendered by `tojson` (TRL reference §1.3).
    assert.strictEqual(
      Tool.pythonJson(Wordle.Guess.definition),
      `{"type": "function", "function": {"name": "guess", "description": "Make a guess in the Wordle environment.", "parameters": {"type": "object", "properties": {"guess": {"type": "string", "description": "The guessed word, formatted as '[abcde]'"}}, "required": ["guess"]}, "return": {"type": "string", "description": "The feedback message from the environment."}}}`
    )
  })

  it("Sudoku place: integers, declaration order, all required", () => {
    assert.deepStrictEqual(
      Sudoku.Place.definition,
      definition("place", "Place a number on the Sudoku board.", {
        type: "object",
        properties: {
          row: { type: "integer", description: "Row number (1-9)." },
          col: { type: "integer", description: "Column number (1-9)." },
          number: { type: "integer", description: "Number to place (1-9)." }
        },
        required: ["row", "col", "number"]
      }, "The result of the move and updated board state.")
    )
  })

  it("Catch move (literal union -> enum) and stay (no parameters, no required)", () => {
    assert.deepStrictEqual(
      Catch.Move.definition,
      definition("move", "Move the paddle left or right.", {
        type: "object",
        properties: {
          direction: {
            type: "string",
            enum: ["left", "right"],
            description: "Direction to move, either \"left\" or \"right\"."
          }
        },
        required: ["direction"]
      }, "The observation after moving.")
    )
    assert.deepStrictEqual(
      Catch.Stay.definition,
      definition(
        "stay",
        "Do nothing and let the ball fall one step.",
        { type: "object", properties: {} },
        "The observation after staying."
      )
    )
  })

  it("Echo echo", () => {
    assert.deepStrictEqual(
      Echo.Echo.definition,
      definition("echo", "Echo the message back from the environment.", {
        type: "object",
        properties: { message: { type: "string", description: "The message to echo" } },
        required: ["message"]
      }, "The echoed message.")
    )
  })

  it("defaults make a parameter optional; arrays, booleans and numbers map to JSON types", () => {
    const t = Tool.make("search", {
      description: "Search.",
      parameters: {
        query: Schema.String.annotations({ description: "Query." }),
        limit: Schema.optionalWith(Schema.Int.annotations({ description: "Max hits." }), { default: () => 10 }),
        tags: Schema.Array(Schema.String),
        exact: Schema.Boolean,
        weight: Schema.Number
      }
    })
    assert.deepStrictEqual(t.definition.function.parameters, {
      type: "object",
      properties: {
        query: { type: "string", description: "Query." },
        limit: { type: "integer", description: "Max hits." },
        tags: { type: "array", items: { type: "string" } },
        exact: { type: "boolean" },
        weight: { type: "number" }
      },
      required: ["query", "tags", "exact", "weight"]
    })
  })

  // transformers' get_json_schema is the judge in interop/test/ToolSchema.test.ts; these are its rules.
  it("unions, null, mixed literals and tuples map as transformers' get_json_schema maps their Python twins", () => {
    const t = Tool.make("mixed", {
      description: "Mixed.",
      parameters: {
        label: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null }).annotations({
          description: "Optional[str] = None."
        }),
        code: Schema.Union(Schema.String, Schema.Int),
        flag: Schema.NullOr(Schema.Union(Schema.Boolean, Schema.Int)),
        many: Schema.Union(Schema.Array(Schema.Int), Schema.String),
        choice: Schema.Literal("two", 1),
        point: Schema.Tuple(Schema.Int, Schema.String),
        mapping: Schema.Object
      }
    })
    assert.deepStrictEqual(t.definition.function.parameters.properties, {
      label: { type: "string", nullable: true, description: "Optional[str] = None." },
      code: { type: ["integer", "string"] },
      flag: { type: ["boolean", "integer"], nullable: true },
      many: { anyOf: [{ type: "array", items: { type: "integer" } }, { type: "string" }] },
      choice: { type: ["string", "integer"], enum: ["two", 1] },
      point: { type: "array", prefixItems: [{ type: "integer" }, { type: "string" }] },
      mapping: { type: "object" }
    })
  })
})

describe("Tool argument decoding", () => {
  it.effect("errors name the parameter", () =>
    Effect.gen(function*() {
      const wrongType = yield* Effect.flip(Tool.decodeArguments(Sudoku.Place, { row: "1", col: 2, number: 3 }))
      assert.include(wrongType.message, "Invalid arguments for tool 'place': parameter 'row'")
      const missing = yield* Effect.flip(Tool.decodeArguments(Sudoku.Place, { row: 1, col: 2 }))
      assert.include(missing.message, "missing required parameter 'number'")
      const extra = yield* Effect.flip(Tool.decodeArguments(Catch.Stay, { direction: "left" }))
      assert.include(extra.message, "unexpected parameter 'direction'")
      const badEnum = yield* Effect.flip(Tool.decodeArguments(Catch.Move, { direction: "up" }))
      assert.include(badEnum.message, "parameter 'direction'")
      assert.deepStrictEqual(yield* Tool.decodeArguments(Catch.Move, { direction: "left" }), { direction: "left" })
    }))

  it.effect("errors state the rule broken, not the parameter's description (which is written for the prompt)", () =>
    Effect.gen(function*() {
      const roll = Tool.make("roll", {
        description: "Roll dice.",
        parameters: {
          count: Schema.Int.pipe(Schema.between(1, 3)).annotations({ description: "How many dice to roll" }),
          face: Schema.optional(Schema.Literal("red", "blue").annotations({ description: "The dice's colour" })),
          name: Schema.optional(Schema.String.pipe(Schema.minLength(2)).annotations({ description: "Who rolls" })),
          even: Schema.optional(Schema.Int.pipe(Schema.filter((n) => n % 2 === 0, { message: () => "must be even" }))),
          word: Schema.optional(
            Schema.String.pipe(Schema.filter((w) => w.length === 5)).annotations({ description: "A five-letter word" })
          )
        }
      })
      const problem = (args: unknown) => Effect.map(Effect.flip(Tool.decodeArguments(roll, args)), (e) => e.message)
      const prefix = "Invalid arguments for tool 'roll': "
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ count: 7 }, "parameter 'count' must be between 1 and 3, got 7"],
        [{ count: 1.5 }, "parameter 'count' must be an integer, got 1.5"],
        [{ count: "2" }, "parameter 'count' must be a number, got \"2\""],
        [{ count: 1, face: "green" }, "parameter 'face' must be one of \"red\", \"blue\", got \"green\""],
        [{ count: 1, name: "x" }, "parameter 'name' must be at least 2 characters long, got \"x\""],
        [{ count: 1, even: 3 }, "parameter 'even': must be even"],
        // A check with neither a message nor a JSON Schema: its description is all there is to name it by.
        [{ count: 1, word: "abc" }, "parameter 'word' fails its check (A five-letter word), got \"abc\""],
        [{}, "missing required parameter 'count'"]
      ]
      for (const [args, expected] of cases) assert.strictEqual(yield* problem(args), prefix + expected)
    }))

  it.prop("any well-typed arguments decode to themselves", [Sudoku.Place.parameters], ([params]) => {
    const decoded = Schema.decodeUnknownSync(Sudoku.Place.parameters)(params)
    assert.deepStrictEqual(decoded, params)
  })
})
