import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CpuModel from "../src/cpu/CpuModel.js"
import * as Gemm from "../src/cpu/Gemm.js"
import * as Bf16 from "../src/cpu/internal/bf16.js"
import { adaptedProjections } from "../src/formats/LoraConfig.js"
import { expectedTensors } from "../src/formats/ModelConfig.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { bf16ToF32, f32ToBf16 } from "../src/runtime/HalfFloat.js"
import { maxRelError } from "./helpers.js"
import * as Fx from "./qwen3Fixtures.js"

// bf16 storage of a frozen base on the CPU device against the specification (Qwen3Reference in f64) run on the
// same weights rounded to bf16: forward, logprobs, adapter gradients, recomputation and KV-cache decode. A vocabulary
// of 130 against a widening scratch of 48 rows makes the LM head go through three tiles.
const routes: ReadonlyArray<Gemm.Gemm> = [
  Gemm.spec,
  ...(["openblas", "wasm-simd"] as const).map((route) => Effect.runSync(Gemm.select({ route, threads: 2 })).gemm)
]

const { packedPositions: positions, packedT: T, packedTokens: tokens, testConfig, testModel } = Fx
const lossWeights = Array.from({ length: 2 * T }, (_, i) => (i % 3 === 0 ? 0 : -0.5 + 0.1 * (i % 4)))

/** Every weight rounded to nearest-even bf16 (HalfFloat's conversions, independent of the device's). */
const rounded = (weights: Ref.Weights): Ref.Weights =>
  Object.fromEntries(Object.entries(weights).map(([n, w]) => [n, bf16ToF32(f32ToBf16(Float32Array.from(w)))]))

describe("bf16 widening", () => {
  it("paired and single reads widen exactly as HalfFloat.bf16ToF32, at even and odd offsets and lengths", () => {
    const source = Uint16Array.from({ length: 41 }, (_, i) => (i * 40503 + 7) & 0xffff)
    const want = new Uint32Array(bf16ToF32(source).buffer)
    for (const [from, n, at] of [[0, 40, 0], [2, 38, 1], [3, 7, 0], [1, 40, 5], [0, 41, 0]]) {
      const out = new Uint32Array(48)
      Bf16.widen(source, Bf16.pairsOf(source), from, n, out, at)
      assert.deepStrictEqual(out.subarray(at, at + n), want.subarray(from, from + n), `from ${from}, n ${n}`)
      assert.isTrue(out.subarray(0, at).every((x) => x === 0) && out.subarray(at + n).every((x) => x === 0))
    }
  })
})

describe.each(["wasm-simd", "js"] as const)("CpuModel with a bf16 base, %s element-wise kernels", (elementwise) => {
  for (const gemm of routes) {
    const cases = [
      ["all seven, tied, dropout 0.25", true, Fx.loraConfig({ dropout: 0.25 }), 77, false],
      [
        "q, v, down, untied, recomputation",
        false,
        Fx.loraConfig({ targetModules: ["q_proj", "v_proj", "down_proj"] }),
        3,
        true
      ]
    ] as const
    for (const [label, tie, l, seed, gradientCheckpointing] of cases) {
      it(`${gemm.route}, ${label}: forward, loss and adapter gradients match the spec on bf16-rounded weights`, () => {
        const config = testConfig({ tie_word_embeddings: tie, vocab_size: 130 })
        const { weights } = testModel(config, 3)
        const base = rounded(weights)
        const adapters = Fx.adaptersWithSignal(config, l)
        const model = CpuModel.make(config, weights, gemm, {
          elementwise,
          gradientCheckpointing,
          frozenDtype: "bf16",
          lora: { config: l, adapters }
        })
        const run: Ref.Lora = { config: l, adapters, dropoutSeed: seed }
        const logits = model.forward(tokens, 2, T, positions, seed)
        const fwd = Ref.forward(config, base, { tokens, batch: 2, seqLen: T, positions }, { lora: run })
        assert.isBelow(maxRelError(logits, fwd.logits), 1e-5)
        // The rounding is real: the unrounded weights give other logits.
        const unrounded = Ref.forward(config, weights, { tokens, batch: 2, seqLen: T, positions }, { lora: run })
        assert.isAbove(maxRelError(logits, unrounded.logits), 1e-4)
        const targets = Ref.nextTokenTargets(fwd)
        const b = model.backward(targets, lossWeights, 0.7)
        const ref = Ref.backward(config, base, fwd, targets, lossWeights, 0.7)
        assert.isBelow(Math.abs(b.loss - ref.loss) / (1 + Math.abs(ref.loss)), 1e-5)
        const names = adaptedProjections(config, l).flatMap((p) => [p.a.name, p.b.name])
        for (const name of names) assert.isBelow(maxRelError(model.grads[name], ref.grads[name]), 1e-4, name)
        assert.isAbove(model.gradNorm(), 1e-3)
      })
    }

    it(`${gemm.route}: KV-cache decode on a bf16 base equals the spec's no-cache forward on the rounded weights`, () => {
      const config = testConfig({ vocab_size: 130 })
      const { weights } = testModel(config, 7)
      const base = rounded(weights)
      const l = Fx.loraConfig({ targetModules: ["q_proj", "o_proj", "up_proj"], dropout: 0.1 })
      const adapters = Fx.adaptersWithSignal(config, l)
      const model = CpuModel.make(config, weights, gemm, {
        elementwise,
        frozenDtype: "bf16",
        lora: { config: l, adapters }
      })
      Fx.assertDecodeMatchesSpec(model, config, base, { config: l, adapters })
    })
  }

  it("holds the base's matrices as bf16 only, the norms as bf16 values, and AdamW moves the adapter alone", () => {
    const config = testConfig({ tie_word_embeddings: false })
    const { weights } = testModel(config, 5)
    const base = rounded(weights)
    const l = Fx.loraConfig({ targetModules: ["k_proj", "gate_proj"] })
    const adapters = Fx.adaptersWithSignal(config, l)
    const model = CpuModel.make(config, weights, Gemm.spec, {
      elementwise,
      frozenDtype: "bf16",
      lora: { config: l, adapters }
    })
    assert.strictEqual(model.frozenDtype, "bf16")
    const matrices = expectedTensors(config).filter((s) => s.shape.length === 2).map((s) => s.name)
    const norms = expectedTensors(config).filter((s) => s.shape.length === 1).map((s) => s.name)
    assert.deepStrictEqual(Object.keys(model.bf16Weights).sort(), [...matrices].sort())
    const adapterNames = adaptedProjections(config, l).flatMap((p) => [p.a.name, p.b.name])
    assert.deepStrictEqual(Object.keys(model.weights).sort(), [...norms, ...adapterNames].sort())
    for (const name of matrices) {
      assert.deepStrictEqual(model.bf16Weights[name], f32ToBf16(Float32Array.from(weights[name])), name)
    }
    for (const name of norms) assert.deepStrictEqual(model.weights[name], base[name], name)
    const before = Object.fromEntries(matrices.map((n) => [n, Uint16Array.from(model.bf16Weights[n])]))
    model.forward(tokens, 2, T, positions)
    model.backward(tokens.map((t) => (t + 1) % 40), lossWeights, 1)
    model.adamW(1, { lr: 1e-2 })
    for (const name of matrices) assert.deepStrictEqual(model.bf16Weights[name], before[name], name)
    for (const name of norms) assert.deepStrictEqual(model.weights[name], base[name], name)
    assert.isTrue(adapterNames.some((n) => maxRelError(model.weights[n], adapters[n]) > 1e-4))
  })

  it("a frozen bf16 model (a KL reference without LoRA) computes the spec's loss and logprobs on rounded weights", () => {
    const config = testConfig({ vocab_size: 130 })
    const { weights } = testModel(config, 4)
    const base = rounded(weights)
    const model = CpuModel.make(config, weights, Gemm.spec, { elementwise, frozen: true, frozenDtype: "bf16" })
    const fwd = Ref.forward(config, base, { tokens, batch: 2, seqLen: T, positions })
    assert.isBelow(maxRelError(model.forward(tokens, 2, T, positions), fwd.logits), 1e-5)
    const targets = Ref.nextTokenTargets(fwd)
    const b = model.backward(targets, lossWeights, 1)
    const ref = Ref.backward(config, base, fwd, targets, lossWeights, 1)
    assert.isBelow(Math.abs(b.loss - ref.loss) / (1 + Math.abs(ref.loss)), 1e-5)
    assert.isBelow(maxRelError(b.logprobs, Ref.tokenLogprobs(fwd.logits, config.vocab_size, targets, 1).logprobs), 1e-5)
  })

  it("refuses bf16 storage for a model whose every weight is trained, naming the fix", () => {
    const config = testConfig()
    const { weights } = testModel(config, 1)
    assert.throws(
      () => CpuModel.make(config, weights, Gemm.spec, { elementwise, frozenDtype: "bf16" }),
      /frozenDtype: "bf16" stores a frozen base.*use it with lora or frozen: true/
    )
  })
})
