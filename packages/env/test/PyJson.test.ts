// The Python-float JSON encoder behind every server frame: repr texts checked against CPython's `repr(float)`.
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import * as PyJson from "../src/internal/pyJson.js"

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
