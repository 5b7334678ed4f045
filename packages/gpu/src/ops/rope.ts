/**
 * RoPE: rotary position embedding in the HF rotate_half layout; its backward is the inverse rotation.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32, need } from "./internal/check.js"
import { type DispatchSpec, f, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { type FloatArray, type Numerics, numerics } from "./Numerics.js"
import { builtins, header, linear } from "./Wgsl.js"

/** Rotary position embedding applied in place (forward or, inverted, backward). */
export interface Rope {
  readonly kind: "rope"
  readonly x: Tensor
  readonly positions: Tensor
  readonly tokens: number
  readonly heads: number
  readonly headDim: number
  readonly theta: number
  readonly inverse: boolean
}

/** In-place RoPE over x[tokens, heads, headDim] (HF rotate_half); `inverse` is its backward. */
export const rope = (
  o: { x: Tensor; positions: Tensor; heads: number; headDim: number; theta: number; inverse?: boolean }
): Rope => {
  need(o.headDim % 2 === 0, "rope: headDim must be even")
  const tokens = o.x.size / (o.heads * o.headDim)
  need(Number.isInteger(tokens), `rope: "${o.x.name}" is not [tokens, ${o.heads}, ${o.headDim}]`)
  isU32(o.positions, "rope positions")
  atLeast(o.positions, tokens, "rope positions")
  return { ...o, kind: "rope", tokens, inverse: o.inverse ?? false }
}

// WGSL

/** In-place rotate_half RoPE over x[tokens, heads, headDim]; sign −1 is the backward (inverse) rotation. */
export const ropeShader = header("tokens: u32, heads: u32, headDim: u32, theta: f32, sign: f32", [["X", "read_write"], [
  "Pos",
  "read",
  "u32"
]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  let half = p.headDim / 2u;
  if (i >= p.tokens * p.heads * half) { return; }
  let pair = i % half;
  let th = i / half;
  let t = th / p.heads;
  let angle = f32(Pos[t]) * pow(p.theta, -f32(2u * pair) / f32(p.headDim));
  let c = cos(angle);
  let s = sin(angle) * p.sign;
  let base = th * p.headDim;
  let x1 = X[base + pair];
  let x2 = X[base + pair + half];
  X[base + pair] = x1 * c - x2 * s;
  X[base + pair + half] = x2 * c + x1 * s;
}`

// Lowering

/** The dispatches of a `rope` op. */
export const lowerRope = (op: Rope): Array<DispatchSpec> => {
  const n = op.tokens * op.heads * op.headDim / 2
  return [{
    label: "rope",
    code: ropeShader,
    bindings: [op.x, op.positions],
    params: [u(op.tokens), u(op.heads), u(op.headDim), f(op.theta), f(op.inverse ? -1 : 1)],
    groups: over(n, 256),
    flops: 6 * 2 * n,
    bytes: 16 * n
  }]
}

// CPU specification

/**
 * RoPE tables as transformers computes them in f32: inv_freq[i] = 1 / theta^(2i/d), angle = pos · inv_freq[i],
 * cos/sin of the f32 angle. Returns [rows, d/2] tables for the given positions.
 */
export const ropeTables = (
  positions: ArrayLike<number>,
  headDim: number,
  theta: number
): { readonly cos: Float32Array; readonly sin: Float32Array } => {
  const half = headDim / 2
  const invFreq = inverseFrequencies(headDim, theta)
  const cos = new Float32Array(positions.length * half)
  const sin = new Float32Array(positions.length * half)
  for (let n = 0; n < positions.length; n++) {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(positions[n] * invFreq[i])
      cos[n * half + i] = Math.cos(angle)
      sin[n * half + i] = Math.sin(angle)
    }
  }
  return { cos, sin }
}

const invFreqCache = new Map<string, Float64Array>()

/** transformers' f32 inverse frequencies 1 / theta^(2i/d), computed once per (d, theta). */
const inverseFrequencies = (headDim: number, theta: number): Float64Array => {
  const key = `${headDim}/${theta}`
  let invFreq = invFreqCache.get(key)
  if (invFreq === undefined) {
    const half = headDim / 2
    invFreq = new Float64Array(half)
    for (let i = 0; i < half; i++) {
      invFreq[i] = Math.fround(1 / Math.fround(Math.pow(theta, Math.fround((2 * i) / headDim))))
    }
    invFreqCache.set(key, invFreq)
  }
  return invFreq
}

/** The backward's products are not rounded (f64's identity: one call target with the f64 forward). */
const unrounded = numerics("f64").round

/**
 * Rotates each (x[i], x[i+d/2]) pair of x [rows, heads, d] by the per-row angle whose cos/sin are given, times
 * `sign` (−1: the inverse rotation): out[i] = r(x[i]·c) − r(x[i+d/2]·s), out[i+d/2] = r(x[i+d/2]·c) + r(x[i]·s)
 * with s = sign·sin and r = `round` applied to each product (a sign flip is exact, so the inverse computes
 * x[i]·c + x[i+d/2]·sin bit for bit).
 */
const rotateHalf = (
  x: ArrayLike<number>,
  rows: number,
  heads: number,
  headDim: number,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  sign: 1 | -1,
  round: (x: number) => number,
  nm: Numerics
): FloatArray => {
  const half = headDim / 2
  const out = nm.alloc(rows * heads * headDim)
  for (let n = 0; n < rows; n++) {
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const c = cos[n * half + i]
        const s = sign * sin[n * half + i]
        const a = x[o + i]
        const b = x[o + i + half]
        out[o + i] = round(a * c) - round(b * s)
        out[o + i + half] = round(b * c) + round(a * s)
      }
    }
  }
  return out
}

/**
 * Rotary embedding in transformers' rotate_half layout, on x [rows, heads, d] with per-row tables:
 * out[i] = x[i]·cos − x[i+d/2]·sin, out[i+d/2] = x[i+d/2]·cos + x[i]·sin (i < d/2), each product rounded as
 * `nm` stores.
 */
export const cpuRope = (
  x: ArrayLike<number>,
  rows: number,
  heads: number,
  headDim: number,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  nm: Numerics
): FloatArray => rotateHalf(x, rows, heads, headDim, cos, sin, 1, nm.round, nm)

/** Backward of {@link cpuRope}: the transpose of each 2×2 rotation (the inverse rotation), products unrounded. */
export const cpuRopeBackward = (
  dy: ArrayLike<number>,
  rows: number,
  heads: number,
  headDim: number,
  cos: ArrayLike<number>,
  sin: ArrayLike<number>,
  nm: Numerics
): FloatArray => rotateHalf(dy, rows, heads, headDim, cos, sin, -1, unrounded, nm)

// CPU twin

/** Runs a `rope` op on a host arena with the CPU specification (f64 storage, transformers' f32 angles). */
export const twinRope = (h: HostArena, op: Rope): void => {
  const x = view(h, op.x, 0, op.tokens * op.heads * op.headDim)
  const { cos, sin } = ropeTables(ids(h, op.positions).subarray(0, op.tokens), op.headDim, op.theta)
  const rotate = op.inverse ? cpuRopeBackward : cpuRope
  x.set(rotate(x, op.tokens, op.heads, op.headDim, cos, sin, numerics("f64")))
}
