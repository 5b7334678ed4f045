/**
 * Axpy: y = alpha·x + beta·y over n elements.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast } from "./internal/check.js"
import { type DispatchSpec, f, over, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { builtins, header, linear } from "./Wgsl.js"

/** y = beta·y + alpha·x over the first n elements. */
export interface Axpy {
  readonly kind: "axpy"
  readonly x: Tensor
  readonly y: Tensor
  readonly n: number
  readonly alpha: number
  readonly beta: number
}

/** Makes an `y = alpha·x + beta·y` op over the first `n` elements. */
export const axpy = (o: { x: Tensor; y: Tensor; alpha?: number; beta?: number; n?: number }): Axpy => {
  const n = o.n ?? o.y.size
  atLeast(o.x, n, "axpy")
  atLeast(o.y, n, "axpy")
  return { kind: "axpy", x: o.x, y: o.y, n, alpha: o.alpha ?? 1, beta: o.beta ?? 1 }
}

// WGSL

/** y = beta·y + alpha·x (beta = 0 writes without reading y). Also a fill when bound with x = y and alpha = 0. */
export const axpyShader = header("n: u32, alpha: f32, beta: f32", [["X", "read"], ["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  var v = p.alpha * X[i];
  if (p.beta != 0.0) { v += p.beta * Y[i]; }
  Y[i] = v;
}`

// Lowering

/** The dispatches of a `axpy` op. */
export const lowerAxpy = (op: Axpy): Array<DispatchSpec> => {
  return [{
    label: "axpy",
    code: axpyShader,
    bindings: [op.x, op.y],
    params: [u(op.n), f(op.alpha), f(op.beta)],
    groups: over(op.n, 256),
    flops: 2 * op.n,
    bytes: 12 * op.n
  }]
}

// CPU twin

/** Runs a `axpy` op on a host arena with the CPU specification. */
export const twinAxpy = (h: HostArena, op: Axpy): void => {
  const x = view(h, op.x, 0, op.n)
  const y = view(h, op.y, 0, op.n)
  for (let i = 0; i < op.n; i++) y[i] = op.alpha * x[i] + (op.beta !== 0 ? op.beta * y[i] : 0)
}
