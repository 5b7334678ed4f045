// Text exactly as Python writes it: `repr` and `str` of values, TRL's tool-error text, `json.dumps` with Python's
// separators, and `json.loads`'s error text. The model and the twins compare these byte for byte, so there is
// one copy of each.
import { floatRepr } from "./pyJson.js"

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** Python's `repr(str)`: single quotes unless the text has a single quote and no double quote. */
export const reprString = (s: string): string => {
  const quote = s.includes("'") && !s.includes("\"") ? "\"" : "'"
  let out = quote
  for (const ch of s) {
    const code = ch.codePointAt(0)!
    if (ch === "\\" || ch === quote) out += "\\" + ch
    else if (ch === "\n") out += "\\n"
    else if (ch === "\r") out += "\\r"
    else if (ch === "\t") out += "\\t"
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0")
    else out += ch
  }
  return out + quote
}

/** Python's `repr` of a parsed JSON value (`None`, `True`, `'text'`, `[1, 2]`, `{'k': 0.5}`). */
export const pythonRepr = (value: unknown): string => {
  if (value === null || value === undefined) return "None"
  if (value === true) return "True"
  if (value === false) return "False"
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : floatRepr(value)
  if (typeof value === "string") return reprString(value)
  if (Array.isArray(value)) return `[${value.map(pythonRepr).join(", ")}]`
  if (isObject(value)) {
    return `{${Object.entries(value).map(([k, v]) => `${reprString(k)}: ${pythonRepr(v)}`).join(", ")}}`
  }
  return String(value)
}

/** Python's `str` of a parsed JSON value: a string as is, anything else as its `repr` (f-string formatting). */
export const pythonStr = (value: unknown): string => typeof value === "string" ? value : pythonRepr(value)

/** Python's `str({"error": message})`, which is how TRL shows a raised tool error to the model. */
export const errorText = (message: string): string => `{'error': ${reprString(message)}}`

/**
 * Serialises like Python's `json.dumps(x, ensure_ascii=False)` (separators `", "` and `": "`), which is what
 * transformers' `tojson` filter writes into chat templates.
 */
export const pythonJson = (value: unknown): string => {
  if (value === null || value === undefined) return "null"
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : JSON.stringify(value)
  if (typeof value === "boolean") return value ? "true" : "false"
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(", ")}]`
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined)
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`).join(", ")}}`
}

/** Python's `JSONDecodeError` text for an error at UTF-16 index `idx` of `s`. */
export const jsonDecodeErrorText = (msg: string, s: string, idx: number): string => {
  const before = s.slice(0, idx)
  const pos = [...before].length
  const newline = before.lastIndexOf("\n")
  const lineno = before.split("\n").length
  const colno = pos - (newline < 0 ? -1 : [...before.slice(0, newline)].length)
  return `${msg}: line ${lineno} column ${colno} (char ${pos})`
}
