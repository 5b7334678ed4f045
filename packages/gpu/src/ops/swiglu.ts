/**
 * SwiGLU: out = silu(gate)·up, and its backward.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast } from "./internal/check.js"
import { type DispatchSpec, over, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { type FloatArray, type Numerics, numerics } from "./Numerics.js"
import { builtins, header, linear } from "./Wgsl.js"

/** out = silu(gate) · up (forward). */
export interface Swiglu {
  readonly kind: "swiglu"
  readonly gate: Tensor
  readonly up: Tensor
  readonly out: Tensor
}

/** The backward of {@link Swiglu}: the gradients of gate and up. */
export interface SwigluBackward {
  readonly kind: "swigluBackward"
  readonly gate: Tensor
  readonly up: Tensor
  readonly dOut: Tensor
  readonly dGate: Tensor
  readonly dUp: Tensor
}

/** Makes a {@link Swiglu} op. */
export const swiglu = (o: { gate: Tensor; up: Tensor; out: Tensor }): Swiglu => {
  atLeast(o.up, o.gate.size, "swiglu up")
  atLeast(o.out, o.gate.size, "swiglu out")
  return { ...o, kind: "swiglu" }
}

/** Makes a {@link SwigluBackward} op. */
export const swigluBackward = (o: Omit<SwigluBackward, "kind">): SwigluBackward => ({ ...o, kind: "swigluBackward" })

// WGSL

/** The {@link Swiglu} kernel's WGSL. */
export const swigluShader = header("n: u32", [["G", "read"], ["U", "read"], ["O", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let g = G[i];
  O[i] = g / (1.0 + exp(-g)) * U[i];
}`

/** The {@link SwigluBackward} kernel's WGSL. */
export const swigluBackwardShader = header("n: u32", [["G", "read"], ["U", "read"], ["DO", "read"], [
  "DG",
  "read_write"
], ["DU", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let g = G[i];
  let sg = 1.0 / (1.0 + exp(-g));
  let d = DO[i];
  DU[i] = d * g * sg;
  DG[i] = d * U[i] * sg * (1.0 + g * (1.0 - sg));
}`

// Lowering

/** The dispatches of a `swiglu` op. */
export const lowerSwiglu = (op: Swiglu): Array<DispatchSpec> => {
  return [{
    label: "swiglu",
    code: swigluShader,
    bindings: [op.gate, op.up, op.out],
    params: [u(op.gate.size)],
    groups: over(op.gate.size, 256),
    flops: 6 * op.gate.size,
    bytes: 12 * op.gate.size
  }]
}

/** The dispatches of a `swigluBackward` op. */
export const lowerSwigluBackward = (op: SwigluBackward): Array<DispatchSpec> => {
  return [{
    label: "swiglu_backward",
    code: swigluBackwardShader,
    bindings: [op.gate, op.up, op.dOut, op.dGate, op.dUp],
    params: [u(op.gate.size)],
    groups: over(op.gate.size, 256),
    flops: 12 * op.gate.size,
    bytes: 20 * op.gate.size
  }]
}

// CPU specification

/** silu(g) = g·σ(g). */
export const silu = (g: number) => g / (1 + Math.exp(-g))

/** d silu / dg = σ(g)·(1 + g·(1 − σ(g))). */
export const siluGrad = (g: number) => {
  const s = 1 / (1 + Math.exp(-g))
  return s * (1 + g * (1 - s))
}

/** SwiGLU's product silu(gate)·up, the silu rounded to the stored type first (as torch's f32 op order). */
export const cpuSwiglu = (gate: FloatArray, up: FloatArray, nm: Numerics): FloatArray => {
  const act = nm.alloc(gate.length)
  const round = nm.round
  for (let i = 0; i < act.length; i++) act[i] = round(silu(gate[i])) * up[i]
  return act
}

/** Backward of {@link cpuSwiglu}: dGate = dAct·up·silu'(gate), dUp = dAct·silu(gate). */
export const cpuSwigluBackward = (
  dAct: FloatArray,
  gate: FloatArray,
  up: FloatArray,
  nm: Numerics
): { readonly dGate: FloatArray; readonly dUp: FloatArray } => {
  const dGate = nm.alloc(gate.length)
  const dUp = nm.alloc(gate.length)
  for (let i = 0; i < gate.length; i++) {
    dGate[i] = dAct[i] * up[i] * siluGrad(gate[i])
    dUp[i] = dAct[i] * silu(gate[i])
  }
  return { dGate, dUp }
}

// CPU twin

/** Runs a `swiglu` op on a host arena with the CPU specification (f64 storage). */
export const twinSwiglu = (h: HostArena, op: Swiglu): void => {
  const n = op.gate.size
  view(h, op.out, 0, n).set(cpuSwiglu(view(h, op.gate), view(h, op.up, 0, n), numerics("f64")))
}

/** Runs a `swigluBackward` op on a host arena with the CPU specification (f64 storage). */
export const twinSwigluBackward = (h: HostArena, op: SwigluBackward): void => {
  const n = op.gate.size
  const { dGate, dUp } = cpuSwigluBackward(
    view(h, op.dOut, 0, n),
    view(h, op.gate),
    view(h, op.up, 0, n),
    numerics("f64")
  )
  view(h, op.dGate, 0, n).set(dGate)
  view(h, op.dUp, 0, n).set(dUp)
}
