// JSON parsing as OpenEnv's server does it (CPython 3.11's `json.loads`, the C scanner): `NaN`, `Infinity` and
// `-Infinity` are accepted, and a malformed text fails with Python's `JSONDecodeError` text, e.g.
// "Expecting value: line 1 column 1 (char 0)", which OpenEnv puts into its INVALID_JSON frame. Positions are in code
// points, as Python indexes strings. JSON.parse runs first; this scanner only runs when it fails.
import { jsonDecodeErrorText } from "./pythonText.js"

class StopIteration {
  constructor(readonly idx: number) {}
}
class DecodeError {
  constructor(readonly msg: string, readonly idx: number) {}
}

const isSpace = (c: string) => c === " " || c === "\t" || c === "\n" || c === "\r"
const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9"
const ESCAPES: Readonly<Record<string, string>> = {
  "\"": "\"",
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t"
}

const scanner = (s: string) => {
  const len = s.length
  const last = len - 1
  const skip = (idx: number) => {
    while (idx <= last && isSpace(s[idx])) idx++
    return idx
  }

  /** `scanstring`: `end` is just after the opening quote. */
  const string = (end: number): [string, number] => {
    const begin = end - 1
    let out = ""
    for (;;) {
      let next = end
      for (; next < len; next++) {
        const c = s[next]
        if (c === "\"" || c === "\\") break
        if (s.charCodeAt(next) <= 0x1f) throw new DecodeError("Invalid control character at", next)
      }
      if (next >= len) throw new DecodeError("Unterminated string starting at", begin)
      out += s.slice(end, next)
      const terminator = s[next]
      next++
      if (terminator === "\"") return [out, next]
      if (next === len) throw new DecodeError("Unterminated string starting at", begin)
      const c = s[next]
      if (c !== "u") {
        end = next + 1
        const escaped = Object.hasOwn(ESCAPES, c) ? ESCAPES[c] : undefined
        if (escaped === undefined) throw new DecodeError("Invalid \\escape", end - 2)
        out += escaped
        continue
      }
      next++
      end = next + 4
      if (end >= len) throw new DecodeError("Invalid \\uXXXX escape", next - 1)
      const hex = s.slice(next, end)
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new DecodeError("Invalid \\uXXXX escape", end - 5)
      // Code units are appended one by one: an escaped surrogate pair joins in the JavaScript string by itself.
      out += String.fromCharCode(parseInt(hex, 16))
    }
  }

  const number = (start: number): [number, number] => {
    let idx = start
    if (s[idx] === "-") {
      idx++
      if (idx > last) throw new StopIteration(start)
    }
    if (s[idx] >= "1" && s[idx] <= "9") {
      idx++
      while (idx <= last && isDigit(s[idx])) idx++
    } else if (s[idx] === "0") idx++
    else throw new StopIteration(start)
    if (idx < last && s[idx] === "." && isDigit(s[idx + 1])) {
      idx += 2
      while (idx <= last && isDigit(s[idx])) idx++
    }
    if (idx < last && (s[idx] === "e" || s[idx] === "E")) {
      const eStart = idx
      idx++
      if (idx < last && (s[idx] === "-" || s[idx] === "+")) idx++
      while (idx <= last && isDigit(s[idx])) idx++
      if (!isDigit(s[idx - 1])) idx = eStart
    }
    return [Number(s.slice(start, idx)), idx]
  }

  const object = (idx: number): [Record<string, unknown>, number] => {
    const out: Record<string, unknown> = {}
    idx = skip(idx)
    if (idx > last || s[idx] !== "}") {
      for (;;) {
        if (idx > last || s[idx] !== "\"") {
          throw new DecodeError("Expecting property name enclosed in double quotes", idx)
        }
        const [key, afterKey] = string(idx + 1)
        idx = skip(afterKey)
        if (idx > last || s[idx] !== ":") throw new DecodeError("Expecting ':' delimiter", idx)
        const [value, afterValue] = once(skip(idx + 1))
        Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true })
        idx = skip(afterValue)
        if (idx <= last && s[idx] === "}") break
        if (idx > last || s[idx] !== ",") throw new DecodeError("Expecting ',' delimiter", idx)
        idx = skip(idx + 1)
      }
    }
    return [out, idx + 1]
  }

  const array = (idx: number): [Array<unknown>, number] => {
    const out: Array<unknown> = []
    idx = skip(idx)
    if (idx > last || s[idx] !== "]") {
      for (;;) {
        const [value, after] = once(idx)
        out.push(value)
        idx = skip(after)
        if (idx <= last && s[idx] === "]") break
        if (idx > last || s[idx] !== ",") throw new DecodeError("Expecting ',' delimiter", idx)
        idx = skip(idx + 1)
      }
    }
    return [out, idx + 1]
  }

  /** `scan_once`: one value at `idx`; a value that cannot start here is a StopIteration. */
  const once = (idx: number): [unknown, number] => {
    if (idx >= len) throw new StopIteration(idx)
    switch (s[idx]) {
      case "\"":
        return string(idx + 1)
      case "{":
        return object(idx + 1)
      case "[":
        return array(idx + 1)
      case "n":
        if (s.startsWith("null", idx)) return [null, idx + 4]
        break
      case "t":
        if (s.startsWith("true", idx)) return [true, idx + 4]
        break
      case "f":
        if (s.startsWith("false", idx)) return [false, idx + 5]
        break
      case "N":
        if (s.startsWith("NaN", idx)) return [NaN, idx + 3]
        break
      case "I":
        if (s.startsWith("Infinity", idx)) return [Infinity, idx + 8]
        break
      case "-":
        if (s.startsWith("-Infinity", idx)) return [-Infinity, idx + 9]
        break
    }
    return number(idx)
  }

  return { once, skip, len }
}

/** `json.loads(text)`: the value, or Python's error text. */
export const parse = (
  text: string
): { readonly _tag: "Value"; readonly value: unknown } | { readonly _tag: "Error"; readonly message: string } => {
  try {
    return { _tag: "Value", value: JSON.parse(text) }
  } catch (nodeError) {
    try {
      if (text.startsWith("\ufeff")) {
        throw new DecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0)
      }
      const scan = scanner(text)
      let value: unknown
      let end: number
      try {
        ;[value, end] = scan.once(scan.skip(0))
      } catch (e) {
        if (e instanceof StopIteration) throw new DecodeError("Expecting value", e.idx)
        throw e
      }
      end = scan.skip(end)
      if (end !== scan.len) throw new DecodeError("Extra data", end)
      return { _tag: "Value", value }
    } catch (e) {
      if (e instanceof DecodeError) return { _tag: "Error", message: jsonDecodeErrorText(e.msg, text, e.idx) }
      // Nesting too deep for this scanner (Python would hit its recursion limit too): JavaScript's own text.
      return { _tag: "Error", message: nodeError instanceof Error ? nodeError.message : String(nodeError) }
    }
  }
}
