// Token-by-token streaming of `envtrain serve-policy --backend cpu` (continuous batching), a real child process
// (the shared `tinyPolicy` fixture): chunks leave the server while the sequence still decodes, their deltas
// concatenate to the non-streamed greedy answer byte for byte (and that is `envtrain generate`'s), and a client that
// hangs up mid-stream takes its sequence out of the batch while the server goes on. Real sockets on loopback
// (node:http, so the test sees each network read); live clock. The same for `--backend gpu` (lavapipe here, in
// process), a chunk per submit, and a sequence that leaves (stop string, hang-up) gives its generation slot back.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as Qwen3Reference from "@envtrain/gpu/model/Qwen3Reference"
import { Gpu } from "@envtrain/gpu/runtime/Gpu"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import { Effect, Layer, Schedule } from "effect"
import * as Http from "node:http"
import * as PolicyBackend from "../src/PolicyBackend.js"
import { MODEL, sharpened, tinyPolicy } from "./fixtures.js"

type Json = Record<string, any>

// `envtrain generate`'s CPU twin: greedy, stopping at the tokenizer's end-of-turn ids.
const greedy = (m: Checkpoint.Model, prompt: ReadonlyArray<number>, maxNewTokens: number) =>
  Qwen3Reference.generate(
    m.config,
    Object.fromEntries([...m.tensors].map(([name, t]) => [name, t.data])),
    prompt,
    { maxNewTokens, temperature: 0, stopTokens: m.tokenizer.eosTokenIds.slice(0, 8) }
  )

// The shared fixture's serve-policy child over a sharpened tiny model: greedy outputs vary from token to token.
const served = tinyPolicy(3, { sharpen: 30 })
// The same weights in process, for the GPU backend.
const model = Checkpoint.makeModel(MODEL, 3).pipe(Effect.map((m) => sharpened(m, 30)), Effect.orDie)

const post = (url: string, body: unknown) =>
  Effect.promise(async () => {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body)
    })
    return { status: res.status, text: await res.text() }
  })

const gauge = (metrics: string, name: string) =>
  Number(new RegExp(`^envtrain:${name}\\{[^}]*\\} (\\d+)$`, "m").exec(metrics)?.[1])
const metricsOf = (url: string) => Effect.promise(() => fetch(`${url}/metrics`).then((r) => r.text()))

const events = (text: string): Array<Json | "[DONE]"> =>
  text.split("\n\n").filter((s) => s.length > 0).map((s) => {
    assert.isTrue(s.startsWith("data: "), s)
    const data = s.slice("data: ".length)
    return data === "[DONE]" ? "[DONE]" : JSON.parse(data) as Json
  })

/**
 * A completions stream's chunks reassemble to the plain answer `choice`: the text and token ids, and, when the
 * request asked for logprobs, the logprobs and text offsets.
 */
const assertReassembles = (chunks: ReadonlyArray<Json>, choice: Json) => {
  assert.strictEqual(chunks.map((c) => c.choices[0].text).join(""), choice.text)
  assert.deepStrictEqual(chunks.flatMap((c) => c.choices[0].token_ids ?? []), choice.token_ids)
  if (choice.logprobs === null || choice.logprobs === undefined) return
  assert.deepStrictEqual(
    chunks.flatMap((c) => c.choices[0].logprobs?.token_logprobs ?? []),
    choice.logprobs.token_logprobs
  )
  assert.deepStrictEqual(chunks.flatMap((c) => c.choices[0].logprobs?.text_offset ?? []), choice.logprobs.text_offset)
}

/** A streamed request over node:http: every network read as it came, the first one awaited separately. */
const open = (url: string, path: string, body: unknown) =>
  Effect.async<{
    readonly reads: Array<string>
    readonly ended: Promise<void>
    readonly request: Http.ClientRequest
  }>((resume) => {
    const reads: Array<string> = []
    let end: () => void = () => {}
    const ended = new Promise<void>((r) => end = r)
    const request = Http.request(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" } })
    request.on("response", (res) => {
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        reads.push(chunk)
        if (reads.length === 1) resume(Effect.succeed({ reads, ended, request }))
      })
      res.on("end", end)
      res.on("close", end)
    })
    request.on("error", () => end())
    request.end(JSON.stringify(body))
  })

describe("serve-policy streams token by token (CPU backend, continuous batching)", () => {
  it.scopedLive(
    "the first chunks arrive while the sequence still decodes; the deltas are the non-streamed answer",
    () =>
      Effect.gen(function*() {
        const { model: m, server } = yield* served
        const body = {
          prompt: "Catch the ball",
          max_tokens: 600,
          temperature: 0,
          ignore_eos: true,
          logprobs: 0,
          return_token_ids: true
        }
        const stream = yield* open(server.url, "/v1/completions", { ...body, stream: true })
        // The first read is in: the sequence is still in the batch and no completion has been counted.
        const during = yield* metricsOf(server.url)
        assert.strictEqual(gauge(during, "num_requests_running"), 1, during)
        assert.strictEqual(gauge(during, "generation_tokens_total"), 0, during)
        // The complete events of the first read (it may end inside one).
        const firstIds = stream.reads[0].split("\n\n").slice(0, -1).map((e) =>
          JSON.parse(e.slice("data: ".length)) as Json
        )
          .flatMap((e) => e.choices.flatMap((c: Json) => c.token_ids ?? []))
        assert.isBelow(firstIds.length, 600)
        yield* Effect.promise(() => stream.ended)
        const all = events(stream.reads.join(""))
        assert.isAbove(stream.reads.length, 1)
        assert.strictEqual(all.at(-1), "[DONE]")
        const chunks = all.slice(0, -1) as Array<Json>
        const plain = JSON.parse((yield* post(`${server.url}/v1/completions`, body)).text) as Json
        const choice = plain.choices[0]
        assertReassembles(chunks, choice)
        assert.deepStrictEqual(chunks[0].choices[0].prompt_token_ids, m.tokenizer.encode("Catch the ball"))
        assert.strictEqual(chunks.at(-1)!.choices[0].finish_reason, "length")
        assert.strictEqual(choice.token_ids.length, 600)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive(
    "greedy chat and completions streams equal the non-streamed answers and `envtrain generate`",
    () =>
      Effect.gen(function*() {
        const { model: m, server } = yield* served
        const messages = [{ role: "user", content: "Guess a word." }]
        const chatBody = {
          messages,
          chat_template_kwargs: { enable_thinking: false },
          max_tokens: 40,
          temperature: 0,
          logprobs: true,
          return_token_ids: true
        }
        const plain = JSON.parse((yield* post(`${server.url}/v1/chat/completions`, chatBody)).text) as Json
        const want = greedy(m, plain.prompt_token_ids, 40)
        assert.deepStrictEqual(plain.choices[0].token_ids, want.tokens)
        const list = events(
          (yield* post(`${server.url}/v1/chat/completions`, {
            ...chatBody,
            stream: true,
            stream_options: { include_usage: true }
          })).text
        )
        assert.strictEqual(list.at(-1), "[DONE]")
        const chunks = list.slice(0, -1) as Array<Json>
        const choices = chunks.flatMap((c) => c.choices as Array<Json>)
        assert.strictEqual(choices[0].delta.role, "assistant")
        assert.strictEqual(choices.map((c) => c.delta.content ?? "").join(""), plain.choices[0].message.content)
        assert.deepStrictEqual(choices.flatMap((c) => c.token_ids ?? []), [...want.tokens])
        assert.deepStrictEqual(choices.flatMap((c) => c.logprobs?.content ?? []), plain.choices[0].logprobs.content)
        assert.deepStrictEqual(chunks[0].prompt_token_ids, plain.prompt_token_ids)
        assert.strictEqual(choices.at(-1)!.finish_reason, plain.choices[0].finish_reason)
        assert.deepStrictEqual(chunks.at(-1)!.usage, plain.usage)
        // One chunk per decode step, not one for the whole answer.
        assert.isAtLeast(choices.filter((c) => (c.token_ids ?? []).length > 0).length, want.tokens.length - 1)

        // A stop string taken from the middle of the greedy text: the stream stops there, as the plain answer does.
        const text = m.tokenizer.decode(want.tokens, { skipSpecialTokens: true })
        assert.isAbove(text.length, 14, text)
        const stop = text.slice(10, 13)
        const body = {
          prompt: plain.prompt_token_ids,
          max_tokens: 40,
          temperature: 0,
          stop: [stop],
          return_token_ids: true
        }
        const cut = JSON.parse((yield* post(`${server.url}/v1/completions`, body)).text) as Json
        assert.strictEqual(cut.choices[0].text, text.slice(0, text.indexOf(stop)))
        assert.strictEqual(cut.choices[0].stop_reason, stop)
        const streamed = events((yield* post(`${server.url}/v1/completions`, { ...body, stream: true })).text)
          .slice(0, -1) as Array<Json>
        assertReassembles(streamed, cut.choices[0])
        assert.strictEqual(streamed.at(-1)!.choices[0].stop_reason, stop)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive(
    "a client that hangs up mid-stream: its sequence leaves the batch, the server keeps serving",
    () =>
      Effect.gen(function*() {
        const { model: m, server } = yield* served
        const stream = yield* open(server.url, "/v1/completions", {
          prompt: "Catch the ball",
          max_tokens: 1500,
          temperature: 0,
          ignore_eos: true,
          stream: true
        })
        stream.request.destroy()
        yield* metricsOf(server.url).pipe(
          Effect.repeat({
            schedule: Schedule.spaced("5 millis"),
            until: (text) => gauge(text, "num_requests_running") === 0
          }),
          Effect.timeout("30 seconds")
        )
        const after = yield* metricsOf(server.url)
        // It left long before its 1500 steps, and it was never answered.
        const steps = gauge(after, "decode_step_occupancy_count")
        assert.isBelow(steps, 1500, after)
        yield* Effect.sleep("200 millis")
        assert.strictEqual(gauge(yield* metricsOf(server.url), "decode_step_occupancy_count"), steps)
        assert.strictEqual(gauge(after, "generation_tokens_total"), 0, after)
        const ids = m.tokenizer.encode("Hi")
        const next = JSON.parse(
          (yield* post(`${server.url}/v1/completions`, {
            prompt: ids,
            max_tokens: 8,
            temperature: 0,
            return_token_ids: true
          })).text
        ) as Json
        assert.deepStrictEqual(next.choices[0].token_ids, greedy(m, ids, 8).tokens)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})

describe("serve-policy streams a chunk per submit (GPU backend, continuous batching)", () => {
  // One generation slot, so a sequence that keeps its slot after it left the batch would block the next request.
  const serveGpu = (m: Checkpoint.Model) =>
    Effect.gen(function*() {
      const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
      const backend = yield* PolicyBackend.gpu(m, { maxBatchSize: 1, contextLength: 512, stepsPerSubmit: 4 }).pipe(
        Effect.provide(device)
      )
      return yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
    })

  it.scopedLive(
    "chunks arrive while the sequence decodes and equal the plain answer; a stop string cuts both alike",
    () =>
      Effect.gen(function*() {
        const m = yield* model
        const server = yield* serveGpu(m)
        const body = {
          prompt: "Catch the ball",
          max_tokens: 120,
          temperature: 0,
          ignore_eos: true,
          logprobs: 0,
          return_token_ids: true
        }
        const stream = yield* open(server.url, "/v1/completions", { ...body, stream: true })
        const during = yield* metricsOf(server.url)
        assert.strictEqual(gauge(during, "num_requests_running"), 1, during)
        assert.strictEqual(gauge(during, "generation_tokens_total"), 0, during)
        yield* Effect.promise(() => stream.ended)
        const chunks = events(stream.reads.join("")).slice(0, -1) as Array<Json>
        const plain = JSON.parse((yield* post(`${server.url}/v1/completions`, body)).text) as Json
        const choice = plain.choices[0]
        assert.deepStrictEqual(choice.token_ids, greedy(m, m.tokenizer.encode("Catch the ball"), 120).tokens)
        assertReassembles(chunks, choice)
        // A chunk per submit of 4 decode steps: many chunks, none longer than a submit.
        const sizes = chunks.map((c) => (c.choices[0].token_ids ?? []).length).filter((n) => n > 0)
        assert.isAtLeast(sizes.length, 120 / 4 - 2, String(sizes))
        assert.isAtMost(Math.max(...sizes), 4, String(sizes))

        // A stop string from the middle of the text: the sequence ends at that submit; the server cuts the tokens
        // sampled after it, streamed or not.
        const text = m.tokenizer.decode(choice.token_ids, { skipSpecialTokens: true })
        const stop = text.slice(21, 24)
        const stopped = { ...body, stop: [stop] }
        const cut = JSON.parse((yield* post(`${server.url}/v1/completions`, stopped)).text) as Json
        assert.strictEqual(cut.choices[0].text, text.slice(0, text.indexOf(stop)))
        assert.strictEqual(cut.choices[0].stop_reason, stop)
        assert.deepStrictEqual(cut.choices[0].token_ids, choice.token_ids.slice(0, cut.choices[0].token_ids.length))
        const streamed = events((yield* post(`${server.url}/v1/completions`, { ...stopped, stream: true })).text)
          .slice(0, -1) as Array<Json>
        assertReassembles(streamed, cut.choices[0])
        // It left at the stop: it gave its one slot back (this request needs it).
        const next = JSON.parse((yield* post(`${server.url}/v1/completions`, { ...body, max_tokens: 6 })).text) as Json
        assert.deepStrictEqual(next.choices[0].token_ids, choice.token_ids.slice(0, 6))
      }),
    300_000
  )

  it.scopedLive("a client that hangs up mid-stream gives its generation slot back", () =>
    Effect.gen(function*() {
      const m = yield* model
      const server = yield* serveGpu(m)
      const stream = yield* open(server.url, "/v1/completions", {
        prompt: "Catch the ball",
        max_tokens: 480,
        temperature: 0,
        ignore_eos: true,
        stream: true
      })
      stream.request.destroy()
      yield* metricsOf(server.url).pipe(
        Effect.repeat({
          schedule: Schedule.spaced("5 millis"),
          until: (text) => gauge(text, "num_requests_running") === 0
        }),
        Effect.timeout("60 seconds")
      )
      const after = yield* metricsOf(server.url)
      assert.isBelow(gauge(after, "decode_step_occupancy_count"), 480 / 4, after)
      assert.strictEqual(gauge(after, "generation_tokens_total"), 0, after)
      // The only slot is free again: the next request is served (it would fail with "slots are taken" otherwise).
      const ids = m.tokenizer.encode("Hi")
      const next = yield* post(`${server.url}/v1/completions`, {
        prompt: ids,
        max_tokens: 8,
        temperature: 0,
        return_token_ids: true
      })
      assert.strictEqual(next.status, 200, next.text)
      assert.deepStrictEqual((JSON.parse(next.text) as Json).choices[0].token_ids, greedy(m, ids, 8).tokens)
    }), 300_000)
})
