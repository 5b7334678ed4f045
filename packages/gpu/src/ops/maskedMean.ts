/**
 * Masked mean: per row scale·Σ mask·x / max(Σ mask, 1) into a loss slot, and its gradient.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, need } from "./internal/check.js"
import { type Bind, type DispatchSpec, f, grid, u } from "./internal/dispatch.js"
import { view } from "./internal/host.js"
import { type Binding, builtins, header } from "./Wgsl.js"

/** The mean of a tensor's elements where a mask is set. */
export interface MaskedMean {
  readonly kind: "maskedMean"
  readonly x: Tensor
  readonly mask: Tensor
  readonly out: Tensor
  readonly outIndex: number
  readonly rows: number
  readonly cols: number
  readonly scale: number
  readonly accumulate: boolean
  /** When set, also writes the gradient of gradScale·out w.r.t. x. */
  readonly dx: Tensor | undefined
  readonly gradScale: number
}

/** Per row of x[rows, cols]: out[outIndex + r] = scale·Σ mask·x / max(Σ mask, 1), optionally seeding dx. */
export const maskedMean = (o: {
  x: Tensor
  mask: Tensor
  out: Tensor
  outIndex?: number
  rows?: number
  scale?: number
  accumulate?: boolean
  dx?: Tensor
  gradScale?: number
}): MaskedMean => {
  const rows = o.rows ?? 1
  need(o.x.size % rows === 0, `maskedMean: "${o.x.name}" is not ${rows} rows`)
  const cols = o.x.size / rows
  atLeast(o.mask, o.x.size, "maskedMean mask")
  atLeast(o.out, (o.outIndex ?? 0) + rows, "maskedMean out")
  return {
    kind: "maskedMean",
    x: o.x,
    mask: o.mask,
    out: o.out,
    outIndex: o.outIndex ?? 0,
    rows,
    cols,
    scale: o.scale ?? 1,
    accumulate: o.accumulate ?? false,
    dx: o.dx,
    gradScale: o.gradScale ?? 1
  }
}

// WGSL

/**
 * Per row (one workgroup): out[outIndex + r] (+)= scale·Σ m·x / max(Σ m, 1); with `grad`, also
 * dx = gradScale·scale·m / max(Σm, 1). Summation order is fixed (deterministic).
 */
export const maskedMeanShader = (grad: boolean) => {
  const bindings: Array<Binding> = [["X", "read"], ["M", "read"], ["Out", "read_write"]]
  if (grad) bindings.push(["DX", "read_write"])
  return header("rows: u32, cols: u32, outIndex: u32, accumulate: u32, scale: f32, gradScale: f32", bindings) + `
var<workgroup> ra: array<f32, 256>;
var<workgroup> rb: array<f32, 256>;
@compute @workgroup_size(256) fn main(${builtins}) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.rows) { return; }
  let base = row * p.cols;
  var s = 0.0;
  var n = 0.0;
  for (var c = lid; c < p.cols; c += 256u) { let m = M[base + c]; s = fma(m, X[base + c], s); n += m; }
  ra[lid] = s;
  rb[lid] = n;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { ra[lid] += ra[lid + w]; rb[lid] += rb[lid + w]; }
    workgroupBarrier();
  }
  let cnt = max(rb[0], 1.0);
  if (lid == 0u) {
    var v = p.scale * ra[0] / cnt;
    if (p.accumulate != 0u) { v += Out[p.outIndex + row]; }
    Out[p.outIndex + row] = v;
  }
  ${
    grad
      ? "for (var c = lid; c < p.cols; c += 256u) { DX[base + c] = p.gradScale * p.scale * M[base + c] / cnt; }"
      : ""
  }
}`
}

// Lowering

/** The dispatches of a `maskedMean` op. */
export const lowerMaskedMean = (op: MaskedMean): Array<DispatchSpec> => {
  const bindings: Array<Bind> = [op.x, op.mask, op.out]
  if (op.dx !== undefined) bindings.push(op.dx)
  return [{
    label: `masked_mean${op.dx !== undefined ? "_grad" : ""}`,
    code: maskedMeanShader(op.dx !== undefined),
    bindings,
    params: [u(op.rows), u(op.cols), u(op.outIndex), u(op.accumulate ? 1 : 0), f(op.scale), f(op.gradScale)],
    groups: grid(op.rows),
    flops: 2 * op.x.size,
    bytes: 12 * op.x.size
  }]
}

// CPU specification

type Num = ArrayLike<number>

/** Per row: scale · Σ mask·x / max(Σ mask, 1) (weighted masked mean), and its gradient w.r.t. x. */
export const cpuMaskedMean = (x: Num, mask: Num, rows: number, cols: number, scale: number) => {
  const out = new Float64Array(rows)
  const dx = new Float64Array(rows * cols)
  for (let r = 0; r < rows; r++) {
    let s = 0
    let n = 0
    for (let c = 0; c < cols; c++) {
      s += mask[r * cols + c] * x[r * cols + c]
      n += mask[r * cols + c]
    }
    const cnt = Math.max(n, 1)
    out[r] = scale * s / cnt
    for (let c = 0; c < cols; c++) dx[r * cols + c] = scale * mask[r * cols + c] / cnt
  }
  return { out, dx }
}

// CPU twin

/** Runs a `maskedMean` op on a host arena with the CPU specification. */
export const twinMaskedMean = (h: HostArena, op: MaskedMean): void => {
  const r = cpuMaskedMean(view(h, op.x), view(h, op.mask), op.rows, op.cols, op.scale)
  const out = view(h, op.out, op.outIndex, op.rows)
  for (let i = 0; i < op.rows; i++) out[i] = r.out[i] + (op.accumulate ? out[i] : 0)
  if (op.dx !== undefined) {
    const dx = view(h, op.dx, 0, r.dx.length)
    for (let i = 0; i < dx.length; i++) dx[i] = op.gradScale * r.dx[i]
  }
}
