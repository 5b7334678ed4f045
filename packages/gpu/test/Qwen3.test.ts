import { NodeContext } from "@effect/platform-node"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as ModelConfig from "../src/formats/ModelConfig.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { testConfig, testModel } from "./qwen3Fixtures.js"

/** |got − want| ≤ tol·max|want| elementwise. */
const assertClose = (got: ArrayLike<number>, want: ArrayLike<number>, tol: number, what: string) => {
  let scale = 0
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]))
  let worst = 0
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]))
  assert.isAtMost(worst, tol * Math.max(scale, 1e-3), `${what}: max error ${worst} vs scale ${scale}`)
}

const live = Layer.merge(Gpu.layer(), NodeContext.layer)

layer(live, { timeout: 120_000 })("Qwen3 on the GPU", (it) => {
  it.scoped("logprobs, loss and every gradient equal the reference (packed rows, 2 logit chunks)", () =>
    Effect.gen(function*() {
      const config = testConfig()
      const { tensors, weights } = testModel(config, 7)
      const model = yield* Qwen3.make({ config, tensors }, { batch: 2, seq: 6, chunk: 8 })
      const tokens = [3, 17, 5, 9, 33, 2, 11, 4, 38, 0, 21, 7]
      const positions = [0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2]
      const fwd = Ref.forward(config, weights, { tokens, batch: 2, seqLen: 6, positions })
      const targets = Ref.nextTokenTargets(fwd)
      const { logprobs: wantLp } = Ref.tokenLogprobs(fwd.logits, config.vocab_size, targets, 1, "f32")
      const got = yield* model.logprobs({ tokens, positions })
      const masked = Array.from(wantLp, (v, i) => (targets[i] < 0 ? 0 : v))
      assertClose(got.logprobs, masked, 1e-4, "logprobs")

      const coef = tokens.map((_, i) => (i % 3 === 0 ? -0.5 : 0.25 + 0.01 * i))
      const want = Ref.backward(config, weights, fwd, targets, coef, 1)
      const r = yield* model.step([{ tokens, positions, coef }], { lr: 0, step: 1 })
      assert.closeTo(r.loss, want.loss, 1e-4 * Math.abs(want.loss) + 1e-5)
      for (const spec of ModelConfig.expectedTensors(config)) {
        const g = yield* model.arena.read(`grad.${spec.name}`)
        assertClose(g, want.grads[spec.name], 2e-4, spec.name)
      }
      const after = yield* model.weights
      assert.deepStrictEqual(after.get("model.norm.weight")!.data, tensors.get("model.norm.weight")!.data)
    }))

  it.scoped("training steps on a next-token task reduce the loss; save → load round-trips the weights", () =>
    Effect.gen(function*() {
      const base = yield* Checkpoint.makeModel("tiny", 0)
      const config = testConfig({ tie_word_embeddings: false, vocab_size: base.config.vocab_size })
      const { tensors } = testModel(config, 9)
      const model = yield* Qwen3.make({ config, tensors }, { batch: 2, seq: 8 })
      const row = (s: number) => Array.from({ length: 8 }, (_, i) => (s + 3 * i) % 40)
      const tokens = [...row(1), ...row(2)]
      const coef = tokens.map((_, i) => (i % 8 === 7 ? 0 : -1 / 14))
      const losses: Array<number> = []
      for (let step = 1; step <= 30; step++) {
        const r = yield* model.step([{ tokens, coef }], { lr: 1e-2, step, maxGradNorm: 1, weightDecay: 0.01 })
        losses.push(r.loss)
        assert.isFalse(r.skipped)
      }
      assert.isBelow(losses[losses.length - 1], 0.5 * losses[0], `losses ${losses.join(", ")}`)

      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "qwen3-save-"))
      yield* model.save(dir, { ...base, config })
      const loaded = yield* Checkpoint.load(dir)
      const trained = yield* model.weights
      for (const [name, t] of trained) assert.deepStrictEqual(loaded.tensors.get(name)!.data, t.data, name)
      const again = yield* Qwen3.make(loaded, { batch: 2, seq: 8, trainable: false })
      const a = yield* model.logprobs({ tokens })
      const b = yield* again.logprobs({ tokens })
      assert.deepStrictEqual(b.logprobs, a.logprobs)
      fs.rmSync(dir, { recursive: true, force: true })
    }))
})
