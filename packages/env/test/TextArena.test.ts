// The Python string helpers behind the TextArena games: counted and split by code point, as Python does.
import { assert, describe, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { pyLen } from "../src/internal/textArena.js"
import { spaced } from "../src/internal/wordleGame.js"

// Astral letters (surrogate pairs) and lone surrogates beside plain text.
const text = FastCheck.array(
  FastCheck.oneof(
    FastCheck.string({ unit: "binary", maxLength: 8 }),
    FastCheck.constantFrom("\ud835\udc00", "\ud835", "\udc00", "é", "ß")
  ),
  { maxLength: 6 }
).map((parts) => parts.join(""))

describe("TextArena string helpers", () => {
  it.prop("pyLen counts code points ([...s].length)", [text], ([s]) => {
    assert.strictEqual(pyLen(s), [...s].length)
  }, { fastCheck: { numRuns: 500 } })

  it.prop("spaced is Python's ' '.join(s) ([...s].join(' '))", [text], ([s]) => {
    assert.strictEqual(spaced(s), [...s].join(" "))
  }, { fastCheck: { numRuns: 500 } })

  it("a surrogate pair stays one letter", () => {
    assert.strictEqual(pyLen("a\ud835\udc00b"), 3)
    assert.strictEqual(spaced("a\ud835\udc00b"), "a \ud835\udc00 b")
    assert.strictEqual(spaced("\udc00\ud835"), "\udc00 \ud835")
  })
})
