import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import { Gpu } from "../src/runtime/Gpu.js"

const shape = { batch: 2, seq: 8 }
const K = 2
const N = 4

// A different packed batch and loss weighting every step, so each step moves the moments differently.
const batchOf = (step: number, vocab: number): Qwen3.TrainBatch => {
  const tokens = Array.from({ length: shape.batch * shape.seq }, (_, i) => (7 * step + 13 * i + i * i) % vocab)
  const coef = tokens.map((_, i) => (i % shape.seq === shape.seq - 1 ? 0 : ((i + step) % 3 === 0 ? 0.3 : -0.1)))
  return { tokens, coef }
}
const scalars = (step: number) => ({ lr: 5e-3, step, maxGradNorm: 0.5, weightDecay: 0.1 })

const run = (model: Qwen3.Qwen3Model, from: number, to: number, vocab: number) =>
  Effect.forEach(
    Array.from({ length: to - from + 1 }, (_, i) => from + i),
    (step) => Effect.map(model.step([batchOf(step, vocab)], scalars(step)), (r) => [r.loss, r.gradNorm] as const)
  )

layer(Gpu.layer(), { timeout: 120_000 })("Qwen3 optimizer state", (it) => {
  it.scoped("steps k+1..n after exporting the AdamW state into a fresh model are bit-identical to one run's", () =>
    Effect.gen(function*() {
      const base = yield* Checkpoint.makeModel("tiny", 3)
      const V = base.config.vocab_size
      const model = yield* Qwen3.make(base, shape)
      yield* run(model, 1, K, V)
      // The state at the interruption: weights (as a checkpoint holds them) and the AdamW state.
      const weights = yield* model.weights
      const saved = yield* model.optimizerState
      assert.strictEqual(saved.step, K)
      assert.strictEqual(saved.m.size, weights.size)
      assert.strictEqual(saved.v.size, weights.size)
      const norm = saved.v.get("model.norm.weight")!
      assert.isTrue(norm.some((x) => x > 0), "the second moments moved after two steps")
      const uninterrupted = yield* run(model, K + 1, N, V)

      const resumed = yield* Qwen3.make({ config: base.config, tensors: weights }, shape)
      yield* resumed.setOptimizerState(saved)
      assert.strictEqual((yield* resumed.optimizerState).step, K)
      const after = yield* run(resumed, K + 1, N, V)
      // Same kernels, same inputs, same f32 state: every value is bit-identical, not just close.
      assert.deepStrictEqual(after, uninterrupted)
      const final = yield* resumed.weights
      for (const [name, t] of yield* model.weights) assert.deepStrictEqual(final.get(name)!.data, t.data, name)

      // Without the moments the same weights take a different step k+2 (the test can tell the difference).
      const restarted = yield* Qwen3.make({ config: base.config, tensors: weights }, shape)
      const cold = yield* run(restarted, K + 1, N, V)
      assert.strictEqual(cold[0][0], uninterrupted[0][0], "step k+1's loss depends only on the weights")
      assert.notStrictEqual(cold[1][0], uninterrupted[1][0], "step k+2's loss depends on the moments")
    }))

  it.scoped("a mismatched name or shape is refused, naming both, and nothing is written; reset zeroes", () =>
    Effect.gen(function*() {
      const base = yield* Checkpoint.makeModel("tiny", 4)
      const model = yield* Qwen3.make(base, shape)
      yield* run(model, 1, 1, base.config.vocab_size)
      const good = yield* model.optimizerState
      const copy = (m: ReadonlyMap<string, Float32Array>) => new Map([...m].map(([k, x]) => [k, Float32Array.from(x)]))

      const renamed = copy(good.m)
      renamed.set("model.norm.weights", renamed.get("model.norm.weight")!)
      renamed.delete("model.norm.weight")
      const e1 = yield* Effect.flip(model.setOptimizerState({ ...good, m: renamed }))
      assert.strictEqual(e1._tag, "Qwen3UsageError")
      assert.include(e1.message, `"model.norm.weights"`)
      assert.include(e1.message, "model.embed_tokens.weight")

      const short = copy(good.v)
      short.set("model.norm.weight", new Float32Array(3))
      const e2 = yield* Effect.flip(model.setOptimizerState({ ...good, v: short }))
      assert.include(e2.message, `v "model.norm.weight" has 3 elements`)
      assert.include(e2.message, `shape [${base.config.hidden_size}]`)

      const missing = copy(good.m)
      missing.delete("model.layers.0.mlp.up_proj.weight")
      const e3 = yield* Effect.flip(model.setOptimizerState({ ...good, m: missing }))
      assert.include(e3.message, `lacks the moment of "model.layers.0.mlp.up_proj.weight"`)

      const e4 = yield* Effect.flip(model.setOptimizerState({ ...good, step: -1 }))
      assert.include(e4.message, "step -1")

      // The failed uploads left the state as it was.
      const now = yield* model.optimizerState
      for (const [name, x] of good.m) assert.deepStrictEqual(now.m.get(name), x, name)
      assert.strictEqual(now.step, 1)

      yield* model.resetOptimizerState(5)
      const reset = yield* model.optimizerState
      assert.strictEqual(reset.step, 5)
      for (const m of [reset.m, reset.v]) for (const [name, x] of m) assert.isTrue(x.every((y) => y === 0), name)

      const frozen = yield* Qwen3.make(base, { ...shape, trainable: false })
      const e5 = yield* Effect.flip(frozen.optimizerState)
      assert.include(e5.message, "trainable: false")
    }))
})
