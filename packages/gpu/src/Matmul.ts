/**
 * The matmul tier for an adapter: which of `Ops.matmul`'s kernels (see `Ops.MatmulTier`) is fastest that the device
 * can run, for f16 or f32 operands. The kernels themselves are generated in the op files (ops/) and lowered in
 * internal/lower.ts; their CPU twin is `Reference.matmul`.
 *
 * @example
 * ```ts
 * const choice = Matmul.chooseTier(gpu.adapter, "f16") // { tier: "tiled128h", reason: "shader-f16 (…)" }
 * ```
 *
 * @since 0.0.0
 */
import type { MatmulTier, SubgroupMatrixShape } from "./ops/Ops.js"
import type { AdapterSummary, SubgroupMatrixConfig } from "./runtime/Gpu.js"

/** A tier for `Ops.matmul` (spread it into the op's options), and why it was picked. */
export interface TierChoice {
  readonly tier: MatmulTier
  readonly subgroupMatrix?: SubgroupMatrixShape
  readonly reason: string
}

/** What an adapter offers that tier selection looks at (a subset of `Gpu.AdapterSummary`). */
export type TierInputs = Pick<AdapterSummary, "features" | "subgroupMatrix" | "subgroupMaxSize">

/** The f16 × f16 → f32 subgroup-matrix configuration to use: the adapter's first (most preferred) such one. */
export const pickSubgroupMatrixConfig = (configs: ReadonlyArray<SubgroupMatrixConfig>) =>
  configs.find((c) =>
    c.componentType === "f16" && c.resultComponentType === "f32" && [c.M, c.N, c.K].every((d) => d >= 8 && d <= 32)
  )

/**
 * The fastest matmul tier the device can run for the given operand storage:
 * - f16 operands: "subgroupMatrix" when the device has chromium-experimental-subgroup-matrix (with shader-f16
 *   and subgroups) and an f16 × f16 → f32 configuration, and reports its subgroup size; else "tiled128h" with
 *   shader-f16; else "tiled128" (packed-pair f16 loads, core WGSL).
 * - f32 operands: "tiled128v4".
 * It does not micro-benchmark: on hardware, check bench/gpu's table before trusting the subgroup-matrix tier.
 *
 * @example
 * ```ts
 * const choice = Matmul.chooseTier(gpu.adapter, "f16")
 * const op = Ops.matmul({ a, b, c, m, n, k, ...choice })
 * ```
 */
export const chooseTier = (adapter: TierInputs, operands: "f16" | "f32"): TierChoice => {
  if (operands === "f32") return { tier: "tiled128v4", reason: "f32 operands: 128×128 tile with vec4 loads" }
  const has = (f: string) => adapter.features.includes(f)
  const config = pickSubgroupMatrixConfig(adapter.subgroupMatrix)
  if (has("chromium-experimental-subgroup-matrix") && has("shader-f16") && has("subgroups")) {
    if (config !== undefined && adapter.subgroupMaxSize > 0) {
      return {
        tier: "subgroupMatrix",
        subgroupMatrix: { m: config.M, n: config.N, k: config.K, subgroupSize: adapter.subgroupMaxSize },
        reason:
          `subgroup matrices ${config.M}×${config.N}×${config.K} f16→f32, ${adapter.subgroupMaxSize}-wide subgroups`
      }
    }
  }
  if (has("shader-f16")) {
    return {
      tier: "tiled128h",
      reason: config === undefined
        ? "shader-f16 (no f16→f32 subgroup-matrix configuration)"
        : "shader-f16 (subgroup matrices need the subgroups feature and a reported subgroup size)"
    }
  }
  return { tier: "tiled128", reason: "no shader-f16: f16 pairs unpacked from u32 words" }
}
