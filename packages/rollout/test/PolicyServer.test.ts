// The policy server over real loopback sockets, queried with fetch, in front of scripted backends (the CPU and GPU
// models behind it are tested in @envtrain/harness): the OpenAI/vLLM wire shapes, tool-call parsing, streaming,
// errors, batching, weight updates between batches, and an episode through Policy.openAiCompatible. Live clock: the
// batch window is real time.
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Environment } from "@envtrain/env"
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import { Effect, Fiber, Layer, Logger, Option } from "effect"
import { Episode, Policy, PolicyServer } from "../src/index.js"
import { catchScript, renderer, tinyModel } from "./fixtures.js"

type Json = Record<string, any>

const post = (url: string, body: unknown, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
      ...init
    })
    return { status: res.status, headers: res.headers, text: await res.text() }
  })

const get = (url: string) =>
  Effect.promise(async () => {
    const res = await fetch(url)
    return { status: res.status, headers: res.headers, text: await res.text() }
  })

const events = (text: string): Array<Json | "[DONE]"> =>
  text.split("\n\n").filter((s) => s.length > 0).map((s) => {
    assert.isTrue(s.startsWith("data: "), s)
    const data = s.slice("data: ".length)
    return data === "[DONE]" ? "[DONE]" : JSON.parse(data) as Json
  })

interface Scripted {
  readonly backend: PolicyServer.Backend
  readonly batches: Array<number>
  /** Each load bumps the "weights" (the reply's suffix). */
  readonly loads: Array<PolicyServer.WeightSource>
}

// A backend that answers `respond(decoded prompt)` (then EOS), with Policy.scriptedLogprob logprobs. The answer ends
// with "v<weights>" after a weight load, so tests can see which weights served a request.
const scripted = (
  tokenizer: Tokenizer,
  template: PolicyServer.Backend["chatTemplate"],
  respond: (text: string) => string,
  contextLength: number
): Scripted => {
  const batches: Array<number> = []
  const loads: Array<PolicyServer.WeightSource> = []
  return {
    batches,
    loads,
    backend: {
      name: "scripted",
      tokenizer,
      chatTemplate: template,
      contextLength,
      maxBatchSize: 8,
      maxTopLogprobs: 2,
      generate: (requests) =>
        Effect.sync(() => {
          batches.push(requests.length)
          return requests.map((r) => {
            const reply = respond(tokenizer.decode(r.promptIds)) + (loads.length > 0 ? ` v${loads.length}` : "")
            const ids = [...tokenizer.encode(reply), tokenizer.eosTokenIds[0]]
            const stop = ids.findIndex((id) => (r.sampling.stopTokenIds ?? []).includes(id))
            const end = Math.min(stop < 0 ? ids.length : stop + 1, r.sampling.maxTokens)
            const tokenIds = ids.slice(0, end)
            return {
              tokenIds,
              logprobs: tokenIds.map(Policy.scriptedLogprob),
              finishReason: stop >= 0 && stop < end ? "stop" : "length",
              ...(r.topLogprobs > 0
                ? {
                  topLogprobs: tokenIds.map((id) =>
                    [{ id, logprob: Policy.scriptedLogprob(id) }, { id: 7, logprob: -5 }].slice(0, r.topLogprobs)
                  )
                }
                : {})
            }
          })
        }),
      loadWeights: (source) =>
        source._tag === "Directory" && source.path === "/nope"
          ? Effect.fail(new PolicyServer.BackendError({ status: 400, message: "no such checkpoint: /nope" }))
          : Effect.sync(() => void loads.push(source))
    }
  }
}

const serve = (
  respond: (text: string) => string,
  options: PolicyServer.PolicyServerOptions = {},
  contextLength = 512
) =>
  Effect.gen(function*() {
    const { template, tokenizer } = yield* tinyModel
    const s = scripted(tokenizer, template, respond, contextLength)
    const server = yield* PolicyServer.serve(s.backend, { port: 0, servedModelName: "tiny", ...options })
    return { ...s, server, tokenizer, url: server.url }
  })

// A step-wise backend (continuous batching): every step appends token 100 + (weight loads so far) to each sequence
// and logs the step's occupancy (a load logs -1), so a sequence that straddled an update would mix tokens.
const stepwise = (tokenizer: Tokenizer, template: PolicyServer.Backend["chatTemplate"], log: Array<number>) => {
  let loads = 0
  const backend: PolicyServer.Backend = {
    name: "stepwise",
    tokenizer,
    chatTemplate: template,
    contextLength: 512,
    maxBatchSize: 4,
    maxTopLogprobs: 0,
    generate: () => Effect.dieMessage("a backend with a decoder is batched continuously"),
    decoder: {
      start: (request) => Effect.succeed({ request, tokens: [] as Array<number> }),
      step: (sequences) =>
        Effect.gen(function*() {
          yield* Effect.sleep("3 millis")
          log.push(sequences.length)
          return (sequences as ReadonlyArray<{ request: PolicyServer.BackendRequest; tokens: Array<number> }>).map(
            (s) => {
              s.tokens.push(100 + loads)
              return s.tokens.length < s.request.sampling.maxTokens ? undefined : {
                tokenIds: s.tokens,
                logprobs: s.tokens.map(() => -1),
                finishReason: "length" as const
              }
            }
          )
        })
    },
    loadWeights: () =>
      Effect.sync(() => {
        loads++
        log.push(-1)
      })
  }
  return backend
}

// A step-wise backend that shows its progress (so the server streams token by token): each sequence samples
// `respond(decoded prompt)`'s tokens one per step, then EOS. `longest` records the most tokens any sequence sampled.
const typing = (
  tokenizer: Tokenizer,
  template: PolicyServer.Backend["chatTemplate"],
  respond: (text: string) => string,
  longest: Array<number>
): PolicyServer.Backend => {
  interface Sequence {
    readonly script: ReadonlyArray<number>
    readonly maxTokens: number
    readonly tokens: Array<number>
    readonly logprobs: Array<number>
  }
  return {
    name: "typing",
    tokenizer,
    chatTemplate: template,
    contextLength: 512,
    maxBatchSize: 4,
    maxTopLogprobs: 0,
    generate: () => Effect.dieMessage("a backend with a decoder is batched continuously"),
    decoder: {
      start: (request) =>
        Effect.succeed<Sequence>({
          script: [...tokenizer.encode(respond(tokenizer.decode(request.promptIds))), tokenizer.eosTokenIds[0]],
          maxTokens: request.sampling.maxTokens,
          tokens: [],
          logprobs: []
        }),
      step: (sequences) =>
        Effect.gen(function*() {
          yield* Effect.sleep("1 millis")
          return (sequences as ReadonlyArray<Sequence>).map((s) => {
            const id = s.script[s.tokens.length]
            s.tokens.push(id)
            s.logprobs.push(Policy.scriptedLogprob(id))
            longest.push(s.tokens.length)
            const eos = id === tokenizer.eosTokenIds[0]
            return eos || s.tokens.length >= s.maxTokens
              ? { tokenIds: s.tokens, logprobs: s.logprobs, finishReason: eos ? "stop" as const : "length" as const }
              : undefined
          })
        }),
      progress: (sequence) => {
        const s = sequence as Sequence
        return { tokenIds: s.tokens, logprobs: s.logprobs }
      }
    },
    loadWeights: () => Effect.void
  }
}

const TOOLS = [{
  type: "function",
  function: {
    name: "move",
    description: "Move",
    parameters: { type: "object", properties: { direction: { type: "string" } } }
  }
}]

describe("PolicyServer", () => {
  it.scopedLive("GET /v1/models, /health, /metrics; every answer names the policy version", () =>
    Effect.gen(function*() {
      const { url } = yield* serve(() => "hi")
      const models = yield* get(`${url}/v1/models`)
      assert.strictEqual(models.status, 200)
      const m = JSON.parse(models.text) as Json
      assert.strictEqual(m.object, "list")
      assert.deepInclude(m.data[0], {
        id: "tiny",
        object: "model",
        owned_by: "envtrain",
        max_model_len: 512,
        policy_version: 0
      })
      assert.strictEqual(models.headers.get("x-policy-version"), "0")
      const health = yield* get(`${url}/health`)
      assert.strictEqual(health.status, 200)
      const metrics = yield* get(`${url}/metrics`)
      assert.strictEqual(metrics.status, 200)
      assert.include(metrics.headers.get("content-type") ?? "", "text/plain")
      assert.match(metrics.text, /^envtrain:policy_version\{model_name="tiny"\} 0$/m)
      assert.match(metrics.text, /^# TYPE envtrain:batch_size histogram$/m)
      assert.isAbove(Number(/^process_cpu_seconds_total ([\d.e-]+)$/m.exec(metrics.text)?.[1]), 0, metrics.text)
    }))

  it.scopedLive("chat: tool calls become OpenAI tool_calls; malformed ones and tool_choice none stay content", () =>
    Effect.gen(function*() {
      const call = "<tool_call>\n{\"name\": \"move\", \"arguments\": {\"direction\": \"left\"}}\n</tool_call>"
      const { url } = yield* serve((text) =>
        text.includes("malformed") ? "<tool_call>\n{\"name\": \"move\", \"arguments\": \n</tool_call>" : call
      )
      const ok = JSON.parse(
        (yield* post(`${url}/v1/chat/completions`, {
          model: "tiny",
          messages: [{ role: "user", content: "Play." }],
          tools: TOOLS,
          return_token_ids: true
        })).text
      ) as Json
      const choice = ok.choices[0]
      assert.strictEqual(choice.finish_reason, "tool_calls")
      assert.isNull(choice.message.content)
      assert.strictEqual(choice.message.tool_calls.length, 1)
      assert.strictEqual(choice.message.tool_calls[0].type, "function")
      assert.match(choice.message.tool_calls[0].id, /^chatcmpl-tool-/)
      assert.deepStrictEqual(choice.message.tool_calls[0].function, {
        name: "move",
        arguments: "{\"direction\":\"left\"}"
      })
      assert.isArray(ok.prompt_token_ids)
      assert.isArray(choice.token_ids)
      assert.strictEqual(ok.policy_version, 0)

      const bad = JSON.parse(
        (yield* post(`${url}/v1/chat/completions`, {
          messages: [{ role: "user", content: "malformed please" }],
          tools: TOOLS
        })).text
      ) as Json
      assert.strictEqual(bad.choices[0].finish_reason, "stop")
      assert.include(bad.choices[0].message.content, "<tool_call>")
      assert.isUndefined(bad.choices[0].message.tool_calls)

      const none = JSON.parse(
        (yield* post(`${url}/v1/chat/completions`, {
          messages: [{ role: "user", content: "Play." }],
          tools: TOOLS,
          tool_choice: "none"
        })).text
      ) as Json
      assert.strictEqual(none.choices[0].message.content, call)
    }))

  it.scopedLive("chat: an assistant turn with OpenAI tool_calls (JSON-text arguments) and a tool result render", () =>
    Effect.gen(function*() {
      const { tokenizer, url } = yield* serve(() => "ok")
      const r = JSON.parse(
        (yield* post(`${url}/v1/chat/completions`, {
          messages: [
            { role: "system", content: "Be brief." },
            { role: "user", content: [{ type: "text", text: "Play." }] },
            {
              role: "assistant",
              content: null,
              tool_calls: [{
                id: "c1",
                type: "function",
                function: { name: "move", arguments: "{\"direction\": \"left\"}" }
              }]
            },
            { role: "tool", tool_call_id: "c1", content: "moved" }
          ],
          tools: TOOLS,
          return_token_ids: true
        })).text
      ) as Json
      const prompt = tokenizer.decode(r.prompt_token_ids)
      assert.include(prompt, "\"direction\": \"left\"")
      assert.include(prompt, "<tool_response>\nmoved\n</tool_response>")
      assert.strictEqual(r.choices[0].message.content, "ok")
    }))

  it.scopedLive("streaming: chunks reassemble to the non-streamed answer (content, tool calls, token ids, logprobs)", () =>
    Effect.gen(function*() {
      const { url } = yield* serve((text) =>
        text.includes("tools")
          ? "Moving.\n<tool_call>\n{\"name\": \"move\", \"arguments\": {}}\n</tool_call>"
          : "Hello there, wörld!"
      )
      for (const tools of [false, true]) {
        const body = {
          messages: [{ role: "user", content: tools ? "use tools" : "say hi" }],
          ...(tools ? { tools: TOOLS } : {}),
          logprobs: true,
          top_logprobs: 2,
          return_token_ids: true,
          return_tokens_as_token_ids: true
        }
        const plain = JSON.parse((yield* post(`${url}/v1/chat/completions`, body)).text) as Json
        const streamed = yield* post(`${url}/v1/chat/completions`, {
          ...body,
          stream: true,
          stream_options: { include_usage: true }
        })
        assert.include(streamed.headers.get("content-type") ?? "", "text/event-stream")
        const list = events(streamed.text)
        assert.strictEqual(list[list.length - 1], "[DONE]")
        const chunks = list.slice(0, -1) as Array<Json>
        let content = ""
        const tokenIds: Array<number> = []
        const logprobs: Array<Json> = []
        const toolCalls: Array<Json> = []
        let finish: string | null = null
        for (const c of chunks) {
          assert.strictEqual(c.object, "chat.completion.chunk")
          assert.strictEqual(c.policy_version, 0)
          for (const ch of c.choices) {
            content += ch.delta.content ?? ""
            tokenIds.push(...(ch.token_ids ?? []))
            logprobs.push(...(ch.logprobs?.content ?? []))
            toolCalls.push(...(ch.delta.tool_calls ?? []))
            finish = ch.finish_reason ?? finish
          }
        }
        const message = plain.choices[0].message
        assert.strictEqual(content, message.content ?? "")
        assert.deepStrictEqual(tokenIds, plain.choices[0].token_ids)
        assert.deepStrictEqual(logprobs, plain.choices[0].logprobs.content)
        assert.deepStrictEqual(chunks[0].prompt_token_ids, plain.prompt_token_ids)
        assert.strictEqual(finish, plain.choices[0].finish_reason)
        assert.deepStrictEqual(
          toolCalls.map(({ index: _, ...t }) => t.function),
          (message.tool_calls ?? []).map((t: Json) => t.function)
        )
        assert.deepStrictEqual(chunks[chunks.length - 1].usage, plain.usage)
        // return_tokens_as_token_ids: every logprob token is "token_id:N" of the sampled id.
        plain.choices[0].logprobs.content.forEach((e: Json, i: number) => {
          assert.strictEqual(e.token, `token_id:${plain.choices[0].token_ids[i]}`)
          assert.strictEqual(e.top_logprobs.length, 2)
        })
      }
    }))

  it.scopedLive("completions: text and token-id prompts, n, stop strings, stop_token_ids, streaming", () =>
    Effect.gen(function*() {
      const { tokenizer, url } = yield* serve(() => "one two three four")
      const ids = tokenizer.encode("count:")
      const r = JSON.parse(
        (yield* post(`${url}/v1/completions`, {
          model: "tiny",
          prompt: [ids, "count:"],
          n: 2,
          max_tokens: 32,
          logprobs: 1,
          return_token_ids: true
        })).text
      ) as Json
      assert.strictEqual(r.object, "text_completion")
      assert.strictEqual(r.choices.length, 4)
      for (const c of r.choices) {
        assert.deepStrictEqual(c.prompt_token_ids, ids)
        assert.strictEqual(c.text, "one two three four")
        assert.strictEqual(tokenizer.decode(c.token_ids, { skipSpecialTokens: true }), c.text)
        assert.strictEqual(c.logprobs.token_logprobs.length, c.token_ids.length)
        assert.deepStrictEqual(c.logprobs.token_logprobs, c.token_ids.map(Policy.scriptedLogprob))
        assert.isTrue(c.logprobs.token_logprobs.every((x: number) => x <= 0))
        assert.strictEqual(c.finish_reason, "stop")
        assert.isNull(c.stop_reason)
      }
      assert.deepStrictEqual(r.usage, {
        prompt_tokens: 2 * ids.length,
        completion_tokens: r.choices.reduce((s: number, c: Json) => s + c.token_ids.length, 0),
        total_tokens: 2 * ids.length + r.choices.reduce((s: number, c: Json) => s + c.token_ids.length, 0)
      })

      const stopped = JSON.parse(
        (yield* post(`${url}/v1/completions`, { prompt: "x", stop: [" three"], return_token_ids: true })).text
      ) as Json
      assert.strictEqual(stopped.choices[0].text, "one two")
      assert.strictEqual(stopped.choices[0].finish_reason, "stop")
      assert.strictEqual(stopped.choices[0].stop_reason, " three")
      assert.include(tokenizer.decode(stopped.choices[0].token_ids), " three")
      const kept = JSON.parse(
        (yield* post(`${url}/v1/completions`, { prompt: "x", stop: " three", include_stop_str_in_output: true })).text
      ) as Json
      assert.strictEqual(kept.choices[0].text, "one two three")

      const twoId = r.choices[0].token_ids[1]
      const byId = JSON.parse(
        (yield* post(`${url}/v1/completions`, { prompt: "x", stop_token_ids: [twoId], return_token_ids: true })).text
      ) as Json
      assert.strictEqual(byId.choices[0].stop_reason, twoId)
      assert.strictEqual(byId.choices[0].token_ids.at(-1), twoId)

      const short = JSON.parse((yield* post(`${url}/v1/completions`, { prompt: "x", max_tokens: 2 })).text) as Json
      assert.strictEqual(short.choices[0].finish_reason, "length")

      const plain = JSON.parse(
        (yield* post(`${url}/v1/completions`, {
          prompt: ids,
          logprobs: 0,
          return_token_ids: true,
          return_tokens_as_token_ids: true
        })).text
      ) as Json
      assert.deepStrictEqual(
        plain.choices[0].logprobs.tokens,
        plain.choices[0].token_ids.map((id: number) => `token_id:${id}`)
      )
      const streamed = events(
        (yield* post(`${url}/v1/completions`, {
          prompt: ids,
          logprobs: 0,
          return_token_ids: true,
          return_tokens_as_token_ids: true,
          stream: true
        })).text
      )
      const chunks = streamed.slice(0, -1) as Array<Json>
      assert.strictEqual(streamed.at(-1), "[DONE]")
      assert.strictEqual(chunks.map((c) => c.choices[0].text).join(""), plain.choices[0].text)
      assert.deepStrictEqual(chunks.flatMap((c) => c.choices[0].token_ids ?? []), plain.choices[0].token_ids)
      assert.deepStrictEqual(
        chunks.flatMap((c) => c.choices[0].logprobs?.token_logprobs ?? []),
        plain.choices[0].logprobs.token_logprobs
      )
      assert.deepStrictEqual(chunks[0].choices[0].prompt_token_ids, ids)
      assert.strictEqual(chunks.at(-1)!.choices[0].finish_reason, "stop")
    }))

  it.scopedLive("bad requests get OpenAI-style errors with their status, and the server keeps serving", () =>
    Effect.gen(function*() {
      const { url } = yield* serve(() => "fine", { maxBodyBytes: 4096 })
      const cases: Array<[string, unknown, number, string | null]> = [
        ["/v1/completions", "{not json", 400, null],
        ["/v1/completions", { model: "gpt-4", prompt: "x" }, 404, "model"],
        ["/v1/completions", { prompt: "word ".repeat(600) }, 400, "prompt"],
        ["/v1/completions", { prompt: "x", max_tokens: 600 }, 400, "prompt"],
        ["/v1/completions", { prompt: "x", temperature: -1 }, 400, "temperature"],
        ["/v1/completions", { prompt: "x", top_p: 2 }, 400, "top_p"],
        ["/v1/completions", { prompt: "x", n: 0 }, 400, "n"],
        ["/v1/completions", { prompt: "x", logprobs: 5 }, 400, "logprobs"],
        ["/v1/completions", { prompt: [1, -2] }, 400, "prompt"],
        ["/v1/completions", { prompt: [999999] }, 400, "prompt"],
        ["/v1/completions", { prompt: "x", seed: 1.5 }, 400, "seed"],
        ["/v1/completions", { prompt: "x", use_beam_search: true }, 400, "use_beam_search"],
        ["/v1/completions", { prompt: "x".repeat(5000) }, 413, null],
        ["/v1/chat/completions", { messages: [] }, 400, "messages"],
        ["/v1/chat/completions", { messages: [{ role: "wizard", content: "x" }] }, 400, "messages[0].role"],
        [
          "/v1/chat/completions",
          { messages: [{ role: "user", content: "x" }], tools: TOOLS, tool_choice: "required" },
          400,
          "tool_choice"
        ],
        ["/v1/chat/completions", { messages: [{ role: "user", content: "x" }], top_logprobs: 1 }, 400, "top_logprobs"],
        ["/v1/nothing", {}, 404, null],
        ["/update_weights_from_disk", {}, 400, "model_path"]
      ]
      for (const [path, body, status, param] of cases) {
        const r = yield* post(`${url}${path}`, body)
        assert.strictEqual(r.status, status, `${path} ${JSON.stringify(body).slice(0, 80)}: ${r.text}`)
        const e = (JSON.parse(r.text) as Json).error
        assert.isString(e.message)
        assert.isString(e.type)
        assert.strictEqual(e.code, status)
        assert.strictEqual(e.param, param, e.message)
      }
      const wrongMethod = yield* get(`${url}/v1/completions`)
      assert.strictEqual(wrongMethod.status, 405)
      const good = yield* post(`${url}/v1/completions`, { prompt: "x", unknown_field: 1 })
      assert.strictEqual(good.status, 200)
      assert.strictEqual((JSON.parse(good.text) as Json).choices[0].text, "fine")
    }))

  it.scopedLive("concurrent requests are batched: the backend gets them together, /metrics shows the occupancy", () =>
    Effect.gen(function*() {
      const { batches, url } = yield* serve(() => "hi", { batchWindow: "50 millis" })
      yield* Effect.forEach(
        Array.from({ length: 6 }, (_, i) => i),
        (i) => post(`${url}/v1/completions`, { prompt: `p${i}` }),
        { concurrency: "unbounded" }
      )
      assert.isTrue(Math.max(...batches) > 1, `batches ${batches}`)
      assert.strictEqual(batches.reduce((a, b) => a + b, 0), 6)
      const metrics = (yield* get(`${url}/metrics`)).text
      const max = Number(/^envtrain:batch_size_max\{[^}]*\} (\d+)$/m.exec(metrics)?.[1])
      assert.isTrue(max > 1, metrics)
      assert.match(metrics, /^envtrain:batch_size_sum\{[^}]*\} 6$/m)
      assert.match(
        metrics,
        /^envtrain:requests_total\{model_name="tiny",endpoint="\/v1\/completions",status="200"\} 6$/m
      )
      assert.match(metrics, /^envtrain:num_requests_waiting\{[^}]*\} 0$/m)
      assert.match(metrics, /^envtrain:generation_tokens_total\{[^}]*\} \d+$/m)
    }))

  it.scopedLive("weight updates run between batches and bump policy_version in bodies, headers and metrics", () =>
    Effect.gen(function*() {
      const { loads, server, url } = yield* serve(() => "answer")
      const before = JSON.parse((yield* post(`${url}/v1/completions`, { prompt: "x" })).text) as Json
      assert.strictEqual(before.choices[0].text, "answer")
      const byPath = yield* post(`${url}/update_weights_from_disk`, { model_path: "/some/checkpoint" })
      assert.strictEqual(byPath.status, 200, byPath.text)
      assert.deepInclude(JSON.parse(byPath.text) as Json, { success: true, policy_version: 1 })
      const bytes = new Uint8Array([1, 2, 3])
      const pushed = yield* post(`${url}/update_weights`, bytes, {
        headers: { "content-type": "application/octet-stream" }
      })
      assert.strictEqual(pushed.status, 200, pushed.text)
      assert.strictEqual(pushed.headers.get("x-policy-version"), "2")
      assert.deepStrictEqual(loads, [{ _tag: "Directory", path: "/some/checkpoint" }, { _tag: "Safetensors", bytes }])
      const failed = yield* post(`${url}/update_weights_from_disk`, { model_path: "/nope" })
      assert.strictEqual(failed.status, 400)
      assert.include(failed.text, "no such checkpoint")
      assert.strictEqual(yield* server.policyVersion, 2)
      const after = yield* post(`${url}/v1/completions`, { prompt: "x" })
      assert.strictEqual(after.headers.get("x-policy-version"), "2")
      const a = JSON.parse(after.text) as Json
      assert.strictEqual(a.policy_version, 2)
      assert.strictEqual(a.choices[0].text, "answer v2")
      // Requests queued before an update are served by the old weights, those after by the new.
      const [early, , late] = yield* Effect.all([
        post(`${url}/v1/completions`, { prompt: "x" }),
        post(`${url}/update_weights_from_disk`, { model_path: "/third" }),
        Effect.delay(post(`${url}/v1/completions`, { prompt: "x" }), "30 millis")
      ], { concurrency: "unbounded" })
      const e = JSON.parse(early.text) as Json
      const l = JSON.parse(late.text) as Json
      assert.strictEqual(e.choices[0].text, `answer v${e.policy_version}`)
      assert.strictEqual(l.policy_version, 3)
      assert.strictEqual(l.choices[0].text, "answer v3")
      assert.match((yield* get(`${url}/metrics`)).text, /^envtrain:policy_version\{[^}]*\} 3$/m)
    }))

  it.scopedLive("continuous batching: requests join the running decode; an update waits for the running sequences", () =>
    Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      const log: Array<number> = []
      const server = yield* PolicyServer.serve(stepwise(tokenizer, template, log), { port: 0, servedModelName: "tiny" })
      const ask = (maxTokens: number) =>
        Effect.map(
          post(`${server.url}/v1/completions`, { prompt: [1, 2, 3], max_tokens: maxTokens, return_token_ids: true }),
          (r) => JSON.parse(r.text) as Json
        )
      const long = yield* Effect.fork(ask(200))
      yield* Effect.sleep("30 millis")
      const short = yield* ask(3)
      assert.isTrue(Option.isNone(yield* Fiber.poll(long)), "the short request waited for the long one")
      const update = yield* Effect.fork(post(`${server.url}/update_weights_from_disk`, { model_path: "/next" }))
      yield* Effect.sleep("100 millis")
      const late = yield* Effect.fork(ask(2))
      const [l, u, la] = yield* Effect.all([Fiber.join(long), Fiber.join(update), Fiber.join(late)])
      assert.deepStrictEqual(short.choices[0].token_ids, [100, 100, 100])
      assert.strictEqual(short.policy_version, 0)
      // The long sequence finished on the old weights before the load; the request queued after it got the new.
      assert.deepStrictEqual(l.choices[0].token_ids, Array.from({ length: 200 }, () => 100))
      assert.strictEqual(l.policy_version, 0)
      assert.strictEqual(u.status, 200, u.text)
      assert.deepStrictEqual(la.choices[0].token_ids, [101, 101])
      assert.strictEqual(la.policy_version, 1)
      const load = log.indexOf(-1)
      assert.strictEqual(log.slice(0, load).length, 200)
      assert.isAtLeast(Math.max(...log.slice(0, load)), 2)
      assert.deepStrictEqual(log.slice(load + 1), [1, 1])
      const metrics = (yield* get(`${server.url}/metrics`)).text
      assert.match(metrics, /^envtrain:decode_step_occupancy_max\{[^}]*\} 2$/m)
      assert.match(metrics, /^envtrain:decode_step_occupancy_count\{[^}]*\} 202$/m)
      assert.match(metrics, /^envtrain:batch_size_sum\{[^}]*\} 3$/m)
      assert.match(metrics, /^envtrain:num_requests_running\{[^}]*\} 0$/m)
    }))

  it.scopedLive("token by token: whole UTF-8 characters, stop strings and tool calls held back, deltas = the answer", () =>
    Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      const longest: Array<number> = []
      const reply = "Hello there, wörld! 日本 🎉"
      const server = yield* PolicyServer.serve(
        typing(
          tokenizer,
          template,
          (text) =>
            text.includes("tools")
              ? "Moving.\n<tool_call>\n{\"name\": \"move\", \"arguments\": {}}\n</tool_call>"
              : reply,
          longest
        ),
        { port: 0, servedModelName: "tiny" }
      )
      const url = `${server.url}/v1/chat/completions`
      const chat = (body: Json) =>
        Effect.gen(function*() {
          const plain = JSON.parse((yield* post(url, body)).text) as Json
          const list = events((yield* post(url, { ...body, stream: true })).text)
          assert.strictEqual(list.at(-1), "[DONE]")
          const choices = (list.slice(0, -1) as Array<Json>).flatMap((c) => c.choices as Array<Json>)
          return { plain, choices, content: choices.map((c) => c.delta.content ?? "").join("") }
        })
      const text = yield* chat({ messages: [{ role: "user", content: "say hi" }], return_token_ids: true })
      assert.strictEqual(text.plain.choices[0].message.content, reply)
      assert.strictEqual(text.content, reply)
      assert.deepStrictEqual(text.choices.flatMap((c) => c.token_ids ?? []), text.plain.choices[0].token_ids)
      // A chunk per step; no delta ends inside a character (the byte tokens of ö, 日, 本 and 🎉 wait for their last).
      const deltas = text.choices.map((c) => c.delta.content ?? "").filter((d) => d.length > 0)
      assert.isAbove(deltas.length, 8)
      for (const d of deltas) assert.notInclude(d, "\uFFFD")
      assert.include(deltas, "ö")
      assert.include(deltas, "🎉")

      // Tools parsed, thinking off: the content streams up to the call, the call comes parsed at the end.
      const tools = {
        messages: [{ role: "user", content: "use tools" }],
        tools: TOOLS,
        chat_template_kwargs: { enable_thinking: false }
      }
      const called = yield* chat(tools)
      assert.strictEqual(called.plain.choices[0].message.content, "Moving.")
      assert.strictEqual(called.content, "Moving.")
      const firstCall = called.choices.findIndex((c) => c.delta.tool_calls !== undefined)
      assert.isAbove(firstCall, called.choices.findIndex((c) => c.delta.content === "Moving."))
      assert.deepStrictEqual(
        called.choices[firstCall].delta.tool_calls.map((t: Json) => t.function),
        called.plain.choices[0].message.tool_calls.map((t: Json) => t.function)
      )
      for (const c of called.choices) assert.notInclude(c.delta.content ?? "", "<tool")
      assert.strictEqual(called.choices.at(-1)!.finish_reason, "tool_calls")
      // Thinking on: text before a later </think> would be reasoning, so the content waits for the end.
      const thinking = yield* chat({ ...tools, chat_template_kwargs: {} })
      assert.strictEqual(thinking.content, thinking.plain.choices[0].message.content ?? "")

      // A stop string ends the sequence at the step that completes it, streamed or not.
      longest.length = 0
      const body = { prompt: "x", stop: [" wör"], max_tokens: 100, return_token_ids: true }
      const cut = JSON.parse((yield* post(`${server.url}/v1/completions`, body)).text) as Json
      assert.strictEqual(cut.choices[0].text, "Hello there,")
      assert.strictEqual(cut.choices[0].stop_reason, " wör")
      const full = tokenizer.encode(reply).length
      assert.isBelow(Math.max(...longest), full)
      const streamed = events((yield* post(`${server.url}/v1/completions`, { ...body, stream: true })).text)
        .slice(0, -1) as Array<Json>
      assert.strictEqual(streamed.map((c) => c.choices[0].text).join(""), "Hello there,")
      assert.deepStrictEqual(streamed.flatMap((c) => c.choices[0].token_ids ?? []), cut.choices[0].token_ids)
      assert.strictEqual(streamed.at(-1)!.choices[0].stop_reason, " wör")
      assert.isBelow(Math.max(...longest), full)
    }))

  it.scopedLive("a decoder whose end throws: the loop keeps serving, and says so (a warning, a counter)", () => {
    const logs: Array<string> = []
    const capture = Logger.replace(
      Logger.defaultLogger,
      Logger.make(({ logLevel, message }) =>
        void logs.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
      )
    )
    return Effect.gen(function*() {
      const { template, tokenizer } = yield* tinyModel
      const backend = typing(tokenizer, template, () => "Hello there, world", [])
      const server = yield* PolicyServer.serve(
        {
          ...backend,
          decoder: {
            ...backend.decoder!,
            end: () => {
              throw new Error("slot 3 is not running")
            }
          }
        },
        { port: 0, servedModelName: "tiny" }
      )
      // A stop string ends the sequence before it finishes: it leaves the batch through `end`.
      const body = { prompt: "x", stop: [" there"], max_tokens: 100 }
      for (let i = 0; i < 2; i++) {
        const cut = JSON.parse((yield* post(`${server.url}/v1/completions`, body)).text) as Json
        assert.strictEqual(cut.choices[0].text, "Hello")
      }
      const warnings = logs.filter((l) => l.startsWith("WARN") && l.includes("slot 3 is not running"))
      assert.strictEqual(warnings.length, 2, logs.join("\n"))
      assert.include(warnings[0], "the decoder's end failed for 1 sequence(s)")
      assert.include(
        (yield* get(`${server.url}/metrics`)).text,
        "envtrain:decoder_end_failures_total{model_name=\"tiny\"} 2"
      )
    }).pipe(Effect.provide(capture))
  })

  it.scopedLive("Policy.openAiCompatible plays a Catch episode through the server, token ids and logprobs intact", () =>
    Effect.gen(function*() {
      const { url } = yield* serve((text) => catchScript({ text }), {}, 16384)
      const live = yield* Environment.episode(Catch.environment, { seed: 5 })
      const record = yield* Episode.run({
        prompt: [{ role: "user", content: "Play." }],
        session: Episode.fromEnvironment(live),
        config: { maxCompletionLength: 4096, sampling: { temperature: 1 } }
      }).pipe(
        Effect.provide(Layer.merge(
          renderer(false),
          Policy.openAiCompatible({ baseUrl: url, model: "tiny" }).pipe(Layer.provide(FetchHttpClient.layer))
        ))
      )
      assert.isTrue((record.state as Catch.State).caught)
      assert.isAbove(record.toolCallCount, 0)
      record.completionIds.forEach((id, i) =>
        assert.strictEqual(record.logprobs[i], record.mask[i] === 1 ? Policy.scriptedLogprob(id) : 0)
      )
    }))
})
