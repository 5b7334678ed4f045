/**
 * BrowserGym's high-level action language: one Python-style call per line (`click('13')`, `fill('5', 'hi')`,
 * `select_option('7', ['a', 'b'])`, `scroll(0, 200)`), parsed without evaluating anything, checked against each
 * action's signature, and run on a page through playwright-core. Parse and signature errors say how to write the
 * action; execution errors (no element with that bid, action timeout) are BrowserGym's "last action error".
 */
import type { Page } from "playwright-core"

type Value = string | number | boolean | null | ReadonlyArray<Value>

export interface Call {
  readonly name: string
  readonly args: ReadonlyArray<Value>
  readonly kwargs: Readonly<Record<string, Value>>
}

interface Param {
  readonly name: string
  readonly type: "str" | "num" | "strs" | "str|strs"
  readonly default?: Value
}

const p = (name: string, type: Param["type"], dflt?: Value): Param =>
  dflt === undefined ? { name, type } : { name, type, default: dflt }

/** Each action's parameters, as BrowserGym's action set declares them. */
export const SIGNATURES: Readonly<Record<string, ReadonlyArray<Param>>> = {
  noop: [p("wait_ms", "num", 1000)],
  send_msg_to_user: [p("text", "str")],
  report_infeasible: [p("reason", "str")],
  scroll: [p("delta_x", "num"), p("delta_y", "num")],
  fill: [p("bid", "str"), p("value", "str")],
  select_option: [p("bid", "str"), p("options", "str|strs")],
  click: [p("bid", "str"), p("button", "str", "left"), p("modifiers", "strs", [])],
  dblclick: [p("bid", "str"), p("button", "str", "left"), p("modifiers", "strs", [])],
  hover: [p("bid", "str")],
  press: [p("bid", "str"), p("key_comb", "str")],
  focus: [p("bid", "str")],
  clear: [p("bid", "str")],
  goto: [p("url", "str")],
  go_back: [],
  go_forward: [],
  keyboard_press: [p("key", "str")],
  keyboard_type: [p("text", "str")],
  // TRL's browsergym example maps its `send_keys(text)` tool to this action.
  send_keys: [p("text", "str")]
}

const usage = (name: string) => {
  const params = SIGNATURES[name] ?? []
  return `${name}(${
    params.map((q) => (q.default === undefined ? q.name : `${q.name}=${JSON.stringify(q.default)}`)).join(", ")
  })`
}

const EXAMPLE = "e.g. click('13'), fill('5', 'hello'), select_option('7', 'Red'), press('5', 'Enter'), scroll(0, 200)"

/** A parse or signature error; the message names the fix. */
export class ActionSyntaxError extends Error {}

// -------------------------------------------------------------------------------------------------------------
// Parsing
// -------------------------------------------------------------------------------------------------------------

class Reader {
  i = 0
  constructor(readonly s: string) {}
  ws() {
    while (this.i < this.s.length && /\s/.test(this.s[this.i])) this.i++
  }
  peek() {
    this.ws()
    return this.s[this.i]
  }
  fail(what: string): never {
    throw new ActionSyntaxError(`${what} at column ${this.i + 1} of \`${this.s}\`; write one call per line, ${EXAMPLE}`)
  }
  expect(c: string) {
    if (this.peek() !== c) this.fail(`expected '${c}'`)
    this.i++
  }
  ident(): string {
    this.ws()
    const m = /^[A-Za-z_]\w*/.exec(this.s.slice(this.i))
    if (!m) this.fail("expected a name")
    this.i += m[0].length
    return m[0]
  }
  string(): string {
    const q = this.s[this.i]
    this.i++
    let out = ""
    while (this.i < this.s.length && this.s[this.i] !== q) {
      const c = this.s[this.i++]
      if (c === "\\") {
        const e = this.s[this.i++]
        out += e === "n" ? "\n" : e === "t" ? "\t" : e
      } else out += c
    }
    if (this.i >= this.s.length) this.fail("unterminated string")
    this.i++
    return out
  }
  value(): Value {
    const c = this.peek()
    if (c === "'" || c === "\"") return this.string()
    if (c === "[" || c === "(") {
      const close = c === "[" ? "]" : ")"
      this.i++
      const items: Array<Value> = []
      while (this.peek() !== close) {
        items.push(this.value())
        if (this.peek() === ",") this.i++
        else if (this.peek() !== close) this.fail(`expected ',' or '${close}'`)
      }
      this.i++
      return items
    }
    const m = /^-?\d+(\.\d+)?([eE][-+]?\d+)?/.exec(this.s.slice(this.i))
    if (m) {
      this.i += m[0].length
      return Number(m[0])
    }
    const word = this.ident()
    if (word === "True") return true
    if (word === "False") return false
    if (word === "None") return null
    return this.fail(`'${word}' is not a value (quote strings: '${word}')`)
  }
}

/** Parses one action line into a call. */
export const parseLine = (line: string): Call => {
  const r = new Reader(line)
  const name = r.ident()
  if (r.peek() !== "(") r.fail(`'${name}' must be called with parentheses: ${name}(...)`)
  r.i++
  const args: Array<Value> = []
  const kwargs: Record<string, Value> = {}
  while (r.peek() !== ")") {
    if (r.peek() === undefined) r.fail("missing ')'")
    const save = r.i
    const m = /^\s*([A-Za-z_]\w*)\s*=(?!=)/.exec(line.slice(r.i))
    if (m) {
      r.i += m[0].length
      kwargs[m[1]] = r.value()
    } else {
      r.i = save
      if (Object.keys(kwargs).length > 0) r.fail("positional argument after keyword argument")
      args.push(r.value())
    }
    if (r.peek() === ",") r.i++
    else if (r.peek() === undefined) r.fail("missing ')'")
    else if (r.peek() !== ")") r.fail("expected ',' or ')'")
  }
  r.i++
  r.ws()
  if (r.i < line.length && line[r.i] !== "#") r.fail("unexpected text after the call")
  return { name, args, kwargs }
}

const check = (name: string, param: Param, v: Value): Value => {
  const bad = (want: string) =>
    new ActionSyntaxError(
      `${name}: ${param.name} must be ${want}, got ${JSON.stringify(v)}` +
        (param.name === "bid"
          ? `; element ids are strings: ${name}('${String(v)}'${name === "fill" ? ", 'text'" : ""})`
          : `; write ${usage(name)}`)
    )
  switch (param.type) {
    case "str":
      if (typeof v !== "string") throw bad("a quoted string")
      return v
    case "num":
      if (typeof v !== "number") throw bad("a number")
      return v
    case "strs":
      if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) throw bad("a list of strings")
      return v
    case "str|strs":
      if (typeof v === "string") return v
      if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) throw bad("a string or a list of strings")
      return v
  }
}

/** The parsed, checked actions of an action string (one call per non-empty line). */
export const parse = (
  actionStr: string
): Array<{ readonly name: string; readonly args: Readonly<Record<string, Value>> }> => {
  const lines = actionStr.split("\n").map((l) => l.trim()).filter((l) => l.length > 0 && !l.startsWith("#"))
  if (lines.length === 0) throw new ActionSyntaxError(`empty action: write one call, ${EXAMPLE}, or noop()`)
  return lines.map((line) => {
    const call = parseLine(line)
    const params = SIGNATURES[call.name]
    if (params === undefined) {
      throw new ActionSyntaxError(
        `unknown action '${call.name}': use one of ${Object.keys(SIGNATURES).map(usage).join(", ")}`
      )
    }
    if (call.args.length > params.length) {
      throw new ActionSyntaxError(
        `${call.name} takes ${params.length} arguments, got ${call.args.length}: write ${usage(call.name)}`
      )
    }
    const out: Record<string, Value> = {}
    params.forEach((param, i) => {
      const v = i < call.args.length ? call.args[i] : call.kwargs[param.name] ?? param.default
      if (v === undefined) {
        throw new ActionSyntaxError(`${call.name} is missing '${param.name}': write ${usage(call.name)}`)
      }
      out[param.name] = check(call.name, param, v)
    })
    for (const k of Object.keys(call.kwargs)) {
      if (!params.some((q) => q.name === k)) {
        throw new ActionSyntaxError(`${call.name} has no argument '${k}': write ${usage(call.name)}`)
      }
    }
    return { name: call.name, args: out }
  })
}

// -------------------------------------------------------------------------------------------------------------
// Running
// -------------------------------------------------------------------------------------------------------------

/** What the run of an action leaves besides the page: the chat (send_msg_to_user) and infeasibility reports. */
export interface Effects {
  readonly chat: Array<string>
}

const KEY_NAMES = new Set([
  "Enter",
  "Tab",
  "Escape",
  "Backspace",
  "Delete",
  "ArrowUp",
  "ArrowDown",
  "ArrowLeft",
  "ArrowRight",
  "Home",
  "End",
  "PageUp",
  "PageDown",
  "Space"
])

/** Runs the checked actions in order; a rejection is the step's last action error. */
export const run = async (
  page: Page,
  actions: ReturnType<typeof parse>,
  effects: Effects
): Promise<void> => {
  for (const { args, name } of actions) {
    const el = () => {
      const bid = args.bid as string
      if (!/^[\w-]+$/.test(bid)) {
        throw new Error(`'${bid}' is not an element id: use a bid shown in brackets in the accessibility tree`)
      }
      return page.locator(`[bid="${bid}"]`)
    }
    const exists = async () => {
      const loc = el()
      if ((await loc.count()) === 0) {
        throw new Error(
          `no element has bid '${args.bid as string}': use a bid shown in brackets in the accessibility tree`
        )
      }
      return loc.first()
    }
    const modifiers = (args.modifiers ?? []) as Array<"Alt" | "Control" | "Meta" | "Shift">
    const button = args.button as "left" | "middle" | "right"
    switch (name) {
      case "noop":
        await page.waitForTimeout(Math.min(Math.max(args.wait_ms as number, 0), 5000))
        break
      case "send_msg_to_user":
        effects.chat.push(args.text as string)
        break
      case "report_infeasible":
        effects.chat.push(`[infeasible] ${args.reason as string}`)
        break
      case "scroll":
        await page.mouse.wheel(args.delta_x as number, args.delta_y as number)
        break
      case "fill":
        await (await exists()).fill(args.value as string)
        break
      case "select_option":
        await (await exists()).selectOption(args.options as string | Array<string>)
        break
      case "click":
        await (await exists()).click({ button, modifiers })
        break
      case "dblclick":
        await (await exists()).dblclick({ button, modifiers })
        break
      case "hover":
        await (await exists()).hover()
        break
      case "press":
        await (await exists()).press(args.key_comb as string)
        break
      case "focus":
        await (await exists()).focus()
        break
      case "clear":
        await (await exists()).clear()
        break
      case "goto":
        await page.goto(args.url as string)
        break
      case "go_back":
        await page.goBack()
        break
      case "go_forward":
        await page.goForward()
        break
      case "keyboard_press":
        await page.keyboard.press(args.key as string)
        break
      case "keyboard_type":
        await page.keyboard.type(args.text as string)
        break
      case "send_keys": {
        const text = args.text as string
        if (KEY_NAMES.has(text) || /^(Control|Shift|Alt|Meta)\+/.test(text)) await page.keyboard.press(text)
        else await page.keyboard.type(text)
        break
      }
    }
  }
}
