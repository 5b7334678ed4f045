/**
 * SwiGLU: out = silu(gate)·up, and its backward.
 *
 * One file per op: the op (plain data naming arena tensors), its WGSL kernels, its lowering to dispatches, its
 * naive CPU specification and the CPU twin that runs the specification on a host arena.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast } from "./internal/check.js"
import { type DispatchSpec, over, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { builtins, header, linear } from "./internal/wgsl.js"

export interface Swiglu {
  readonly kind: "swiglu"
  readonly gate: Tensor
  readonly up: Tensor
  readonly out: Tensor
}

export interface SwigluBackward {
  readonly kind: "swigluBackward"
  readonly gate: Tensor
  readonly up: Tensor
  readonly dOut: Tensor
  readonly dGate: Tensor
  readonly dUp: Tensor
}

export const swiglu = (o: { gate: Tensor; up: Tensor; out: Tensor }): Swiglu => {
  atLeast(o.up, o.gate.size, "swiglu up")
  atLeast(o.out, o.gate.size, "swiglu out")
  return { ...o, kind: "swiglu" }
}

export const swigluBackward = (o: Omit<SwigluBackward, "kind">): SwigluBackward => ({ ...o, kind: "swigluBackward" })

// WGSL

export const swigluShader = header("n: u32", [["G", "read"], ["U", "read"], ["O", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let g = G[i];
  O[i] = g / (1.0 + exp(-g)) * U[i];
}`

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

type Num = ArrayLike<number>

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/** SwiGLU: out = silu(gate) · up. */
export const cpuSwiglu = (gate: Num, up: Num): Float64Array =>
  Float64Array.from({ length: gate.length }, (_, i) => gate[i] * sigmoid(gate[i]) * up[i])

/** Gradients of {@link cpuSwiglu}. */
export const cpuSwigluBackward = (gate: Num, up: Num, dOut: Num) => {
  const dGate = new Float64Array(gate.length)
  const dUp = new Float64Array(gate.length)
  for (let i = 0; i < gate.length; i++) {
    const sg = sigmoid(gate[i])
    dUp[i] = dOut[i] * gate[i] * sg
    dGate[i] = dOut[i] * up[i] * sg * (1 + gate[i] * (1 - sg))
  }
  return { dGate, dUp }
}

// CPU twin

/** Runs a `swiglu` op on a host arena with the CPU specification. */
export const twinSwiglu = (h: HostArena, op: Swiglu): void => {
  view(h, op.out, 0, op.gate.size).set(cpuSwiglu(view(h, op.gate), view(h, op.up, 0, op.gate.size)))
  return
}

/** Runs a `swigluBackward` op on a host arena with the CPU specification. */
export const twinSwigluBackward = (h: HostArena, op: SwigluBackward): void => {
  const n = op.gate.size
  const { dGate, dUp } = cpuSwigluBackward(view(h, op.gate), view(h, op.up, 0, n), view(h, op.dOut, 0, n))
  view(h, op.dGate, 0, n).set(dGate)
  view(h, op.dUp, 0, n).set(dUp)
  return
}
