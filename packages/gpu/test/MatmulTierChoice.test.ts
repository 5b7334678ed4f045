import { assert, describe, it } from "@effect/vitest"
import * as Matmul from "../src/Matmul.js"
import * as Ops from "../src/ops/Ops.js"
import * as Arena from "../src/runtime/Arena.js"
import { parseSubgroupMatrixConfigs } from "../src/runtime/Gpu.js"
import * as Program from "../src/runtime/Program.js"

// Tier selection is pure: it reads the adapter summary. The adapters below are described, not run.
const nvidia = {
  features: ["chromium-experimental-subgroup-matrix", "shader-f16", "subgroups", "timestamp-query"],
  subgroupMatrix: [
    { componentType: "i8", resultComponentType: "i32", M: 16, N: 16, K: 32 },
    { componentType: "f16", resultComponentType: "f16", M: 16, N: 16, K: 16 },
    { componentType: "f16", resultComponentType: "f32", M: 16, N: 16, K: 16 }
  ],
  subgroupMaxSize: 32
}
const lavapipe = { features: ["shader-f16", "subgroups", "timestamp-query"], subgroupMatrix: [], subgroupMaxSize: 8 }

describe("Matmul.chooseTier", () => {
  it("picks subgroup matrices with the adapter's f16 → f32 configuration and subgroup size", () => {
    const c = Matmul.chooseTier(nvidia, "f16")
    assert.strictEqual(c.tier, "subgroupMatrix")
    assert.deepStrictEqual(c.subgroupMatrix, { m: 16, n: 16, k: 16, subgroupSize: 32 })
  })

  it("falls back to shader-f16 without the feature, without an f16 → f32 config or without subgroups", () => {
    assert.strictEqual(Matmul.chooseTier(lavapipe, "f16").tier, "tiled128h")
    const noF32Result = { ...nvidia, subgroupMatrix: nvidia.subgroupMatrix.slice(0, 2) }
    assert.strictEqual(Matmul.chooseTier(noF32Result, "f16").tier, "tiled128h")
    const noSubgroups = { ...nvidia, features: nvidia.features.filter((f) => f !== "subgroups") }
    assert.strictEqual(Matmul.chooseTier(noSubgroups, "f16").tier, "tiled128h")
    const configsButNoFeature = { ...lavapipe, subgroupMatrix: nvidia.subgroupMatrix, subgroupMaxSize: 32 }
    assert.strictEqual(Matmul.chooseTier(configsButNoFeature, "f16").tier, "tiled128h")
  })

  it("uses packed-pair loads without shader-f16, and the vec4 f32 tier for f32 operands", () => {
    assert.strictEqual(
      Matmul.chooseTier({ features: [], subgroupMatrix: [], subgroupMaxSize: 0 }, "f16").tier,
      "tiled128"
    )
    assert.strictEqual(Matmul.chooseTier(nvidia, "f32").tier, "tiled128v4")
  })

  it("reads Dawn's config objects through their getters", () => {
    class Config {
      get componentType() {
        return "f16"
      }
      get resultComponentType() {
        return "f32"
      }
      get M() {
        return 8
      }
      get N() {
        return 8
      }
      get K() {
        return 8
      }
    }
    assert.strictEqual(JSON.stringify(new Config()), "{}")
    assert.deepStrictEqual(parseSubgroupMatrixConfigs([new Config()]), [
      { componentType: "f16", resultComponentType: "f32", M: 8, N: 8, K: 8 }
    ])
  })

  it("lowers the chosen tier: subgroup-matrix WGSL for f16 operands, the shader-f16 kernel for an f32 one", () => {
    const plan = Arena.plan({
      ah: { shape: [40, 24], dtype: "f16" },
      bh: { shape: [24, 36], dtype: "f16" },
      a: { shape: [40, 24] },
      c: { shape: [40, 36] }
    })
    const t = (n: string) => Arena.tensorOf(plan, n)
    const choice = Matmul.chooseTier(nvidia, "f16")
    const [sm] = Program.plan({ plan }, [
      Ops.matmul({ a: t("ah"), b: t("bh"), c: t("c"), m: 40, n: 36, k: 24, ...choice })
    ])
    assert.strictEqual(sm.label, "matmul_NN_sgmat16x16x16")
    assert.deepStrictEqual(sm.groups, [2, 2, 1]) // 32×32 tiles over 40×36
    assert.deepStrictEqual(sm.features, ["chromium-experimental-subgroup-matrix", "shader-f16", "subgroups"])
    assert.include(sm.code, "enable chromium_experimental_subgroup_matrix;")
    assert.include(sm.code, "@workgroup_size(32)")
    assert.include(sm.code, "subgroup_matrix_left<f16, 16, 16>")
    const [mixed] = Program.plan({ plan }, [
      Ops.matmul({ a: t("a"), b: t("bh"), c: t("c"), m: 40, n: 36, k: 24, ...choice })
    ])
    assert.strictEqual(mixed.label, "matmul_NN_128hv4_f16b")
  })
})
