/**
 * Fill: every element of a tensor set to one value.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { type DispatchSpec, f, over, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { builtins, header, linear } from "./Wgsl.js"

/** Sets every element of a tensor to one value. */
export interface Fill {
  readonly kind: "fill"
  readonly out: Tensor
  readonly value: number
}

/** Makes a {@link Fill} op (default value 0). */
export const fill = (out: Tensor, value = 0): Fill => ({ kind: "fill", out, value })

// WGSL

/** The {@link Fill} kernel's WGSL. */
export const fillShader = header("n: u32, value: f32", [["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  Y[i] = p.value;
}`

// Lowering

/** The dispatches of a `fill` op. */
export const lowerFill = (op: Fill): Array<DispatchSpec> => {
  return [{
    label: "fill",
    code: fillShader,
    bindings: [op.out],
    params: [u(op.out.size), f(op.value)],
    groups: over(op.out.size, 256),
    flops: 0,
    bytes: op.out.bytes
  }]
}

// CPU twin

/** Runs a `fill` op on a host arena with the CPU specification. */
export const twinFill = (h: HostArena, op: Fill): void => {
  view(h, op.out).fill(op.value)
}
