// `envtrain serve-policy` with the real backends: the CPU reference model (greedy output equal to the trainer's model
// and to Qwen3Reference.generate, the CPU twin of `envtrain generate`; logprobs; top logprobs; weight updates from a
// checkpoint directory and from pushed safetensors bytes; batching), the GPU backend on the device (lavapipe here;
// continuous batching with slot reuse, window batching),
// and the command itself as a child process. Every query is a real fetch over loopback. Live clock throughout.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Gemm from "@envtrain/gpu/cpu/Gemm"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import * as Qwen3Reference from "@envtrain/gpu/model/Qwen3Reference"
import { Gpu } from "@envtrain/gpu/runtime/Gpu"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as ChatRenderer from "@envtrain/rollout/ChatRenderer"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import { Effect, Fiber, Layer, Option, Schedule } from "effect"
import * as PolicyBackend from "../src/PolicyBackend.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"

type Json = Record<string, any>

// A long seeded sample that ignores end-of-turn, so it is still decoding when the requests under test arrive.
const longSample = (maxTokens: number) => ({
  prompt: "Catch the ball",
  max_tokens: maxTokens,
  temperature: 1,
  seed: 11,
  ignore_eos: true,
  logprobs: 0,
  return_token_ids: true
})

const post = (url: string, body: unknown, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: body instanceof Uint8Array ? body : JSON.stringify(body),
      ...init
    })
    const text = await res.text()
    // SSE bodies are not JSON; their `json` is empty.
    const json = (res.headers.get("content-type") ?? "").includes("json") ? JSON.parse(text) as Json : {}
    return { status: res.status, headers: res.headers, text, json }
  })

const weightsOf = (model: Checkpoint.Model): Qwen3Reference.Weights =>
  Object.fromEntries([...model.tensors].map(([name, t]) => [name, t.data]))

// What `envtrain generate` computes (its CPU twin): greedy decoding stopping at the tokenizer's EOS ids.
const greedy = (model: Checkpoint.Model, prompt: ReadonlyArray<number>, maxNewTokens: number) =>
  Qwen3Reference.generate(model.config, weightsOf(model), prompt, {
    maxNewTokens,
    temperature: 0,
    stopTokens: model.tokenizer.eosTokenIds.slice(0, 8)
  })

// Two models of one tokenizer. A fresh tiny model's logits are nearly flat (its greedy choice is the same token at
// every step), so the weights (norms aside) are scaled up: greedy outputs then vary from step to step and between A
// and B, which makes "equal to the reference" mean something.
const sharpened = (model: Checkpoint.Model): Checkpoint.Model => ({
  ...model,
  tensors: new Map(
    [...model.tensors].map((
      [name, t]
    ) => [name, name.endsWith("norm.weight") ? t : { ...t, data: t.data.map((x) => x * 30) }])
  )
})
const models = Effect.all([Checkpoint.makeModel("tiny", 3), Checkpoint.makeModel("tiny", 4)]).pipe(
  Effect.map(([a, b]): [Checkpoint.Model, Checkpoint.Model] => [sharpened(a), sharpened(b)]),
  Effect.orDie
)

// The reference backend is the specification itself: the protocol tests below compare it with Qwen3Reference bit for
// bit. The CPU device's backend has its own tests (equal to the trainer's device model, the spec within f32).
const serveCpu = (model: Checkpoint.Model, options: PolicyServer.PolicyServerOptions = {}) =>
  Effect.gen(function*() {
    const backend = yield* PolicyBackend.reference(model, { maxBatchSize: 8 }).pipe(Effect.provide(NodeContext.layer))
    return yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny", ...options })
  })

/** A server's /metrics: one gauge's value, the text now, and polling it until a condition holds (60 s at most). */
const metricsOf = (url: string) => {
  const gauge = (text: string, name: string) =>
    Number(new RegExp(`^envtrain:${name}\\{[^}]*\\} (\\d+)$`, "m").exec(text)?.[1])
  const metrics = Effect.promise(() => fetch(`${url}/metrics`).then((r) => r.text()))
  const poll = (until: (text: string) => boolean) =>
    metrics.pipe(Effect.repeat({ schedule: Schedule.spaced("2 millis"), until }), Effect.timeout("60 seconds"))
  return { gauge, metrics, poll }
}

describe("serve-policy, CPU device backend", () => {
  it.scopedLive("greedy completions equal the trainer's device model, and the spec's tokens; logprobs within f32", () =>
    Effect.gen(function*() {
      const [a, b] = yield* models
      for (const model of [a, b]) {
        const { gemm } = yield* Gemm.select({ route: "openblas", threads: 1 })
        const backend = yield* PolicyBackend.cpu(model, { maxBatchSize: 8, device: { route: "openblas", threads: 1 } })
          .pipe(Effect.provide(NodeContext.layer))
        assert.strictEqual(backend.name, "cpu")
        const server = yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
        const ids = model.tokenizer.encode("<|im_start|>user\nCatch the ball.<|im_end|>\n<|im_start|>assistant\n")
        const want = greedy(model, ids, 12)
        const trainer = yield* Trainer.deviceModel(model, { gemm }).generate([{
          promptIds: ids,
          sampling: { maxTokens: 12, temperature: 0, stopTokenIds: model.tokenizer.eosTokenIds, seed: 0 }
        }])
        assert.deepStrictEqual(trainer[0].tokenIds, want.tokens)
        const c = (yield* post(`${server.url}/v1/completions`, {
          model: "tiny",
          prompt: ids,
          max_tokens: 12,
          temperature: 0,
          logprobs: 0,
          return_token_ids: true
        })).json.choices[0]
        assert.deepStrictEqual(c.token_ids, want.tokens)
        assert.deepStrictEqual(c.logprobs.token_logprobs, trainer[0].logprobs)
        c.logprobs.token_logprobs.forEach((lp: number, i: number) => assert.closeTo(lp, want.logprobs[i], 1e-4))
      }
    }))
})

describe("serve-policy, reference backend", () => {
  it.scopedLive("greedy completions equal the trainer's model and `envtrain generate`; logprobs and ids line up", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu(a)
      const text = "<|im_start|>user\nCatch the ball.<|im_end|>\n<|im_start|>assistant\n"
      const ids = a.tokenizer.encode(text)
      const want = greedy(a, ids, 12)
      const trainer = yield* Trainer.referenceModel(a).generate([{
        promptIds: ids,
        sampling: { maxTokens: 12, temperature: 0, stopTokenIds: a.tokenizer.eosTokenIds, seed: 0 }
      }])
      assert.deepStrictEqual(trainer[0].tokenIds, want.tokens)
      for (const prompt of [text, ids]) {
        const r = (yield* post(`${server.url}/v1/completions`, {
          model: "tiny",
          prompt,
          max_tokens: 12,
          temperature: 0,
          logprobs: 0,
          return_token_ids: true
        })).json
        const c = r.choices[0]
        assert.deepStrictEqual(c.prompt_token_ids, ids)
        assert.deepStrictEqual(c.token_ids, want.tokens)
        assert.strictEqual(c.text, a.tokenizer.decode(want.tokens, { skipSpecialTokens: true }))
        assert.strictEqual(c.logprobs.token_logprobs.length, c.token_ids.length)
        c.logprobs.token_logprobs.forEach((lp: number, i: number) => {
          assert.isAtMost(lp, 0)
          assert.closeTo(lp, want.logprobs[i], 1e-9)
        })
        assert.strictEqual(c.finish_reason, want.finishReason)
        assert.strictEqual(r.policy_version, 0)
      }
    }))

  it.scopedLive("greedy chat renders the chat template as `generate --chat` does; top logprobs are ranked", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu(a)
      const messages = [{ role: "user" as const, content: "Guess a word." }]
      const rendered = yield* a.chatTemplate.render({ messages, addGenerationPrompt: true, enableThinking: false })
      const ids = a.tokenizer.encode(rendered)
      const viaRenderer = yield* ChatRenderer.make({
        tokenizer: a.tokenizer,
        template: a.chatTemplate,
        enableThinking: false
      })
        .promptIds(messages, [])
      assert.deepStrictEqual(viaRenderer, ids)
      const want = greedy(a, ids, 10)
      const r = (yield* post(`${server.url}/v1/chat/completions`, {
        messages,
        chat_template_kwargs: { enable_thinking: false },
        max_tokens: 10,
        temperature: 0,
        logprobs: true,
        top_logprobs: 3,
        return_token_ids: true,
        return_tokens_as_token_ids: true
      })).json
      assert.deepStrictEqual(r.prompt_token_ids, ids)
      const c = r.choices[0]
      assert.deepStrictEqual(c.token_ids, want.tokens)
      assert.strictEqual(c.logprobs.content.length, want.tokens.length)
      c.logprobs.content.forEach((e: Json, i: number) => {
        assert.strictEqual(e.token, `token_id:${want.tokens[i]}`)
        assert.closeTo(e.logprob, want.logprobs[i], 1e-9)
        assert.strictEqual(e.top_logprobs.length, 3)
        // Greedy: the sampled token is the most likely one.
        assert.strictEqual(e.top_logprobs[0].token, e.token)
        assert.closeTo(e.top_logprobs[0].logprob, e.logprob, 1e-5)
        for (let k = 1; k < 3; k++) assert.isAtMost(e.top_logprobs[k].logprob, e.top_logprobs[k - 1].logprob)
      })
      assert.deepStrictEqual(r.usage, {
        prompt_tokens: ids.length,
        completion_tokens: want.tokens.length,
        total_tokens: ids.length + want.tokens.length
      })
    }))

  it.scopedLive("a streamed chat answer reassembles to the non-streamed one (content, token ids, logprobs)", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu(a)
      const body = {
        messages: [{ role: "user", content: "Catch the ball." }],
        max_tokens: 12,
        temperature: 0.7,
        seed: 5,
        logprobs: true,
        return_token_ids: true
      }
      const plain = (yield* post(`${server.url}/v1/chat/completions`, body)).json
      const streamed = (yield* post(`${server.url}/v1/chat/completions`, { ...body, stream: true })).text
      const chunks = streamed.split("\n\n").filter((x) => x.length > 0).map((x) => x.slice("data: ".length))
      assert.strictEqual(chunks.pop(), "[DONE]")
      const parsed = chunks.map((c) => JSON.parse(c) as Json)
      const choices = parsed.flatMap((c) => c.choices as Array<Json>)
      assert.strictEqual(choices.map((c) => c.delta.content ?? "").join(""), plain.choices[0].message.content)
      assert.deepStrictEqual(choices.flatMap((c) => c.token_ids ?? []), plain.choices[0].token_ids)
      assert.deepStrictEqual(choices.flatMap((c) => c.logprobs?.content ?? []), plain.choices[0].logprobs.content)
      assert.deepStrictEqual(parsed[0].prompt_token_ids, plain.prompt_token_ids)
      assert.strictEqual(choices.at(-1)!.finish_reason, plain.choices[0].finish_reason)
    }))

  it.scopedLive("seeded sampling is reproducible, n choices differ in their streams, logprobs are processed", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu(a)
      const body = {
        prompt: "Hello",
        max_tokens: 8,
        temperature: 0.8,
        top_k: 50,
        seed: 11,
        n: 3,
        logprobs: 0,
        return_token_ids: true
      }
      const one = (yield* post(`${server.url}/v1/completions`, body)).json
      const two = (yield* post(`${server.url}/v1/completions`, body)).json
      assert.deepStrictEqual(one.choices.map((c: Json) => c.token_ids), two.choices.map((c: Json) => c.token_ids))
      const ids = a.tokenizer.encode("Hello")
      one.choices.forEach((c: Json, i: number) => {
        // Choice i is the trainer's sampling with seed + i.
        const want = Qwen3Reference.generate(a.config, weightsOf(a), ids, {
          maxNewTokens: 8,
          temperature: 0.8,
          topK: 50,
          seed: 11 + i,
          sequence: ids.length,
          stopTokens: a.tokenizer.eosTokenIds.slice(0, 8)
        })
        assert.deepStrictEqual(c.token_ids, want.tokens)
        c.logprobs.token_logprobs.forEach((lp: number, k: number) => assert.closeTo(lp, want.sampledLogprobs[k], 1e-9))
      })
    }))

  it.scopedLive("a request without sampling settings takes the model's generation_config, as vLLM does", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu({ ...a, generationConfig: { ...a.generationConfig, temperature: 0 } })
      const ids = a.tokenizer.encode("Hello")
      const r =
        (yield* post(`${server.url}/v1/completions`, { prompt: ids, max_tokens: 6, return_token_ids: true })).json
      assert.deepStrictEqual(r.choices[0].token_ids, greedy(a, ids, 6).tokens)
    }))

  it.scopedLive("weight updates: a checkpoint directory and pushed safetensors bytes change the output and the version", () =>
    Effect.gen(function*() {
      const [a, b] = yield* models
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = path.join(yield* fs.makeTempDirectoryScoped(), "b")
      yield* Checkpoint.save(dir, b)
      const server = yield* serveCpu(a)
      const ids = a.tokenizer.encode("Play catch.")
      const ask = post(`${server.url}/v1/completions`, {
        prompt: ids,
        max_tokens: 10,
        temperature: 0,
        return_token_ids: true
      })
      const wantA = greedy(a, ids, 10).tokens
      const wantB = greedy(b, ids, 10).tokens
      assert.notDeepEqual(wantA, wantB)
      assert.deepStrictEqual((yield* ask).json.choices[0].token_ids, wantA)

      const byDir = yield* post(`${server.url}/update_weights_from_disk`, { model_path: dir })
      assert.strictEqual(byDir.status, 200, byDir.text)
      assert.strictEqual(byDir.json.policy_version, 1)
      const afterDir = yield* ask
      assert.strictEqual(afterDir.headers.get("x-policy-version"), "1")
      assert.strictEqual(afterDir.json.policy_version, 1)
      assert.deepStrictEqual(afterDir.json.choices[0].token_ids, wantB)

      const bytes = Safetensors.encode(a.tensors)
      const pushed = yield* post(`${server.url}/update_weights`, bytes, {
        headers: { "content-type": "application/octet-stream" }
      })
      assert.strictEqual(pushed.status, 200, pushed.text)
      assert.strictEqual(pushed.json.policy_version, 2)
      assert.deepStrictEqual((yield* ask).json.choices[0].token_ids, wantA)

      // Refused updates leave the weights and the version as they were.
      const missing = yield* post(`${server.url}/update_weights_from_disk`, { model_path: path.join(dir, "nope") })
      assert.strictEqual(missing.status, 400)
      const partial = Safetensors.encode(new Map([...a.tensors].slice(1)))
      const wrong = yield* post(`${server.url}/update_weights`, partial, {
        headers: { "content-type": "application/octet-stream" }
      })
      assert.strictEqual(wrong.status, 400)
      assert.include(wrong.json.error.message, "lack")
      const still = (yield* ask).json
      assert.strictEqual(still.policy_version, 2)
      assert.deepStrictEqual(still.choices[0].token_ids, wantA)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scopedLive("concurrent requests decode in one batch (metrics show the occupancy) with unchanged outputs", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const server = yield* serveCpu(a, { batchWindow: "30 millis" })
      const prompts = ["Hi", "Play.", "Guess a word", "ok go", "Catch", "Sudoku"]
      const outs = yield* Effect.forEach(
        prompts,
        (prompt) =>
          post(`${server.url}/v1/completions`, { prompt, max_tokens: 6, temperature: 0, return_token_ids: true }),
        { concurrency: "unbounded" }
      )
      prompts.forEach((p, i) =>
        assert.deepStrictEqual(outs[i].json.choices[0].token_ids, greedy(a, a.tokenizer.encode(p), 6).tokens)
      )
      const metrics = yield* Effect.promise(() => fetch(`${server.url}/metrics`).then((r) => r.text()))
      const max = Number(/^envtrain:batch_size_max\{[^}]*\} (\d+)$/m.exec(metrics)?.[1])
      assert.isAbove(max, 1, metrics)
      assert.match(metrics, /^envtrain:batch_size_sum\{[^}]*\} 6$/m)
    }))
  it.scopedLive(
    "continuous batching: a request arriving mid-decode joins the running batch; both equal their solo runs",
    () =>
      Effect.gen(function*() {
        const [a] = yield* models
        const server = yield* serveCpu(a)
        const { gauge, metrics, poll } = metricsOf(server.url)
        // A long seeded sample (no end-of-turn stop) and a short greedy one.
        const long = longSample(1500)
        const short = { prompt: "Hi", max_tokens: 6, temperature: 0, logprobs: 0, return_token_ids: true }
        const first = yield* Effect.fork(post(`${server.url}/v1/completions`, long))
        yield* poll((text) => gauge(text, "num_requests_running") === 1)
        const joined = yield* post(`${server.url}/v1/completions`, short)
        // The short request was answered while the long one still decodes: it did not wait for that batch to end.
        assert.isTrue(Option.isNone(yield* Fiber.poll(first)), "the long request finished before the short one")
        const during = yield* metrics
        assert.isAtLeast(gauge(during, "decode_step_occupancy_max"), 2, during)
        const longOut = (yield* Fiber.join(first)).json
        assert.strictEqual(longOut.choices[0].token_ids.length, 1500)
        // Solo runs, one at a time: the same tokens and logprobs.
        const soloLong = (yield* post(`${server.url}/v1/completions`, long)).json
        const soloShort = (yield* post(`${server.url}/v1/completions`, short)).json
        assert.deepStrictEqual(longOut.choices[0].token_ids, soloLong.choices[0].token_ids)
        assert.deepStrictEqual(longOut.choices[0].logprobs, soloLong.choices[0].logprobs)
        assert.deepStrictEqual(joined.json.choices[0].token_ids, soloShort.choices[0].token_ids)
        assert.deepStrictEqual(joined.json.choices[0].logprobs, soloShort.choices[0].logprobs)
        assert.deepStrictEqual(joined.json.choices[0].token_ids, greedy(a, a.tokenizer.encode("Hi"), 6).tokens)
        const after = yield* metrics
        assert.strictEqual(gauge(after, "num_requests_running"), 0)
        assert.strictEqual(gauge(after, "num_requests_waiting"), 0)
      }),
    120_000
  )
})

describe("serve-policy, GPU backend", () => {
  it.scopedLive(
    "top logprobs equal the CPU backend's on the same weights (greedy chat, continuous and window batching)",
    () =>
      Effect.gen(function*() {
        const [a] = yield* models
        const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
        const gpuBackend = yield* PolicyBackend.gpu(a, { maxBatchSize: 2, contextLength: 64 }).pipe(
          Effect.provide(device)
        )
        const servers = {
          cpu: yield* serveCpu(a),
          gpu: yield* PolicyServer.serve(gpuBackend, { port: 0, servedModelName: "tiny" }),
          gpuWindow: yield* PolicyServer.serve(gpuBackend, { port: 0, servedModelName: "tiny", batching: "window" })
        }
        const ask = (url: string) =>
          post(`${url}/v1/chat/completions`, {
            messages: [{ role: "user", content: "Guess a word." }],
            chat_template_kwargs: { enable_thinking: false },
            max_tokens: 8,
            temperature: 0,
            logprobs: true,
            top_logprobs: 5,
            return_tokens_as_token_ids: true
          }).pipe(Effect.map((r) => r.json.choices[0].logprobs.content as Array<Json>))
        const want = yield* ask(servers.cpu.url)
        assert.strictEqual(want.length, 8)
        for (const url of [servers.gpu.url, servers.gpuWindow.url]) {
          const got = yield* ask(url)
          assert.strictEqual(got.length, want.length)
          got.forEach((e, i) => {
            assert.strictEqual(e.token, want[i].token)
            // Never fewer than asked.
            assert.strictEqual(e.top_logprobs.length, 5)
            assert.deepStrictEqual(
              e.top_logprobs.map((t: Json) => t.token),
              want[i].top_logprobs.map((t: Json) => t.token),
              `position ${i}`
            )
            e.top_logprobs.forEach((t: Json, k: number) =>
              assert.closeTo(t.logprob, want[i].top_logprobs[k].logprob, 1e-4)
            )
          })
        }
      }),
    300_000
  )

  it.scopedLive(
    "greedy output equals the CPU model's; pushed weights change it and bump the version",
    () =>
      Effect.gen(function*() {
        const [a, b] = yield* models
        // The device in the test's scope, so it outlives the server that uses it.
        const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
        const backend = yield* PolicyBackend.gpu(a, { maxBatchSize: 4, contextLength: 64 }).pipe(Effect.provide(device))
        const server = yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
        const ids = a.tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        const ask = post(`${server.url}/v1/completions`, {
          prompt: ids,
          max_tokens: 8,
          temperature: 0,
          logprobs: 0,
          return_token_ids: true
        })
        const first = (yield* ask).json.choices[0]
        const wantA = greedy(a, ids, 8)
        assert.deepStrictEqual(first.token_ids, wantA.tokens)
        first.logprobs.token_logprobs.forEach((lp: number, i: number) => assert.closeTo(lp, wantA.logprobs[i], 1e-4))
        // Top logprobs as asked (the legacy completions shape: one {token: logprob} per position, with the sampled
        // token added when it is not among them, as vLLM does).
        const top = (yield* post(`${server.url}/v1/completions`, { prompt: ids, max_tokens: 2, logprobs: 2 })).json
        assert.strictEqual(top.choices[0].logprobs.top_logprobs.length, 2, JSON.stringify(top))
        for (const alt of top.choices[0].logprobs.top_logprobs) assert.include([2, 3], Object.keys(alt).length)
        const manyStops = yield* post(`${server.url}/v1/completions`, {
          prompt: ids,
          max_tokens: 2,
          stop_token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9]
        })
        assert.strictEqual(manyStops.status, 400)
        assert.strictEqual(manyStops.json.error.param, "stop_token_ids")
        const pushed = yield* post(`${server.url}/update_weights`, Safetensors.encode(b.tensors), {
          headers: { "content-type": "application/octet-stream" }
        })
        assert.strictEqual(pushed.status, 200, pushed.text)
        const after = (yield* ask).json
        assert.strictEqual(after.policy_version, 1)
        assert.deepStrictEqual(after.choices[0].token_ids, greedy(b, ids, 8).tokens)
      }),
    300_000
  )
  it.scopedLive(
    "continuous batching: requests of different lengths join mid-decode and reuse freed slots; each equals its solo run",
    () =>
      Effect.gen(function*() {
        const [a] = yield* models
        const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
        // Two slots: of the two requests sent while the long one runs, one joins at once, the other takes the slot
        // the first frees.
        const backend = yield* PolicyBackend.gpu(a, { maxBatchSize: 2, contextLength: 512 }).pipe(
          Effect.provide(device)
        )
        const server = yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
        const { gauge, metrics, poll } = metricsOf(server.url)
        const long = longSample(240)
        const greedyShort = { prompt: "Hi", max_tokens: 6, temperature: 0, logprobs: 0, return_token_ids: true }
        const seededShort = {
          prompt: "Guess a word",
          max_tokens: 11,
          temperature: 0.8,
          top_p: 0.9,
          seed: 5,
          ignore_eos: true,
          logprobs: 0,
          return_token_ids: true
        }
        const first = yield* Effect.fork(post(`${server.url}/v1/completions`, long))
        yield* poll((text) => gauge(text, "num_requests_running") === 1)
        const joined = yield* Effect.all([
          post(`${server.url}/v1/completions`, greedyShort),
          post(`${server.url}/v1/completions`, seededShort)
        ], { concurrency: "unbounded" })
        // Both were answered while the long one still decodes: they did not wait for its batch to end.
        assert.isTrue(Option.isNone(yield* Fiber.poll(first)), "the long request finished before the short ones")
        const during = yield* metrics
        assert.strictEqual(gauge(during, "decode_step_occupancy_max"), 2, during)
        const longOut = (yield* Fiber.join(first)).json
        assert.strictEqual(longOut.choices[0].token_ids.length, 240)
        // Solo runs, one at a time: the same tokens and logprobs.
        const [soloLong, soloGreedy, soloSeeded] = [
          (yield* post(`${server.url}/v1/completions`, long)).json,
          (yield* post(`${server.url}/v1/completions`, greedyShort)).json,
          (yield* post(`${server.url}/v1/completions`, seededShort)).json
        ]
        for (
          const [got, solo, what] of [
            [longOut, soloLong, "long"],
            [joined[0].json, soloGreedy, "greedy"],
            [joined[1].json, soloSeeded, "seeded"]
          ] as const
        ) {
          assert.deepStrictEqual(got.choices[0].token_ids, solo.choices[0].token_ids, what)
          assert.deepStrictEqual(got.choices[0].logprobs, solo.choices[0].logprobs, what)
        }
        assert.strictEqual(joined[1].json.choices[0].token_ids.length, 11)
        assert.deepStrictEqual(joined[0].json.choices[0].token_ids, greedy(a, a.tokenizer.encode("Hi"), 6).tokens)
        // More requests at once than slots: they queue, take freed slots, and each equals the CPU model's answer.
        const prompts = ["Play.", "ok go", "Catch", "Sudoku", "Hi there"]
        const outs = yield* Effect.forEach(
          prompts,
          (prompt) =>
            post(`${server.url}/v1/completions`, { prompt, max_tokens: 5, temperature: 0, return_token_ids: true }),
          { concurrency: "unbounded" }
        )
        prompts.forEach((p, i) =>
          assert.deepStrictEqual(outs[i].json.choices[0].token_ids, greedy(a, a.tokenizer.encode(p), 5).tokens, p)
        )
        const after = yield* metrics
        assert.strictEqual(gauge(after, "num_requests_running"), 0, after)
        assert.strictEqual(gauge(after, "num_requests_waiting"), 0, after)
        assert.match(after, /^envtrain:batch_size_sum\{[^}]*\} 11$/m)
      }),
    300_000
  )

  it.scopedLive(
    "window batching (`batching: \"window\"`) still serves the GPU backend through its decoder's steps",
    () =>
      Effect.gen(function*() {
        const [a] = yield* models
        const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
        const backend = yield* PolicyBackend.gpu(a, { maxBatchSize: 4, contextLength: 64, stepsPerSubmit: 3 }).pipe(
          Effect.provide(device)
        )
        const server = yield* PolicyServer.serve(backend, { port: 0, batching: "window", batchWindow: "30 millis" })
        const prompts = ["Hi", "Play.", "Guess a word"]
        const outs = yield* Effect.forEach(
          prompts,
          (prompt) =>
            post(`${server.url}/v1/completions`, { prompt, max_tokens: 7, temperature: 0, return_token_ids: true }),
          { concurrency: "unbounded" }
        )
        prompts.forEach((p, i) =>
          assert.deepStrictEqual(outs[i].json.choices[0].token_ids, greedy(a, a.tokenizer.encode(p), 7).tokens, p)
        )
      }),
    300_000
  )
})

describe("envtrain serve-policy (the command)", () => {
  it.scopedLive("serves a model directory until killed", () =>
    Effect.gen(function*() {
      const [a] = yield* models
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* Checkpoint.save(dir, a)
      const { url } = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
      const models_ = yield* Effect.promise(() => fetch(`${url}/v1/models`).then((r) => r.json() as Promise<Json>))
      assert.strictEqual(models_.data[0].id, "tiny")
      const ids = a.tokenizer.encode("Hello")
      const r = (yield* post(`${url}/v1/completions`, {
        model: "tiny",
        prompt: ids,
        max_tokens: 5,
        temperature: 0,
        return_token_ids: true
      })).json
      assert.deepStrictEqual(r.choices[0].token_ids, greedy(a, ids, 5).tokens)
    }).pipe(Effect.provide(NodeContext.layer)), 180_000)
})
