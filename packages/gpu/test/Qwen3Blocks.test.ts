import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { maxRelError } from "./helpers.js"

// The tiny preset under a forced 32 KiB binding limit: the tied embedding (1024×64 f32, 256 KiB) is split into
// 8 row blocks (gather, its backward and the LM head run per block), the MLP weights into 2 (their linears and
// gradients per block), and the logits are materialised 8 rows at a time; the model must compute what the
// unsplit one does: logprobs, loss, gradients, and the weights after an AdamW step.
layer(Gpu.layer(), { timeout: 180_000 })("Qwen3 with its embedding split into row blocks", (it) => {
  it.scoped("logprobs, a step's loss and gradients, and the updated weights equal the unsplit model's", () =>
    Effect.gen(function*() {
      const base = yield* Checkpoint.makeModel("tiny", 5)
      const shape = { batch: 2, seq: 8 }
      const whole = yield* Qwen3.make(base, shape)
      const split = yield* Qwen3.make(base, { ...shape, maxBindingBytes: 32 * 1024 })
      const embed = "model.embed_tokens.weight"
      assert.isUndefined(whole.arena.tensor(`${Arena.PARAM}.${embed}`).blocks)
      assert.strictEqual(split.arena.tensor(`${Arena.PARAM}.${embed}`).blocks?.length, 8)
      // The MLP weights (192×64, 48 KiB) are split too, and the logit chunk shrinks to what one binding holds.
      assert.strictEqual(split.arena.tensor(`${Arena.PARAM}.model.layers.0.mlp.up_proj.weight`).blocks?.length, 2)
      assert.strictEqual(split.train.chunk, 8)
      assert.strictEqual(whole.train.chunk, 16)
      const V = base.config.vocab_size
      const tokens = Array.from({ length: 16 }, (_, i) => (i * 211 + 5) % V) // ids in every block
      const a = yield* whole.logprobs({ tokens })
      const b = yield* split.logprobs({ tokens })
      assert.isBelow(maxRelError(b.logprobs, a.logprobs), 1e-5)
      const coef = tokens.map((_, i) => (i % 8 === 7 ? 0 : -1 / 14))
      const hyper = { lr: 1e-2, step: 1, weightDecay: 0.1, maxGradNorm: 1 }
      const ra = yield* whole.step([{ tokens, coef }], hyper)
      const rb = yield* split.step([{ tokens, coef }], hyper)
      assert.closeTo(rb.loss, ra.loss, 1e-5 * Math.abs(ra.loss))
      assert.closeTo(rb.gradNorm, ra.gradNorm, 1e-5 * ra.gradNorm)
      const ga = yield* whole.arena.read(`${Arena.GRAD}.${embed}`)
      const gb = yield* split.arena.read(`${Arena.GRAD}.${embed}`)
      assert.isBelow(maxRelError(gb, ga), 1e-5)
      // AdamW's moments are linear in the gradient; the first update lr·g/(|g| + ε) is not (it turns on the
      // sign of gradients near 0, which reordered sums may flip): at most 1% of the weights may differ by more
      // than 0.1% of lr (measured: the embedding within 4e-9, 2 of 12288 up_proj weights by 1.5% of lr).
      for (const group of [Arena.ADAM_M, Arena.ADAM_V]) {
        const ma = yield* whole.arena.read(`${group}.${embed}`)
        const mb = yield* split.arena.read(`${group}.${embed}`)
        assert.isBelow(maxRelError(mb, ma), 1e-6, group)
      }
      const wa = yield* whole.weights
      const wb = yield* split.weights
      for (const name of [embed, "model.layers.1.mlp.up_proj.weight"]) {
        const x = wa.get(name)!.data
        const y = wb.get(name)!.data
        let worst = 0
        let moved = 0
        for (let i = 0; i < x.length; i++) {
          const d = Math.abs(x[i] - y[i])
          worst = Math.max(worst, d)
          if (d > 1e-3 * hyper.lr) moved++
        }
        assert.isBelow(worst, 2 * hyper.lr, name)
        assert.isBelow(moved, x.length / 100, name)
      }
      // The weights moved (the step did something) and the split model's copy of them is whole.
      assert.strictEqual(wb.get(embed)!.data.length, V * base.config.hidden_size)
      assert.isAbove(maxRelError(wb.get(embed)!.data, base.tensors.get(embed)!.data), 1e-4)
    }))
})
