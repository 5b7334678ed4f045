// The Python-float JSON encoder behind every server frame: repr texts checked against CPython's `repr(float)`.
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, FastCheck, Option, Schema, SchemaAST } from "effect"
import * as PyJson from "../src/internal/pyJson.js"
import * as Wordle from "../src/Wordle.js"

describe("PyJson", () => {
  it("floatRepr matches CPython repr", () => {
    const cases: ReadonlyArray<[number, string]> = [
      [0, "0.0"],
      [-0, "-0.0"],
      [1, "1.0"],
      [-1, "-1.0"],
      [0.1, "0.1"],
      [3 * 0.1, "0.30000000000000004"],
      [0.0001, "0.0001"],
      [1e-5, "1e-05"],
      [1.5e-7, "1.5e-07"],
      [123.456, "123.456"],
      [1e15, "1000000000000000.0"],
      [1e16, "1e+16"],
      [123456789012345680, "1.2345678901234568e+17"],
      [2.5e300, "2.5e+300"],
      [5e-324, "5e-324"]
    ]
    for (const [x, text] of cases) assert.strictEqual(PyJson.floatRepr(x), text, String(x))
  })

  it("writes Schema.Number as float and Schema.Int as int, in key order", () => {
    const schema = Schema.Struct({
      xs: Schema.Array(Schema.Number),
      ids: Schema.Array(Schema.Int),
      maybe: Schema.NullOr(Schema.Number),
      pair: Schema.Tuple(Schema.Int, Schema.Number),
      extra: Schema.Record({ key: Schema.String, value: Schema.Unknown })
    })
    assert.strictEqual(
      PyJson.stringify(
        { ids: [1, 2], xs: [0, 1, 0.5], maybe: 2, pair: [3, 3], extra: { n: 4, f: 0.25, s: "é" } },
        schema
      ),
      `{"ids":[1,2],"xs":[0.0,1.0,0.5],"maybe":2.0,"pair":[3,3.0],"extra":{"n":4,"f":0.25,"s":"é"}}`
    )
    assert.strictEqual(PyJson.stringify({ maybe: null, skipped: undefined }, schema), `{"maybe":null}`)
  })

  it("without a Schema it writes what JSON.stringify writes", () => {
    const value = { a: [1, 2.5, null, "x\n"], b: { c: true }, d: -3 }
    assert.strictEqual(PyJson.stringify(value), JSON.stringify(value))
  })

  it("a wire Schema annotation marks floats inside a looser declared Schema", () => {
    const Dict = Schema.Record({ key: Schema.String, value: Schema.Unknown })
    const info = Dict.annotations({
      [PyJson.WireSchemaId]: Schema.Struct({
        reward_signals: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Number }))
      }, Dict)
    })
    assert.strictEqual(
      PyJson.stringify({ reward_signals: { a: 1, b: 0.2 }, turn: 1 }, info),
      `{"reward_signals":{"a":1.0,"b":0.2},"turn":1}`
    )
  })
})

// The encoder as first written (an interpreter over the Schema AST per value): the compiled writers must agree.
const referenceStringify = (value: unknown, schema?: Schema.Schema.Any): string => {
  const isObj = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null
  const resolve = (ast: SchemaAST.AST | undefined, v: unknown): SchemaAST.AST | undefined => {
    while (ast !== undefined) {
      const wire = ast.annotations[PyJson.WireSchemaId]
      if (Schema.isSchema(wire)) ast = wire.ast
      else if (ast._tag === "Refinement") {
        if (Option.getOrUndefined(SchemaAST.getSchemaIdAnnotation(ast)) === Schema.IntSchemaId) return ast
        ast = ast.from
      } else if (ast._tag === "Transformation") ast = ast.to
      else if (ast._tag === "Suspend") ast = ast.f()
      else if (ast._tag === "Union") ast = ast.types.find((t) => Schema.is(Schema.make(t))(v))
      else return ast
    }
    return undefined
  }
  const fieldAst = (ast: SchemaAST.AST | undefined, key: string) => {
    if (ast === undefined || ast._tag !== "TypeLiteral") return undefined
    const p = ast.propertySignatures.find((x) => x.name === key)
    return p !== undefined ? p.type : ast.indexSignatures.find((x) => x.parameter._tag === "StringKeyword")?.type
  }
  const elementAst = (ast: SchemaAST.AST | undefined, i: number) =>
    ast === undefined || ast._tag !== "TupleType"
      ? undefined
      : i < ast.elements.length
      ? ast.elements[i].type
      : ast.rest[0]?.type
  const write = (v: unknown, s: SchemaAST.AST | undefined): string | undefined => {
    if (isObj(v) && typeof (v as { toJSON?: unknown }).toJSON === "function") {
      v = (v as { toJSON: () => unknown }).toJSON()
    }
    const ast = resolve(s, v)
    if (typeof v === "number") {
      return ast?._tag === "NumberKeyword" || !Number.isInteger(v) ? PyJson.floatRepr(v) : JSON.stringify(v)
    }
    if (Array.isArray(v)) return `[${v.map((x, i) => write(x, elementAst(ast, i)) ?? "null").join(",")}]`
    if (isObj(v)) {
      const parts: Array<string> = []
      for (const [k, x] of Object.entries(v)) {
        const text = write(x, fieldAst(ast, k))
        if (text !== undefined) parts.push(`${JSON.stringify(k)}:${text}`)
      }
      return `{${parts.join(",")}}`
    }
    return JSON.stringify(v)
  }
  return write(value, schema?.ast) ?? "null"
}

const Mixed = Schema.Struct({
  xs: Schema.Array(Schema.Number),
  ids: Schema.Array(Schema.Int),
  maybe: Schema.NullOr(Schema.Union(Schema.Boolean, Schema.Number)),
  pair: Schema.Tuple(Schema.Int, Schema.Number),
  extra: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  floats: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Number }))
})

describe("PyJson compiled writers", () => {
  it.prop(
    "agree with the per-value interpreter on Schema-shaped values",
    [Arbitrary.make(Mixed), Arbitrary.make(Wordle.Observation), Arbitrary.make(Wordle.OpenEnvState)],
    ([mixed, observation, state]) => {
      assert.strictEqual(PyJson.stringify(mixed, Mixed), referenceStringify(mixed, Mixed))
      assert.strictEqual(
        PyJson.stringify(observation, Wordle.Observation),
        referenceStringify(observation, Wordle.Observation)
      )
      assert.strictEqual(PyJson.stringify(state, Wordle.OpenEnvState), referenceStringify(state, Wordle.OpenEnvState))
    },
    { fastCheck: { numRuns: 300 } }
  )

  // Float-free values are written by one JSON.stringify, re-done value by value where JS and Python may differ.
  it.prop(
    "agree on tiny and exponent numbers (and look-alike strings) without float Schemas",
    [
      FastCheck.array(
        FastCheck.oneof(
          FastCheck.double({ min: -1e-3, max: 1e-3 }),
          FastCheck.double(),
          FastCheck.integer(),
          FastCheck.constantFrom("0.00001", "1e-7", "x e-5 y", "e-12")
        )
      )
    ],
    ([xs]) => {
      const FloatFree = Schema.Struct({ xs: Schema.Array(Schema.Unknown), ids: Schema.Array(Schema.Int) })
      const ids = xs.filter((x): x is number => Number.isInteger(x))
      assert.strictEqual(PyJson.stringify(xs), referenceStringify(xs))
      assert.strictEqual(PyJson.stringify({ xs, ids }, FloatFree), referenceStringify({ xs, ids }, FloatFree))
    },
    { fastCheck: { numRuns: 300 } }
  )

  it("writes tiny fractions as Python does where no Schema asks for floats", () => {
    assert.strictEqual(PyJson.stringify({ a: [0.00001, 1e-7, 0.5, 2] }), "{\"a\":[1e-05,1e-07,0.5,2]}")
    assert.strictEqual(PyJson.stringify(["1e-7", 0.25]), "[\"1e-7\",0.25]")
  })

  it.prop("agree on arbitrary JSON under a Schema it does not fit", [FastCheck.jsonValue()], ([value]) => {
    assert.strictEqual(PyJson.stringify(value, Mixed), referenceStringify(value, Mixed))
    assert.strictEqual(PyJson.stringify(value), referenceStringify(value))
  }, { fastCheck: { numRuns: 500 } })
})

describe("PyJson recursive Schemas", () => {
  interface Tree {
    readonly v: number
    readonly name: string
    readonly kids: ReadonlyArray<Tree>
    readonly next?: Tree | undefined
  }
  const Tree: Schema.Schema<Tree> = Schema.Struct({
    v: Schema.Number,
    name: Schema.String,
    kids: Schema.Array(Schema.suspend((): Schema.Schema<Tree> => Tree)),
    next: Schema.optional(Schema.suspend((): Schema.Schema<Tree> => Tree))
  })

  it("compile (cycles go through a forwarder) and write as the reference", () => {
    const trees: ReadonlyArray<Tree> = [
      { v: 0, name: "leaf", kids: [] },
      { v: 1.5, name: "a", kids: [{ v: 2, name: "b\n", kids: [], next: { v: 1e-7, name: "c", kids: [] } }] },
      { v: -0, name: "x".repeat(300), kids: [{ v: 3, name: "y", kids: [{ v: 4, name: "z", kids: [] }] }] }
    ]
    for (const tree of trees) {
      assert.strictEqual(PyJson.stringify(tree, Tree), referenceStringify(tree, Tree))
      assert.strictEqual(PyJson.stringify(tree, Tree, PyJson.stringCache()), referenceStringify(tree, Tree))
    }
  })
})

describe("PyJson string cache", () => {
  const TwoTexts = Schema.Struct({ a: Schema.String, b: Schema.String })
  // Text pieces that stress the per-character escaping: quotes, controls, non-ASCII, pairs and lone surrogates.
  const piece = FastCheck.oneof(
    FastCheck.string({ unit: "binary", maxLength: 40 }),
    FastCheck.constantFrom(
      "\ud83d",
      "\ude00",
      "\ud83d\ude00",
      "\"",
      "\\",
      "\n",
      "\u0000",
      "\u2028",
      "é",
      "x".repeat(300)
    )
  )

  it.prop(
    "a growing string (and one that changes) writes as without the cache",
    [FastCheck.array(FastCheck.tuple(FastCheck.boolean(), piece), { minLength: 1, maxLength: 12 }), piece],
    ([steps, start]) => {
      const cache = PyJson.stringCache()
      let text = "a".repeat(256) + start
      for (const [restart, more] of steps) {
        // Mostly an extension of the previous text, sometimes a different text of the same length or longer.
        text = restart ? more + text : text + more
        assert.strictEqual(PyJson.stringify(text, undefined, cache), JSON.stringify(text))
        const two = { a: text, b: text + more }
        assert.strictEqual(PyJson.stringify(two, TwoTexts, cache), JSON.stringify(two))
      }
    },
    { fastCheck: { numRuns: 300 } }
  )

  it("a high surrogate ending the cached text pairs with a low one appended", () => {
    const cache = PyJson.stringCache()
    const head = "x".repeat(300) + "\ud83d"
    assert.strictEqual(PyJson.stringify(head, undefined, cache), JSON.stringify(head))
    assert.strictEqual(PyJson.stringify(head + "\ude00!", undefined, cache), JSON.stringify(head + "\ude00!"))
    assert.isTrue(PyJson.stringify(head + "\ude00!", undefined, cache).endsWith("\ud83d\ude00!\""))
  })

  it.prop(
    "a TextArena transcript growing over an episode writes as the reference",
    [FastCheck.array(FastCheck.string({ unit: "grapheme", maxLength: 60 }), { minLength: 1, maxLength: 8 })],
    ([messages]) => {
      const cache = PyJson.stringCache()
      let content = "\n[GAME] " + "You are Playing Wordle. ".repeat(12)
      for (const message of messages) {
        content += `\n[Player] ${message}\n[GAME] Feedback:\nG Y X X X`
        const observation = {
          prompt: "Wordle-v0",
          messages: [{ sender_id: -1, content, category: "MESSAGE" }],
          current_player_id: 0,
          legal_players: [0],
          info: { reward_signals: { "wordle.greens": 0.2, "wordle.correct": 0 } }
        }
        assert.strictEqual(
          PyJson.stringify(observation, Wordle.Observation, cache),
          referenceStringify(observation, Wordle.Observation)
        )
      }
    },
    { fastCheck: { numRuns: 100 } }
  )
})
