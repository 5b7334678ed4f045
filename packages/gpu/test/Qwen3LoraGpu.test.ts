import { NodeContext } from "@effect/platform-node"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as LoraAdapter from "../src/formats/LoraAdapter.js"
import { adaptedProjections, LORA_TARGETS, type LoraConfig } from "../src/formats/LoraConfig.js"
import * as Generation from "../src/model/Generation.js"
import * as Qwen3 from "../src/model/Qwen3.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { testConfig, testModel } from "./qwen3Fixtures.js"

/** |got − want| ≤ tol·max|want| elementwise. */
const assertClose = (got: ArrayLike<number>, want: ArrayLike<number>, tol: number, what: string) => {
  assert.strictEqual(got.length, want.length, `${what}: length`)
  let scale = 0
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]))
  let worst = 0
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]))
  assert.isAtMost(worst, tol * Math.max(scale, 1e-3), `${what}: max error ${worst} vs scale ${scale}`)
}

const config = testConfig()
const { tensors, weights } = testModel(config, 7)

const loraConfig = (o: Partial<LoraConfig> = {}): LoraConfig => ({
  r: 4,
  alpha: 6,
  dropout: 0,
  targetModules: LORA_TARGETS,
  useRsLora: false,
  ...o
})

/** PEFT's initialisation leaves B = 0 (no gradient would reach A): the tests give B values too. */
const adaptersFor = (lora: LoraConfig, seed = 3): Ref.Weights => {
  const adapters = Ref.initAdapters(config, lora, { seed })
  adaptedProjections(config, lora).forEach((p, i) => {
    const b = adapters[p.b.name]
    for (let j = 0; j < b.length; j++) b[j] = Math.fround(0.3 * Math.sin(5 * j + i + seed))
  })
  return adapters
}

const asTensors = (w: Ref.Weights) =>
  new Map(Object.entries(w).map(([name, data]) => [name, { data: Float32Array.from(data) }] as const))

const live = Layer.merge(Gpu.layer(), NodeContext.layer)

// Two packed rows of 6 (three sequences), two logit chunks.
const tokens = [3, 17, 5, 9, 33, 2, 11, 4, 38, 0, 21, 7]
const positions = [0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2]
const coef = tokens.map((_, i) => (i % 3 === 0 ? -0.5 : 0.25 + 0.01 * i))

layer(live, { timeout: 120_000 })("Qwen3 with LoRA on the GPU", (it) => {
  // The last element, when given, is a binding size small enough to split the frozen embedding and MLP weights
  // into row blocks (ops then run per block).
  const cases: ReadonlyArray<readonly [string, LoraConfig, number | undefined, number?]> = [
    ["all seven projections", loraConfig(), undefined],
    ["all seven on a base split into row blocks", loraConfig({ alpha: 3 }), undefined, 2048],
    [
      "q, v and down with rsLoRA",
      loraConfig({ targetModules: ["q_proj", "v_proj", "down_proj"], useRsLora: true }),
      undefined
    ],
    [
      "o, gate and up with dropout 0.3 (the reference's mask)",
      loraConfig({ targetModules: ["o_proj", "gate_proj", "up_proj"], dropout: 0.3 }),
      4242
    ]
  ]
  for (const [label, lora, dropoutSeed, maxBindingBytes] of cases) {
    it.scoped(`logprobs, loss and the adapter's gradients equal the reference: ${label}`, () =>
      Effect.gen(function*() {
        const adapters = adaptersFor(lora)
        const model = yield* Qwen3.make({ config, tensors }, {
          batch: 2,
          seq: 6,
          chunk: 8,
          lora: { config: lora, adapters: asTensors(adapters) },
          ...(maxBindingBytes === undefined ? {} : { maxBindingBytes })
        })
        if (maxBindingBytes !== undefined) {
          assert.strictEqual(model.arena.tensor(`${Arena.PARAM}.model.embed_tokens.weight`).blocks?.length, 3)
          assert.isDefined(model.arena.tensor(`${Arena.PARAM}.model.layers.1.mlp.up_proj.weight`).blocks)
        }
        // Only the adapter is trained: the gradient and moment groups hold its tensors and nothing else.
        const names = adaptedProjections(config, lora).flatMap((p) => [p.a.name, p.b.name]).sort()
        const inGroup = (group: string) =>
          [...model.arena.plan.tensors.values()].filter((t) => t.group === group).map((t) =>
            t.name.slice(group.length + 1)
          ).sort()
        for (const group of [Arena.PARAM, Arena.GRAD, Arena.ADAM_M, Arena.ADAM_V]) {
          assert.deepStrictEqual(inGroup(group), names, group)
        }

        const batch = { tokens, batch: 2, seqLen: 6, positions }
        const plain = Ref.forward(config, weights, batch, { lora: { config: lora, adapters } })
        const targets = Ref.nextTokenTargets(plain)
        const want = Ref.tokenLogprobs(plain.logits, config.vocab_size, targets, 1, "f32").logprobs
        const got = yield* model.logprobs({ tokens, positions })
        assertClose(got.logprobs, Array.from(want, (v, i) => (targets[i] < 0 ? 0 : v)), 1e-4, "logprobs")

        const run: Ref.Lora = dropoutSeed === undefined
          ? { config: lora, adapters }
          : { config: lora, adapters, dropoutSeed }
        const fwd = Ref.forward(config, weights, batch, { lora: run })
        const grads = Ref.backward(config, weights, fwd, targets, coef, 1)
        const r = yield* model.step([{
          tokens,
          positions,
          coef,
          ...(dropoutSeed === undefined ? {} : { dropoutSeed })
        }], {
          lr: 0,
          step: 1
        })
        assert.closeTo(r.loss, grads.loss, 1e-4 * Math.abs(grads.loss) + 1e-5)
        assert.deepStrictEqual(Object.keys(grads.grads).sort(), names)
        for (const name of names) {
          const g = yield* model.arena.read(`${Arena.GRAD}.${name}`)
          assertClose(g, grads.grads[name], 2e-4, name)
        }
        if (dropoutSeed !== undefined) {
          // The same step without the reference's mask would differ: the mask is really applied.
          const noMask = Ref.backward(config, weights, plain, targets, coef, 1)
          assert.isAbove(Math.abs(noMask.loss - r.loss), 1e-4, "dropout changes the loss")
        }
      }))
  }

  it.scoped("AdamW moves only the adapter; the base on the device is bit-identical after steps", () =>
    Effect.gen(function*() {
      const lora = loraConfig({ targetModules: ["q_proj", "k_proj", "up_proj"], dropout: 0.1 })
      const adapters = adaptersFor(lora)
      const model = yield* Qwen3.make({ config, tensors }, {
        batch: 2,
        seq: 6,
        lora: { config: lora, adapters: asTensors(adapters) }
      })
      for (let step = 1; step <= 3; step++) {
        const r = yield* model.step([{ tokens, positions, coef, dropoutSeed: step }], {
          lr: 1e-2,
          step,
          maxGradNorm: 1,
          weightDecay: 0.01
        })
        assert.isFalse(r.skipped)
      }
      for (const [name, t] of tensors) {
        assert.deepStrictEqual(yield* model.arena.read(`${Arena.PARAM}.${name}`), t.data, `base ${name}`)
      }
      const trained = yield* model.weights
      assert.deepStrictEqual([...trained.keys()].sort(), Object.keys(adapters).sort())
      for (const [name, t] of trained) {
        assert.notDeepEqual(t.data, Float32Array.from(adapters[name]), `${name} was trained`)
      }
      const state = yield* model.optimizerState
      assert.deepStrictEqual([...state.m.keys()].sort(), Object.keys(adapters).sort())
    }))

  it.scoped("greedy decoding with the adapter equals the reference's; the PEFT files round-trip", () =>
    Effect.gen(function*() {
      const lora = loraConfig({ targetModules: ["k_proj", "v_proj", "o_proj", "down_proj"], alpha: 12, dropout: 0.2 })
      const adapters = adaptersFor(lora, 5)
      const model = yield* Qwen3.make({ config, tensors }, {
        batch: 1,
        seq: 24,
        trainable: false,
        lora: { config: lora, adapters: asTensors(adapters) },
        generation: { slots: 2, capacity: 24, prefillChunk: 4, stepsPerSubmit: 4 }
      })
      const generator = yield* Generation.make(model)
      const ref: Ref.Lora = { config: lora, adapters }
      for (const prompt of [[3, 17, 5, 9, 33], [7, 1]]) {
        const want = Ref.generate(config, weights, prompt, { temperature: 0, maxNewTokens: 10 }, ref)
        const got = yield* generator.generate({ prompt, maxNewTokens: 10, temperature: 0 })
        assert.deepStrictEqual(got.tokens, want.tokens)
        got.logprobs.forEach((lp, i) => assert.closeTo(lp, want.logprobs[i], 1e-4))
        const plain = Ref.generate(config, weights, prompt, { temperature: 0, maxNewTokens: 10 })
        assert.notDeepEqual(plain.logprobs, want.logprobs, "the adapter changes the model")
      }
      // Scoring with the adapter off is the base alone (the KL reference of a LoRA run), on the same model.
      const seq = [3, 17, 5, 9, 33, 2, 11, 4]
      const batch = { tokens: seq, batch: 1, seqLen: seq.length }
      for (const [adapter, run] of [[true, ref], [false, undefined]] as const) {
        const fwd = Ref.forward(config, weights, batch, run === undefined ? {} : { lora: run })
        const targets = Ref.nextTokenTargets(fwd)
        const want = Ref.tokenLogprobs(fwd.logits, config.vocab_size, targets, 1, "f32").logprobs
        const got = yield* model.logprobs({ tokens: seq }, { adapter })
        assertClose(
          got.logprobs.subarray(0, seq.length - 1),
          want.subarray(0, seq.length - 1),
          1e-4,
          `adapter ${adapter}`
        )
      }

      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "qwen3-lora-gpu-"))
      const base = yield* Checkpoint.makeModel("tiny", 0)
      yield* model.save(dir, { ...base, config, tensors })
      const loaded = yield* LoraAdapter.load(dir, config)
      assert.deepStrictEqual(loaded.config, lora)
      for (const [name, t] of loaded.tensors) assert.deepStrictEqual(t.data, Float32Array.from(adapters[name]), name)
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.scoped("bad LoRA settings are refused with the problem named", () =>
    Effect.gen(function*() {
      const lora = loraConfig({ targetModules: ["q_proj"] })
      const adapters = asTensors(adaptersFor(lora))
      const tried = (o: Partial<Qwen3.Qwen3Options>) =>
        Effect.flip(Qwen3.make({ config, tensors }, { batch: 1, seq: 4, lora: { config: lora, adapters }, ...o }))
      const plain = yield* Qwen3.make({ config, tensors }, { batch: 1, seq: 4, trainable: false })
      const off = yield* Effect.flip(plain.logprobs({ tokens: [1, 2, 3, 4] }, { adapter: false }))
      assert.include(off.message, "needs a model made with lora")
      const half = yield* tried({ f16Weights: true })
      assert.include(half.message, "drop f16Weights")
      const rank = yield* tried({ lora: { config: { ...lora, r: 0 }, adapters } })
      assert.include(rank.message, "rank r = 0")
      const missing = yield* tried({ lora: { config: loraConfig({ targetModules: ["q_proj", "v_proj"] }), adapters } })
      assert.include(missing.message, "self_attn.v_proj.lora_A.weight")
      const short = new Map(adapters)
      const name = "model.layers.1.self_attn.q_proj.lora_B.weight"
      short.set(name, { data: new Float32Array(3) })
      const size = yield* tried({ lora: { config: lora, adapters: short } })
      assert.include(size.message, `The LoRA tensor "${name}" has 3 elements; the model needs 256.`)
    }))
})
