// The scripted endpoint over real loopback HTTP: replies picked by the conversation's assistant count (the last
// repeating), complete chat.completion answers, every call kept with its path, key and body; malformed bodies,
// streams and other routes refused in OpenAI's error shape. Live clock (real sockets).
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ScriptedEndpoint from "../src/ScriptedEndpoint.js"

const post = (url: string, body: unknown, path = "/v1/chat/completions") =>
  Effect.promise(async () => {
    const res = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer key-1" },
      body: typeof body === "string" ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000)
    })
    return { status: res.status, json: (await res.json()) as Record<string, any> }
  })

describe("ScriptedEndpoint", () => {
  it.scopedLive("answers the n-th reply to a conversation with n assistant messages, the last repeating", () =>
    Effect.gen(function*() {
      const endpoint = yield* ScriptedEndpoint.make([ScriptedEndpoint.bash("ls -l", "Looking."), { content: "Done." }])
      const user = { role: "user", content: "list the files" }
      const first = yield* post(endpoint.url, { model: "m", messages: [user], tools: [] })
      assert.strictEqual(first.status, 200)
      assert.deepStrictEqual(first.json, {
        id: "chatcmpl-0",
        object: "chat.completion",
        created: 0,
        model: "m",
        choices: [{
          index: 0,
          message: {
            role: "assistant",
            content: "Looking.",
            tool_calls: [{
              id: "call_0",
              type: "function",
              function: { name: "bash", arguments: "{\"command\":\"ls -l\"}" }
            }]
          },
          finish_reason: "tool_calls"
        }],
        usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }
      })
      const answered = first.json.choices[0].message
      const tool = { role: "tool", tool_call_id: "call_0", content: "a.txt" }
      const second = yield* post(endpoint.url, { model: "m", messages: [user, answered, tool] }, "/chat/completions")
      assert.deepStrictEqual(second.json.choices[0], {
        index: 0,
        message: { role: "assistant", content: "Done." },
        finish_reason: "stop"
      })
      const third = yield* post(endpoint.url, { messages: [user, answered, tool, answered, tool] })
      assert.strictEqual(third.json.choices[0].message.content, "Done.")
      assert.strictEqual(third.json.model, "scripted")
      assert.deepStrictEqual(
        endpoint.exchanges.map((e) => [e.path, e.authorization, e.request.messages.length, e.reply.content]),
        [
          ["/v1/chat/completions", "Bearer key-1", 1, "Looking."],
          ["/chat/completions", "Bearer key-1", 3, "Done."],
          ["/v1/chat/completions", "Bearer key-1", 5, "Done."]
        ]
      )
    }))

  it.scopedLive("sends null content and string arguments as they are (a malformed call scripted)", () =>
    Effect.gen(function*() {
      const endpoint = yield* ScriptedEndpoint.make([
        { content: null, toolCalls: [{ name: "bash", arguments: "{not json" }, { name: "ls", arguments: {} }] }
      ])
      const r = yield* post(endpoint.url, { messages: [{ role: "user", content: "go" }] })
      assert.deepStrictEqual(r.json.choices[0].message, {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_0_0", type: "function", function: { name: "bash", arguments: "{not json" } },
          { id: "call_0_1", type: "function", function: { name: "ls", arguments: "{}" } }
        ]
      })
    }))

  it.scopedLive("refuses a body without messages, a stream and another route, recording none of them", () =>
    Effect.gen(function*() {
      const endpoint = yield* ScriptedEndpoint.make([{ content: "Hi." }])
      const notJson = yield* post(endpoint.url, "{")
      assert.strictEqual(notJson.status, 400)
      assert.strictEqual(notJson.json.error.type, "invalid_request_error")
      const noMessages = yield* post(endpoint.url, { model: "m" })
      assert.strictEqual(noMessages.status, 400)
      assert.include(noMessages.json.error.message, "messages")
      const stream = yield* post(endpoint.url, { messages: [], stream: true })
      assert.strictEqual(stream.status, 400)
      assert.include(stream.json.error.message, "stream")
      const other = yield* post(endpoint.url, { messages: [] }, "/v1/responses")
      assert.strictEqual(other.status, 404)
      assert.deepStrictEqual(endpoint.exchanges, [])
    }))
})
