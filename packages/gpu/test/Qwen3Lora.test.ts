import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { adaptedProjections, LORA_TARGETS, type LoraConfig, scaling } from "../src/formats/LoraConfig.js"
import * as Q from "../src/model/Qwen3Reference.js"
import { testConfig } from "./qwen3Fixtures.js"

// Small sizes so that central differences over every adapter tensor stay quick.
const config: Q.Config = testConfig({
  vocab_size: 23,
  hidden_size: 16,
  intermediate_size: 24,
  head_dim: 8,
  tie_word_embeddings: false
})

const loraConfig = (o: Partial<LoraConfig> = {}): LoraConfig => ({
  r: 3,
  alpha: 5,
  dropout: 0,
  targetModules: LORA_TARGETS,
  useRsLora: false,
  ...o
})

const tokensOf = (seed: number, n: number) =>
  Array.from({ length: n }, (_, i) => Q.philox4x32([i, seed, 1, 2], [3, 4])[0] % config.vocab_size)

/** PEFT's initialisation leaves B = 0 (no gradient reaches A): tests give B random values too. */
const adaptersFor = (lora: LoraConfig, precision: Q.Precision, seed = 3): Q.Weights => {
  const adapters = Q.initAdapters(config, lora, { seed, precision })
  adaptedProjections(config, lora).forEach((p, i) => {
    const b = adapters[p.b.name]
    for (let j = 0; j < b.length; j++) b[j] = 0.4 * Math.sin(7 * j + i + seed)
  })
  return adapters
}

const batch: Q.Batch = { tokens: tokensOf(11, 10), batch: 2, seqLen: 5, positions: [0, 1, 2, 3, 4, 0, 1, 2, 0, 1] }
const sync = (name: string, body: () => void) => it.effect(name, () => Effect.sync(body))

describe("Qwen3Reference with LoRA", () => {
  const cases: ReadonlyArray<readonly [string, LoraConfig, number | undefined]> = [
    ["all seven projections", loraConfig(), undefined],
    [
      "q, v and down with rsLoRA",
      loraConfig({ targetModules: ["q_proj", "v_proj", "down_proj"], useRsLora: true }),
      undefined
    ],
    ["all seven with dropout 0.3 (seeded mask)", loraConfig({ dropout: 0.3 }), 42]
  ]
  for (const [label, lora, dropoutSeed] of cases) {
    // Central differences in f64 of Σ w·logprob + Σ e·entropy against the backward, for entries of every adapter
    // tensor; layer 0's adapters are only reached through layer 1's dx, so dx through the adapters is checked too.
    sync(`dA and dB match central finite differences: ${label}`, () => {
      const weights = Q.randomWeights(config, { seed: 7, std: 0.5, normJitter: 0.3, precision: "f64" })
      const adapters = adaptersFor(lora, "f64")
      const run: Q.Lora = dropoutSeed === undefined
        ? { config: lora, adapters }
        : { config: lora, adapters, dropoutSeed }
      const targets = tokensOf(12, 10)
      targets[3] = -1
      const lossWeights = Array.from({ length: 10 }, (_, i) => (i % 3 === 0 ? 0 : Math.sin(i + 1)))
      const entropyWeights = Array.from({ length: 10 }, (_, i) => 0.3 * Math.cos(i))
      const fwd = Q.forward(config, weights, batch, { precision: "f64", lora: run })
      const { grads, loss } = Q.backward(config, weights, fwd, targets, lossWeights, 0.7, entropyWeights)
      const specs = adaptedProjections(config, lora).flatMap((p) => [p.a, p.b])
      // Only the adapter's gradients exist: the base is frozen.
      assert.deepStrictEqual(Object.keys(grads).sort(), specs.map((s) => s.name).sort())
      const lossAt = () => {
        const f = Q.forward(config, weights, batch, { precision: "f64", lora: run })
        const { entropy, logprobs } = Q.tokenLogprobs(f.logits, config.vocab_size, targets, 0.7, "f64")
        let sum = 0
        for (let n = 0; n < 10; n++) sum += lossWeights[n] * logprobs[n] + entropyWeights[n] * entropy[n]
        return sum
      }
      assert.closeTo(lossAt(), loss, 1e-12)
      const h = 1e-5
      for (const spec of specs) {
        const w = adapters[spec.name]
        const g = grads[spec.name]
        let largest = 0
        for (let i = 1; i < g.length; i++) if (Math.abs(g[i]) > Math.abs(g[largest])) largest = i
        const picks = [largest, (spec.name.length * 7) % w.length, (spec.name.length * 13 + 5) % w.length]
        for (const i of picks) {
          const saved = w[i]
          w[i] = saved + h
          const plus = lossAt()
          w[i] = saved - h
          const minus = lossAt()
          w[i] = saved
          const numeric = (plus - minus) / (2 * h)
          assert.closeTo(g[i], numeric, 1e-6 * Math.max(1, Math.abs(numeric)), `${spec.name}[${i}]`)
        }
        assert.isAbove(Math.abs(g[largest]), 1e-6, `${spec.name} gets a gradient`)
      }
    })
  }

  sync("the adapted forward equals the base with W + scaling·B·A merged in (f64)", () => {
    const lora = loraConfig({ targetModules: ["k_proj", "o_proj", "gate_proj", "up_proj"], alpha: 7 })
    const weights = Q.randomWeights(config, { seed: 2, std: 0.3, precision: "f64" })
    const adapters = adaptersFor(lora, "f64")
    const merged: Q.Weights = { ...weights }
    const s = scaling(lora)
    for (const p of adaptedProjections(config, lora)) {
      const [out, r] = p.b.shape
      const inF = p.a.shape[1]
      const w = Float64Array.from(weights[p.base])
      for (let o = 0; o < out; o++) {
        for (let i = 0; i < inF; i++) {
          let sum = 0
          for (let k = 0; k < r; k++) sum += adapters[p.b.name][o * r + k] * adapters[p.a.name][k * inF + i]
          w[o * inF + i] += s * sum
        }
      }
      merged[p.base] = w
    }
    const adapted = Q.forward(config, weights, batch, { precision: "f64", lora: { config: lora, adapters } }).logits
    const plain = Q.forward(config, merged, batch, { precision: "f64" }).logits
    for (let i = 0; i < plain.length; i++) assert.closeTo(adapted[i], plain[i], 1e-10, `logit ${i}`)
  })

  sync("PEFT's initialisation: A ~ U(±1/√in) from the seed, B = 0, so the adapted model equals the base", () => {
    const lora = loraConfig()
    const adapters = Q.initAdapters(config, lora, { seed: 9 })
    for (const p of adaptedProjections(config, lora)) {
      const a = adapters[p.a.name]
      const bound = 1 / Math.sqrt(p.a.shape[1])
      assert.isTrue(a.every((x) => Math.abs(x) <= bound), p.a.name)
      assert.isAbove(Math.max(...a) - Math.min(...a), bound, `${p.a.name} spreads over the interval`)
      assert.isTrue(adapters[p.b.name].every((x) => x === 0), p.b.name)
    }
    assert.deepStrictEqual(Q.initAdapters(config, lora, { seed: 9 }), adapters)
    assert.notDeepEqual(Q.initAdapters(config, lora, { seed: 10 }), adapters)
    const weights = Q.randomWeights(config, { seed: 2 })
    const base = Q.forward(config, weights, batch).logits
    assert.deepStrictEqual(Q.forward(config, weights, batch, { lora: { config: lora, adapters } }).logits, base)
  })

  sync("the KV-cache path with adapters equals the no-cache forward, and greedy generation uses them", () => {
    const lora = loraConfig({ targetModules: ["q_proj", "v_proj", "up_proj", "down_proj"] })
    const weights = Q.randomWeights(config, { seed: 4, std: 0.3 })
    const run: Q.Lora = { config: lora, adapters: adaptersFor(lora, "f32"), dropoutSeed: 5 }
    const tokens = tokensOf(3, 6)
    const full = Q.forward(config, weights, { tokens, batch: 1, seqLen: 6 }, {
      lora: { config: lora, adapters: run.adapters }
    })
    const cache = Q.makeKvCache(config, 6)
    // dropoutSeed is ignored by decoding (evaluation): the same logits as the forward without dropout.
    const got = [
      ...Q.extend(config, weights, cache, tokens.slice(0, 4), run),
      ...Q.extend(config, weights, cache, tokens.slice(4), run)
    ]
    for (let i = 0; i < got.length; i++) assert.closeTo(got[i], full.logits[i], 1e-6, `logit ${i}`)
    const plain = Q.forward(config, weights, { tokens, batch: 1, seqLen: 6 }).logits
    assert.isAbove(Math.max(...plain.map((x, i) => Math.abs(x - full.logits[i]))), 1e-3, "the adapters change logits")
    const gen = Q.generate(config, weights, tokens, { temperature: 0, maxNewTokens: 3 }, run)
    const next = Q.extend(config, weights, Q.makeKvCache(config, 7), tokens, run)
    let best = 0
    const V = config.vocab_size
    for (let v = 1; v < V; v++) if (next[5 * V + v] > next[5 * V + best]) best = v
    assert.strictEqual(gen.tokens[0], best)
  })

  sync("dropout masks: about p dropped, fixed by the seed, different per projection and seed", () => {
    const m = Q.dropoutMask(1, 0, 40000, 0.25)
    const dropped = m.reduce((a, x) => a + (1 - x), 0) / m.length
    assert.closeTo(dropped, 0.25, 0.01)
    assert.deepStrictEqual(Q.dropoutMask(1, 0, 40000, 0.25), m)
    assert.notDeepEqual(Q.dropoutMask(1, 1, 40000, 0.25), m)
    assert.notDeepEqual(Q.dropoutMask(2, 0, 40000, 0.25), m)
    const lora = loraConfig({ dropout: 0.5 })
    const weights = Q.randomWeights(config, { seed: 4, std: 0.3 })
    const adapters = adaptersFor(lora, "f32")
    const at = (dropoutSeed: number) =>
      Q.forward(config, weights, batch, { lora: { config: lora, adapters, dropoutSeed } }).logits
    assert.deepStrictEqual(at(1), at(1))
    assert.notDeepEqual(at(1), at(2))
  })

  sync("missing or mis-sized adapter tensors and bad settings are refused by name", () => {
    const lora = loraConfig({ targetModules: ["v_proj"] })
    const weights = Q.randomWeights(config, { seed: 1 })
    const adapters = Q.initAdapters(config, lora, { seed: 1 })
    const missing = { ...adapters }
    delete missing["model.layers.1.self_attn.v_proj.lora_B.weight"]
    assert.throws(
      () => Q.forward(config, weights, batch, { lora: { config: lora, adapters: missing } }),
      /Missing LoRA tensor model\.layers\.1\.self_attn\.v_proj\.lora_B\.weight \[16, 3\]/
    )
    const short = { ...adapters, "model.layers.0.self_attn.v_proj.lora_A.weight": new Float32Array(5) }
    assert.throws(
      () => Q.forward(config, weights, batch, { lora: { config: lora, adapters: short } }),
      /lora_A\.weight has 5 elements/
    )
    assert.throws(
      () => Q.forward(config, weights, batch, { lora: { config: { ...lora, dropout: 1 }, adapters } }),
      /dropout 1: use a probability in \[0, 1\)/
    )
  })
})
