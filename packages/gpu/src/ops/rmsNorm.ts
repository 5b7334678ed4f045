/**
 * RMSNorm: y = x · rstd · w per row, rstd = 1/sqrt(mean(x²) + eps), and its backward.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, need } from "./internal/check.js"
import { type DispatchSpec, f, grid, over, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { type FloatArray, type Numerics, numerics } from "./Numerics.js"
import { builtins, header, linear, reduce64 } from "./Wgsl.js"

/** RMSNorm over rows (forward; keeps the reciprocal RMS for the backward). */
export interface RmsNorm {
  readonly kind: "rmsNorm"
  readonly x: Tensor
  readonly weight: Tensor
  readonly y: Tensor
  readonly rstd: Tensor
  readonly rows: number
  readonly dim: number
  readonly eps: number
}

/** The backward of {@link RmsNorm}: dx and the weight's gradient. */
export interface RmsNormBackward {
  readonly kind: "rmsNormBackward"
  readonly x: Tensor
  readonly weight: Tensor
  readonly rstd: Tensor
  readonly dy: Tensor
  readonly dx: Tensor
  readonly dWeight: Tensor
  readonly rows: number
  readonly dim: number
  /** dx += (residual stream) instead of dx =. */
  readonly accumulate: boolean
}

/** RMSNorm over the last `dim` (= weight.size) of x; per-head q/k norm is the same op with rows = tokens·heads. */
export const rmsNorm = (o: { x: Tensor; weight: Tensor; y: Tensor; rstd: Tensor; eps: number }): RmsNorm => {
  const dim = o.weight.size
  need(o.x.size % dim === 0, `rmsNorm: "${o.x.name}" (${o.x.size}) is not rows of ${dim}`)
  const rows = o.x.size / dim
  atLeast(o.y, o.x.size, "rmsNorm y")
  atLeast(o.rstd, rows, "rmsNorm rstd")
  return { kind: "rmsNorm", x: o.x, weight: o.weight, y: o.y, rstd: o.rstd, rows, dim, eps: o.eps }
}

/** Makes an {@link RmsNormBackward} op. */
export const rmsNormBackward = (
  o: { x: Tensor; weight: Tensor; rstd: Tensor; dy: Tensor; dx: Tensor; dWeight: Tensor; accumulate?: boolean }
): RmsNormBackward => {
  const dim = o.weight.size
  const rows = o.x.size / dim
  atLeast(o.dx, o.x.size, "rmsNormBackward dx")
  atLeast(o.dy, o.x.size, "rmsNormBackward dy")
  atLeast(o.dWeight, dim, "rmsNormBackward dWeight")
  need(o.dx !== o.dy && o.dx !== o.x, "rmsNormBackward: dx must not alias dy or x")
  return { ...o, kind: "rmsNormBackward", rows, dim, accumulate: o.accumulate ?? false }
}

// WGSL

/** One 64-thread workgroup per row: rstd = 1/sqrt(mean(x²)+eps), y = x·rstd·w. */
export const rmsNormShader =
  header("rows: u32, dim: u32, eps: f32", [["X", "read"], ["W", "read"], ["Y", "read_write"], [
    "R",
    "read_write"
  ]]) + `
var<workgroup> red: array<f32, 64>;
@compute @workgroup_size(64) fn main(${builtins}) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.rows) { return; }
  let base = row * p.dim;
  var ss = 0.0;
  for (var c = lid; c < p.dim; c += 64u) { let x = X[base + c]; ss = fma(x, x, ss); }
  red[lid] = ss;
  ${reduce64("red", (a, b) => `${a} + ${b}`)}
  let rstd = inverseSqrt(red[0] / f32(p.dim) + p.eps);
  for (var c = lid; c < p.dim; c += 64u) { Y[base + c] = X[base + c] * rstd * W[c]; }
  if (lid == 0u) { R[row] = rstd; }
}`

/** dx = rstd·g − x·rstd³·Σ(g·x)/dim with g = dy·w; written as dx = beta·dx + that (beta 1 accumulates). */
export const rmsNormBackwardXShader = header("rows: u32, dim: u32, beta: f32", [
  ["X", "read"],
  ["W", "read"],
  [
    "R",
    "read"
  ],
  ["DY", "read"],
  ["DX", "read_write"]
]) + `
var<workgroup> red: array<f32, 64>;
@compute @workgroup_size(64) fn main(${builtins}) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.rows) { return; }
  let base = row * p.dim;
  var s = 0.0;
  for (var c = lid; c < p.dim; c += 64u) { s += DY[base + c] * W[c] * X[base + c]; }
  red[lid] = s;
  ${reduce64("red", (a, b) => `${a} + ${b}`)}
  let rstd = R[row];
  let k = red[0] * rstd * rstd * rstd / f32(p.dim);
  for (var c = lid; c < p.dim; c += 64u) {
    var v = rstd * DY[base + c] * W[c] - X[base + c] * k;
    if (p.beta != 0.0) { v += p.beta * DX[base + c]; }
    DX[base + c] = v;
  }
}`

/**
 * dw stage 1: workgroup (column block of 64, row block) sums dy·x·rstd over its rows into
 * Part[block·dim + c]. Two stages keep every SM busy when rows ≫ dim (q/k norm: rows = tokens·heads).
 */
export const rmsNormBackwardWPartialShader =
  header("rows: u32, dim: u32, rowsPerBlock: u32", [["X", "read"], ["R", "read"], [
    "DY",
    "read"
  ], ["Part", "read_write"]]) + `
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = wid.x * 64u + lid;
  if (c >= p.dim) { return; }
  let r0 = wid.y * p.rowsPerBlock;
  let r1 = min(p.rows, r0 + p.rowsPerBlock);
  var acc = 0.0;
  for (var r = r0; r < r1; r++) { acc = fma(DY[r * p.dim + c] * X[r * p.dim + c], R[r], acc); }
  Part[wid.y * p.dim + c] = acc;
}`

/** dw stage 2: dw[c] += Σ_blocks Part[block·dim + c], blocks in order (deterministic). */
export const rmsNormBackwardWFinishShader = header("dim: u32, blocks: u32", [["Part", "read"], ["DW", "read_write"]]) +
  `
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.dim) { return; }
  var acc = 0.0;
  for (var b = 0u; b < p.blocks; b++) { acc += Part[b * p.dim + i]; }
  DW[i] += acc;
}`

// Lowering

/** Row blocks of the two-stage RMSNorm weight gradient: ~32 rows each, at most 256 blocks. */
const blocks = (rows: number) => Math.min(256, Math.ceil(rows / 32))

/** The dispatches of a `rmsNorm` op. */
export const lowerRmsNorm = (op: RmsNorm): Array<DispatchSpec> => {
  return [{
    label: "rmsnorm",
    code: rmsNormShader,
    bindings: [op.x, op.weight, op.y, op.rstd],
    params: [u(op.rows), u(op.dim), f(op.eps)],
    groups: grid(op.rows),
    flops: 4 * op.rows * op.dim,
    bytes: 8 * op.rows * op.dim
  }]
}

/** The dispatches of a `rmsNormBackward` op. */
export const lowerRmsNormBackward = (op: RmsNormBackward): Array<DispatchSpec> => {
  return [{
    label: "rmsnorm_backward_x",
    code: rmsNormBackwardXShader,
    bindings: [op.x, op.weight, op.rstd, op.dy, op.dx],
    params: [u(op.rows), u(op.dim), f(op.accumulate ? 1 : 0)],
    groups: grid(op.rows),
    flops: 8 * op.rows * op.dim,
    bytes: 16 * op.rows * op.dim
  }, {
    label: "rmsnorm_backward_w_partial",
    code: rmsNormBackwardWPartialShader,
    bindings: [op.x, op.rstd, op.dy, { scratch: blocks(op.rows) * op.dim * 4 }],
    params: [u(op.rows), u(op.dim), u(Math.ceil(op.rows / blocks(op.rows)))],
    groups: [Math.ceil(op.dim / 64), blocks(op.rows), 1],
    flops: 3 * op.rows * op.dim,
    bytes: 8 * op.rows * op.dim
  }, {
    label: "rmsnorm_backward_w_finish",
    code: rmsNormBackwardWFinishShader,
    bindings: [{ scratch: blocks(op.rows) * op.dim * 4 }, op.dWeight],
    params: [u(op.dim), u(blocks(op.rows))],
    groups: over(op.dim, 64),
    flops: blocks(op.rows) * op.dim,
    bytes: 4 * blocks(op.rows) * op.dim
  }]
}

// CPU specification

/**
 * RMSNorm as Hugging Face's Qwen3RMSNorm: y = weight · (x · rsqrt(mean(x²) + eps)), each product rounded to the
 * stored type. Returns the per-row reciprocal std (needed by the backward).
 */
export const cpuRmsNorm = (
  x: ArrayLike<number>,
  rows: number,
  dim: number,
  w: ArrayLike<number>,
  eps: number,
  nm: Numerics
): { readonly y: FloatArray; readonly rstd: FloatArray } => {
  const y = nm.alloc(rows * dim)
  const rstd = nm.alloc(rows)
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    let ss = 0
    for (let i = 0; i < dim; i++) ss += x[o + i] * x[o + i]
    const r = nm.round(1 / Math.sqrt(nm.round(ss / dim) + eps))
    rstd[n] = r
    for (let i = 0; i < dim; i++) y[o + i] = w[i] * nm.round(x[o + i] * r)
  }
  return { y, rstd }
}

/**
 * Backward of {@link cpuRmsNorm} with g = w ⊙ dy:
 * dx = r·g − x·r³·(g·x)/dim, dw += dy ⊙ x·r (summed over rows, into `dW`).
 */
export const cpuRmsNormBackward = (
  dy: ArrayLike<number>,
  x: ArrayLike<number>,
  rstd: ArrayLike<number>,
  rows: number,
  dim: number,
  w: ArrayLike<number>,
  dW: Float64Array,
  nm: Numerics
): FloatArray => {
  const dx = nm.alloc(rows * dim)
  for (let n = 0; n < rows; n++) {
    const o = n * dim
    const r = rstd[n]
    let dot = 0
    for (let i = 0; i < dim; i++) dot += w[i] * dy[o + i] * x[o + i]
    const c = (r * r * r * dot) / dim
    for (let i = 0; i < dim; i++) {
      dx[o + i] = r * w[i] * dy[o + i] - x[o + i] * c
      dW[i] += dy[o + i] * x[o + i] * r
    }
  }
  return dx
}

// CPU twin

/** Runs a `rmsNorm` op on a host arena with the CPU specification (f64 storage). */
export const twinRmsNorm = (h: HostArena, op: RmsNorm): void => {
  const { rstd, y } = cpuRmsNorm(view(h, op.x), op.rows, op.dim, view(h, op.weight), op.eps, numerics("f64"))
  view(h, op.y, 0, y.length).set(y)
  view(h, op.rstd, 0, op.rows).set(rstd)
}

/** Runs a `rmsNormBackward` op on a host arena with the CPU specification (f64 storage). */
export const twinRmsNormBackward = (h: HostArena, op: RmsNormBackward): void => {
  const n = op.rows * op.dim
  const dw = new Float64Array(op.dim)
  const dx = cpuRmsNormBackward(
    view(h, op.dy, 0, n),
    view(h, op.x, 0, n),
    view(h, op.rstd),
    op.rows,
    op.dim,
    view(h, op.weight),
    dw,
    numerics("f64")
  )
  const dX = view(h, op.dx, 0, n)
  for (let i = 0; i < n; i++) dX[i] = dx[i] + (op.accumulate ? dX[i] : 0)
  const dW = view(h, op.dWeight)
  for (let i = 0; i < op.dim; i++) dW[i] += dw[i]
}
