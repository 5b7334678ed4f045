/**
 * AdamW: one decoupled-weight-decay Adam update of every parameter shard (PyTorch AdamW).
 *
 * @since 0.0.0
 */
import {
  ADAM_M,
  ADAM_V,
  type ArenaPlan,
  GRAD,
  type HostArena,
  PARAM,
  Result,
  Scalar,
  STEP_RESULTS,
  STEP_SCALARS,
  tensorOf
} from "../runtime/Arena.js"
import { type DispatchSpec, over, u } from "./internal/dispatch.js"
import { builtins, header, linear } from "./Wgsl.js"

/** Fused AdamW over the whole "param" group (per shard), reading step.scalars and the clip scale. */
export interface AdamW {
  readonly kind: "adamw"
}

/** The AdamW update op (over the plan's parameter groups). */
export const adamw: AdamW = { kind: "adamw" }

// WGSL

/** Fused AdamW over one shard of every parameter, with the clip scale and skip flag read on the device. */
export const adamwShader = header("n: u32", [
  ["Pm", "read_write"],
  ["G", "read"],
  ["Mm", "read_write"],
  [
    "Vm",
    "read_write"
  ],
  ["Decay", "read", "u32"],
  ["S", "read"],
  ["Res", "read"]
]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n || Res[3] != 0.0) { return; }
  let lr = S[0];
  let b1 = S[1];
  let b2 = S[2];
  let g = G[i] * Res[2];
  let m = b1 * Mm[i] + (1.0 - b1) * g;
  let v = b2 * Vm[i] + (1.0 - b2) * g * g;
  Mm[i] = m;
  Vm[i] = v;
  var keep = 1.0;
  if (Decay[i / 256u] != 0u) { keep = 1.0 - lr * S[4]; }
  Pm[i] = Pm[i] * keep - lr * (m / S[5]) / (sqrt(v / S[6]) + S[3]);
}`

// Lowering

/** The dispatches of a `adamw` op. */
export const lowerAdamw = (plan: ArenaPlan): Array<DispatchSpec> => {
  const shards = [PARAM, GRAD, ADAM_M, ADAM_V].map((g) => plan.groups.get(g) ?? [])
  if (shards[0].length === 0) throw new RangeError("adamw: the plan has no \"param\" group (use Arena.parameters)")
  return shards[0].map((_, i) => {
    const n = plan.buffers[shards[0][i]].bytes / 4
    const whole = (g: number) => ({ shard: shards[g][i], bytes: plan.buffers[shards[g][i]].bytes })
    return {
      label: "adamw",
      code: adamwShader,
      bindings: [
        whole(0),
        whole(1),
        whole(2),
        whole(3),
        tensorOf(plan, `opt.decay.${i}`),
        tensorOf(plan, STEP_SCALARS),
        tensorOf(plan, STEP_RESULTS)
      ],
      params: [u(n)],
      groups: over(n, 256),
      flops: 12 * n,
      bytes: 28 * n
    }
  })
}

// CPU specification

type Num = ArrayLike<number>

/** AdamW hyper-parameters of one step (bias corrections are 1 − βᵗ). */
export interface AdamWStep {
  readonly lr: number
  readonly beta1: number
  readonly beta2: number
  readonly eps: number
  readonly weightDecay: number
  readonly biasCorrection1: number
  readonly biasCorrection2: number
}

/** One decoupled-weight-decay Adam update in place (PyTorch AdamW), gradient pre-multiplied by `clip`. */
export const cpuAdamw = (
  p: Float32Array | Float64Array,
  g: Num,
  m: Float32Array | Float64Array,
  v: Float32Array | Float64Array,
  decay: (i: number) => boolean,
  h: AdamWStep,
  clip: number
) => {
  for (let i = 0; i < p.length; i++) {
    const gi = g[i] * clip
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * gi
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * gi * gi
    const mhat = m[i] / h.biasCorrection1
    const vhat = v[i] / h.biasCorrection2
    const wd = decay(i) ? h.lr * h.weightDecay : 0
    p[i] = p[i] * (1 - wd) - h.lr * mhat / (Math.sqrt(vhat) + h.eps)
  }
}

// CPU twin

/** Runs a `adamw` op on a host arena with the CPU specification. */
export const twinAdamw = (h: HostArena): void => {
  const s = h.f32(STEP_SCALARS)
  const res = h.f32(STEP_RESULTS)
  if (res[Result.skipped] !== 0) return
  const hyper: AdamWStep = {
    lr: s[Scalar.lr],
    beta1: s[Scalar.beta1],
    beta2: s[Scalar.beta2],
    eps: s[Scalar.eps],
    weightDecay: s[Scalar.weightDecay],
    biasCorrection1: s[Scalar.biasCorrection1],
    biasCorrection2: s[Scalar.biasCorrection2]
  }
  const [ps, gs, ms, vs] = [PARAM, GRAD, ADAM_M, ADAM_V].map((g) => h.plan.groups.get(g) ?? [])
  ps.forEach((shard, i) => {
    const flags = h.u32(`opt.decay.${i}`)
    cpuAdamw(
      h.raw(shard),
      h.raw(gs[i]),
      h.raw(ms[i]),
      h.raw(vs[i]),
      (j) => flags[Math.floor(j / 256)] !== 0,
      hyper,
      res[Result.clipScale]
    )
  })
}
