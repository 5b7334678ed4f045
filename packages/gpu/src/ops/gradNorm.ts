/**
 * Gradient norm: the global L2 norm of the gradient group and the clip scale (non-finite norms skip the step).
 *
 * @since 0.0.0
 */
import {
  type ArenaPlan,
  GRAD,
  type HostArena,
  normGroups,
  Result,
  Scalar,
  STEP_RESULTS,
  STEP_SCALARS,
  tensorOf
} from "../runtime/Arena.js"
import { type DispatchSpec, u } from "./internal/dispatch.js"
import { header } from "./Wgsl.js"

/** Global L2 norm of the "grad" group and the clip scale, into step.results. */
export interface GradNorm {
  readonly kind: "gradNorm"
}

/** The global gradient-norm and clipping op (over the plan's gradient groups). */
export const gradNorm: GradNorm = { kind: "gradNorm" }

// WGSL

/** Gradient norm stage 1: each workgroup sums squares of a strided slice of one shard into one partial. */
export const normPartialsShader = header("n: u32, partialOff: u32", [["G", "read"], ["Part", "read_write"]]) + `
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
    @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = wid.x * 256u + lid; i < p.n; i += nwg.x * 256u) { let g = G[i]; s = fma(g, g, s); }
  red[lid] = s;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { Part[p.partialOff + wid.x] = red[0]; }
}`

/**
 * Stage 2: one workgroup sums the partials; writes norm, clip scale = min(1, max/(norm+1e-6)) (max ≤ 0: 1),
 * and skipped = 1 when the norm is not finite (then AdamW leaves everything untouched). Finite-ness is tested
 * on the bits, since WGSL may assume NaN never occurs.
 */
export const normFinishShader = header("count: u32", [["Part", "read"], ["S", "read"], ["Res", "read_write"]]) + `
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.count; i += 256u) { s += Part[i]; }
  red[lid] = s;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let norm = sqrt(red[0]);
    let finite = (bitcast<u32>(norm) & 0x7f800000u) != 0x7f800000u;
    let mx = S[7];
    var clip = 1.0;
    if (mx > 0.0) { clip = min(1.0, mx / (norm + 1e-6)); }
    if (!finite) { clip = 0.0; }
    Res[1] = norm;
    Res[2] = clip;
    Res[3] = select(1.0, 0.0, finite);
  }
}`

// Lowering

/** The dispatches of a `gradNorm` op. */
export const lowerGradNorm = (plan: ArenaPlan): Array<DispatchSpec> => {
  const shards = plan.groups.get(GRAD) ?? []
  if (shards.length === 0) throw new RangeError("gradNorm: the plan has no \"grad\" group (use Arena.parameters)")
  const partials = tensorOf(plan, "opt.partials")
  const out: Array<DispatchSpec> = []
  let off = 0
  for (const shard of shards) {
    const n = plan.buffers[shard].bytes / 4
    const g = normGroups(n)
    out.push({
      label: "grad_norm_partials",
      code: normPartialsShader,
      bindings: [{ shard, bytes: plan.buffers[shard].bytes }, partials],
      params: [u(n), u(off)],
      groups: [g, 1, 1],
      flops: 2 * n,
      bytes: 4 * n
    })
    off += g
  }
  out.push({
    label: "grad_norm_finish",
    code: normFinishShader,
    bindings: [partials, tensorOf(plan, STEP_SCALARS), tensorOf(plan, STEP_RESULTS)],
    params: [u(off)],
    groups: [1, 1, 1],
    flops: off,
    bytes: 4 * off
  })
  return out
}

// CPU specification

type Num = ArrayLike<number>

/** Global L2 norm and the clip scale min(1, max/(norm + 1e-6)); max ≤ 0 disables clipping. */
export const cpuGradNorm = (grads: ReadonlyArray<Num>, maxNorm: number) => {
  let ss = 0
  for (const g of grads) for (let i = 0; i < g.length; i++) ss += g[i] * g[i]
  const norm = Math.sqrt(ss)
  const finite = Number.isFinite(norm)
  const clip = !finite ? 0 : maxNorm > 0 ? Math.min(1, maxNorm / (norm + 1e-6)) : 1
  return { norm, clip, skipped: !finite }
}

// CPU twin

/** Runs a `gradNorm` op on a host arena with the CPU specification. */
export const twinGradNorm = (h: HostArena): void => {
  const s = h.f32(STEP_SCALARS)
  const res = h.f32(STEP_RESULTS)
  const g = cpuGradNorm((h.plan.groups.get(GRAD) ?? []).map((i) => h.raw(i)), s[Scalar.maxGradNorm])
  res[Result.gradNorm] = g.norm
  res[Result.clipScale] = g.clip
  res[Result.skipped] = g.skipped ? 1 : 0
}
