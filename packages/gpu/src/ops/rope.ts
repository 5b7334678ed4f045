/**
 * RoPE: rotary position embedding in the HF rotate_half layout; its backward is the inverse rotation.
 *
 * One file per op: the op (plain data naming arena tensors), its WGSL kernels, its lowering to dispatches, its
 * naive CPU specification and the CPU twin that runs the specification on a host arena.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32, need } from "./internal/check.js"
import { type DispatchSpec, f, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { builtins, header, linear } from "./internal/wgsl.js"

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

type Num = ArrayLike<number>

/** The RoPE angle of a position and pair, as HF computes it: pos · theta^(-2i/headDim). */
export const ropeAngle = (pos: number, i: number, headDim: number, theta: number) =>
  pos * Math.pow(theta, -(2 * i) / headDim)

/**
 * Rotary embedding in the HF "rotate_half" layout over x[tokens, heads, headDim]: pairs (i, i + headDim/2).
 * `inverse` rotates by the negative angle, which is exactly the backward pass.
 */
export const cpuRope = (
  x: Num,
  positions: ArrayLike<number>,
  tokens: number,
  heads: number,
  headDim: number,
  theta: number,
  inverse = false
): Float64Array => {
  const out = Float64Array.from(x)
  const half = headDim / 2
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * headDim
      for (let i = 0; i < half; i++) {
        const a = ropeAngle(positions[t], i, headDim, theta)
        const c = Math.cos(a)
        const s = inverse ? -Math.sin(a) : Math.sin(a)
        const x1 = x[base + i]
        const x2 = x[base + i + half]
        out[base + i] = x1 * c - x2 * s
        out[base + i + half] = x2 * c + x1 * s
      }
    }
  }
  return out
}

// CPU twin

/** Runs a `rope` op on a host arena with the CPU specification. */
export const twinRope = (h: HostArena, op: Rope): void => {
  const x = view(h, op.x, 0, op.tokens * op.heads * op.headDim)
  x.set(cpuRope(x, ids(h, op.positions), op.tokens, op.heads, op.headDim, op.theta, op.inverse))
  return
}
