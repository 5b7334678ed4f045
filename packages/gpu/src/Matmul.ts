/**
 * Tiled f32 matrix multiply, C[M,N] = A[M,K] · B[K,N] (row-major), on the GPU.
 *
 * Each 16×16 workgroup computes a 64×64 tile of C; each invocation accumulates a 4×4 register block while
 * 64×16 and 16×64 slices of A and B are staged in workgroup memory. Edges are zero-padded, so any M, N, K work.
 * The plain twin is `Reference.matmul`.
 *
 * @example
 * ```ts
 * const mm = yield* Matmul.make({ m: 64, n: 64, k: 64 })
 * const c = yield* mm.run(a, b) // Float32Array of 64·64
 * ```
 *
 * @since 0.0.0
 */
import { Effect } from "effect"
import type { MatmulTier, SubgroupMatrixShape } from "./ops/Ops.js"
import { Gpu } from "./runtime/Gpu.js"
import type { AdapterSummary, SubgroupMatrixConfig } from "./runtime/Gpu.js"
import type { GpuError } from "./runtime/GpuError.js"

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

/** Rows and columns of C computed by one workgroup, and the K slice staged per iteration. */
export const TILE = { m: 64, n: 64, k: 16 } as const

/** The WGSL source. */
export const wgsl = /* wgsl */ `
struct Dims { m: u32, n: u32, k: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;

const TM = ${TILE.m}u;
const TN = ${TILE.n}u;
const TK = ${TILE.k}u;
var<workgroup> As: array<f32, ${TILE.m * TILE.k}>; // [TK][TM]: transposed so a thread reads 4 consecutive rows
var<workgroup> Bs: array<f32, ${TILE.k * TILE.n}>; // [TK][TN]

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
  let tid = lid.y * 16u + lid.x;
  let row0 = wid.y * TM;
  let col0 = wid.x * TN;
  var acc: array<f32, 16>;
  for (var k0 = 0u; k0 < dims.k; k0 += TK) {
    for (var i = 0u; i < 4u; i++) {
      let idx = tid + i * 256u;
      let r = idx / TK;
      let kk = idx % TK;
      let gr = row0 + r;
      let gk = k0 + kk;
      var v = 0.0;
      if (gr < dims.m && gk < dims.k) { v = A[gr * dims.k + gk]; }
      As[kk * TM + r] = v;
      let bk = idx / TN;
      let bc = idx % TN;
      let gbk = k0 + bk;
      let gc = col0 + bc;
      var w = 0.0;
      if (gbk < dims.k && gc < dims.n) { w = B[gbk * dims.n + gc]; }
      Bs[bk * TN + bc] = w;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < TK; kk++) {
      let a = vec4f(As[kk * TM + lid.y * 4u], As[kk * TM + lid.y * 4u + 1u],
                    As[kk * TM + lid.y * 4u + 2u], As[kk * TM + lid.y * 4u + 3u]);
      let b = vec4f(Bs[kk * TN + lid.x * 4u], Bs[kk * TN + lid.x * 4u + 1u],
                    Bs[kk * TN + lid.x * 4u + 2u], Bs[kk * TN + lid.x * 4u + 3u]);
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i * 4u + j] = fma(a[i], b[j], acc[i * 4u + j]);
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let r = row0 + lid.y * 4u + i;
    for (var j = 0u; j < 4u; j++) {
      let c = col0 + lid.x * 4u + j;
      if (r < dims.m && c < dims.n) { C[r * dims.n + c] = acc[i * 4u + j]; }
    }
  }
}
`

/** Shape of one multiply. */
export interface MatmulShape {
  readonly m: number
  readonly n: number
  readonly k: number
}

/** A multiply of one shape with its buffers and bind group created once; `run` only uploads and dispatches. */
export interface Matmul {
  readonly shape: MatmulShape
  /** Uploads A and B, multiplies, and reads C back (checking the device). */
  readonly run: (a: Float32Array, b: Float32Array) => Effect.Effect<Float32Array, GpuError>
  /** Records the multiply into an existing pass, for benchmarks and step programs. */
  readonly encode: (pass: GPUComputePassEncoder) => void
  readonly buffers: { readonly a: GPUBuffer; readonly b: GPUBuffer; readonly c: GPUBuffer }
}

const checkShape = (shape: MatmulShape) => {
  for (const [name, v] of Object.entries(shape)) {
    if (!Number.isInteger(v) || v <= 0) throw new RangeError(`Matmul: ${name} must be a positive integer, got ${v}`)
  }
}

/** Plans a multiply of the given shape. Buffers are released with the scope. */
export const make = (shape: MatmulShape) =>
  Effect.gen(function*() {
    yield* Effect.try({ try: () => checkShape(shape), catch: (e) => e as RangeError }).pipe(Effect.orDie)
    const gpu = yield* Gpu
    const { device } = gpu
    const { k, m, n } = shape
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC
    const alloc = (label: string, bytes: number, usage: number) =>
      Effect.acquireRelease(gpu.createBuffer(label, bytes, usage), (b) => Effect.sync(() => b.destroy()))
    const a = yield* alloc("matmul.A", m * k * 4, storage)
    const b = yield* alloc("matmul.B", k * n * 4, storage)
    const c = yield* alloc("matmul.C", m * n * 4, storage)
    const dims = yield* alloc("matmul.dims", 16, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST)
    device.queue.writeBuffer(dims, 0, new Uint32Array([m, n, k, 0]))
    const pipeline = yield* gpu.pipeline("matmul_tiled_f32", wgsl)
    const bindGroup = device.createBindGroup({
      label: "matmul",
      layout: pipeline.getBindGroupLayout(0),
      entries: [a, b, c, dims].map((buffer, binding) => ({ binding, resource: { buffer } }))
    })
    const groups = [Math.ceil(n / TILE.n), Math.ceil(m / TILE.m)] as const
    const encode = (pass: GPUComputePassEncoder) => {
      pass.setPipeline(pipeline)
      pass.setBindGroup(0, bindGroup)
      pass.dispatchWorkgroups(groups[0], groups[1])
    }
    const run = Effect.fn("Matmul.run")(function*(x: Float32Array, y: Float32Array) {
      if (x.length !== m * k || y.length !== k * n) {
        return yield* Effect.dieMessage(
          `Matmul.run: expected A of ${m}×${k}=${m * k} and B of ${k}×${n}=${k * n} floats, ` +
            `got ${x.length} and ${y.length}`
        )
      }
      device.queue.writeBuffer(a, 0, x)
      device.queue.writeBuffer(b, 0, y)
      const encoder = device.createCommandEncoder({ label: "matmul" })
      const pass = encoder.beginComputePass({ label: "matmul" })
      encode(pass)
      pass.end()
      device.queue.submit([encoder.finish()])
      const out = yield* gpu.read(c, m * n * 4)
      return new Float32Array(out)
    })
    return { shape, run, encode, buffers: { a, b, c } } satisfies Matmul
  })
