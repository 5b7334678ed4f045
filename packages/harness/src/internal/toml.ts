// The part of TOML that Harbor's task.toml files use: [tables] (dotted names too), `key = value` with basic or
// literal strings, integers, floats, booleans and one-line arrays of those, and # comments. Anything else is an
// error that names the line, so a task file never half-parses.

export type TomlValue = string | number | boolean | ReadonlyArray<TomlValue>
export type TomlTable = { [key: string]: TomlValue | TomlTable }

export class TomlSyntaxError extends Error {}

const fail = (line: number, problem: string): never => {
  throw new TomlSyntaxError(`line ${line}: ${problem}`)
}

const stripComment = (text: string): string => {
  let quote: string | undefined
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (quote !== undefined) {
      if (c === "\\" && quote === "\"") i++
      else if (c === quote) quote = undefined
    } else if (c === "\"" || c === "'") quote = c
    else if (c === "#") return text.slice(0, i)
  }
  return text
}

const keyPattern = /^[A-Za-z0-9_-]+$/

// Reads one value starting at `at`; returns it and where it ended.
const readValue = (text: string, at: number, line: number): [TomlValue, number] => {
  const c = text[at]
  if (c === "\"") {
    let out = ""
    for (let i = at + 1; i < text.length; i++) {
      const d = text[i]
      if (d === "\"") return [out, i + 1]
      if (d === "\\") {
        const e = text[++i]
        const escapes: Record<string, string> = { n: "\n", t: "\t", "\"": "\"", "\\": "\\", r: "\r" }
        if (escapes[e] === undefined) fail(line, `unsupported escape \\${e} in a string`)
        out += escapes[e]
      } else out += d
    }
    return fail(line, "a string is not closed (multi-line strings are not supported)")
  }
  if (c === "'") {
    const end = text.indexOf("'", at + 1)
    if (end < 0) fail(line, "a literal string is not closed")
    return [text.slice(at + 1, end), end + 1]
  }
  if (c === "[") {
    const items: Array<TomlValue> = []
    let i = at + 1
    for (;;) {
      while (text[i] === " " || text[i] === "\t") i++
      if (text[i] === "]") return [items, i + 1]
      if (i >= text.length) fail(line, "an array is not closed on its line (multi-line arrays are not supported)")
      const [v, next] = readValue(text, i, line)
      items.push(v)
      i = next
      while (text[i] === " " || text[i] === "\t") i++
      if (text[i] === ",") i++
      else if (text[i] !== "]") fail(line, "array items must be separated by commas")
    }
  }
  const m = /^(true|false|[+-]?[0-9][0-9_]*(\.[0-9_]+)?([eE][+-]?[0-9]+)?)/.exec(text.slice(at))
  if (m === null) return fail(line, `cannot read the value "${text.slice(at).trim()}"`)
  const word = m[1]
  return [word === "true" ? true : word === "false" ? false : Number(word.replaceAll("_", "")), at + word.length]
}

/** Parses the TOML subset above; throws `TomlSyntaxError` naming the line. */
export const parse = (source: string): TomlTable => {
  const root: TomlTable = {}
  let table = root
  const lines = source.split(/\r?\n/)
  lines.forEach((raw, index) => {
    const line = index + 1
    const text = stripComment(raw).trim()
    if (text === "") return
    if (text.startsWith("[[")) fail(line, "arrays of tables ([[…]]) are not supported")
    if (text.startsWith("[")) {
      if (!text.endsWith("]")) fail(line, "a table header must end with ]")
      table = root
      for (const part of text.slice(1, -1).split(".").map((s) => s.trim())) {
        if (!keyPattern.test(part)) fail(line, `"${part}" is not a plain table name`)
        const next = table[part] ?? {}
        if (typeof next !== "object" || Array.isArray(next)) fail(line, `"${part}" is already a value`)
        table[part] = next
        table = next as TomlTable
      }
      return
    }
    const eq = text.indexOf("=")
    if (eq < 0) fail(line, "expected `key = value`")
    const key = text.slice(0, eq).trim()
    if (!keyPattern.test(key)) fail(line, `"${key}" is not a plain key (dotted or quoted keys are not supported)`)
    if (key in table) fail(line, `"${key}" is defined twice`)
    const rest = text.slice(eq + 1).trimStart()
    const [value, end] = readValue(rest, 0, line)
    if (rest.slice(end).trim() !== "") fail(line, `unexpected text after the value: "${rest.slice(end).trim()}"`)
    table[key] = value
  })
  return root
}
