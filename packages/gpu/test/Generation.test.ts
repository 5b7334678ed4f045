import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Generation from "../src/model/Generation.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { testConfig, testModel } from "./qwen3Fixtures.js"

const config = testConfig()
const { tensors, weights } = testModel(config, 11)

const setup = (slots: number) =>
  Effect.gen(function*() {
    const model = yield* Qwen3.make({ config, tensors }, {
      batch: 1,
      seq: 24,
      trainable: false,
      generation: { slots, capacity: 24, prefillChunk: 8, stepsPerSubmit: 4 }
    })
    const generator = yield* Generation.make(model)
    return { model, generator }
  })

const argmax = (row: ArrayLike<number>) => {
  let best = 0
  for (let v = 1; v < row.length; v++) if (row[v] > row[best]) best = v
  return best
}

layer(Gpu.layer(), { timeout: 120_000 })("Generation on the GPU", (it) => {
  it.scoped("greedy decoding equals the argmax of full forward passes; KV-cache logprobs equal the no-cache path", () =>
    Effect.gen(function*() {
      const { generator, model } = yield* setup(2)
      const prompt = [3, 17, 5, 9, 33]
      const out = yield* generator.generate({ prompt, maxNewTokens: 10, temperature: 0 })
      const seq = [...prompt]
      for (let i = 0; i < 10; i++) {
        const fwd = Ref.forward(config, weights, { tokens: seq, batch: 1, seqLen: seq.length })
        seq.push(argmax(fwd.logits.subarray((seq.length - 1) * config.vocab_size, seq.length * config.vocab_size)))
      }
      assert.deepStrictEqual(out.tokens, seq.slice(prompt.length))
      assert.strictEqual(out.finishReason, "length")
      const full = [...prompt, ...out.tokens]
      const scored = yield* model.logprobs({ tokens: full })
      out.logprobs.forEach((lp, i) => assert.closeTo(lp, scored.logprobs[prompt.length - 1 + i], 1e-4))
    }))

  it.scoped("sampling equals the reference sampler for the same seed (all processors on)", () =>
    Effect.gen(function*() {
      const { generator } = yield* setup(2)
      const options = {
        temperature: 0.9,
        topK: 20,
        topP: 0.9,
        minP: 0.05,
        repetitionPenalty: 1.3,
        seed: 12345,
        sequence: 3
      }
      for (const prompt of [[1, 2, 3], [7], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39]]) {
        const want = Ref.generate(config, weights, prompt, { ...options, maxNewTokens: 12 })
        const got = yield* generator.generate({ prompt, maxNewTokens: 12, ...options })
        assert.deepStrictEqual(got.tokens, want.tokens)
        got.logprobs.forEach((lp, i) => assert.closeTo(lp, want.logprobs[i], 1e-4))
        got.sampledLogprobs.forEach((lp, i) => assert.closeTo(lp, want.sampledLogprobs[i], 1e-4))
      }
    }))

  it.scoped("top logprobs: the k most likely tokens of log_softmax(logits / T), before the penalty and filters", () =>
    Effect.gen(function*() {
      const { generator } = yield* setup(2)
      const V = config.vocab_size
      for (const options of [{ temperature: 0 }, { temperature: 0.7, topK: 5, repetitionPenalty: 1.3, seed: 9 }]) {
        const prompt = [4, 8, 15, 16, 23]
        const plain = yield* generator.generate({ prompt, maxNewTokens: 6, ...options })
        const got = yield* generator.generate({ prompt, maxNewTokens: 6, topLogprobs: 7, ...options })
        // Asking for them changes nothing else.
        assert.deepStrictEqual(got.tokens, plain.tokens)
        assert.deepStrictEqual(got.logprobs, plain.logprobs)
        assert.isUndefined(plain.topLogprobs)
        const T = options.temperature === 0 ? 1 : options.temperature
        const seq = [...prompt, ...got.tokens]
        const fwd = Ref.forward(config, weights, { tokens: seq, batch: 1, seqLen: seq.length })
        assert.strictEqual(got.topLogprobs?.length, got.tokens.length)
        got.topLogprobs!.forEach((top, i) => {
          const row = Array.from(fwd.logits.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V))
          const max = Math.max(...row)
          const lse = max / T + Math.log(row.reduce((a, z) => a + Math.exp(z / T - max / T), 0))
          const order = row.map((_, v) => v).sort((a, b) => row[b] - row[a] || a - b).slice(0, 7)
          assert.deepStrictEqual(top.map((t) => t.id), order, `token ${i}`)
          top.forEach((t) => assert.closeTo(t.logprob, row[t.id] / T - lse, 1e-4))
          // The sampled token's reported logprob is the same quantity.
          const j = top.findIndex((t) => t.id === got.tokens[i])
          if (j >= 0) assert.closeTo(top[j].logprob, got.logprobs[i], 1e-5)
        })
      }
    }))

  it.scoped("concurrent requests share slots (continuous batching) and each equals its solo reference run", () =>
    Effect.gen(function*() {
      const { generator } = yield* setup(2)
      const requests = Array.from({ length: 5 }, (_, i) => ({
        prompt: Array.from({ length: 2 + i }, (_, j) => (5 * i + 3 * j + 1) % 40),
        maxNewTokens: 4 + 3 * i,
        temperature: 1,
        topP: 0.95,
        stopTokens: [i % 2 === 0 ? 0 : 1, 2],
        seed: 99,
        sequence: i
      }))
      const results = yield* Effect.forEach(requests, (r) => generator.generate(r), { concurrency: "unbounded" })
      results.forEach((got, i) => {
        const r = requests[i]
        const want = Ref.generate(config, weights, r.prompt, r)
        assert.deepStrictEqual(got.tokens, want.tokens, `request ${i}`)
        assert.strictEqual(got.finishReason, want.finishReason)
      })
      assert.isAtLeast(generator.stats().tokens, results.reduce((a, r) => a + r.tokens.length, 0))
      const bad = yield* Effect.flip(generator.generate({ prompt: [1], maxNewTokens: 30 }))
      assert.include(bad.message, "capacity")
    }))

  it.scoped("step-wise: sequences joining, pausing and ending between submits each equal their solo reference run", () =>
    Effect.gen(function*() {
      const model = yield* Qwen3.make({ config, tensors }, {
        batch: 1,
        seq: 24,
        trainable: false,
        generation: { slots: 2, capacity: 24, prefillChunk: 8, stepsPerSubmit: 4 }
      })
      const stepwise = yield* Generation.makeStepwise(model, { stepsPerStep: 3 })
      const request = (i: number, temperature: number) => ({
        prompt: Array.from({ length: 2 + i }, (_, j) => (7 * i + 3 * j + 2) % 40),
        maxNewTokens: 14 - 2 * i,
        temperature,
        topK: 30,
        // Request 0 runs to its length (it is stepped alone first); the others may stop early.
        stopTokens: i === 0 ? [] : [i % 2 === 0 ? 0 : 1],
        seed: 7,
        sequence: i
      })
      const want = (r: ReturnType<typeof request>) => Ref.generate(config, weights, r.prompt, r)
      const check = (got: Generation.GenerateResult | undefined, r: ReturnType<typeof request>, what: string) => {
        assert.isDefined(got, what)
        const w = want(r)
        assert.deepStrictEqual(got!.tokens, w.tokens, what)
        assert.strictEqual(got!.finishReason, w.finishReason, what)
        got!.sampledLogprobs.forEach((lp, k) => assert.closeTo(lp, w.sampledLogprobs[k], 1e-4, what))
      }
      // Runs `live` until each finishes; `pauseFirst` leaves sequence 0 out of every other step.
      const drain = (live: Array<[Generation.Sequence, ReturnType<typeof request>, string]>, pauseFirst: boolean) =>
        Effect.gen(function*() {
          let turn = 0
          while (live.length > 0) {
            // Lost tokens would leave a sequence running forever.
            assert.isBelow(turn, 30, "a sequence never finished")
            const now = pauseFirst && turn % 2 === 1 && live.length > 1 ? live.slice(1) : live.slice()
            turn++
            const out = yield* stepwise.step(now.map(([s]) => s))
            out.forEach((got, i) => {
              if (got === undefined) return
              check(got, now[i][1], now[i][2])
              live.splice(live.indexOf(now[i]), 1)
            })
          }
        })
      // Greedy and seeded: one request runs a step alone, a second joins it mid-decode; the first is paused at times.
      for (const temperature of [0, 0.9]) {
        const [r0, r1] = [request(0, temperature), request(3, temperature)]
        const s0 = yield* stepwise.start(r0)
        const first = yield* stepwise.step([s0])
        assert.isUndefined(first[0])
        assert.lengthOf(s0.tokens, 3)
        const s1 = yield* stepwise.start(r1)
        yield* drain([[s0, r0, `T=${temperature} first`], [s1, r1, `T=${temperature} joined`]], true)
      }
      // Slots are freed: an ended sequence gives its slot back, and more requests than slots run one after another.
      const a = yield* stepwise.start(request(1, 0.9))
      yield* stepwise.start(request(2, 0.9))
      assert.include((yield* Effect.flip(stepwise.start(request(4, 0.9)))).message, "slots are taken")
      stepwise.end(a)
      assert.include((yield* Effect.flip(stepwise.step([a]))).message, "not running")
      const c = yield* stepwise.start(request(4, 0))
      const r4 = request(4, 0)
      yield* drain([[c, r4, "after end"]], false)
    }))
})
