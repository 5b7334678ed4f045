import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CpuDevice from "../src/cpu/CpuDevice.js"
import * as CpuModel from "../src/cpu/CpuModel.js"
import * as Gemm from "../src/cpu/Gemm.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { maxRelError } from "./helpers.js"
import { assertDecodeMatchesSpec, testConfig, testModel } from "./qwen3Fixtures.js"

// The CPU device against the specification (Qwen3Reference, f32 storage, f64 sums) at the GPU kernels' tolerances,
// on every matmul route. OpenBLAS must be present here (npm test's set-up installs it): a missing route fails.
const routes: ReadonlyArray<Gemm.Gemm> = [
  Gemm.spec,
  ...(["openblas", "wasm-relaxed-simd", "wasm-simd"] as const).map((route) =>
    Effect.runSync(Gemm.select({ route, threads: 2 })).gemm
  )
]

const packed = (config: ReturnType<typeof testConfig>) => {
  // Two rows of 9; row 1 holds two sequences (positions restart at t = 4).
  const T = 9
  const tokens = Array.from({ length: 2 * T }, (_, i) => (i * 7 + 3) % config.vocab_size)
  const positions = [...Array.from({ length: T }, (_, t) => t), 0, 1, 2, 3, 0, 1, 2, 3, 4]
  return { tokens, positions, B: 2, T }
}

// Every case runs with both element-wise kernel sets: WebAssembly SIMD (the default where the model fits) and JS.
describe.each(["wasm-simd", "js"] as const)("CpuModel, %s element-wise kernels", (elementwise) => {
  for (const gemm of routes) {
    for (const [tie, attention] of [[true, "tiled"], [false, "matmul"]] as const) {
      it(`${gemm.route}, tied ${tie}, ${attention} attention: forward, logprobs and gradients match the spec`, () => {
        const config = testConfig({ tie_word_embeddings: tie })
        const { weights } = testModel(config, 3)
        const { B, T, positions, tokens } = packed(config)
        const model = CpuModel.make(config, weights, gemm, { attention, elementwise })
        const logits = model.forward(tokens, B, T, positions)
        const fwd = Ref.forward(config, weights, { tokens, batch: B, seqLen: T, positions })
        assert.isBelow(maxRelError(logits, fwd.logits), 1e-5)
        const targets = Ref.nextTokenTargets(fwd)
        const lossWeights = Array.from({ length: B * T }, (_, i) => (i % 3 === 0 ? 0 : -0.5 + 0.1 * (i % 4)))
        const entropyWeights = Array.from({ length: B * T }, (_, i) => 0.01 * (i % 5))
        const got = model.tokenLogprobs(targets, 0.7)
        const want = Ref.tokenLogprobs(fwd.logits, config.vocab_size, targets, 0.7)
        assert.isBelow(maxRelError(got.logprobs, want.logprobs), 1e-5)
        assert.isBelow(maxRelError(got.entropy, want.entropy), 1e-5)
        const b = model.backward(targets, lossWeights, 0.7, entropyWeights)
        const ref = Ref.backward(config, weights, fwd, targets, lossWeights, 0.7, entropyWeights)
        assert.isBelow(Math.abs(b.loss - ref.loss) / (1 + Math.abs(ref.loss)), 1e-5)
        for (const name of Object.keys(ref.grads)) {
          const e = maxRelError(model.grads[name], ref.grads[name])
          assert.isBelow(e, 1e-4, name)
        }
        // The gradient is not trivially zero.
        assert.isAbove(model.gradNorm(), 1e-3)
      })
    }

    it(`${gemm.route}: gradients accumulate over backwards, and AdamW matches the specification`, () => {
      const config = testConfig()
      const { weights } = testModel(config, 5)
      const model = CpuModel.make(config, weights, gemm, { elementwise })
      const { B, T, positions, tokens } = packed(config)
      const lw = Array.from({ length: B * T }, () => -0.1)
      const fwd = Ref.forward(config, weights, { tokens, batch: B, seqLen: T, positions })
      const targets = Ref.nextTokenTargets(fwd)
      for (let i = 0; i < 2; i++) {
        model.forward(tokens, B, T, positions)
        model.backward(targets, lw, 1)
      }
      const g = Ref.backward(config, weights, fwd, targets, lw, 1).grads
      for (const name of Object.keys(g)) for (let i = 0; i < g[name].length; i++) g[name][i] *= 2
      const norm = model.gradNorm()
      const refClip = Ref.clipGradNorm(g, 0.5)
      assert.isBelow(Math.abs(norm - refClip.totalNorm) / refClip.totalNorm, 1e-5)
      const w2: Ref.Weights = {}
      for (const [n, w] of Object.entries(weights)) w2[n] = Float32Array.from(w)
      const state = Ref.makeAdamWState(w2)
      const adam = { lr: 1e-2, weightDecay: 0.1 }
      Ref.adamWStep(w2, g, state, adam)
      model.adamW(Math.min(1, 0.5 / (norm + 1e-6)), adam)
      // AdamW's first step moves each weight by about lr·sign(g): an entry with a tiny gradient amplifies the route's
      // rounding of it, so weights compare at 1e-4 (lr is 1e-2).
      for (const name of Object.keys(w2)) assert.isBelow(maxRelError(model.weights[name], w2[name]), 1e-4, name)
      assert.strictEqual(model.step, 1)
      assert.strictEqual(model.gradNorm(), 0)
    })

    it(`${gemm.route}: KV-cache decode equals the no-cache forward, several sequences per pass`, () => {
      const config = testConfig()
      const { weights } = testModel(config, 7)
      const model = CpuModel.make(config, weights, gemm, { elementwise })
      const [ca, cb] = assertDecodeMatchesSpec(model, config, weights).caches
      assert.strictEqual(ca.length, 6)
      assert.throws(() => model.extendBatch([cb], [Array.from({ length: 14 }, () => 1)]), /do not fit/)
    })
  }

  for (const attention of ["tiled", "matmul"] as const) {
    it(`${attention} attention matches the spec across blocks: one row of 150 tokens holding three sequences`, () => {
      const config = testConfig()
      const { weights } = testModel(config, 11)
      const T = 150
      const tokens = Array.from({ length: T }, (_, i) => (i * 13 + 5) % config.vocab_size)
      const positions = Array.from({ length: T }, (_, t) => (t < 40 ? t : t < 110 ? t - 40 : t - 110))
      const model = CpuModel.make(config, weights, routes[1], { attention, elementwise })
      const logits = model.forward(tokens, 1, T, positions)
      const fwd = Ref.forward(config, weights, { tokens, batch: 1, seqLen: T, positions })
      assert.isBelow(maxRelError(logits, fwd.logits), 1e-5)
      const targets = Ref.nextTokenTargets(fwd)
      const lw = Array.from({ length: T }, (_, i) => -0.01 * (1 + (i % 3)))
      model.backward(targets, lw, 1)
      const ref = Ref.backward(config, weights, fwd, targets, lw, 1)
      for (const name of Object.keys(ref.grads)) {
        assert.isBelow(maxRelError(model.grads[name], ref.grads[name]), 1e-4, name)
      }
    })
  }

  it("profiles per op when asked, and only then", () => {
    const config = testConfig()
    const { weights } = testModel(config, 2)
    const { B, T, positions, tokens } = packed(config)
    const quiet = CpuModel.make(config, weights, Gemm.spec, { elementwise })
    const timed = CpuModel.make(config, weights, Gemm.spec, { profile: true, elementwise })
    for (const m of [quiet, timed]) {
      m.forward(tokens, B, T, positions)
      m.backward(Array.from({ length: B * T }, (_, i) => i % config.vocab_size), new Float64Array(B * T).fill(-1), 1)
    }
    assert.strictEqual(quiet.profile.size, 0)
    assert.strictEqual(timed.kernels, elementwise)
    for (const op of ["matmul", "attention", "attentionBackward", "rmsNorm", "tokenLogprobs", "embedding"]) {
      assert.isAbove(timed.profile.get(op) ?? 0, 0, op)
    }
    timed.resetProfile()
    assert.strictEqual(timed.profile.size, 0)
  })

  it("refuses weights of the wrong size, tokens outside the vocabulary and tiled attention at an odd head_dim", () => {
    const config = testConfig()
    const { weights } = testModel(config, 1)
    const model = CpuModel.make(config, weights, Gemm.spec)
    assert.throws(() => model.forward([1, 2, config.vocab_size], 1, 3), /Token id 40 at index 2/)
    assert.throws(
      () => model.setWeights({ ...weights, "model.norm.weight": new Float32Array(3) }),
      /model\.norm\.weight has 3 elements/
    )
    const odd = testConfig({ head_dim: 6 })
    assert.throws(
      () => CpuModel.make(odd, testModel(odd, 1).weights, Gemm.spec, { attention: "tiled" }),
      /"tiled" needs head_dim a multiple of 4 \(got 6\)/
    )
  })
})

describe("CpuModel", () => {
  it("runs the WebAssembly element-wise kernels by default, and refuses them for a model their memory cannot hold", () => {
    const config = testConfig()
    assert.strictEqual(CpuModel.make(config, testModel(config, 1).weights, Gemm.spec).kernels, "wasm-simd")
    // 2^24 × 32 embedding values × 16 bytes (weights, gradients, two moments) is 8 GiB: refused before allocating.
    const huge = testConfig({ vocab_size: 2 ** 24 })
    assert.throws(
      () => CpuModel.make(huge, {}, Gemm.spec, { elementwise: "wasm-simd" }),
      /elementwise: "wasm-simd" needs the weights, gradients and AdamW moments \(8\.00 GiB\) within 3 GiB/
    )
  })

  it.scoped("CpuDevice.layer provides the fastest route with its description; a missing route is a typed failure", () =>
    Effect.gen(function*() {
      const device = yield* CpuDevice.CpuDevice.pipe(Effect.provide(CpuDevice.CpuDevice.layer({ threads: 1 })))
      assert.strictEqual(device.gemm.route, "openblas")
      assert.match(device.description, /^OpenBLAS .* on 1 thread/)
      const missing = yield* Effect.flip(
        CpuDevice.CpuDevice.pipe(Effect.provide(CpuDevice.CpuDevice.layer({ route: "accelerate" })))
      )
      assert.strictEqual(missing._tag, "GemmRouteUnavailable")
      assert.match(missing.message, /Fix: ask for openblas/)
    }))

  it("gradients agree with finite differences of the f32 loss (a few entries of every kind of tensor)", () => {
    const config = testConfig()
    const { weights } = testModel(config, 13)
    const { B, T, positions, tokens } = packed(config)
    const gemm = routes[1]
    const targets = Ref.nextTokenTargets(Ref.forward(config, weights, { tokens, batch: B, seqLen: T, positions }))
    const lw = Array.from({ length: B * T }, (_, i) => (i % 2 ? -0.3 : 0.2))
    const model = CpuModel.make(config, weights, gemm)
    model.forward(tokens, B, T, positions)
    model.backward(targets, lw, 1)
    const loss = (w: Record<string, Float32Array>) => {
      const m = CpuModel.make(config, w, gemm)
      m.forward(tokens, B, T, positions)
      const { logprobs } = m.tokenLogprobs(targets, 1)
      return logprobs.reduce((a, l, i) => a + lw[i] * l, 0)
    }
    const names = [
      "model.embed_tokens.weight",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.1.self_attn.k_norm.weight",
      "model.layers.1.mlp.down_proj.weight",
      "model.norm.weight"
    ]
    for (const name of names) {
      for (const i of [0, 7, 13]) {
        const h = 1e-2
        const plus = Object.fromEntries(Object.entries(weights).map(([n, w]) => [n, Float32Array.from(w)]))
        const minus = Object.fromEntries(Object.entries(weights).map(([n, w]) => [n, Float32Array.from(w)]))
        plus[name][i] += h
        minus[name][i] -= h
        const fd = (loss(plus) - loss(minus)) / (2 * h)
        const g = model.grads[name][i]
        assert.isBelow(Math.abs(fd - g), 2e-3 + 2e-2 * Math.abs(g), `${name}[${i}]: fd ${fd}, grad ${g}`)
      }
    }
  })

  it("OpenBLAS on 1 and 2 threads agree within tolerance; deterministic mode repeats bit for bit", () => {
    const config = testConfig({ hidden_size: 64, intermediate_size: 160, vocab_size: 300 })
    const { weights } = testModel(config, 17)
    const T = 96
    const tokens = Array.from({ length: 2 * T }, (_, i) => (i * 11 + 1) % config.vocab_size)
    const lw = Array.from({ length: 2 * T }, () => -0.01)
    const grads = (gemm: Gemm.Gemm) => {
      const m = CpuModel.make(config, weights, gemm)
      m.forward(tokens, 2, T)
      m.backward(tokens.map((_, i) => (i % T === T - 1 ? -1 : tokens[i + 1])), lw, 1)
      return m.grads
    }
    const one = Effect.runSync(Gemm.select({ route: "openblas", deterministic: true })).gemm
    const two = Effect.runSync(Gemm.select({ route: "openblas", threads: 2 })).gemm
    assert.strictEqual(one.threads, 1)
    const [a, b, c] = [grads(one), grads(one), grads(two)]
    for (const name of Object.keys(a)) {
      assert.deepStrictEqual(b[name], a[name], name)
      assert.isBelow(maxRelError(c[name], a[name]), 1e-5, name)
    }
  })
})
