import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Metric, Ref, TestClock } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Policy } from "../src/index.js"
import * as PolicyRequest from "../src/PolicyRequest.js"
import { tinyModel } from "./fixtures.js"
import { relay } from "./Relay.js"

// A loopback server answering like vLLM's /v1/completions; `reply` decides status and body per request.
const fakeVllm = (reply: (body: any) => { status: number; body: unknown } | "hang") =>
  Effect.gen(function*() {
    const requests: Array<{ url: string; body: any; auth: string | undefined }> = []
    const server = Http.createServer((req, res) => {
      let data = ""
      req.on("data", (c) => data += c)
      req.on("end", () => {
        const body = JSON.parse(data)
        requests.push({ url: req.url ?? "", body, auth: req.headers.authorization })
        const r = reply(body)
        if (r === "hang") return
        res.writeHead(r.status, { "content-type": "application/json" })
        res.end(typeof r.body === "string" ? r.body : JSON.stringify(r.body))
      })
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )
    const port = (server.address() as AddressInfo).port
    return { baseUrl: `http://127.0.0.1:${port}`, requests }
  })

// vLLM's response shape with return_token_ids and return_tokens_as_token_ids.
const vllmBody = (ids: Array<number>, finish: string, withTokenIds = true) => ({
  id: "cmpl-1",
  object: "text_completion",
  model: "m",
  choices: [{
    index: 0,
    text: "…",
    finish_reason: finish,
    ...(withTokenIds ? { token_ids: ids } : {}),
    logprobs: {
      tokens: ids.map((id) => `token_id:${id}`),
      token_logprobs: ids.map((id) => -id / 10),
      top_logprobs: ids.map(() => null),
      text_offset: ids.map((_, i) => i)
    }
  }],
  usage: { prompt_tokens: 3, completion_tokens: ids.length, total_tokens: 3 + ids.length }
})

const generate = (request: Policy.GenerateRequest) => Effect.flatMap(Policy.Policy, (p) => p.generate(request))

const remote = (baseUrl: string, extra: Partial<Policy.OpenAiCompatibleOptions> = {}) =>
  Policy.openAiCompatible({ baseUrl, model: "qwen-test", ...extra }).pipe(Layer.provide(FetchHttpClient.layer))

describe("Policy.openAiCompatible", () => {
  it.scopedLive("sends token ids and sampling params, reads token ids and logprobs", () =>
    Effect.gen(function*() {
      const server = yield* fakeVllm(() => ({ status: 200, body: vllmBody([7, 8, 9], "stop") }))
      const out = yield* generate({
        promptIds: [1, 2, 3],
        sampling: {
          maxTokens: 16,
          temperature: 0.7,
          topP: 0.9,
          topK: 20,
          minP: 0.05,
          repetitionPenalty: 1.1,
          stopTokenIds: [9],
          seed: 42
        }
      }).pipe(Effect.provide(remote(server.baseUrl + "/", { apiKey: "sk-test" })))
      assert.deepStrictEqual(out, { tokenIds: [7, 8, 9], logprobs: [-0.7, -0.8, -0.9], finishReason: "stop" })
      assert.strictEqual(server.requests[0].url, "/v1/completions")
      assert.strictEqual(server.requests[0].auth, "Bearer sk-test")
      assert.deepStrictEqual(server.requests[0].body, {
        model: "qwen-test",
        prompt: [1, 2, 3],
        max_tokens: 16,
        n: 1,
        stream: false,
        logprobs: 0,
        return_token_ids: true,
        return_tokens_as_token_ids: true,
        skip_special_tokens: false,
        include_stop_str_in_output: true,
        temperature: 0.7,
        top_p: 0.9,
        top_k: 20,
        min_p: 0.05,
        repetition_penalty: 1.1,
        stop_token_ids: [9],
        seed: 42
      })
    }))

  it.scopedLive("falls back to token_id:<n> strings when the server has no return_token_ids", () =>
    Effect.gen(function*() {
      const server = yield* fakeVllm(() => ({ status: 200, body: vllmBody([4, 5], "length", false) }))
      const out = yield* generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(
        Effect.provide(remote(server.baseUrl))
      )
      assert.deepStrictEqual(out, { tokenIds: [4, 5], logprobs: [-0.4, -0.5], finishReason: "length" })
    }))

  it.scopedLive("5xx and refused connections are transport errors; 4xx and bad bodies are response errors", () =>
    Effect.gen(function*() {
      const s500 = yield* fakeVllm(() => ({ status: 503, body: { error: "overloaded" } }))
      const e1 = yield* Effect.flip(
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(Effect.provide(remote(s500.baseUrl)))
      )
      assert.strictEqual(e1._tag, "PolicyTransportError")
      const s400 = yield* fakeVllm(() => ({ status: 400, body: { error: "bad model" } }))
      const e2 = yield* Effect.flip(
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(Effect.provide(remote(s400.baseUrl)))
      )
      assert.strictEqual(e2._tag, "PolicyResponseError")
      assert.include(e2.message, "400")
      const noLogprobs = yield* fakeVllm(() => ({
        status: 200,
        body: { choices: [{ finish_reason: "stop", text: "x", logprobs: null }] }
      }))
      const e3 = yield* Effect.flip(
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(Effect.provide(remote(noLogprobs.baseUrl)))
      )
      assert.strictEqual(e3._tag, "PolicyResponseError")
      assert.include(e3.message, "no logprobs")
      const e4 = yield* Effect.flip(
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(Effect.provide(remote("http://127.0.0.1:1")))
      )
      assert.strictEqual(e4._tag, "PolicyTransportError")
    }))

  it.scopedLive("a request a closed kept-alive connection drops is sent again once; a server resetting every connection still fails", () =>
    Effect.gen(function*() {
      const resent = Effect.map(Metric.value(PolicyRequest.resends), (s) => s.count)
      const server = yield* fakeVllm(() => ({ status: 200, body: vllmBody([4, 5], "stop") }))
      const port = Number(new URL(server.baseUrl).port)
      const stale = yield* relay(port, "reused")
      const before = yield* resent
      const policy = remote(stale.url)
      // One layer, one client: the second request goes out on the first one's kept-alive connection (back in the
      // pool once the first answer is read and a turn has passed), which the relay cuts.
      const [first, second] = yield* Effect.all([
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }),
        Effect.sleep("50 millis"),
        generate({ promptIds: [2], sampling: { maxTokens: 2 } })
      ], { concurrency: 1 }).pipe(
        Effect.map(([a, _, b]) => [a, b] as const),
        Effect.provide(policy)
      )
      assert.deepStrictEqual(first.tokenIds, [4, 5])
      assert.deepStrictEqual(second.tokenIds, [4, 5])
      assert.strictEqual(stale.cuts(), 1)
      assert.deepStrictEqual(server.requests.map((r) => r.body.prompt), [[1], [2]])
      assert.strictEqual((yield* resent) - before, 1)

      const gone = yield* relay(port, "fresh")
      const e = yield* Effect.flip(
        generate({ promptIds: [3], sampling: { maxTokens: 2 } }).pipe(Effect.provide(remote(gone.url)))
      )
      assert.strictEqual(e._tag, "PolicyTransportError")
      assert.strictEqual(gone.cuts(), 2)
      assert.strictEqual(server.requests.length, 2)
    }))

  it.scopedLive("a server that never answers times out", () =>
    Effect.gen(function*() {
      const server = yield* fakeVllm(() => "hang")
      const e = yield* Effect.flip(
        generate({ promptIds: [1], sampling: { maxTokens: 2 } }).pipe(
          Effect.provide(remote(server.baseUrl, { requestTimeout: "200 millis" }))
        )
      )
      assert.strictEqual(e._tag, "PolicyTransportError")
      assert.strictEqual((e as Policy.PolicyTransportError).reason, "timeout")
    }))
})

describe("Policy.scripted", () => {
  it.effect("tokenises the reply with the real tokenizer, appends EOS, honours maxTokens and stop ids", () =>
    Effect.gen(function*() {
      const { tokenizer } = yield* tinyModel
      const layer = Policy.scripted(tokenizer, ({ text }) => `You said ${text.length} chars.`)
      const prompt = tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n")
      const full = yield* generate({ promptIds: prompt, sampling: { maxTokens: 100 } }).pipe(Effect.provide(layer))
      const text = tokenizer.decode(full.tokenIds)
      assert.strictEqual(text, `You said ${tokenizer.decode(prompt).length} chars.<|im_end|>`)
      assert.strictEqual(full.finishReason, "stop")
      assert.deepStrictEqual(full.logprobs, full.tokenIds.map(Policy.scriptedLogprob))
      const cut = yield* generate({ promptIds: prompt, sampling: { maxTokens: 3 } }).pipe(Effect.provide(layer))
      assert.deepStrictEqual(cut.tokenIds, full.tokenIds.slice(0, 3))
      assert.strictEqual(cut.finishReason, "length")
      const stopAt = full.tokenIds[1]
      const stopped = yield* generate({ promptIds: prompt, sampling: { maxTokens: 100, stopTokenIds: [stopAt] } }).pipe(
        Effect.provide(layer)
      )
      assert.deepStrictEqual(stopped.tokenIds, full.tokenIds.slice(0, full.tokenIds.indexOf(stopAt) + 1))
      assert.strictEqual(stopped.finishReason, "stop")
    }))
})

describe("Policy.batching", () => {
  it.scoped("concurrent requests are served in batches of at most maxBatchSize, in order", () =>
    Effect.gen(function*() {
      const batches = yield* Ref.make<Array<Array<number>>>([])
      const gate = yield* Deferred.make<void>()
      const layer = Policy.batching({
        maxBatchSize: 3,
        generateBatch: (requests) =>
          Effect.gen(function*() {
            yield* Deferred.await(gate)
            yield* Ref.update(batches, (b) => [...b, requests.map((r) => r.promptIds[0])])
            return requests.map((r) => ({
              tokenIds: [r.promptIds[0] * 10],
              logprobs: [-1],
              finishReason: "stop" as const
            }))
          })
      })
      const ctx = yield* Layer.build(layer)
      const fiber = yield* Effect.forEach(
        [1, 2, 3, 4, 5, 6, 7],
        (i) => generate({ promptIds: [i], sampling: { maxTokens: 1 } }),
        { concurrency: "unbounded" }
      ).pipe(Effect.provide(ctx), Effect.fork)
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      const outs = yield* Fiber.join(fiber)
      assert.deepStrictEqual(outs.map((o) => o.tokenIds[0]), [10, 20, 30, 40, 50, 60, 70])
      const seen = yield* Ref.get(batches)
      assert.isTrue(seen.every((b) => b.length <= 3))
      assert.deepStrictEqual(seen.flat().sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7])
      // The first request ran alone while the rest queued up behind it.
      assert.isTrue(seen.length < 7)
    }))

  it.scoped("the wait window gathers requests that arrive shortly after the first into its batch", () =>
    Effect.gen(function*() {
      const batches = yield* Ref.make<Array<Array<number>>>([])
      const ctx = yield* Layer.build(Policy.batching({
        maxBatchSize: 4,
        window: "10 millis",
        generateBatch: (requests) =>
          Effect.as(
            Ref.update(batches, (b) => [...b, requests.map((r) => r.promptIds[0])]),
            requests.map(() => ({ tokenIds: [0], logprobs: [0], finishReason: "stop" as const }))
          )
      }))
      const ask = (i: number, after: number) =>
        Effect.zipRight(Effect.sleep(`${after} millis`), generate({ promptIds: [i], sampling: { maxTokens: 1 } }))
      // 1 at 0 ms, 2 at 5 ms (inside the window), 3 at 30 ms (after it).
      const fiber = yield* Effect.forEach([[1, 0], [2, 5], [3, 30]], ([i, t]) => ask(i, t), {
        concurrency: "unbounded"
      }).pipe(Effect.provide(ctx), Effect.fork)
      for (let t = 0; t < 50; t++) yield* TestClock.adjust("1 millis")
      yield* Fiber.join(fiber)
      assert.deepStrictEqual(yield* Ref.get(batches), [[1, 2], [3]])
    }))

  it.scoped("a failed batch fails each of its requests as a transport error", () =>
    Effect.gen(function*() {
      const layer = Policy.batching({
        maxBatchSize: 8,
        generateBatch: () => Effect.fail({ message: "device busy" })
      })
      const ctx = yield* Layer.build(layer)
      const e = yield* Effect.flip(generate({ promptIds: [1], sampling: { maxTokens: 1 } }).pipe(Effect.provide(ctx)))
      assert.strictEqual(e._tag, "PolicyTransportError")
      assert.include(e.message, "device busy")
    }))

  it.scoped("requests interrupted while queued are never generated", () =>
    Effect.gen(function*() {
      const seen = yield* Ref.make<Array<Array<number>>>([])
      const gate = yield* Deferred.make<void>()
      const layer = Policy.batching({
        maxBatchSize: 8,
        generateBatch: (requests) =>
          Effect.gen(function*() {
            yield* Ref.update(seen, (s) => [...s, requests.map((r) => r.promptIds[0])])
            yield* Deferred.await(gate)
            return requests.map(() => ({ tokenIds: [0], logprobs: [0], finishReason: "stop" as const }))
          })
      })
      const ctx = yield* Layer.build(layer)
      const ask = (i: number) =>
        Effect.fork(generate({ promptIds: [i], sampling: { maxTokens: 1 } }).pipe(Effect.provide(ctx)))
      const a = yield* ask(1)
      yield* Effect.yieldNow()
      const b = yield* ask(2)
      const c = yield* ask(3)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(b)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(a)
      yield* Fiber.join(c)
      assert.deepStrictEqual(yield* Ref.get(seen), [[1], [3]])
    }))
})
