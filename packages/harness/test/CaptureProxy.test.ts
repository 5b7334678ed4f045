// The capture proxy with real components: an in-process policy server (the CPU reference backend over a tiny
// model), a real CaptureProxy on loopback (and on a Unix socket), and fetch as the agent in each dialect. Captured
// ids are compared with a direct call to the policy server with the same request (greedy); conversations link by
// token prefix; retries are discarded; auxiliary calls are mask 0; unknown keys, dead and silent upstreams.
// Live clock throughout.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import { Context, Duration, Effect, Exit, Layer, Schedule, Scope } from "effect"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import * as CaptureProxy from "../src/CaptureProxy.js"
import * as Anthropic from "../src/internal/capture/anthropicMessages.js"
import * as Chat from "../src/internal/capture/openaiChat.js"
import * as Responses from "../src/internal/capture/openaiResponses.js"
import * as Upstream from "../src/internal/capture/upstream.js"
import * as PolicyBackend from "../src/PolicyBackend.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import * as TrainingTrace from "../src/TrainingTrace.js"

type Json = Record<string, any>

// A fresh tiny model's logits are nearly flat, so its weights (norms aside) are scaled up: greedy outputs vary from
// token to token. Seed 38's greedy replies (4 tokens each) decode and re-encode to the same ids, which exact-prefix linking needs
// (a reply whose text re-tokenises differently would, rightly, start a new conversation).
const SEED = 38
const sharpened = (model: Checkpoint.Model): Checkpoint.Model => ({
  ...model,
  tensors: new Map(
    [...model.tensors].map((
      [name, t]
    ) => [name, name.endsWith("norm.weight") ? t : { ...t, data: t.data.map((x) => x * 30) }])
  )
})

const TEMPLATE = { chat_template_kwargs: { enable_thinking: false } }

const policyServer = Effect.gen(function*() {
  const model = sharpened(yield* Checkpoint.makeModel("tiny", SEED).pipe(Effect.orDie))
  const backend = yield* PolicyBackend.cpu(model, { maxBatchSize: 8 }).pipe(Effect.provide(NodeContext.layer))
  return yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
})

const proxyFor = (upstream: string, options: Partial<CaptureProxy.CaptureProxyOptions> = {}) =>
  CaptureProxy.make({ upstream, model: "tiny", extraBody: TEMPLATE, ...options })

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body)
    })
    const text = await res.text()
    const isJson = (res.headers.get("content-type") ?? "").includes("json")
    return { status: res.status, text, json: isJson ? JSON.parse(text) as Json : {} as Json }
  })

const get = (url: string, method = "GET", headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const res = await fetch(url, { method, headers })
    return { status: res.status, json: await res.json() as Json }
  })

// SSE: [{event, data}] (data parsed; [DONE] kept as the string).
const sse = (text: string) =>
  text.split("\n\n").filter((b) => b.trim() !== "").map((block) => {
    const event = /^event: (.*)$/m.exec(block)?.[1]
    const data = /^data: (.*)$/m.exec(block)![1]
    return { event, data: data === "[DONE]" ? data : JSON.parse(data) as Json }
  })

const TOOLS = [{
  type: "function",
  function: {
    name: "bash",
    description: "Run a shell command.",
    parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] }
  }
}]
const SYSTEM = "You are a helper."
const USER = "Count the lines."

// The same request, direct to the policy server: the reference for the captured ids.
const direct = (server: PolicyServer.RunningPolicyServer, messages: ReadonlyArray<unknown>, maxTokens = 4) =>
  post(`${server.url}/v1/chat/completions`, {
    model: "tiny",
    messages,
    tools: TOOLS,
    max_tokens: maxTokens,
    temperature: 0,
    logprobs: true,
    return_token_ids: true,
    ...TEMPLATE
  }).pipe(Effect.map((r) => r.json))

const chatCall = (proxy: CaptureProxy.RunningCaptureProxy, key: string, messages: ReadonlyArray<unknown>, extra = {}) =>
  post(`${proxy.url}/v1/chat/completions`, {
    model: "gpt-4o",
    messages,
    tools: TOOLS,
    max_tokens: 4,
    temperature: 0,
    ...extra
  }, { authorization: `Bearer ${key}` })

const traceOf = (proxy: CaptureProxy.RunningCaptureProxy, id: string) =>
  Effect.flatMap(proxy.trace(id), (t) => TrainingTrace.decode(JSON.parse(JSON.stringify(t))))

describe("CaptureProxy", () => {
  it.scopedLive(
    "each dialect: the captured ids equal a direct greedy generation; logprobs ≤ 0; the trace validates",
    () =>
      Effect.gen(function*() {
        const server = yield* policyServer
        const proxy = yield* proxyFor(server.url)
        const key = yield* proxy.open({ label: "dialects" })
        const want = yield* direct(server, [{ role: "system", content: SYSTEM }, { role: "user", content: USER }])
        const wantText: string = want.choices[0].message.content
        assert.isAbove(want.choices[0].token_ids.length, 0)
        const auth = { authorization: `Bearer ${key}` }
        const anthropicHeaders = { "x-api-key": key, "anthropic-version": "2023-06-01" }
        const base = [{ role: "system", content: SYSTEM }, { role: "user", content: USER }]

        // OpenAI chat, plain and streamed.
        const plain = yield* chatCall(proxy, key, base)
        assert.strictEqual(plain.status, 200, plain.text)
        assert.strictEqual(plain.json.choices[0].message.content, wantText)
        assert.isUndefined(plain.json.prompt_token_ids)
        const streamed = yield* chatCall(proxy, key, base, { stream: true, stream_options: { include_usage: true } })
        const chunks = sse(streamed.text)
        assert.strictEqual(chunks[chunks.length - 1].data, "[DONE]")
        const deltas = chunks.slice(0, -1).map((c) => c.data as Json)
        assert.strictEqual(deltas.map((c) => c.choices[0]?.delta?.content ?? "").join(""), wantText)
        assert.strictEqual(deltas[deltas.length - 1].usage.completion_tokens, want.choices[0].token_ids.length)

        // OpenAI Responses, plain and streamed.
        const responsesBody = {
          model: "gpt-4o",
          instructions: SYSTEM,
          input: USER,
          max_output_tokens: 4,
          temperature: 0
        }
        const tools = [{
          type: "function",
          name: "bash",
          description: "Run a shell command.",
          parameters: TOOLS[0].function.parameters
        }]
        const r = yield* post(`${proxy.url}/v1/responses`, { ...responsesBody, tools }, auth)
        assert.strictEqual(r.status, 200, r.text)
        assert.strictEqual(r.json.object, "response")
        assert.strictEqual(r.json.output_text, wantText)
        assert.strictEqual(r.json.output[0].content[0].text, wantText)
        const rs = sse((yield* post(`${proxy.url}/v1/responses`, { ...responsesBody, tools, stream: true }, auth)).text)
        assert.strictEqual(rs[0].event, "response.created")
        assert.strictEqual(
          rs.filter((e) => e.event === "response.output_text.delta").map((e) => (e.data as Json).delta).join(""),
          wantText
        )
        assert.include(["response.completed", "response.incomplete"], rs[rs.length - 1].event)

        // Anthropic Messages, plain and streamed.
        const anthropicBody = {
          model: "claude-sonnet-4",
          system: SYSTEM,
          messages: [{ role: "user", content: [{ type: "text", text: USER }] }],
          tools: [{ name: "bash", description: "Run a shell command.", input_schema: TOOLS[0].function.parameters }],
          max_tokens: 4,
          temperature: 0
        }
        const a = yield* post(`${proxy.url}/v1/messages`, anthropicBody, anthropicHeaders)
        assert.strictEqual(a.status, 200, a.text)
        assert.strictEqual(a.json.type, "message")
        assert.strictEqual(a.json.content[0].text, wantText)
        assert.strictEqual(a.json.stop_reason, want.choices[0].finish_reason === "length" ? "max_tokens" : "end_turn")
        const as = sse(
          (yield* post(`${proxy.url}/v1/messages`, { ...anthropicBody, stream: true }, anthropicHeaders)).text
        )
        assert.deepStrictEqual(as.map((e) => e.event), [
          "message_start",
          "content_block_start",
          "content_block_delta",
          "content_block_stop",
          "message_delta",
          "message_stop"
        ])
        assert.strictEqual((as[2].data as Json).delta.text, wantText)

        // Six calls, one prompt: six turns whose ids are the direct call's.
        const trace = yield* traceOf(proxy, key)
        assert.strictEqual(trace.turns.length, 6)
        for (const t of trace.turns) {
          assert.deepStrictEqual(t.prompt_token_ids, want.prompt_token_ids)
          assert.deepStrictEqual(t.completion_token_ids, want.choices[0].token_ids)
          assert.strictEqual(t.per_token_logps.length, t.completion_token_ids.length)
          t.per_token_logps.forEach((lp, i) => {
            assert.isAtMost(lp, 0)
            assert.closeTo(lp, want.choices[0].logprobs.content[i].logprob, 1e-9)
          })
          assert.strictEqual(t.metadata.role, "agent")
        }
        assert.deepStrictEqual(trace.turns.map((t) => t.metadata.dialect), [
          "openai-chat",
          "openai-chat",
          "openai-responses",
          "openai-responses",
          "anthropic-messages",
          "anthropic-messages"
        ])
      }),
    120_000
  )

  it.scopedLive(
    "tool calls in the history: Responses and Anthropic items render the same prompt as OpenAI chat",
    () =>
      Effect.gen(function*() {
        const server = yield* policyServer
        const proxy = yield* proxyFor(server.url)
        const key = yield* proxy.open()
        const messages = [
          { role: "system", content: SYSTEM },
          { role: "user", content: USER },
          {
            role: "assistant",
            content: "Let me look.",
            tool_calls: [{
              id: "call_1",
              type: "function",
              function: { name: "bash", arguments: "{\"cmd\":\"wc -l f\"}" }
            }]
          },
          { role: "tool", tool_call_id: "call_1", content: "3 f" }
        ]
        const want = yield* direct(server, messages)
        yield* chatCall(proxy, key, messages)
        yield* post(`${proxy.url}/v1/responses`, {
          instructions: SYSTEM,
          input: [
            { role: "user", content: [{ type: "input_text", text: USER }] },
            { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me look." }] },
            { type: "function_call", call_id: "call_1", name: "bash", arguments: "{\"cmd\":\"wc -l f\"}" },
            { type: "function_call_output", call_id: "call_1", output: "3 f" }
          ],
          tools: [{
            type: "function",
            name: "bash",
            description: "Run a shell command.",
            parameters: TOOLS[0].function.parameters
          }],
          max_output_tokens: 4,
          temperature: 0
        }, { authorization: `Bearer ${key}` })
        yield* post(`${proxy.url}/v1/messages`, {
          system: [{ type: "text", text: SYSTEM }],
          messages: [
            { role: "user", content: USER },
            {
              role: "assistant",
              content: [{ type: "text", text: "Let me look." }, {
                type: "tool_use",
                id: "call_1",
                name: "bash",
                input: { cmd: "wc -l f" }
              }]
            },
            { role: "user", content: [{ type: "tool_result", tool_use_id: "call_1", content: "3 f" }] }
          ],
          tools: [{ name: "bash", description: "Run a shell command.", input_schema: TOOLS[0].function.parameters }],
          max_tokens: 4,
          temperature: 0
        }, { "x-api-key": key })
        const trace = yield* traceOf(proxy, key)
        assert.strictEqual(trace.turns.length, 3)
        for (const t of trace.turns) {
          assert.deepStrictEqual(t.prompt_token_ids, want.prompt_token_ids, String(t.metadata.dialect))
          assert.deepStrictEqual(t.completion_token_ids, want.choices[0].token_ids)
        }
      }),
    120_000
  )

  it.scopedLive(
    "a tool loop links into one conversation; a retry that led nowhere is discarded; a rewritten history is a new " +
      "root; a title-generation call is auxiliary with mask 0",
    () =>
      Effect.gen(function*() {
        const server = yield* policyServer
        const proxy = yield* proxyFor(server.url)
        const key = yield* proxy.open()
        const history: Array<Json> = [{ role: "system", content: SYSTEM }, { role: "user", content: USER }]
        const step = (messages: ReadonlyArray<Json>) =>
          Effect.map(chatCall(proxy, key, messages), (r) => r.json.choices[0].message as Json)
        const first = yield* step(history) // turn 0
        history.push(first, { role: "tool", tool_call_id: "call_1", content: "3" })
        yield* step(history) // turn 1
        const retried = yield* step(history) // turn 2: the same history again (a retry)
        const afterRetry = [...history, retried, { role: "tool", tool_call_id: "call_2", content: "done" }]
        yield* step(afterRetry) // turn 3 continues turns 1 and 2 alike; the earlier (1) is its parent
        yield* step([{ role: "system", content: SYSTEM }, { role: "user", content: "Count the words instead." }]) // 4
        yield* step([
          { role: "system", content: "You are a title generator. Generate a short title for this conversation." },
          { role: "user", content: USER }
        ]) // 5
        const trace = yield* traceOf(proxy, key)
        const meta = trace.turns.map((t) => [t.node_id, t.metadata.role, t.metadata.parent_id, t.metadata.root_id])
        assert.deepStrictEqual(meta, [
          ["0", "agent", null, "0"],
          ["1", "agent", "0", "0"],
          ["2", "discarded", "0", "0"],
          ["3", "agent", "1", "0"],
          ["4", "agent", null, "4"],
          ["5", "auxiliary", null, "5"]
        ])
        // Agent turns train their completion; discarded and auxiliary ones are context only.
        for (const t of trace.turns) {
          const p = t.prompt_token_ids.length
          const trained = t.metadata.role === "agent" ? 1 : 0
          assert.deepStrictEqual(t.loss_mask, [...Array(p).fill(0), ...t.completion_token_ids.map(() => trained)])
        }
        // Each link is exact: the parent's prompt + completion opens the child's prompt.
        const byId = new Map(trace.turns.map((t) => [t.node_id, t]))
        for (const t of trace.turns) {
          const parent = t.metadata.parent_id
          if (typeof parent !== "string") continue
          const p = byId.get(parent)!
          const sequence = [...p.prompt_token_ids, ...p.completion_token_ids]
          assert.deepStrictEqual(t.prompt_token_ids.slice(0, sequence.length), sequence)
        }
        const status = yield* proxy.status(key)
        assert.deepStrictEqual(status.conversations.map((c) => [c.root_id, c.role, c.n_turns]), [
          ["0", "agent", 4],
          ["4", "agent", 1],
          ["5", "auxiliary", 1]
        ])
        assert.isNull(status.transport_failure)
      }),
    120_000
  )

  it.scopedLive(
    "(the service) unknown or missing keys are refused with 401 in the dialect's shape; a closed session's key too",
    () =>
      Effect.gen(function*() {
        const server = yield* policyServer
        // The service, as a rollout uses it in process.
        const context = yield* Layer.build(
          CaptureProxy.CaptureProxy.layer({ upstream: server.url, model: "tiny", extraBody: TEMPLATE })
        )
        const proxy = Context.get(context, CaptureProxy.CaptureProxy)
        const msgs = [{ role: "user", content: "hi" }]
        const c = yield* chatCall(proxy, "sk-not-a-session", msgs)
        assert.strictEqual(c.status, 401)
        assert.strictEqual(c.json.error.code, "invalid_api_key")
        const none = yield* post(`${proxy.url}/v1/chat/completions`, { messages: msgs })
        assert.strictEqual(none.status, 401)
        const a = yield* post(`${proxy.url}/v1/messages`, { messages: msgs, max_tokens: 4 }, { "x-api-key": "nope" })
        assert.strictEqual(a.status, 401)
        assert.deepStrictEqual(a.json.type, "error")
        assert.strictEqual(a.json.error.type, "authentication_error")
        const r = yield* post(`${proxy.url}/v1/responses`, { input: "hi" }, { authorization: "Bearer nope" })
        assert.strictEqual(r.status, 401)
        assert.strictEqual(r.json.error.code, "invalid_api_key")
        const key = yield* proxy.open()
        assert.strictEqual((yield* chatCall(proxy, key, msgs)).status, 200)
        const final = yield* proxy.close(key)
        assert.strictEqual(final.n_turns, 1)
        assert.strictEqual((yield* chatCall(proxy, key, msgs)).status, 401)
        assert.strictEqual((yield* Effect.exit(proxy.trace(key)))._tag, "Failure")
      }),
    120_000
  )

  it.scopedLive(
    "the admin API over HTTP (guarded by its key) and the agent routes on a Unix socket",
    () =>
      Effect.gen(function*() {
        const server = yield* policyServer
        const socketPath = Path.join(Os.tmpdir(), `capture-${process.pid}-${Date.now()}.sock`)
        const proxy = yield* proxyFor(server.url, { socketPath, adminKey: "admin-secret" })
        const admin = { authorization: "Bearer admin-secret" }
        assert.strictEqual((yield* post(`${proxy.url}/admin/sessions`, {})).status, 401)
        const opened = yield* post(`${proxy.url}/admin/sessions`, { label: "http" }, admin)
        assert.strictEqual(opened.status, 201)
        const key: string = opened.json.session_id
        // The agent on the socket.
        const viaSocket = (path: string, method: string, body?: unknown) =>
          Effect.async<{ status: number; json: Json }>((resume) => {
            const req = Http.request({
              socketPath,
              path,
              method,
              headers: { "content-type": "application/json", authorization: `Bearer ${key}` }
            }, (res) => {
              let text = ""
              res.on("data", (d) => (text += d))
              res.on(
                "end",
                () => resume(Effect.succeed({ status: res.statusCode ?? 0, json: JSON.parse(text) as Json }))
              )
            })
            req.on("error", (e) => resume(Effect.die(e)))
            req.end(body === undefined ? undefined : JSON.stringify(body))
          })
        const call = yield* viaSocket("/v1/chat/completions", "POST", {
          messages: [{ role: "user", content: USER }],
          max_tokens: 4,
          temperature: 0
        })
        assert.strictEqual(call.status, 200)
        // The socket does not serve the admin routes.
        assert.strictEqual((yield* viaSocket(`/admin/sessions/${key}/trace`, "GET")).status, 404)
        const trace = yield* get(`${proxy.url}/admin/sessions/${key}/trace`, "GET", admin)
        assert.strictEqual(trace.status, 200)
        const decoded = yield* TrainingTrace.decode(trace.json)
        assert.strictEqual(decoded.turns.length, 1)
        const status = yield* get(`${proxy.url}/admin/sessions/${key}`, "GET", admin)
        assert.strictEqual(status.json.label, "http")
        const closed = yield* get(`${proxy.url}/admin/sessions/${key}`, "DELETE", admin)
        assert.strictEqual(closed.json.open, false)
        assert.strictEqual((yield* get(`${proxy.url}/admin/sessions/${key}`, "GET", admin)).status, 404)
      }),
    120_000
  )

  it.scopedLive(
    "an upstream call after this process was held past the policy server's keep-alive is sent again, not failed",
    () =>
      Effect.gen(function*() {
        // The server in its own process, so it closes the idle kept-alive connection while this one is held (as a
        // harness trainer's synchronous optimizer step holds it on a loaded machine); the next call is written into
        // the closed connection. Before the fix it failed (transport: the rollout unscoreable).
        const dir = yield* Effect.acquireRelease(
          Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "capture-keepalive-"))),
          (d) => Effect.promise(() => Fs.rm(d, { recursive: true, force: true }))
        )
        yield* Checkpoint.save(dir, sharpened(yield* Checkpoint.makeModel("tiny", SEED))).pipe(
          Effect.provide(NodeContext.layer)
        )
        const server = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
        const upstream: Upstream.Upstream = {
          url: server.url,
          model: "tiny",
          apiKey: undefined,
          timeout: Duration.minutes(1),
          extraBody: TEMPLATE
        }
        const chat = { messages: [{ role: "user", content: USER }], max_tokens: 4, temperature: 0 }
        const first = yield* Upstream.complete(upstream, chat)
        yield* Effect.sync(() => {
          const until = Date.now() + 6500
          while (Date.now() < until) {
            // held past node:http's 5 s keep-alive
          }
        })
        const second = yield* Upstream.complete(upstream, chat)
        assert.deepStrictEqual(second.completionIds, first.completionIds)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive(
    "a killed, unreachable or silent upstream: the agent gets an error; the session records a transport failure",
    () =>
      Effect.gen(function*() {
        // Killed: the policy server's scope closes after one good call.
        const scope = yield* Scope.make()
        const server = yield* policyServer.pipe(Scope.extend(scope))
        const proxy = yield* proxyFor(server.url)
        const key = yield* proxy.open()
        const msgs = [{ role: "user", content: USER }]
        assert.strictEqual((yield* chatCall(proxy, key, msgs)).status, 200)
        yield* Scope.close(scope, Exit.void)
        const after = yield* post(`${proxy.url}/v1/messages`, { messages: msgs, max_tokens: 4 }, { "x-api-key": key })
        assert.strictEqual(after.status, 502)
        assert.strictEqual(after.json.error.type, "api_error")
        const status = yield* proxy.status(key)
        assert.match(status.transport_failure ?? "", /could not be reached|answered 5/)
        assert.strictEqual(status.n_turns, 1)

        // Unreachable: nothing listens on the port.
        const port = yield* Launcher.freePort()
        const nowhere = yield* proxyFor(`http://127.0.0.1:${port}`)
        const k2 = yield* nowhere.open()
        const r2 = yield* chatCall(nowhere, k2, msgs)
        assert.strictEqual(r2.status, 502)
        assert.match(r2.json.error.message, /could not be reached/)
        assert.isNotNull((yield* nowhere.status(k2)).transport_failure)

        // Silent: a socket that accepts and never answers, against a short upstream timeout.
        const silent = Net.createServer(() => {})
        yield* Effect.acquireRelease(
          Effect.async<void>((resume) => void silent.listen(0, "127.0.0.1", () => resume(Effect.void))),
          () => Effect.sync(() => void silent.close())
        )
        const silentPort = (silent.address() as Net.AddressInfo).port
        const slow = yield* proxyFor(`http://127.0.0.1:${silentPort}`, { upstreamTimeout: "300 millis" })
        const k3 = yield* slow.open()
        const r3 = yield* post(`${slow.url}/v1/responses`, { input: "hi" }, { authorization: `Bearer ${k3}` })
        assert.strictEqual(r3.status, 504)
        assert.match(r3.json.error.message, /did not answer within/)
        assert.match((yield* slow.status(k3)).transport_failure ?? "", /did not answer within/)

        // The agent hanging up mid-call (its own time limit) is noted, but is not a transport failure.
        const patient = yield* proxyFor(`http://127.0.0.1:${silentPort}`, { upstreamTimeout: "60 seconds" })
        const k4 = yield* patient.open()
        const aborted = yield* Effect.promise(() =>
          fetch(`${patient.url}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json", authorization: `Bearer ${k4}` },
            body: JSON.stringify({ messages: msgs }),
            signal: AbortSignal.timeout(300)
          }).then(() => "answered", (e: Error) => e.name)
        )
        assert.strictEqual(aborted, "TimeoutError")
        const noted = yield* patient.status(k4).pipe(
          Effect.filterOrFail((s) => s.failures.length > 0),
          Effect.retry({ schedule: Schedule.spaced("50 millis"), times: 100 }),
          Effect.orDie
        )
        assert.deepStrictEqual(noted.failures.map((f) => f.kind), ["abandoned"])
        assert.isNull(noted.transport_failure)
      }),
    120_000
  )
})

// The tiny random model never writes a tool call, so the replay of one is checked on the dialects' own functions,
// fed an answer shaped as the policy server gives it (tool calls parsed from <tool_call> blocks).
describe("CaptureProxy dialects replay tool calls", () => {
  const upstreamAnswer = {
    id: "chatcmpl-abc",
    object: "chat.completion",
    created: 1,
    model: "tiny",
    prompt_token_ids: [1, 2, 3],
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "chatcmpl-tool-1",
          type: "function",
          function: { name: "bash", arguments: "{\"cmd\":\"ls\"}" }
        }]
      },
      logprobs: { content: [{ token: "a", logprob: -0.1 }, { token: "b", logprob: -0.2 }] },
      finish_reason: "tool_calls",
      token_ids: [7, 8]
    }]
  }
  const captured = Upstream.capturedOf(upstreamAnswer)
  const request = { chat: {}, stream: true, wantsLogprobs: false, includeUsage: false }

  it("OpenAI chat, Responses and Anthropic Messages each carry the call, plain and streamed", () => {
    if (typeof captured === "string") throw new Error(captured)
    const c = Chat.dialect.reply(captured, request) as Json
    assert.deepStrictEqual(c.choices[0].message.tool_calls[0].function, { name: "bash", arguments: "{\"cmd\":\"ls\"}" })
    assert.isUndefined(c.choices[0].token_ids)
    const cs = Chat.dialect.stream(captured, request).map((e) => e.data as Json)
    assert.strictEqual(
      cs.find((e) => e.choices[0].delta.tool_calls)!.choices[0].delta.tool_calls[0].function.name,
      "bash"
    )
    assert.strictEqual(cs[cs.length - 1].choices[0].finish_reason, "tool_calls")

    const r = Responses.dialect.reply(captured, request) as Json
    assert.deepStrictEqual(
      r.output.map((o: Json) => [o.type, o.call_id, o.name, o.arguments]),
      [["function_call", "chatcmpl-tool-1", "bash", "{\"cmd\":\"ls\"}"]]
    )
    const rs = Responses.dialect.stream(captured, request)
    assert.strictEqual(
      (rs.find((e) => e.event === "response.function_call_arguments.done")!.data as Json).arguments,
      "{\"cmd\":\"ls\"}"
    )

    const a = Anthropic.dialect.reply(captured, request) as Json
    assert.deepStrictEqual(a.content, [{ type: "tool_use", id: "chatcmpl-tool-1", name: "bash", input: { cmd: "ls" } }])
    assert.strictEqual(a.stop_reason, "tool_use")
    const as = Anthropic.dialect.stream(captured, request)
    assert.strictEqual(
      (as.find((e) => e.event === "content_block_delta")!.data as Json).delta.partial_json,
      "{\"cmd\":\"ls\"}"
    )
  })

  it("an answer without token ids or logprobs cannot be captured, and says what the engine must be asked", () => {
    const { prompt_token_ids: _p, ...noPrompt } = upstreamAnswer
    assert.match(String(Upstream.capturedOf(noPrompt)), /no prompt_token_ids/)
    const noLogprobs = { ...upstreamAnswer, choices: [{ ...upstreamAnswer.choices[0], logprobs: null }] }
    assert.match(String(Upstream.capturedOf(noLogprobs)), /ignored logprobs/)
  })
})
