import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ModelConfig from "../src/formats/ModelConfig.js"
import * as Q from "../src/model/Qwen3Reference.js"
import * as Reference from "../src/ops/Reference.js"

const tiny = (tied: boolean): Q.Config => ({
  vocab_size: 23,
  hidden_size: 16,
  intermediate_size: 24,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  tie_word_embeddings: tied
})

// Large init so every nonlinearity (norms, softmax, silu) is far from linear and a wrong derivative shows.
const weightsFor = (config: Q.Config, precision: Q.Precision, seed = 7) =>
  Q.randomWeights(config, { seed, std: 0.5, normJitter: 0.3, precision })

const tokensOf = (seed: number, n: number, vocab: number) =>
  Array.from({ length: n }, (_, i) => Q.philox4x32([i, seed, 1, 2], [3, 4])[0] % vocab)

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  assert.strictEqual(a.length, b.length)
  let worst = 0
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]))
  return worst
}

const argmax = (x: ArrayLike<number>, from: number, to: number) => {
  let best = from
  for (let i = from + 1; i < to; i++) if (x[i] > x[best]) best = i
  return best - from
}

const sync = (name: string, body: () => void) => it.effect(name, () => Effect.sync(body))

describe("Qwen3Reference", () => {
  it.effect("random weights have every tensor of ModelConfig.expectedTensors, norms at one", () =>
    Effect.gen(function*() {
      for (const tied of [true, false]) {
        const config = yield* ModelConfig.decode({
          architectures: ["Qwen3ForCausalLM"],
          vocab_size: 23,
          hidden_size: 16,
          intermediate_size: 24,
          num_hidden_layers: 2,
          num_attention_heads: 4,
          num_key_value_heads: 2,
          head_dim: 8,
          rms_norm_eps: 1e-6,
          rope_theta: 10000,
          max_position_embeddings: 64,
          tie_word_embeddings: tied
        })
        const weights = Q.randomWeights(config, { seed: 1 })
        assert.doesNotThrow(() => Q.checkWeights(config, weights))
        assert.strictEqual(weights["model.norm.weight"][3], 1)
      }
      const broken = Q.randomWeights(tiny(true), { seed: 1 })
      delete broken["model.layers.1.self_attn.k_norm.weight"]
      assert.throws(() => Q.checkWeights(tiny(true), broken), /model\.layers\.1\.self_attn\.k_norm\.weight/)
    }))

  sync("Philox4x32-10 reproduces the Random123 known-answer vectors", () => {
    assert.deepStrictEqual(Q.philox4x32([0, 0, 0, 0], [0, 0]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8])
    const f = 0xffffffff
    assert.deepStrictEqual(Q.philox4x32([f, f, f, f], [f, f]), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd])
    assert.deepStrictEqual(
      Q.philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
      [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    )
    const u = Q.samplingUniform(2 ** 40 + 5, 3, 9)
    assert.isTrue(u >= 0 && u < 1 && Math.fround(u) === u)
    assert.notStrictEqual(Q.samplingUniform(5, 3, 9), u)
  })

  // Central differences in f64 (no rounding anywhere) against the hand-written backward, for a sample of entries of
  // every tensor: the largest-gradient entry and three pseudo-random ones.
  for (const tied of [true, false]) {
    sync(`backward matches central finite differences for every tensor (${tied ? "tied" : "untied"})`, () => {
      const config = tiny(tied)
      const weights = weightsFor(config, "f64")
      const B = 2
      const T = 5
      const batch: Q.Batch = {
        tokens: tokensOf(11, B * T, config.vocab_size),
        batch: B,
        seqLen: T,
        positions: [0, 1, 2, 3, 4, 0, 1, 2, 0, 1] // row 1 packs two sequences
      }
      const fwd = Q.forward(config, weights, batch, { precision: "f64" })
      const targets = tokensOf(12, B * T, config.vocab_size)
      targets[3] = -1
      const lossWeights = Array.from({ length: B * T }, (_, i) => (i % 3 === 0 ? 0 : Math.sin(i + 1)))
      const entropyWeights = Array.from({ length: B * T }, (_, i) => (i % 4 === 1 ? 0 : 0.3 * Math.cos(i)))
      const temperature = 0.7
      const { grads, loss } = Q.backward(config, weights, fwd, targets, lossWeights, temperature, entropyWeights)
      const lossAt = () => {
        const f = Q.forward(config, weights, batch, { precision: "f64" })
        const { entropy, logprobs } = Q.tokenLogprobs(f.logits, config.vocab_size, targets, temperature, "f64")
        let sum = 0
        for (let n = 0; n < logprobs.length; n++) sum += lossWeights[n] * logprobs[n] + entropyWeights[n] * entropy[n]
        return sum
      }
      assert.closeTo(lossAt(), loss, 1e-12)
      const h = 1e-5
      for (const spec of ModelConfig.expectedTensors(config)) {
        const w = weights[spec.name]
        const g = grads[spec.name]
        const picks = [argmax(g.map(Math.abs), 0, g.length)]
        for (let s = 0; s < 3; s++) picks.push(Q.philox4x32([s, spec.name.length, 5, 6], [7, 8])[0] % w.length)
        for (const i of picks) {
          const saved = w[i]
          w[i] = saved + h
          const plus = lossAt()
          w[i] = saved - h
          const minus = lossAt()
          w[i] = saved
          const numeric = (plus - minus) / (2 * h)
          const tolerance = 1e-6 * Math.max(1, Math.abs(numeric))
          assert.closeTo(g[i], numeric, tolerance, `${spec.name}[${i}]`)
        }
        assert.isAbove(Math.abs(g[picks[0]]), 1e-6, `${spec.name} gets a gradient`)
      }
    })
  }

  // The GPU model is assembled from kernels whose CPU twins run the op specifications (Reference): the same assembly
  // of the specifications, with the plain gemm, must give this reference's logits (one sequence per row).
  sync("a forward assembled from the op specifications in Reference gives the same logits", () => {
    for (const tied of [true, false]) {
      const config = tiny(tied)
      const weights = weightsFor(config, "f64")
      const { head_dim: D, hidden_size: h, intermediate_size: I, num_attention_heads: H, num_key_value_heads: KV } =
        config
      const B = 2
      const T = 5
      const N = B * T
      const tokens = tokensOf(81, N, config.vocab_size)
      const positions = Array.from({ length: N }, (_, n) => n % T)
      const eps = config.rms_norm_eps
      const F64 = Reference.numerics("f64")
      const { cos, sin } = Reference.ropeTables(positions, D, config.rope_theta)
      const shape = { batch: B, seq: T, heads: H, kvHeads: KV, headDim: D, scale: 1 / Math.sqrt(D) }
      const lin = (x: ArrayLike<number>, name: string, inF: number, outF: number) =>
        Reference.gemm(x, weights[name], { m: N, n: outF, k: inF, transB: true })
      let x: ArrayLike<number> = Reference.embedding(weights["model.embed_tokens.weight"], tokens, N, h)
      for (let l = 0; l < config.num_hidden_layers; l++) {
        const p = `model.layers.${l}.`
        const xn = Reference.rmsNorm(x, N, h, weights[`${p}input_layernorm.weight`], eps, F64).y
        const qn = Reference.rmsNorm(
          lin(xn, `${p}self_attn.q_proj.weight`, h, H * D),
          N * H,
          D,
          weights[`${p}self_attn.q_norm.weight`],
          eps,
          F64
        ).y
        const kn = Reference.rmsNorm(
          lin(xn, `${p}self_attn.k_proj.weight`, h, KV * D),
          N * KV,
          D,
          weights[`${p}self_attn.k_norm.weight`],
          eps,
          F64
        ).y
        const v = lin(xn, `${p}self_attn.v_proj.weight`, h, KV * D)
        const q = Reference.rope(qn, N, H, D, cos, sin, F64)
        const k = Reference.rope(kn, N, KV, D, cos, sin, F64)
        const o = Reference.attention(q, k, v, new Int32Array(N), shape, F64).o
        const h1 = Reference.gemm(o, weights[`${p}self_attn.o_proj.weight`], {
          m: N,
          n: h,
          k: H * D,
          transB: true,
          beta: 1
        }, x)
        const mn = Reference.rmsNorm(h1, N, h, weights[`${p}post_attention_layernorm.weight`], eps, F64).y
        const act = Reference.swiglu(
          lin(mn, `${p}mlp.gate_proj.weight`, h, I),
          lin(mn, `${p}mlp.up_proj.weight`, h, I),
          F64
        )
        x = Reference.gemm(act, weights[`${p}mlp.down_proj.weight`], { m: N, n: h, k: I, transB: true, beta: 1 }, h1)
      }
      const head = tied ? "model.embed_tokens.weight" : "lm_head.weight"
      const fn = Reference.rmsNorm(x, N, h, weights["model.norm.weight"], eps, F64).y
      const logits = Reference.gemm(fn, weights[head], { m: N, n: config.vocab_size, k: h, transB: true })
      const mine = Q.forward(config, weights, { tokens, batch: B, seqLen: T }, { precision: "f64" })
      // The twins are the specifications the model runs (gemm in place of its blocked matmul).
      assert.isBelow(maxAbsDiff(logits, mine.logits), 1e-5)
      const targets = Q.nextTokenTargets(mine).map((t) => Math.max(t, 0))
      const twin = Reference.tokenLogprobs(logits, config.vocab_size, targets, 0.8, F64)
      const ours = Q.tokenLogprobs(mine.logits, config.vocab_size, targets, 0.8, "f64")
      assert.isBelow(maxAbsDiff(twin.logprobs, ours.logprobs), 1e-5)
      assert.isBelow(maxAbsDiff(twin.entropy, ours.entropy), 1e-5)
    }
  })

  sync("f32 gradients agree with the f64 ones", () => {
    const config = tiny(false)
    const batch: Q.Batch = { tokens: tokensOf(21, 6, 23), batch: 1, seqLen: 6 }
    const w32 = weightsFor(config, "f32")
    const w64 = weightsFor(config, "f64")
    const f32 = Q.forward(config, w32, batch)
    const f64 = Q.forward(config, w64, batch, { precision: "f64" })
    const targets = Q.nextTokenTargets(f32)
    const lw = Array.from({ length: 6 }, () => -1 / 5)
    const g32 = Q.backward(config, w32, f32, targets, lw, 1).grads
    const g64 = Q.backward(config, w64, f64, targets, lw, 1).grads
    assert.isBelow(maxAbsDiff(f32.logits, f64.logits), 1e-4)
    for (const name of Object.keys(g64)) {
      assert.instanceOf(g32[name], Float32Array)
      const scale = Math.max(...g64[name].map(Math.abs))
      assert.isBelow(maxAbsDiff(g32[name], g64[name]), 1e-4 * Math.max(1, scale), name)
    }
  })

  sync("causal masking: changing a token never changes the logits before it", () => {
    const config = tiny(true)
    const weights = weightsFor(config, "f32")
    const T = 6
    const tokens = tokensOf(31, T, 23)
    const base = Q.forward(config, weights, { tokens, batch: 1, seqLen: T }).logits
    for (let t = 1; t < T; t++) {
      const changed = [...tokens]
      changed[t] = (changed[t] + 1) % 23
      const logits = Q.forward(config, weights, { tokens: changed, batch: 1, seqLen: T }).logits
      const V = config.vocab_size
      assert.strictEqual(maxAbsDiff(logits.subarray(0, t * V), base.subarray(0, t * V)), 0)
      assert.isAbove(maxAbsDiff(logits.subarray(t * V), base.subarray(t * V)), 1e-4)
    }
  })

  sync("packed sequences and batch rows equal separate runs", () => {
    const config = tiny(false)
    const weights = weightsFor(config, "f32")
    const V = config.vocab_size
    const a = tokensOf(41, 4, V)
    const b = tokensOf(42, 3, V)
    const c = tokensOf(43, 7, V)
    const packed = Q.forward(config, weights, {
      tokens: [...a, ...b, ...c],
      batch: 2,
      seqLen: 7,
      positions: [0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6]
    }).logits
    const alone = (t: Array<number>) => Q.forward(config, weights, { tokens: t, batch: 1, seqLen: t.length }).logits
    const want = [...alone(a), ...alone(b), ...alone(c)]
    // Same rows, same keys in the same order: bit-identical, not merely close.
    assert.strictEqual(maxAbsDiff(packed, want), 0)
  })

  sync("the KV-cache path equals the no-cache forward (prefill, single tokens, chunks)", () => {
    for (const tied of [true, false]) {
      const config = tiny(tied)
      const weights = weightsFor(config, "f32")
      const V = config.vocab_size
      const tokens = tokensOf(51, 9, V)
      const full = Q.forward(config, weights, { tokens, batch: 1, seqLen: tokens.length }).logits
      const cache = Q.makeKvCache(config, 9)
      const chunks = [[0, 3], [3, 4], [4, 5], [5, 7], [7, 8], [8, 9]]
      const got: Array<number> = []
      for (const [from, to] of chunks) got.push(...Q.extend(config, weights, cache, tokens.slice(from, to)))
      assert.strictEqual(cache.length, 9)
      // Both paths share attendRow and the per-row ops, so the cache path is bit-identical.
      assert.strictEqual(maxAbsDiff(got, full), 0)
      assert.throws(() => Q.extend(config, weights, cache, [1]), /KV cache holds 9/)
    }
  })

  sync("greedy generation equals the argmax of full forward passes", () => {
    const config = tiny(true)
    const weights = weightsFor(config, "f32", 3)
    const V = config.vocab_size
    const prompt = tokensOf(61, 4, V)
    const out = Q.generate(config, weights, prompt, { temperature: 0, maxNewTokens: 10 })
    assert.strictEqual(out.tokens.length, 10)
    assert.strictEqual(out.finishReason, "length")
    const seq = [...prompt]
    for (let s = 0; s < 10; s++) {
      const logits = Q.forward(config, weights, { tokens: seq, batch: 1, seqLen: seq.length }).logits
      const next = argmax(logits, (seq.length - 1) * V, seq.length * V)
      assert.strictEqual(out.tokens[s], next, `step ${s}`)
      const lp = Q.tokenLogprobs(logits.subarray((seq.length - 1) * V), V, [next], 1).logprobs[0]
      assert.closeTo(out.logprobs[s], lp, 1e-6)
      seq.push(next)
    }
    assert.isAbove(new Set(out.tokens).size, 1)
    const stopped = Q.generate(config, weights, prompt, {
      temperature: 0,
      maxNewTokens: 10,
      stopTokens: [out.tokens[2]]
    })
    assert.deepStrictEqual(stopped.tokens, out.tokens.slice(0, out.tokens.indexOf(out.tokens[2]) + 1))
    assert.strictEqual(stopped.finishReason, "stop")
  })

  sync("extendBatch gives each sequence's last logits exactly as separate extend calls", () => {
    const config = tiny(false)
    const weights = weightsFor(config, "f32", 4)
    const V = config.vocab_size
    const seqs = [tokensOf(91, 6, V), tokensOf(92, 2, V), tokensOf(93, 9, V)]
    const alone = seqs.map(() => Q.makeKvCache(config, 12))
    const together = seqs.map(() => Q.makeKvCache(config, 12))
    // A prefill of different lengths, then one token each.
    const want = seqs.map((t, i) => Q.extend(config, weights, alone[i], t.slice(0, -1)).subarray((t.length - 2) * V))
    const got = Q.extendBatch(config, weights, together, seqs.map((t) => t.slice(0, -1)))
    seqs.forEach((_, i) => assert.strictEqual(maxAbsDiff(got[i], want[i]), 0))
    const want2 = seqs.map((t, i) => Q.extend(config, weights, alone[i], [t[t.length - 1]]))
    const got2 = Q.extendBatch(config, weights, together, seqs.map((t) => [t[t.length - 1]]))
    seqs.forEach((_, i) => {
      assert.strictEqual(maxAbsDiff(got2[i], want2[i]), 0)
      assert.strictEqual(together[i].length, seqs[i].length)
    })
    assert.throws(() => Q.extendBatch(config, weights, [together[0], together[0]], [[1], [2]]), /distinct cache/)
    assert.throws(() => Q.extendBatch(config, weights, [together[1]], [[]]), /no new tokens/)
  })

  sync("generateBatch gives exactly what separate generate calls give", () => {
    const config = tiny(true)
    const weights = weightsFor(config, "f32", 6)
    const V = config.vocab_size
    const greedy = Q.generate(config, weights, tokensOf(101, 3, V), { temperature: 0, maxNewTokens: 12 })
    const requests: Array<Q.GenerateRequest> = [
      { prompt: tokensOf(101, 3, V), options: { temperature: 0, maxNewTokens: 12, stopTokens: [greedy.tokens[4]] } },
      { prompt: tokensOf(102, 7, V), options: { temperature: 1.3, maxNewTokens: 10, seed: 5, sequence: 1 } },
      { prompt: tokensOf(103, 1, V), options: { temperature: 0.9, maxNewTokens: 0, seed: 5, sequence: 2 } },
      { prompt: tokensOf(104, 5, V), options: { temperature: 1, maxNewTokens: 15, seed: 9, topK: 5, topP: 0.9 } },
      { prompt: tokensOf(105, 4, V), options: { temperature: 0.7, maxNewTokens: 6, seed: 1, repetitionPenalty: 1.3 } }
    ]
    const batched = Q.generateBatch(config, weights, requests)
    assert.strictEqual(batched[0].finishReason, "stop")
    assert.strictEqual(batched[2].tokens.length, 0)
    requests.forEach((r, i) => assert.deepStrictEqual(batched[i], Q.generate(config, weights, r.prompt, r.options)))
  })

  sync("seeded sampling: same seed and sequence ⇒ same tokens; filters behave as specified", () => {
    const config = tiny(false)
    const weights = weightsFor(config, "f32", 5)
    const prompt = tokensOf(71, 3, 23)
    const opts = { temperature: 1.5, maxNewTokens: 24, seed: 1234, sequence: 2 }
    const one = Q.generate(config, weights, prompt, opts)
    assert.deepStrictEqual(Q.generate(config, weights, prompt, opts).tokens, one.tokens)
    assert.notDeepEqual(Q.generate(config, weights, prompt, { ...opts, seed: 1235 }).tokens, one.tokens)
    assert.notDeepEqual(Q.generate(config, weights, prompt, { ...opts, sequence: 3 }).tokens, one.tokens)
    for (const s of one.sampledLogprobs) assert.isTrue(s <= 0)

    const logits = [0.1, 2, -1, 2, 0.5, -3]
    // Inverse CDF in vocabulary order: a grid of uniforms reproduces the probabilities.
    const probs = logits.map((z) => Math.exp(z))
    const total = probs.reduce((x, y) => x + y)
    const counts = new Array(6).fill(0)
    const M = 10000
    for (let i = 0; i < M; i++) counts[Q.sampleToken(logits, [], { temperature: 1 }, (i + 0.5) / M).token]++
    counts.forEach((c, v) => assert.closeTo(c, (M * probs[v]) / total, 1))
    // Greedy takes the lowest index on ties; top-k 1, a tiny top-p and min-p 1 reduce to greedy for any u.
    for (const u of [0, 0.3, 0.999]) {
      assert.strictEqual(Q.sampleToken(logits, [], { temperature: 0 }, u).token, 1)
      assert.strictEqual(Q.sampleToken(logits, [], { temperature: 1, topP: 1e-3 }, u).token, 1)
      assert.include([1, 3], Q.sampleToken(logits, [], { temperature: 1, topK: 1 }, u).token)
      assert.include([1, 3], Q.sampleToken(logits, [], { temperature: 1, minP: 1 }, u).token)
    }
    // top-k 3 keeps {1, 3, 4} (values 2, 2, 0.5); u near 1 picks the last survivor in vocabulary order.
    const k2 = Q.sampleToken(logits, [], { temperature: 1, topK: 3 }, 0.999)
    assert.strictEqual(k2.token, 4)
    assert.closeTo(k2.logprob, logits[4] - Math.log(total), 1e-12)
    assert.closeTo(k2.sampledLogprob, logits[4] - Math.log(probs[1] + probs[3] + probs[4]), 1e-12)
    // top-p: p1 = p3 ≈ 0.41 (together ≈ 0.82), p4 ≈ 0.09: 0.8 keeps {1, 3}, 0.85 also needs 4.
    const keptByTopP = new Set<number>()
    for (let i = 0; i < 200; i++) {
      keptByTopP.add(Q.sampleToken(logits, [], { temperature: 1, topP: 0.8 }, i / 200).token)
    }
    assert.deepStrictEqual([...keptByTopP].sort(), [1, 3])
    keptByTopP.clear()
    for (let i = 0; i < 200; i++) {
      keptByTopP.add(Q.sampleToken(logits, [], { temperature: 1, topP: 0.85 }, i / 200).token)
    }
    assert.deepStrictEqual([...keptByTopP].sort(), [1, 3, 4])
    // Repetition penalty 2 on tokens 1 and 2 (positive divided, negative multiplied): token 3 becomes greedy.
    const pen = Q.sampleToken(logits, [1, 2, 1], { temperature: 0, repetitionPenalty: 2 }, 0)
    assert.strictEqual(pen.token, 3)
    const penSampled = Q.sampleToken(logits, [1, 2], { temperature: 1, repetitionPenalty: 2 }, 0.999)
    const pz = [0.1, 1, -2, 2, 0.5, -3]
    const pt = pz.reduce((x, z) => x + Math.exp(z), 0)
    assert.closeTo(penSampled.sampledLogprob, pz[penSampled.token] - Math.log(pt), 1e-12)
  })

  sync("logprobs and entropy follow TRL's temperature convention", () => {
    const V = 5
    const logits = [1, 2, 3, 4, 5, 0, 0, 0, 0, 0]
    const { logprobs, entropy } = Q.tokenLogprobs(logits, V, [4, 2], 0.5)
    const z = [2, 4, 6, 8, 10]
    const lse = Math.log(z.reduce((a, b) => a + Math.exp(b), 0))
    assert.closeTo(logprobs[0], 10 - lse, 1e-12)
    assert.closeTo(logprobs[1], -Math.log(5), 1e-12)
    assert.closeTo(entropy[1], Math.log(5), 1e-12)
    const p = z.map((x) => Math.exp(x - lse))
    assert.closeTo(entropy[0], -p.reduce((a, pi) => a + pi * Math.log(pi), 0), 1e-12)
  })

  sync("clipping and AdamW follow torch; a few steps reduce the next-token loss", () => {
    const config = tiny(true)
    const weights = Q.randomWeights(config, { seed: 9, std: 0.1 })
    // Grad clipping: norm 5 clipped to 1.
    const g: Q.Weights = { a: new Float32Array([3, 0]), b: new Float32Array([4]) }
    const clip = Q.clipGradNorm(g, 1)
    assert.closeTo(clip.totalNorm, 5, 1e-12)
    assert.closeTo(g.a[0], 0.6, 1e-6)
    assert.closeTo(g.b[0], 0.8, 1e-6)
    // Decay mask: transformers' default excludes every norm weight.
    assert.isTrue(ModelConfig.decays("model.embed_tokens.weight"))
    assert.isTrue(ModelConfig.decays("model.layers.0.mlp.down_proj.weight"))
    for (
      const n of [
        "model.norm.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.layers.1.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight"
      ]
    ) {
      assert.isFalse(ModelConfig.decays(n), n)
    }
    // First step: m̂ = g, v̂ = g², so p ← p·(1 − lr·wd) − lr·g/(|g| + eps).
    const p: Q.Weights = { "x.weight": new Float32Array([1, -2]), "model.norm.weight": new Float32Array([1]) }
    const grads: Q.Weights = { "x.weight": new Float32Array([0.5, -0.25]), "model.norm.weight": new Float32Array([2]) }
    const st = Q.makeAdamWState(p)
    Q.adamWStep(p, grads, st, { lr: 0.1, weightDecay: 0.5 })
    assert.closeTo(p["x.weight"][0], 1 * 0.95 - 0.1, 1e-6)
    assert.closeTo(p["x.weight"][1], -2 * 0.95 + 0.1, 1e-6)
    assert.closeTo(p["model.norm.weight"][0], 1 - 0.1, 1e-6)
    // Two more steps agree with the fused-kernel twin in Reference.ts (same decay mask, bias corrections 1 − βᵗ).
    const twinP = Float64Array.from(p["x.weight"])
    const twinM = Float64Array.from(st.m["x.weight"])
    const twinV = Float64Array.from(st.v["x.weight"])
    for (const gs of [[0.3, 0.1], [-0.2, 0.4]]) {
      Q.adamWStep(p, { "x.weight": new Float32Array(gs), "model.norm.weight": new Float32Array([0]) }, st, {
        lr: 0.1,
        weightDecay: 0.5
      })
      const t = st.step
      Reference.adamw(twinP, gs, twinM, twinV, () => true, {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weightDecay: 0.5,
        biasCorrection1: 1 - 0.9 ** t,
        biasCorrection2: 1 - 0.999 ** t
      }, 1)
    }
    assert.isBelow(maxAbsDiff(p["x.weight"], twinP), 1e-6)
    // Tiny next-token task: the sequence 0,1,…,7 repeated, 8 steps of AdamW with clipping.
    const T = 8
    const tokens = Array.from({ length: 2 * T }, (_, i) => i % 8)
    const batch: Q.Batch = { tokens, batch: 2, seqLen: T }
    const state = Q.makeAdamWState(weights)
    const losses: Array<number> = []
    for (let step = 0; step < 8; step++) {
      const fwd = Q.forward(config, weights, batch)
      const targets = Q.nextTokenTargets(fwd)
      const count = targets.filter((t) => t >= 0).length
      const { grads, loss } = Q.backward(config, weights, fwd, targets, new Array(2 * T).fill(-1 / count), 1)
      losses.push(loss)
      Q.clipGradNorm(grads, 1)
      Q.adamWStep(weights, grads, state, { lr: 0.02, weightDecay: 0.01 })
    }
    assert.isBelow(losses[7], losses[0] * 0.7, losses.join(", "))
  })
})
