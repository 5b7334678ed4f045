import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Ops from "../src/ops/Ops.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { maxRelError, randomize, runBoth, seeded } from "./helpers.js"

// Each kernel on the device against its CPU twin, at tiny shapes that straddle workgroup and tile edges.
const close = (h: { gpu: Arena.HostArena; cpu: Arena.HostArena }, names: ReadonlyArray<string>, tol = 1e-5) => {
  for (const name of names) {
    const e = maxRelError(h.gpu.f32(name), h.cpu.f32(name))
    assert.isBelow(e, tol, `${name}: max relative error ${e}`)
  }
}

/**
 * Attention forward and backward on the device and the twin for each variant (packed by `positions` or not,
 * a given kernel or the default), from shared q, k, v and dO; variant i writes o{i}, lse{i}, dq{i}, dk{i}, dv{i}.
 */
const attentionVariants = (
  shape: Ops.AttentionShape,
  positions: ReadonlyArray<number>,
  seed: number,
  variants: ReadonlyArray<{ readonly packed: boolean; readonly kernel?: "tiled" | "rows" }>
) => {
  const { batch, headDim: D, heads: H, kvHeads: KV, seq } = shape
  const n = batch * seq
  const perVariant = { o: [n, H, D], lse: [n, H], dq: [n, H, D], dk: [n, KV, D], dv: [n, KV, D] }
  const names = variants.flatMap((_, i) => Object.keys(perVariant).map((name) => `${name}${i}`))
  const { h, t } = seeded({
    q: { shape: [n, H, D] },
    k: { shape: [n, KV, D] },
    v: { shape: [n, KV, D] },
    dO: { shape: [n, H, D] },
    delta: { shape: [n, H] },
    pos: { shape: [n], dtype: "u32" },
    ...Object.fromEntries(
      variants.flatMap((_, i) => Object.entries(perVariant).map(([name, dims]) => [`${name}${i}`, { shape: dims }]))
    )
  }, seed)
  h.u32("pos").set(positions)
  const ops = variants.flatMap((variant, i) => {
    const inputs = {
      q: t("q"),
      k: t("k"),
      v: t("v"),
      shape,
      ...(variant.packed ? { positions: t("pos") } : {}),
      ...(variant.kernel === undefined ? {} : { kernel: variant.kernel })
    }
    const out = { o: t(`o${i}`), lse: t(`lse${i}`) }
    return [
      Ops.attention({ ...inputs, ...out }),
      Ops.attentionBackward({
        ...inputs,
        ...out,
        dO: t("dO"),
        delta: t("delta"),
        dq: t(`dq${i}`),
        dk: t(`dk${i}`),
        dv: t(`dv${i}`)
      })
    ]
  })
  return Effect.map(runBoth(h, ops), (r) => ({ ...r, ops, names }))
}

layer(Gpu.layer())("kernels match their CPU twins on the device", (it) => {
  it.scoped("matmul NN / NT / TN with bias, scale, accumulate and offsets", () =>
    Effect.gen(function*() {
      const { h, t } = seeded({
        a: { shape: [70 * 20 + 7] },
        b: { shape: [20 * 66 + 3] },
        bias: { shape: [66] },
        c1: { shape: [70, 66] },
        c2: { shape: [70, 66] },
        c3: { shape: [70 * 66 + 5] }
      }, 1)
      const ops = [
        Ops.matmul({ a: t("a"), b: t("b"), c: t("c1"), m: 70, n: 66, k: 20, bias: t("bias"), alpha: 0.5, beta: 1 }),
        Ops.matmul({ a: t("a"), b: t("b"), c: t("c2"), m: 70, n: 66, k: 20, transB: true, aOffset: 7, bOffset: 3 }),
        Ops.matmul({ a: t("a"), b: t("b"), c: t("c3"), m: 70, n: 66, k: 20, transA: true, cOffset: 5, beta: -1 })
      ]
      close(yield* runBoth(h, ops), ["c1", "c2", "c3"])
    }))

  it.scoped("embedding forward and deterministic backward with repeated ids", () =>
    Effect.gen(function*() {
      const { h, t } = seeded({
        table: { shape: [11, 70] },
        ids: { shape: [130], dtype: "u32" },
        out: { shape: [130, 70] },
        dTable: { shape: [11, 70] },
        dOut: { shape: [130, 70] }
      }, 2)
      h.u32("ids").set(Uint32Array.from({ length: 130 }, (_, i) => (i * 7) % 9 + (i === 5 ? 99 : 0)))
      const ops = [
        Ops.embedding({ table: t("table"), ids: t("ids"), out: t("out") }),
        Ops.embeddingBackward({ ids: t("ids"), dOut: t("dOut"), dTable: t("dTable") })
      ]
      const r = yield* runBoth(h, ops)
      close(r, ["out", "dTable"])
      assert.strictEqual(r.gpu.f32("out")[5 * 70], 0) // id 99 is outside the table
    }))

  it.scoped("rmsNorm forward and backward, whole rows and per head", () =>
    Effect.gen(function*() {
      const { h, t } = seeded({
        x: { shape: [5, 3, 8] },
        w: { shape: [24] },
        wh: { shape: [8] },
        y: { shape: [5, 24] },
        yh: { shape: [15, 8] },
        r: { shape: [5] },
        rh: { shape: [15] },
        dy: { shape: [5, 24] },
        dx: { shape: [5, 24] },
        dxh: { shape: [15, 8] },
        dw: { shape: [24] },
        dwh: { shape: [8] },
        // Many rows: the weight gradient is reduced in several row blocks.
        xl: { shape: [200, 8] },
        yl: { shape: [200, 8] },
        rl: { shape: [200] },
        dyl: { shape: [200, 8] },
        dxl: { shape: [200, 8] },
        dwl: { shape: [8] }
      }, 3)
      const ops = [
        Ops.rmsNorm({ x: t("x"), weight: t("w"), y: t("y"), rstd: t("r"), eps: 1e-6 }),
        Ops.rmsNorm({ x: t("x"), weight: t("wh"), y: t("yh"), rstd: t("rh"), eps: 1e-6 }),
        Ops.rmsNormBackward({
          x: t("x"),
          weight: t("w"),
          rstd: t("r"),
          dy: t("dy"),
          dx: t("dx"),
          dWeight: t("dw"),
          accumulate: true
        }),
        Ops.rmsNormBackward({
          x: t("x"),
          weight: t("wh"),
          rstd: t("rh"),
          dy: t("dy"),
          dx: t("dxh"),
          dWeight: t("dwh")
        }),
        Ops.rmsNorm({ x: t("xl"), weight: t("wh"), y: t("yl"), rstd: t("rl"), eps: 1e-6 }),
        Ops.rmsNormBackward({
          x: t("xl"),
          weight: t("wh"),
          rstd: t("rl"),
          dy: t("dyl"),
          dx: t("dxl"),
          dWeight: t("dwl")
        })
      ]
      close(yield* runBoth(h, ops), ["y", "yh", "r", "rh", "dx", "dxh", "dw", "dwh", "yl", "dxl", "dwl"], 1e-4)
    }))

  it.scoped("rope forward and inverse in place", () =>
    Effect.gen(function*() {
      const { h, t } = seeded({
        q: { shape: [6, 2, 16] },
        k: { shape: [6, 1, 16] },
        pos: { shape: [6], dtype: "u32" }
      }, 4)
      h.u32("pos").set([0, 1, 2, 9, 4, 33])
      const ops = [
        Ops.rope({ x: t("q"), positions: t("pos"), heads: 2, headDim: 16, theta: 10000 }),
        Ops.rope({ x: t("k"), positions: t("pos"), heads: 1, headDim: 16, theta: 1e6, inverse: true })
      ]
      close(yield* runBoth(h, ops), ["q", "k"], 1e-5)
    }))

  it.scoped("causal GQA attention forward (lse saved) and backward, plain and packed", () =>
    Effect.gen(function*() {
      const shape = { batch: 2, seq: 5, heads: 4, kvHeads: 2, headDim: 8, scale: 1 / Math.sqrt(8) }
      // Row 0 packs 3+2 tokens, row 1 packs 4+1.
      const pos = [0, 1, 2, 0, 1, 0, 1, 2, 3, 0]
      const r = yield* attentionVariants(shape, pos, 5, [{ packed: true }, { packed: false, kernel: "rows" }])
      close(r, r.names, 1e-4)
      assert.isAbove(maxRelError(r.gpu.f32("o0"), r.gpu.f32("o1")), 1e-3) // packing changed the result
    }))

  it.scoped("tiled attention forward and backward across several tiles, packed rows, against the row kernels", () =>
    Effect.gen(function*() {
      const shape = { batch: 2, seq: 37, heads: 4, kvHeads: 2, headDim: 8, scale: 0.3 }
      // Row 0 packs sequences of 20 and 17 tokens (the second starts inside a tile); row 1 is one sequence.
      const pos = Array.from({ length: 74 }, (_, i) => (i < 20 ? i : i < 37 ? i - 20 : i - 37))
      const r = yield* attentionVariants(shape, pos, 9, [{ packed: true }, { packed: true, kernel: "rows" }])
      assert.strictEqual(r.ops[0].kind === "attention" && r.ops[0].kernel, "tiled")
      close(r, r.names, 1e-4)
    }))

  it.scoped("swiglu, chunked token logprobs (+entropy, temperature) and masked mean", () =>
    Effect.gen(function*() {
      const { h, t } = seeded({
        g: { shape: [300] },
        u: { shape: [300] },
        s: { shape: [300] },
        dO: { shape: [300] },
        dg: { shape: [300] },
        du: { shape: [300] },
        logits: { shape: [3, 301] },
        targets: { shape: [6], dtype: "u32" },
        logp: { shape: [6] },
        ent: { shape: [6] },
        lse: { shape: [6] },
        dlogp: { shape: [6] },
        dent: { shape: [6] },
        mask: { shape: [6] },
        out: { shape: [4] },
        dx: { shape: [6] }
      }, 6)
      h.u32("targets").set([0, 5, 300, 17, 2, 299])
      h.f32("mask").set([1, 0, 1, 1, 0.5, 0])
      const lp = {
        targets: t("targets"),
        lse: t("lse"),
        entropy: t("ent"),
        rows: 3,
        vocab: 301,
        rowOffset: 3,
        temperature: 0.8
      }
      const ops = [
        Ops.swiglu({ gate: t("g"), up: t("u"), out: t("s") }),
        Ops.swigluBackward({ gate: t("g"), up: t("u"), dOut: t("dO"), dGate: t("dg"), dUp: t("du") }),
        Ops.tokenLogprobs({ ...lp, logits: t("logits"), logp: t("logp") }),
        Ops.maskedMean({
          x: t("logp"),
          mask: t("mask"),
          out: t("out"),
          outIndex: 1,
          scale: -1,
          dx: t("dx"),
          gradScale: 0.5
        }),
        Ops.maskedMean({ x: t("logp"), mask: t("mask"), out: t("out"), outIndex: 2, rows: 2, accumulate: true }),
        Ops.tokenLogprobsBackward({ ...lp, logits: t("logits"), dLogp: t("dlogp"), dEntropy: t("dent") })
      ]
      close(yield* runBoth(h, ops), ["s", "dg", "du", "logp", "ent", "lse", "out", "dx", "logits"], 1e-4)
    }))

  it.scoped("gradient norm, clipping and fused AdamW over sharded groups with a decay mask", () =>
    Effect.gen(function*() {
      // Shards of 4 KiB force the parameters across several buffers.
      const plan = Arena.plan(
        Arena.parameters({
          w1: { shape: [20, 30], decay: true },
          b1: { shape: [30] },
          w2: { shape: [700], decay: true }
        }),
        { maxShardBytes: 4096 }
      )
      assert.isAbove(plan.groups.get(Arena.PARAM)!.length, 1)
      const h = Arena.host(plan)
      randomize(h, 7)
      for (const name of ["w1", "b1", "w2"]) h.f32(`adam.v.${name}`).set(h.f32(`adam.v.${name}`).map(Math.abs))
      const { scalarWords } = yield* Effect.promise(() => import("../src/runtime/StepProgram.js"))
      h.f32(Arena.STEP_SCALARS).set(scalarWords({ lr: 0.01, step: 3, weightDecay: 0.1, maxGradNorm: 2 }))
      const r = yield* runBoth(h, [Ops.gradNorm, Ops.adamw])
      close(r, [Arena.STEP_RESULTS, "param.w1", "param.b1", "param.w2", "adam.m.w2", "adam.v.w1"], 1e-5)
      assert.isBelow(r.gpu.f32(Arena.STEP_RESULTS)[Arena.Result.clipScale], 1)
    }))
})
