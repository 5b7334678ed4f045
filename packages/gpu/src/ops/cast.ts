/**
 * Cast: a tensor converted between f32 and f16 storage (f16 weight copies for f16-input matmuls).
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { f32ToF16 } from "../runtime/HalfFloat.js"
import { atLeast, need } from "./internal/check.js"
import { type DispatchSpec, over, u } from "./internal/dispatch.js"
import { values, view } from "./internal/host.js"
import { builtins, header } from "./Wgsl.js"

/** Converts between f32 and f16 storage (round to nearest even), n elements. */
export interface Cast {
  readonly kind: "cast"
  readonly x: Tensor
  readonly y: Tensor
  readonly n: number
}

/** y = x converted between f32 and f16 (one side must be each); e.g. f16 weight copies for f16-input matmuls. */
export const cast = (o: { x: Tensor; y: Tensor; n?: number }): Cast => {
  const n = o.n ?? o.x.size
  need(
    (o.x.dtype === "f32" && o.y.dtype === "f16") || (o.x.dtype === "f16" && o.y.dtype === "f32"),
    `cast: "${o.x.name}" (${o.x.dtype}) → "${o.y.name}" (${o.y.dtype}) must be f32 → f16 or f16 → f32`
  )
  atLeast(o.x, n, "cast")
  atLeast(o.y, n, "cast")
  return { kind: "cast", x: o.x, y: o.y, n }
}

// WGSL

/** f32 → packed f16 pairs (round to nearest even), and back. n counts elements. */
export const castToF16Shader = header("n: u32", [["X", "read"], ["Y", "read_write", "u32"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (2u * i >= p.n) { return; }
  var hi = 0.0;
  if (2u * i + 1u < p.n) { hi = X[2u * i + 1u]; }
  Y[i] = pack2x16float(vec2f(X[2u * i], hi));
}`

/** WGSL that unpacks f16 pairs (stored as u32) to f32. */
export const castToF32Shader = header("n: u32", [["X", "read", "u32"], ["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (2u * i >= p.n) { return; }
  let v = unpack2x16float(X[i]);
  Y[2u * i] = v.x;
  if (2u * i + 1u < p.n) { Y[2u * i + 1u] = v.y; }
}`

// Lowering

/** The dispatches of a `cast` op. */
export const lowerCast = (op: Cast): Array<DispatchSpec> => {
  const toF16 = op.y.dtype === "f16"
  return [{
    label: toF16 ? "cast_f32_f16" : "cast_f16_f32",
    code: toF16 ? castToF16Shader : castToF32Shader,
    bindings: [op.x, op.y],
    params: [u(op.n)],
    groups: over(Math.ceil(op.n / 2), 256),
    flops: 0,
    bytes: 6 * op.n
  }]
}

// CPU twin

/** Runs a `cast` op on a host arena with the CPU specification. */
export const twinCast = (h: HostArena, op: Cast): void => {
  if (op.y.dtype === "f16") {
    new Uint16Array(h.buffers[op.y.buffer], op.y.offset, op.n).set(f32ToF16(view(h, op.x, 0, op.n)))
  } else view(h, op.y, 0, op.n).set(values(h, op.x, 0, op.n))
}
