// OpenEnv's server parses frames with CPython 3.11's json.loads: these are its JSONDecodeError texts (C scanner),
// positions in code points.
import { assert, describe, it } from "@effect/vitest"
import * as PyJsonParse from "../src/internal/pyJsonParse.js"

const errorOf = (text: string) => {
  const r = PyJsonParse.parse(text)
  return r._tag === "Error" ? r.message : "parsed"
}

describe("PyJsonParse", () => {
  it("writes Python's JSONDecodeError texts", () => {
    const cases: ReadonlyArray<[string, string]> = [
      ["", "Expecting value: line 1 column 1 (char 0)"],
      ["   ", "Expecting value: line 1 column 4 (char 3)"],
      ["nul", "Expecting value: line 1 column 1 (char 0)"],
      ["{nope", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"],
      [`{"type": "step",}`, "Expecting property name enclosed in double quotes: line 1 column 17 (char 16)"],
      [`{"type" "step"}`, "Expecting ':' delimiter: line 1 column 9 (char 8)"],
      [`{"a":1 "b":2}`, "Expecting ',' delimiter: line 1 column 8 (char 7)"],
      ["[1,2", "Expecting ',' delimiter: line 1 column 5 (char 4)"],
      ["[1,]", "Expecting value: line 1 column 4 (char 3)"],
      [`"abc`, "Unterminated string starting at: line 1 column 1 (char 0)"],
      [`{"a":"\\x"}`, "Invalid \\escape: line 1 column 7 (char 6)"],
      [`{"a":"\\u12G4"}`, "Invalid \\uXXXX escape: line 1 column 8 (char 7)"],
      [`{"a":"b\tc"}`, "Invalid control character at: line 1 column 8 (char 7)"],
      ["{} x", "Extra data: line 1 column 4 (char 3)"],
      ["01", "Extra data: line 1 column 2 (char 1)"],
      [`{"type":"step",\n"data":}`, "Expecting value: line 2 column 8 (char 23)"],
      [`{"😀":x}`, "Expecting value: line 1 column 6 (char 5)"],
      ["\ufeff{}", "Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)"]
    ]
    for (const [text, message] of cases) assert.strictEqual(errorOf(text), message, JSON.stringify(text))
  })

  it("accepts what Python accepts: NaN and ±Infinity, and everything JSON.parse reads", () => {
    const r = PyJsonParse.parse(`{"a": [NaN, Infinity, -Infinity, -0.5e2, "\\ud83d\\ude00"], "b": {"c": null}}`)
    assert.strictEqual(r._tag, "Value")
    if (r._tag === "Value") {
      const v = r.value as { a: Array<unknown>; b: unknown }
      assert.isTrue(Number.isNaN(v.a[0]))
      assert.deepStrictEqual(v.a.slice(1), [Infinity, -Infinity, -50, "😀"])
      assert.deepStrictEqual(v.b, { c: null })
    }
    const plain = `{"type":"step","data":{"message":"crane","n":[1,2.5,true,false,null]}}`
    assert.deepStrictEqual(PyJsonParse.parse(plain), { _tag: "Value", value: JSON.parse(plain) })
  })
})
