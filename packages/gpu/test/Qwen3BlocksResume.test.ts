import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"

// The tiny preset under a forced 32 KiB binding limit splits the embedding's (and the MLP weights') AdamW moments
// into row blocks spread over several shards; saving and restoring the optimizer state must move every block.
const shape = { batch: 2, seq: 8, maxBindingBytes: 32 * 1024 }
const embed = "model.embed_tokens.weight"
const up = "model.layers.0.mlp.up_proj.weight"

const batchOf = (step: number, vocab: number): Qwen3.TrainBatch => {
  const tokens = Array.from({ length: 16 }, (_, i) => (i * 211 + 37 * step + 5) % vocab) // ids in every block
  return { tokens, coef: tokens.map((_, i) => (i % 8 === 7 ? 0 : (i + step) % 3 === 0 ? 0.3 : -0.1)) }
}
const scalars = (step: number) => ({ lr: 5e-3, step, maxGradNorm: 0.5, weightDecay: 0.1 })

layer(Gpu.layer(), { timeout: 180_000 })("Qwen3 optimizer state with row-blocked moments", (it) => {
  it.scoped("restoring the saved state into a fresh model gives the uninterrupted model's next step, bit for bit", () =>
    Effect.gen(function*() {
      const base = yield* Checkpoint.makeModel("tiny", 6)
      const V = base.config.vocab_size
      const model = yield* Qwen3.make(base, shape)
      assert.strictEqual(model.arena.tensor(`${Arena.ADAM_M}.${embed}`).blocks?.length, 8)
      assert.strictEqual(model.arena.tensor(`${Arena.ADAM_V}.${up}`).blocks?.length, 2)
      yield* model.step([batchOf(1, V)], scalars(1))
      const weights = yield* model.weights
      const saved = yield* model.optimizerState
      // Each blocked moment comes back whole, its rows in order (as the arena reads them block by block).
      for (const group of [Arena.ADAM_M, Arena.ADAM_V]) {
        const moments = group === Arena.ADAM_M ? saved.m : saved.v
        for (const name of [embed, up]) {
          const got = moments.get(name)!
          assert.deepStrictEqual(got, yield* model.arena.read(`${group}.${name}`), `${group} ${name}`)
          assert.isTrue(got.subarray(got.length - 64).some((x) => x !== 0), `${group} ${name}: last block moved`)
        }
      }
      yield* model.step([batchOf(2, V)], scalars(2))
      const uninterrupted = yield* model.weights

      const resumed = yield* Qwen3.make({ config: base.config, tensors: weights }, shape)
      yield* resumed.setOptimizerState(saved)
      const back = yield* resumed.optimizerState
      assert.deepStrictEqual(back.m.get(embed), saved.m.get(embed))
      assert.deepStrictEqual(back.v.get(up), saved.v.get(up))
      yield* resumed.step([batchOf(2, V)], scalars(2))
      const after = yield* resumed.weights
      for (const [name, t] of uninterrupted) assert.deepStrictEqual(after.get(name)!.data, t.data, name)

      // Without the moments, step 2 moves the blocked weights differently (the comparison above can fail).
      const cold = yield* Qwen3.make({ config: base.config, tensors: weights }, shape)
      yield* cold.step([batchOf(2, V)], scalars(2))
      const coldWeights = yield* cold.weights
      assert.notDeepEqual(coldWeights.get(embed)!.data, uninterrupted.get(embed)!.data)
    }))
})
