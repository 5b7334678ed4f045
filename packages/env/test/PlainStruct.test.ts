// The action shortcut (a plain Struct checked directly) against Schema decoding with excess properties forbidden.
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Either, FastCheck, Schema } from "effect"
import * as Catch from "../src/Catch.js"
import { plainStructDecoder } from "../src/internal/plainStruct.js"
import * as Wire from "../src/Wire.js"
import * as Wordle from "../src/Wordle.js"

const Mixed = Schema.Struct({
  name: Schema.String,
  n: Schema.Number,
  k: Schema.Int,
  flag: Schema.optional(Schema.Boolean),
  meta: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})

const agree = <A, I>(schema: Schema.Schema<A, I>, value: unknown) => {
  const fast = Wire.decodeForbid(schema)(value)
  const slow = Schema.decodeUnknownEither(schema, { onExcessProperty: "error", errors: "all" })(value)
  assert.strictEqual(fast._tag, slow._tag)
  if (Either.isRight(fast) && Either.isRight(slow)) {
    assert.deepStrictEqual(fast.right, slow.right)
    assert.deepStrictEqual(Object.keys(fast.right as object), Object.keys(slow.right as object))
  }
  if (Either.isLeft(fast) && Either.isLeft(slow)) assert.strictEqual(fast.left.message, slow.left.message)
}

/** Objects near the Schema's shape: its own values, with keys dropped, added or retyped. */
const nearly = <A, I>(schema: Schema.Schema<A, I>) =>
  FastCheck.tuple(
    Arbitrary.make(schema),
    FastCheck.dictionary(
      FastCheck.constantFrom("name", "n", "k", "flag", "meta", "message", "action_id", "x"),
      FastCheck.jsonValue(),
      { maxKeys: 3 }
    ),
    FastCheck.boolean()
  ).map(([value, extra, merge]) => (merge ? { ...(value as object), ...extra } : value) as unknown)

describe("plain Struct decoding", () => {
  it.prop(
    "agrees with Schema decoding (value, keys and order, errors)",
    [nearly(Mixed), FastCheck.jsonValue()],
    ([a, b]) => {
      agree(Mixed, a)
      agree(Mixed, b)
    },
    { fastCheck: { numRuns: 500 } }
  )

  it.prop("agrees on the Wordle and Catch actions", [nearly(Wordle.Action), nearly(Catch.Action)], ([w, c]) => {
    agree(Wordle.Action, w)
    agree(Catch.Action, c)
  }, { fastCheck: { numRuns: 300 } })

  it("takes the shortcut for a well-formed action and leaves everything else to Schema", () => {
    const decode = plainStructDecoder(Mixed.ast)!
    assert.deepStrictEqual(decode({ k: 1, n: 0.5, name: "a" }), { name: "a", n: 0.5, k: 1 })
    assert.isUndefined(decode({ name: "a", n: 0.5, k: 1.5 }))
    assert.isUndefined(decode({ name: "a", n: 0.5, k: 1, meta: {} }))
    assert.isUndefined(decode({ name: "a", n: 0.5, k: 1, extra: 1 }))
    assert.isUndefined(decode({ name: "a", n: 0.5 }))
    assert.isUndefined(plainStructDecoder(Schema.Record({ key: Schema.String, value: Schema.Number }).ast))
  })
})
