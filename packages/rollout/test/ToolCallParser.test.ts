import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { ToolCallParser } from "../src/index.js"

const STOPS = { thinking: false, stopStrings: ["<|im_end|>"] } as const

const toolName = fc.stringMatching(/^[a-z_][a-z0-9_]{0,15}$/)
const args = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 })
const call = fc.record({ name: toolName, arguments: args })
const plainText = fc.string({ maxLength: 40 }).filter((s) => !/<\/?(tool_call|think)>|<\|im_end\|>/.test(s))

// JSON normalises -0 to 0; compare what a JSON round trip keeps.
const normal = (u: unknown) => JSON.parse(JSON.stringify(u))

describe("ToolCallParser", () => {
  it.prop("round trip: rendered calls parse back to the same calls", [fc.array(call, { maxLength: 4 }), plainText], ([
    calls,
    content
  ]) => {
    const text = ToolCallParser.renderTurn({ content, calls }) + "<|im_end|>"
    const turn = ToolCallParser.parse(text, STOPS)
    assert.strictEqual(turn.failures.length, 0)
    assert.deepStrictEqual(turn.calls.map((c) => ({ name: c.name, arguments: c.arguments })), normal(calls))
    assert.deepStrictEqual(turn.calls.map((c) => c.index), calls.map((_, i) => i))
    assert.strictEqual(turn.content, content.trim())
    assert.strictEqual(turn.requestedTools, calls.length > 0)
    return true
  })

  it.prop(
    "round trip with reasoning, thinking on or off",
    [call, plainText, fc.boolean()],
    ([c, reasoning, thinking]) => {
      const text = ToolCallParser.renderTurn({ reasoning, calls: [c] })
      const turn = ToolCallParser.parse(text, { thinking })
      assert.strictEqual(turn.reasoning, reasoning.trim())
      assert.deepStrictEqual(turn.calls.map((x) => x.name), [c.name])
      assert.strictEqual(turn.content, "")
      return true
    }
  )

  const corruption = fc.constantFrom(
    "truncate",
    "drop_name",
    "array_arguments",
    "string_arguments",
    "number_arguments",
    "not_object",
    "unclosed"
  )

  it.prop(
    "corruptions never throw and name what is wrong",
    [call, corruption, fc.nat(), fc.array(call, { maxLength: 2 })],
    ([c, kind, cut, others]) => {
      const good = JSON.stringify({ name: c.name, arguments: c.arguments })
      // "unclosed" keeps the good JSON and drops the closing tag.
      let inner = good
      let expected: ToolCallParser.FailureReason = "unterminated"
      switch (kind) {
        case "truncate":
          inner = good.slice(0, cut % (good.length - 1))
          expected = "malformed_json"
          break
        case "drop_name":
          inner = JSON.stringify({ arguments: c.arguments })
          expected = "missing_name"
          break
        case "array_arguments":
          inner = JSON.stringify({ name: c.name, arguments: [1, 2] })
          expected = "invalid_arguments"
          break
        case "string_arguments":
          inner = JSON.stringify({ name: c.name, arguments: JSON.stringify(c.arguments) })
          expected = "invalid_arguments"
          break
        case "number_arguments":
          inner = JSON.stringify({ name: c.name, arguments: 3 })
          expected = "invalid_arguments"
          break
        case "not_object":
          inner = JSON.stringify([c.name, c.arguments])
          expected = "not_an_object"
          break
      }
      // Well-formed calls before the corrupted one are still returned.
      const text = ToolCallParser.renderCalls(others) + (others.length > 0 ? "\n" : "") + "<tool_call>\n" + inner +
        (kind === "unclosed" ? "" : "\n</tool_call>") + "<|im_end|>"
      const turn = ToolCallParser.parse(text, STOPS)
      assert.strictEqual(turn.calls.length, others.length)
      assert.strictEqual(turn.failures.length, 1)
      const f = turn.failures[0]
      assert.strictEqual(f.reason, expected)
      assert.strictEqual(f.index, others.length)
      assert.isTrue(turn.requestedTools)
      assert.include(f.message, "<tool_call>")
      if (expected === "invalid_arguments") {
        assert.strictEqual(f.name, c.name)
        assert.include(f.message, `'${c.name}'`)
        assert.include(f.message, "\"arguments\" must be a JSON object")
      }
      if (expected === "missing_name") assert.include(f.message, "\"name\"")
      if (expected === "malformed_json") assert.include(f.message, "not valid JSON")
      return true
    }
  )

  it.prop("arbitrary text never throws", [fc.string({ maxLength: 200 }), fc.boolean()], ([s, thinking]) => {
    const turn = ToolCallParser.parse(s, { thinking, stopStrings: ["<|im_end|>"] })
    return typeof turn.content === "string"
  })

  it.prop(
    "arbitrary text inside the tags never throws",
    [fc.string({ maxLength: 60 }), fc.boolean()],
    ([s, closed]) => {
      const turn = ToolCallParser.parse(`<tool_call>${s}${closed ? "</tool_call>" : ""}`, STOPS)
      assert.isTrue(turn.requestedTools)
      assert.strictEqual(turn.calls.length + turn.failures.length >= 1, true)
      return true
    }
  )

  it("a JSON string containing the closing tag stays inside the call", () => {
    const calls = [{ name: "echo", arguments: { message: "a </tool_call> b" } }, { name: "x", arguments: {} }]
    const turn = ToolCallParser.parse(ToolCallParser.renderCalls(calls), STOPS)
    assert.deepStrictEqual(turn.calls.map((c) => c.arguments), [{ message: "a </tool_call> b" }, {}])
  })

  it("missing arguments become {} (as TRL)", () => {
    const turn = ToolCallParser.parse("<tool_call>\n{\"name\": \"reset\"}\n</tool_call>", STOPS)
    assert.deepStrictEqual(turn.calls, [{ _tag: "Call", name: "reset", arguments: {}, index: 0 }])
  })

  it("thinking: an unclosed <think> is all reasoning; a stray </think> depends on enable_thinking", () => {
    const open = ToolCallParser.parse("<think>\nlet me see <tool_call>", { thinking: true })
    assert.strictEqual(open.reasoning, "let me see <tool_call>")
    assert.strictEqual(open.calls.length + open.failures.length, 0)
    const on = ToolCallParser.parse("plan\n</think>\n\nanswer", { thinking: true })
    assert.strictEqual(on.reasoning, "plan")
    assert.strictEqual(on.content, "answer")
    const off = ToolCallParser.parse("plan\n</think>\n\nanswer", { thinking: false })
    assert.strictEqual(off.reasoning, undefined)
    assert.strictEqual(off.content, "plan\n</think>\n\nanswer")
  })

  it("a malformed name is still recovered for per-tool counting", () => {
    const turn = ToolCallParser.parse(
      "<tool_call>{\"name\": \"guess\", \"arguments\": {\"guess\": }</tool_call>",
      STOPS
    )
    assert.strictEqual(turn.failures[0].reason, "malformed_json")
    assert.strictEqual(turn.failures[0].name, "guess")
  })

  it("a call's JSON may be surrounded by any whitespace trim removes, not only JSON's own", () => {
    for (const space of ["\n", " \t\r\n", "\u00a0", "\u3000\n", "\ufeff"]) {
      const turn = ToolCallParser.parse(
        `<tool_call>${space}{"name": "guess", "arguments": {}}${space}</tool_call>`,
        STOPS
      )
      assert.deepStrictEqual(
        turn.calls,
        [{ _tag: "Call", name: "guess", arguments: {}, index: 0 }],
        JSON.stringify(space)
      )
    }
  })

  it.prop(
    "stop strings: every trailing stop (with whitespace before it) is removed, other text is kept",
    [plainText, fc.array(fc.constantFrom("<|im_end|>", "<|endoftext|>", " ", "\n"), { maxLength: 5 })],
    ([text, tail]) => {
      const stops = { thinking: false, stopStrings: ["<|im_end|>", "<|endoftext|>"] }
      // Reference: strip whitespace + one stop at a time, as long as one matches.
      let expected = text + tail.join("")
      for (let again = true; again;) {
        again = false
        const trimmed = expected.trimEnd()
        for (const stop of stops.stopStrings) {
          if (trimmed.endsWith(stop)) {
            expected = trimmed.slice(0, -stop.length)
            again = true
          }
        }
      }
      assert.strictEqual(ToolCallParser.parse(text + tail.join(""), stops).content, expected.trim())
      return true
    }
  )

  it.prop(
    "a malformed call's message reports the JSON error of its trimmed text (positions from its first character)",
    [plainText, fc.constantFrom("", "\n", " \n", "\u00a0"), fc.constantFrom("", "\n", "\t\n", "\u3000")],
    ([s, before, after]) => {
      const inner = before + s + after
      let expected: string | undefined
      try {
        JSON.parse(inner.trim())
      } catch (e) {
        expected = (e as Error).message
      }
      const turn = ToolCallParser.parse(`<tool_call>${inner}</tool_call>`, STOPS)
      const malformed = turn.failures.filter((f) => f.reason === "malformed_json")
      if (expected === undefined) assert.strictEqual(malformed.length, 0)
      else assert.include(malformed[0]?.message ?? "", `(${expected})`)
      return true
    }
  )
})
