import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import { Gpu } from "../src/runtime/Gpu.js"

/** max |got − want| / max |want|. */
const relMax = (got: ArrayLike<number>, want: ArrayLike<number>) => {
  let scale = 0
  let worst = 0
  for (let i = 0; i < want.length; i++) {
    scale = Math.max(scale, Math.abs(want[i]))
    worst = Math.max(worst, Math.abs(got[i] - want[i]))
  }
  return worst / scale
}

// Mixed precision on the tiny preset: f16 weight copies in the forward against the all-f32 model. f16 keeps
// 11 significant bits, so a weight moves by up to 2^-12 relative; through two layers and the LM head the logits
// stay within 0.2% of their scale (measured on lavapipe: 0.027%; gradients 0.03-0.05%), while differing from
// f32 (the copies are really used).
const LOGIT_TOLERANCE = 2e-3

layer(Gpu.layer(), { timeout: 180_000 })("Qwen3 with f16 weight copies", (it) => {
  it.scoped("forward logits match the f32 model within 0.2% on the tiny preset; a training step's gradients within 0.5%", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      assert.isTrue(gpu.hasFeature("shader-f16"))
      const base = yield* Checkpoint.makeModel("tiny", 3)
      const shape = { batch: 2, seq: 8 }
      const f32 = yield* Qwen3.make(base, shape)
      const f16 = yield* Qwen3.make(base, { ...shape, f16Weights: true })
      assert.deepStrictEqual(f16.train.half, { tier: "tiled128h" })
      const V = base.config.vocab_size
      const tokens = Array.from({ length: 16 }, (_, i) => (i * 37 + 11) % V)
      const a = yield* f32.logprobs({ tokens })
      const logits32 = yield* f32.arena.read("t.logits")
      const b = yield* f16.logprobs({ tokens })
      const logits16 = yield* f16.arena.read("t.logits")
      const e = relMax(logits16, logits32)
      assert.isAbove(e, 0, "the f16 copies must change the logits")
      assert.isBelow(e, LOGIT_TOLERANCE, `logits: ${e}`)
      assert.isBelow(relMax(b.logprobs, a.logprobs), LOGIT_TOLERANCE, "logprobs")

      // One step at lr 0: the gradients (of the f16-forward loss) against the f32 ones; the masters stay f32.
      const coef = tokens.map((_, i) => (i % 8 === 7 ? 0 : -1 / 14))
      const r32 = yield* f32.step([{ tokens, coef }], { lr: 0, step: 1 })
      const r16 = yield* f16.step([{ tokens, coef }], { lr: 0, step: 1 })
      assert.closeTo(r16.loss, r32.loss, 1e-3 * Math.abs(r32.loss))
      for (const name of ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]) {
        const g = relMax(yield* f16.arena.read(`grad.${name}`), yield* f32.arena.read(`grad.${name}`))
        assert.isBelow(g, 5e-3, `${name}: ${g}`)
      }
      const w = (yield* f16.weights).get("model.layers.1.mlp.down_proj.weight")!.data
      assert.deepStrictEqual(w, base.tensors.get("model.layers.1.mlp.down_proj.weight")!.data)
    }))
})
