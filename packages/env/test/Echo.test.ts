import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import { Echo, Environment } from "../src/index.js"

describe("Echo (legacy OpenEnv)", () => {
  it.effect("reset, echo with reward 0.1 x length, state", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Echo.openEnv.make
      const r0 = yield* env.reset({ episode_id: "e1" })
      assert.deepStrictEqual(r0, {
        observation: { echoed_message: "Echo environment ready!", message_length: 0 },
        reward: 0,
        done: false
      })
      const r1 = yield* env.step({ message: "Hello" })
      assert.deepStrictEqual(r1, {
        observation: { echoed_message: "Hello", message_length: 5 },
        reward: 0.5,
        done: false
      })
      const r2 = yield* env.step({ message: "héllo😀" })
      assert.strictEqual(r2.observation.message_length, 6)
      assert.deepStrictEqual(yield* env.state, { episode_id: "e1", step_count: 2 })
    })))

  it("the action requires a non-empty message and rejects unknown keys", () => {
    const decode = Schema.decodeUnknownEither(Echo.openEnv.action)
    assert.strictEqual(decode({ message: "" })._tag, "Left")
    assert.strictEqual(decode({ message: "a", extra: 1 })._tag, "Left")
    assert.strictEqual(decode({ message: "a", metadata: {} })._tag, "Right")
  })
})

describe("Echo (MCP OpenEnv)", () => {
  it.effect("list_tools, call_tool and MCP tools", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Echo.openEnvMcp.make
      const r0 = yield* env.reset({})
      assert.deepStrictEqual(r0, { observation: {}, reward: 0, done: false })
      const listed = yield* env.step({ type: "list_tools" })
      assert.deepStrictEqual(
        (listed.observation.tools as ReadonlyArray<{ name: string }>).map((t) => t.name),
        ["echo_message", "echo_with_length"]
      )
      const called = yield* env.step({ type: "call_tool", tool_name: "echo_message", arguments: { message: "Hi" } })
      assert.deepStrictEqual(called, {
        observation: {
          tool_name: "echo_message",
          result: {
            content: [{ type: "text", text: "Hi", annotations: null, meta: null }],
            structured_content: { result: "Hi" },
            // FastMCP 3 marks a result it wrapped (checked against the real FastMCP in interop/test/RealOpenEnv).
            meta: { fastmcp: { wrap_result: true } },
            data: "Hi",
            is_error: false
          },
          error: null
        },
        reward: null,
        done: false
      })
      const missing = yield* env.step({ type: "call_tool", tool_name: "nope", arguments: {} })
      assert.deepStrictEqual((missing.observation.error as { error_type: string }).error_type, "tool_not_found")
      assert.strictEqual((yield* env.state).step_count, 3)
      const tools = env.tools!
      const withLength = yield* tools.call("echo_with_length", { message: "abc" })
      assert.deepStrictEqual(withLength.structured_content, { message: "abc", length: 3 })
      const bad = yield* Effect.flip(tools.call("echo_message", {}))
      assert.strictEqual(bad.kind, "invalid_args")
    })))
})

describe("Echo (tools)", () => {
  it.effect("echo returns the message; the reward is the last echo's", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Echo.environment, {}, (episode) =>
        Effect.gen(function*() {
          yield* episode.call("echo", { message: "Hello World!" })
          yield* episode.call("echo", { message: "Hi" })
        }))
      assert.isTrue(Option.isNone(result.observation))
      assert.strictEqual(result.steps[0].outcome.text, "Hello World!")
      assert.deepStrictEqual(result.state, { reward: 2 * 0.1, echoes: 2 })
    }))

  it.effect.prop("same input, same episode", [Schema.Array(Schema.String)], ([messages]) =>
    Effect.gen(function*() {
      const play = Environment.run(Echo.environment, {}, (episode) =>
        Effect.forEach(messages, (message) =>
          episode.call("echo", { message }), { discard: true }))
      assert.deepStrictEqual(yield* play, yield* play)
    }), { fastCheck: { numRuns: 30 } })
})
