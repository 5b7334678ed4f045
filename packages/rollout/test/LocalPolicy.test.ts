import { assert, layer } from "@effect/vitest"
import { Checkpoint, Generation, Gpu, Qwen3, Qwen3Reference as Ref } from "@envtrain/gpu"
import { Effect } from "effect"
import * as LocalPolicy from "../src/LocalPolicy.js"

// The tiny preset on the real device (lavapipe here): short prompts and 8 new tokens keep it to a few submits.
// Live clock: the batch window is real time.
layer(Gpu.layer(), { timeout: 300_000, excludeTestServices: true })("LocalPolicy on the GPU", (it) => {
  it.scoped("greedy turns equal the model's own greedy decoding; concurrent requests share batches", () =>
    Effect.gen(function*() {
      const ckpt = yield* Checkpoint.makeModel("tiny", 3)
      const model = yield* Qwen3.make(ckpt, {
        batch: 1,
        seq: 8,
        trainable: false,
        generation: { slots: 4, capacity: 32, prefillChunk: 8, stepsPerSubmit: 4 }
      })
      const generator = yield* Generation.make(model)
      const local = yield* LocalPolicy.fromGenerator(generator, { maxBatchSize: 4, window: "20 millis" })
      const prompts = ["Hi", "Play.", "Guess a word", "ok go"].map((t) =>
        ckpt.tokenizer.encode(`<|im_start|>user\n${t}<|im_end|>\n<|im_start|>assistant\n`)
      )
      const outs = yield* Effect.forEach(
        prompts,
        (promptIds) => local.policy.generate({ promptIds, sampling: { maxTokens: 8, temperature: 0 } }),
        { concurrency: "unbounded" }
      )
      // The model's own greedy decoding, on the CPU reference with the same weights.
      const weights = Object.fromEntries([...ckpt.tensors].map(([name, t]) => [name, t.data]))
      prompts.forEach((prompt, i) => {
        const want = Ref.generate(ckpt.config, weights, prompt, { maxNewTokens: 8, temperature: 0 })
        assert.deepStrictEqual(outs[i].tokenIds, want.tokens)
        assert.strictEqual(outs[i].finishReason, "length")
        outs[i].logprobs.forEach((lp, k) => assert.closeTo(lp, want.logprobs[k], 1e-4))
      })
      const stats = local.stats()
      assert.strictEqual(stats.requests, 4)
      assert.isBelow(stats.batches, 4)
      // Side by side on the device: fewer decode steps than the 4 × 8 tokens one at a time would take.
      assert.isBelow(generator.stats().steps, 4 * 8)
    }))
})
