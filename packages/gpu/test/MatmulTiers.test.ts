import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Matmul from "../src/Matmul.js"
import * as Ops from "../src/ops/Ops.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import * as Program from "../src/runtime/Program.js"
import { maxRelError, runBoth, seeded } from "./helpers.js"

// The faster matmul tiers against the CPU twin. Each tier/form is its own pipeline and lavapipe's first
// dispatch of one costs 5-20 s of LLVM time, so a covering subset runs: every load path of the shared
// generator (scalar/vec4 × A plain/transposed × B plain/transposed) through the 128 tile, and the vec4
// fallback on unaligned shapes. The 64-tile vec4 tier is the same generator with other constants (bench only).
layer(Gpu.layer())("matmul tiers match the CPU twin", (it) => {
  it.scoped("tiled128 NT, tiled128v4 NN/TN/NT with epilogues, on ragged and aligned shapes", () =>
    Effect.gen(function*() {
      const { h, plan, t } = seeded({
        a: { shape: [132 * 24 + 4] },
        b: { shape: [24 * 140 + 8] },
        bias: { shape: [140] },
        c1: { shape: [132, 140] },
        c2: { shape: [132, 140] },
        c3: { shape: [132, 140] },
        c4: { shape: [132, 140] },
        c5: { shape: [132, 140] },
        c6: { shape: [7, 9] }
      }, 11)
      const mm = { a: t("a"), b: t("b"), m: 132, n: 140, k: 24 }
      const ops = [
        Ops.matmul({ ...mm, c: t("c1"), tier: "tiled128v4", bias: t("bias"), aOffset: 4 }),
        Ops.matmul({ ...mm, c: t("c2"), tier: "tiled128v4", transB: true, bOffset: 8, beta: 1 }),
        Ops.matmul({ ...mm, c: t("c3"), tier: "tiled128v4", transA: true, alpha: 2 }),
        Ops.matmul({ ...mm, c: t("c4"), tier: "tiled128", transB: true, beta: 0.5 }),
        Ops.matmul({ ...mm, c: t("c5"), tier: "tiled128", transA: true }),
        // K = 5 is not a multiple of 4: falls back to the scalar 64 tile (same pipeline as no tier).
        Ops.matmul({ a: t("a"), b: t("b"), c: t("c6"), m: 7, n: 9, k: 5, tier: "tiled64v4", aOffset: 1 })
      ]
      const labels = Program.plan({ plan }, ops).map((d) => d.label)
      assert.deepStrictEqual(labels, [
        "matmul_NN_bias_128v4",
        "matmul_NT_128v4",
        "matmul_TN_128v4",
        "matmul_NT_128",
        "matmul_TN_128",
        "matmul_NN_64"
      ])
      const r = yield* runBoth(h, ops)
      for (const name of ["c1", "c2", "c3", "c4", "c5", "c6"]) {
        const e = maxRelError(r.gpu.f32(name), r.cpu.f32(name))
        assert.isBelow(e, 1e-5, `${name}: ${e}`)
      }
    }))

  it.scoped("f16-stored operands: cast both ways, then f16 × f32 and f32 × f16ᵀ matmuls with f32 accumulation", () =>
    Effect.gen(function*() {
      const { h, plan, t } = seeded({
        x: { shape: [70, 32] },
        w: { shape: [40, 32] },
        xh: { shape: [70, 32], dtype: "f16" },
        wh: { shape: [40, 32], dtype: "f16" },
        back: { shape: [40, 32] },
        y1: { shape: [70, 40] },
        y2: { shape: [32, 32] }
      }, 12)
      const ops = [
        Ops.cast({ x: t("x"), y: t("xh") }),
        Ops.cast({ x: t("w"), y: t("wh") }),
        Ops.cast({ x: t("wh"), y: t("back") }),
        // y1 = x_f16 · w_f16ᵀ (the forward of a linear layer with f16 weight copies), 64 tile.
        Ops.matmul({ a: t("xh"), b: t("wh"), c: t("y1"), m: 70, n: 40, k: 32, transB: true }),
        // y2 = w_f32ᵀ · x_f16[0:40] (a weight gradient form), 128 tile with vec4 loads for the f32 side.
        Ops.matmul({ a: t("w"), b: t("xh"), c: t("y2"), m: 32, n: 32, k: 40, transA: true, tier: "tiled128v4" })
      ]
      const labels = Program.plan({ plan }, ops).map((d) => d.label)
      assert.deepStrictEqual(labels.slice(3), ["matmul_NT_64_f16a_f16b", "matmul_TN_128v4_f16b"])
      const r = yield* runBoth(h, ops)
      assert.deepStrictEqual(Array.from(r.gpu.f16("wh")), Array.from(r.cpu.f16("wh"))) // round to nearest even
      for (const name of ["back", "y1", "y2"]) {
        const e = maxRelError(r.gpu.f32(name), r.cpu.f32(name))
        assert.isBelow(e, 1e-5, `${name}: ${e}`)
      }
      // f16 storage loses precision against the f32 product, by about 2^-11 relative.
      const exact = Arena.host(plan, h.buffers.map((b) => b.slice(0)))
      const f32Product = maxRelError(r.gpu.f32("back"), exact.f32("w"))
      assert.isAbove(f32Product, 0)
      assert.isBelow(f32Product, 1e-3)
    }))
})

// The shader-f16 tier: f16 operands read as vec4<f16> and staged as f16 in workgroup memory, f32 accumulation.
// The twin decodes the same f16 bits (HalfFloat), so the only difference is the f32 summation order.
layer(Gpu.layer())("the shader-f16 matmul tier matches the CPU twin", (it) => {
  it.scoped("f32 × f16ᵀ (a linear layer on f16 weights), f16 × f16 NN and TN, ragged edges", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      assert.isTrue(gpu.hasFeature("shader-f16"), "lavapipe and every GPU this tier targets offer shader-f16")
      const { h, plan, t } = seeded({
        x: { shape: [70, 40] },
        w: { shape: [36, 40] },
        u: { shape: [40, 36] },
        wh: { shape: [36, 40], dtype: "f16" },
        xh: { shape: [70, 40], dtype: "f16" },
        uh: { shape: [40, 36], dtype: "f16" },
        bias: { shape: [36] },
        y1: { shape: [70, 36] },
        y2: { shape: [70, 36] },
        y3: { shape: [36, 36] },
        y4: { shape: [70, 36] }
      }, 21)
      const ops = [
        Ops.cast({ x: t("w"), y: t("wh") }),
        Ops.cast({ x: t("x"), y: t("xh") }),
        Ops.cast({ x: t("u"), y: t("uh") }),
        Ops.matmul({
          a: t("x"),
          b: t("wh"),
          c: t("y1"),
          m: 70,
          n: 36,
          k: 40,
          transB: true,
          bias: t("bias"),
          tier: "tiled128h"
        }),
        Ops.matmul({ a: t("xh"), b: t("uh"), c: t("y2"), m: 70, n: 36, k: 40, beta: 1, tier: "tiled128h" }),
        // y3 = uhᵀ · uh[0:40]: the weight-gradient (TN) form with both operands f16.
        Ops.matmul({
          a: t("uh"),
          b: t("uh"),
          c: t("y3"),
          m: 36,
          n: 36,
          k: 40,
          transA: true,
          alpha: 0.5,
          tier: "tiled128h"
        }),
        // f16 partial sums over each K step of 16 (half an ulp of ~2^-9 per fma at sums near 4, 16 fmas): the twin
        // sums exactly, so only ~1e-2 agreement (measured on lavapipe: 4.8e-3).
        Ops.matmul({ a: t("xh"), b: t("uh"), c: t("y4"), m: 70, n: 36, k: 40, tier: "tiled128hh" })
      ]
      const specs = Program.plan({ plan }, ops).slice(3)
      assert.deepStrictEqual(specs.map((d) => d.label), [
        "matmul_NT_bias_128hv4_f16b",
        "matmul_NN_128h_f16a_f16b",
        "matmul_TN_128h_f16a_f16b",
        "matmul_NN_128hh_f16a_f16b"
      ])
      for (const s of specs) assert.deepStrictEqual(s.features, ["shader-f16"])
      assert.include(specs[1].code, "enable f16;")
      const r = yield* runBoth(h, ops)
      for (const name of ["y1", "y2", "y3"]) {
        const e = maxRelError(r.gpu.f32(name), r.cpu.f32(name))
        assert.isBelow(e, 1e-5, `${name}: ${e}`)
      }
      const e4 = maxRelError(r.gpu.f32("y4"), r.cpu.f32("y4"))
      assert.isAbove(e4, 0)
      assert.isBelow(e4, 2e-2, `y4: ${e4}`)
    }))
})

// The subgroup-matrix tier runs only where the adapter has the feature (no adapter here has: lavapipe lacks it);
// elsewhere the same op must be refused with a typed error before Dawn sees the WGSL.
layer(Gpu.layer())("the subgroup-matrix matmul tier", (it) => {
  it.scoped("matches the CPU twin where the adapter offers it, else is refused with a typed error", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      const { h, plan, t } = seeded({
        a: { shape: [72, 48] },
        b: { shape: [40, 48] },
        ah: { shape: [72, 48], dtype: "f16" },
        bh: { shape: [40, 48], dtype: "f16" },
        c: { shape: [72, 40] }
      }, 31)
      const choice = Matmul.chooseTier(gpu.adapter, "f16")
      const offered = choice.tier === "subgroupMatrix"
      const config = offered ? choice : {
        tier: "subgroupMatrix" as const,
        subgroupMatrix: { m: 16, n: 16, k: 16, subgroupSize: 32 }
      }
      const ops = [
        Ops.cast({ x: t("a"), y: t("ah") }),
        Ops.cast({ x: t("b"), y: t("bh") }),
        Ops.matmul({ a: t("ah"), b: t("bh"), c: t("c"), m: 72, n: 40, k: 48, transB: true, alpha: 0.5, ...config })
      ]
      if (!offered) {
        const arena = yield* Arena.allocate(plan)
        const error = yield* Effect.flip(Program.compile(arena, ops))
        assert.strictEqual(error._tag, "GpuShaderError")
        assert.include(error.message, "chromium-experimental-subgroup-matrix")
        return
      }
      const r = yield* runBoth(h, ops)
      const e = maxRelError(r.gpu.f32("c"), r.cpu.f32("c"))
      assert.isBelow(e, 1e-4, `c: ${e}`)
    }))
})

layer(Gpu.layer({ optionalFeatures: [] }))("a device without shader-f16", (it) => {
  it.scoped("refuses the shader-f16 tier with a typed error naming the feature", () =>
    Effect.gen(function*() {
      const plan = Arena.plan({ x: { shape: [8, 8] }, wh: { shape: [8, 8], dtype: "f16" }, y: { shape: [8, 8] } })
      const arena = yield* Arena.allocate(plan)
      const t = (n: string) => arena.tensor(n)
      const op = Ops.matmul({ a: t("x"), b: t("wh"), c: t("y"), m: 8, n: 8, k: 8, transB: true, tier: "tiled128h" })
      const error = yield* Effect.flip(Program.compile(arena, [op]))
      assert.strictEqual(error._tag, "GpuShaderError")
      assert.include(error.message, "shader-f16")
    }))
})
