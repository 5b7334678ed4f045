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
})
