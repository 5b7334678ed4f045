import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CpuModel from "../src/cpu/CpuModel.js"
import * as Gemm from "../src/cpu/Gemm.js"
import { adaptedProjections } from "../src/formats/LoraConfig.js"
import { expectedTensors } from "../src/formats/ModelConfig.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { maxRelError } from "./helpers.js"
import {
  adaptersWithSignal,
  assertDecodeMatchesSpec,
  loraConfig,
  packedPositions,
  packedT,
  packedTokens,
  testConfig,
  testModel
} from "./qwen3Fixtures.js"

// LoRA on the CPU device against the specification (Qwen3Reference with adapters), on every matmul route the
// CpuModel tests cover, with both element-wise kernel sets.
const routes: ReadonlyArray<Gemm.Gemm> = [
  Gemm.spec,
  ...(["openblas", "wasm-relaxed-simd", "wasm-simd"] as const).map((route) =>
    Effect.runSync(Gemm.select({ route, threads: 2 })).gemm
  )
]

const T = packedT
const tokens = packedTokens
const positions = packedPositions
const lora = loraConfig
const adaptersFor = adaptersWithSignal

describe.each(["wasm-simd", "js"] as const)("CpuModel with LoRA, %s element-wise kernels", (elementwise) => {
  for (const gemm of routes) {
    const cases = [
      ["all seven projections, tied, tiled attention", true, "tiled", lora(), undefined],
      [
        "q, v, down with rsLoRA, untied, matmul attention",
        false,
        "matmul",
        lora({
          targetModules: ["q_proj", "v_proj", "down_proj"],
          useRsLora: true
        }),
        undefined
      ],
      ["all seven with dropout 0.25 (the reference's seeded masks)", true, "tiled", lora({ dropout: 0.25 }), 77]
    ] as const
    for (const [label, tie, attention, l, seed] of cases) {
      it(`${gemm.route}, ${label}: forward, logprobs and every adapter gradient match the spec`, () => {
        const config = testConfig({ tie_word_embeddings: tie })
        const { weights } = testModel(config, 3)
        const adapters = adaptersFor(config, l)
        const model = CpuModel.make(config, weights, gemm, { attention, elementwise, lora: { config: l, adapters } })
        const run: Ref.Lora = seed === undefined ? { config: l, adapters } : { config: l, adapters, dropoutSeed: seed }
        const logits = model.forward(tokens, 2, T, positions, seed)
        const fwd = Ref.forward(config, weights, { tokens, batch: 2, seqLen: T, positions }, { lora: run })
        assert.isBelow(maxRelError(logits, fwd.logits), 1e-5)
        const targets = Ref.nextTokenTargets(fwd)
        const lossWeights = Array.from({ length: 2 * T }, (_, i) => (i % 3 === 0 ? 0 : -0.5 + 0.1 * (i % 4)))
        const entropyWeights = Array.from({ length: 2 * T }, (_, i) => 0.01 * (i % 5))
        const got = model.tokenLogprobs(targets, 0.7)
        const want = Ref.tokenLogprobs(fwd.logits, config.vocab_size, targets, 0.7)
        assert.isBelow(maxRelError(got.logprobs, want.logprobs), 1e-5)
        const b = model.backward(targets, lossWeights, 0.7, entropyWeights)
        const ref = Ref.backward(config, weights, fwd, targets, lossWeights, 0.7, entropyWeights)
        assert.isBelow(Math.abs(b.loss - ref.loss) / (1 + Math.abs(ref.loss)), 1e-5)
        // Gradients (and moments) exist for the adapter only: the base is frozen.
        const names = adaptedProjections(config, l).flatMap((p) => [p.a.name, p.b.name])
        assert.deepStrictEqual([...model.trained].sort(), [...names].sort())
        assert.deepStrictEqual(Object.keys(model.grads).sort(), [...names].sort())
        assert.deepStrictEqual(Object.keys(model.moments.m).sort(), [...names].sort())
        for (const name of names) assert.isBelow(maxRelError(model.grads[name], ref.grads[name]), 1e-4, name)
        assert.isAbove(model.gradNorm(), 1e-3)
      })
    }

    it(`${gemm.route}: AdamW updates the adapter only (as the spec's adamWStep), the base stays bit for bit`, () => {
      const config = testConfig()
      const { weights } = testModel(config, 5)
      const l = lora({ targetModules: ["k_proj", "o_proj", "gate_proj", "up_proj"] })
      const adapters = adaptersFor(config, l)
      const model = CpuModel.make(config, weights, gemm, { elementwise, lora: { config: l, adapters } })
      const run = { config: l, adapters }
      const fwd = Ref.forward(config, weights, { tokens, batch: 2, seqLen: T, positions }, { lora: run })
      const targets = Ref.nextTokenTargets(fwd)
      const lw = Array.from({ length: 2 * T }, () => -0.1)
      model.forward(tokens, 2, T, positions)
      model.backward(targets, lw, 1)
      const g = Ref.backward(config, weights, fwd, targets, lw, 1).grads
      const norm = model.gradNorm()
      const refClip = Ref.clipGradNorm(g, 0.5)
      assert.isBelow(Math.abs(norm - refClip.totalNorm) / refClip.totalNorm, 1e-5)
      const a2: Ref.Weights = {}
      for (const [n, w] of Object.entries(adapters)) a2[n] = Float32Array.from(w)
      const adam = { lr: 1e-2, weightDecay: 0.1 }
      Ref.adamWStep(a2, g, Ref.makeAdamWState(a2), adam)
      model.adamW(Math.min(1, 0.5 / (norm + 1e-6)), adam)
      for (const name of Object.keys(a2)) assert.isBelow(maxRelError(model.weights[name], a2[name]), 1e-4, name)
      for (const spec of expectedTensors(config)) {
        assert.deepStrictEqual(model.weights[spec.name], Float32Array.from(weights[spec.name]), spec.name)
      }
      assert.strictEqual(model.gradNorm(), 0)
    })

    it(`${gemm.route}: KV-cache decode with adapters equals the spec's no-cache forward with them`, () => {
      const config = testConfig()
      const { weights } = testModel(config, 7)
      const l = lora({ targetModules: ["q_proj", "v_proj", "o_proj", "down_proj"], dropout: 0.1 })
      const adapters = adaptersFor(config, l)
      const model = CpuModel.make(config, weights, gemm, { elementwise, lora: { config: l, adapters } })
      const { second } = assertDecodeMatchesSpec(model, config, weights, { config: l, adapters })
      const V = config.vocab_size
      const a = [1, 5, 9, 2, 7, 3]
      const base = Ref.forward(config, weights, { tokens: a, batch: 1, seqLen: 6 }).logits
      assert.isAbove(maxRelError(second, base.subarray(5 * V, 6 * V)), 1e-4, "the adapters change the logits")
    })
  }

  it("a frozen model (the KL reference) allocates no gradients or moments and computes what the trained one does", () => {
    const config = testConfig()
    const { weights } = testModel(config, 4)
    const frozen = CpuModel.make(config, weights, Gemm.spec, { elementwise, frozen: true })
    const trained = CpuModel.make(config, weights, Gemm.spec, { elementwise })
    assert.deepStrictEqual([frozen.trained, Object.keys(frozen.grads), Object.keys(frozen.moments.m)], [[], [], []])
    const targets = Array.from({ length: 2 * T }, (_, i) => (i * 3 + 1) % 40)
    const lw = Array.from({ length: 2 * T }, () => -0.1)
    const [a, b] = [frozen, trained].map((m) => {
      const logits = Float32Array.from(m.forward(tokens, 2, T, positions))
      return { logits, ...m.backward(targets, lw, 1) }
    })
    assert.deepStrictEqual(a, b)
  })

  it("refuses missing adapter tensors and bad settings by name", () => {
    const config = testConfig()
    const { weights } = testModel(config, 1)
    const l = lora({ targetModules: ["up_proj"] })
    const adapters = Ref.initAdapters(config, l, { seed: 1 })
    const { ["model.layers.1.mlp.up_proj.lora_A.weight"]: _, ...missing } = adapters
    assert.throws(
      () => CpuModel.make(config, weights, Gemm.spec, { elementwise, lora: { config: l, adapters: missing } }),
      /Missing LoRA tensor model\.layers\.1\.mlp\.up_proj\.lora_A\.weight \[4, 32\]/
    )
    assert.throws(
      () =>
        CpuModel.make(config, weights, Gemm.spec, { elementwise, lora: { config: { ...l, dropout: -1 }, adapters } }),
      /dropout -1/
    )
    const model = CpuModel.make(config, weights, Gemm.spec, { elementwise, lora: { config: l, adapters } })
    assert.throws(() => model.setTrained({}), /Missing tensor model\.layers\.0\.mlp\.up_proj\.lora_A\.weight/)
  })
})
