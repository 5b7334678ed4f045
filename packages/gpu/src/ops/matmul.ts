/**
 * Matmul: C = alpha·op(A)·op(B) (+ beta·C) (+ bias), in tiers of tiling, vec4 loads and f16 operands.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, need } from "./internal/check.js"
import { type DispatchSpec, f, u } from "./internal/dispatch.js"
import { strided, view } from "./internal/host.js"
import * as SM from "./internal/subgroupMatrix.js"
import { type SubgroupMatrixShape } from "./internal/subgroupMatrix.js"
import { type Binding, header } from "./Wgsl.js"

/**
 * Matmul kernel tiers. "tiled64": 64×64 tile, 4×4 per thread, scalar loads (the default). "tiled64v4" and
 * "tiled128v4" read with vec4 loads (falling back to their scalar twin when a contiguous dim or offset is not a
 * multiple of 4); "tiled128": 128×128 tile, 8×8 per thread, K staged 8 at a time.
 * "tiled128h" (needs the device feature shader-f16): f16-stored operands are read as `vec4<f16>` and staged as
 * f16 in workgroup memory, K staged 16 at a time, f32 products and accumulation; f32 operands as in tiled128v4.
 * Where an f16 operand's contiguous dim or offset is not a multiple of 4 it uses the packed-pair loads instead.
 * "tiled128hh" (experimental): tiled128h with f16 products summed in f16 over each K step of 16 (packed
 * `vec2<f16>` fma) before f32 accumulation, when both operands are f16; about 3 significant digits per partial
 * sum, so only for forward passes that tolerate it. Otherwise it is tiled128h.
 * "subgroupMatrix" (needs chromium-experimental-subgroup-matrix with an f16 → f32 configuration): see
 * `Matmul.chooseTier` and `Matmul.pickSubgroupMatrixConfig`; f16 A and B, f32 C, no epilogue beyond alpha/beta.
 */
export type MatmulTier =
  | "tiled64"
  | "tiled64v4"
  | "tiled128"
  | "tiled128v4"
  | "tiled128h"
  | "tiled128hh"
  | "subgroupMatrix"

/** The tiers a benchmark sweeps: all but the experimental tiled128hh and subgroupMatrix (tiled128h needs shader-f16). */
export const MATMUL_TIERS: ReadonlyArray<MatmulTier> = ["tiled64", "tiled64v4", "tiled128", "tiled128v4", "tiled128h"]

/** C = alpha·op(A)·op(B) + beta·C, with the tier that runs it. */
export interface Matmul {
  readonly kind: "matmul"
  readonly tier: MatmulTier
  readonly a: Tensor
  readonly b: Tensor
  readonly c: Tensor
  readonly bias: Tensor | undefined
  readonly m: number
  readonly n: number
  readonly k: number
  readonly transA: boolean
  readonly transB: boolean
  readonly alpha: number
  readonly beta: number
  /** Element offsets into a, b, c (views such as a chunk of rows). */
  readonly aOffset: number
  readonly bOffset: number
  readonly cOffset: number
  /** For the "subgroupMatrix" tier: the adapter configuration to generate for (from `Matmul.chooseTier`). */
  readonly subgroupMatrix: SubgroupMatrixShape | undefined
  /** Row strides (elements) of A, B, C as stored: by default their contiguous dims (k or m, n or k, n). */
  readonly lda: number
  readonly ldb: number
  readonly ldc: number
  /** Element offset into bias (a column block's share of it). */
  readonly biasOffset: number
}

/** C = alpha·op(A)·op(B) + beta·C + bias. transA: A is [K, M]; transB: B is [N, K]. */
export const matmul = (o: {
  a: Tensor
  b: Tensor
  c: Tensor
  m: number
  n: number
  k: number
  bias?: Tensor
  transA?: boolean
  transB?: boolean
  alpha?: number
  beta?: number
  aOffset?: number
  bOffset?: number
  cOffset?: number
  tier?: MatmulTier
  subgroupMatrix?: SubgroupMatrixShape | undefined
  lda?: number
  ldb?: number
  ldc?: number
  biasOffset?: number
}): Matmul => {
  const op: Matmul = {
    kind: "matmul",
    tier: o.tier ?? "tiled64",
    a: o.a,
    b: o.b,
    c: o.c,
    bias: o.bias,
    m: o.m,
    n: o.n,
    k: o.k,
    transA: o.transA ?? false,
    transB: o.transB ?? false,
    alpha: o.alpha ?? 1,
    beta: o.beta ?? 0,
    aOffset: o.aOffset ?? 0,
    bOffset: o.bOffset ?? 0,
    cOffset: o.cOffset ?? 0,
    subgroupMatrix: o.subgroupMatrix,
    lda: o.lda ?? ((o.transA ?? false) ? o.m : o.k),
    ldb: o.ldb ?? ((o.transB ?? false) ? o.k : o.n),
    ldc: o.ldc ?? o.n,
    biasOffset: o.biasOffset ?? 0
  }
  need(
    op.tier !== "subgroupMatrix" || op.subgroupMatrix !== undefined,
    "matmul: the subgroupMatrix tier needs the adapter configuration (use Matmul.chooseTier)"
  )
  // The last element each operand reaches, through its row stride.
  const [ar, ac] = op.transA ? [op.k, op.m] : [op.m, op.k]
  const [br, bc] = op.transB ? [op.n, op.k] : [op.k, op.n]
  need(op.lda >= ac && op.ldb >= bc && op.ldc >= op.n, "matmul: a row stride is shorter than its row")
  atLeast(op.a, op.aOffset + (ar - 1) * op.lda + ac, "matmul A")
  atLeast(op.b, op.bOffset + (br - 1) * op.ldb + bc, "matmul B")
  atLeast(op.c, op.cOffset + (op.m - 1) * op.ldc + op.n, "matmul C")
  if (op.bias !== undefined) atLeast(op.bias, op.biasOffset + op.n, "matmul bias")
  need(op.c.dtype === "f32", `matmul: C "${op.c.name}" must be f32`)
  // f16 operands are read as packed pairs along their contiguous dim: pairs must not straddle rows.
  if (op.a.dtype === "f16") {
    need(
      ac % 2 === 0 && op.lda % 2 === 0 && op.aOffset % 2 === 0,
      `matmul: f16 A "${op.a.name}" needs an even ${op.transA ? "m" : "k"}, row stride and offset`
    )
  }
  if (op.b.dtype === "f16") {
    need(
      bc % 2 === 0 && op.ldb % 2 === 0 && op.bOffset % 2 === 0,
      `matmul: f16 B "${op.b.name}" needs an even ${op.transB ? "k" : "n"}, row stride and offset`
    )
  }
  need(op.a !== op.c && op.b !== op.c, "matmul: C must not alias A or B")
  return op
}

// WGSL

/** Matmul tile: 64×64 outputs per 256-thread workgroup, 4×4 per thread, K staged 16 at a time. */
export const MM_TILE = { m: 64, n: 64, k: 16 } as const

/**
 * C[cOff + r·N + c] = alpha · Σ_k op(A)[r,k] · op(B)[k,c] (+ beta · C) (+ bias[c]).
 * op(A) = A[K,M]ᵀ when transA; op(B) = B[N,K]ᵀ when transB. Loads are arranged so neighbouring threads read
 * neighbouring addresses in every layout. `vec4` reads A and B with vec4 loads (needs K, M, N as the layout
 * requires to be multiples of 4 and 16-byte aligned offsets; the lowering checks).
 */
export const matmulShader = (o: { transA: boolean; transB: boolean; bias: boolean }) => {
  const { k: TK, m: TM, n: TN } = MM_TILE
  const loadA = o.transA
    ? `let r = idx % ${TM}u; let kk = idx / ${TM}u; let gr = row0 + r; let gk = k0 + kk;
      var v = 0.0; if (gr < p.m && gk < p.k) { v = A[p.aOff + gk * p.lda + gr]; }`
    : `let r = idx / ${TK}u; let kk = idx % ${TK}u; let gr = row0 + r; let gk = k0 + kk;
      var v = 0.0; if (gr < p.m && gk < p.k) { v = A[p.aOff + gr * p.lda + gk]; }`
  const loadB = o.transB
    ? `let bc = idx / ${TK}u; let bk = idx % ${TK}u; let gbk = k0 + bk; let gc = col0 + bc;
      var w = 0.0; if (gbk < p.k && gc < p.n) { w = B[p.bOff + gc * p.ldb + gbk]; }`
    : `let bk = idx / ${TN}u; let bc = idx % ${TN}u; let gbk = k0 + bk; let gc = col0 + bc;
      var w = 0.0; if (gbk < p.k && gc < p.n) { w = B[p.bOff + gbk * p.ldb + gc]; }`
  const bindings: Array<Binding> = [["A", "read"], ["B", "read"], ["C", "read_write"]]
  if (o.bias) bindings.push(["Bias", "read"])
  return header(
    "m: u32, n: u32, k: u32, aOff: u32, bOff: u32, cOff: u32, biasOff: u32, alpha: f32, beta: f32, lda: u32, ldb: u32, ldc: u32",
    bindings
  ) + `
var<workgroup> As: array<f32, ${TM * TK}>; // [TK][TM]
var<workgroup> Bs: array<f32, ${TK * TN}>; // [TK][TN]
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
  let tid = lid.y * 16u + lid.x;
  let row0 = wid.y * ${TM}u;
  let col0 = wid.x * ${TN}u;
  var acc: array<f32, 16>;
  for (var k0 = 0u; k0 < p.k; k0 += ${TK}u) {
    for (var q = 0u; q < 4u; q++) {
      let idx = tid + q * 256u;
      {
      ${loadA}
      As[kk * ${TM}u + r] = v;
      }
      {
      ${loadB}
      Bs[bk * ${TN}u + bc] = w;
      }
    }
    workgroupBarrier();
    for (var kk = 0u; kk < ${TK}u; kk++) {
      let a = vec4f(As[kk * ${TM}u + lid.y * 4u], As[kk * ${TM}u + lid.y * 4u + 1u],
                    As[kk * ${TM}u + lid.y * 4u + 2u], As[kk * ${TM}u + lid.y * 4u + 3u]);
      let b = vec4f(Bs[kk * ${TN}u + lid.x * 4u], Bs[kk * ${TN}u + lid.x * 4u + 1u],
                    Bs[kk * ${TN}u + lid.x * 4u + 2u], Bs[kk * ${TN}u + lid.x * 4u + 3u]);
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i * 4u + j] = fma(a[i], b[j], acc[i * 4u + j]);
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let r = row0 + lid.y * 4u + i;
    for (var j = 0u; j < 4u; j++) {
      let c = col0 + lid.x * 4u + j;
      if (r < p.m && c < p.n) {
        let at = p.cOff + r * p.ldc + c;
        var v = p.alpha * acc[i * 4u + j];
        if (p.beta != 0.0) { v += p.beta * C[at]; }
        ${o.bias ? "v += Bias[p.biasOff + c];" : ""}
        C[at] = v;
      }
    }
  }
}`
}

/** A register + workgroup tiling: tm×tn outputs per 256-thread workgroup, K staged tk at a time. */
export interface MatmulTiling {
  readonly tm: number
  readonly tn: number
  readonly tk: number
  /** Read f32 operands from global memory as vec4 (needs the contiguous dims and offsets to be multiples of 4). */
  readonly vec4: boolean
  /** Operands stored as packed f16 pairs (half the bytes; f32 accumulation). Needs even contiguous dims/offsets. */
  readonly f16A?: boolean
  readonly f16B?: boolean
  /**
   * With shader-f16 (`enable f16;`): f16 operands are read as `vec4<f16>` (needs their contiguous dim and offset
   * to be multiples of 4) and staged as f16 in workgroup memory (half the bytes of an f32 tile); products and
   * sums stay f32.
   */
  readonly shaderF16?: boolean
  /**
   * With shaderF16 and both operands f16: products and the sums within each K step of tk are f16 (packed
   * `vec2<f16>` fma, twice the FMA rate on GPUs with packed half math), added into f32 accumulators once per K
   * step. Less exact than f32 accumulation (each partial sum of tk products rounds to 11 bits).
   */
  readonly f16Math?: boolean
}

// Vector lanes are stored with constant swizzles: a loop indexing v[e] compiled ~20 s on lavapipe's LLVM.
const LANES = ["x", "y", "z", "w"]

const lanes = (w: number, f: (e: number, c: string) => string) =>
  w === 1 ? f(0, "") : LANES.slice(0, w).map((c, e) => f(e, `.${c}`)).join(" ")

/**
 * How one operand is read: `width` elements per load, WGSL element type, fetch expression and zero, and the
 * element type of its workgroup tile (f16 only with shader-f16; registers are always f32).
 */
const operand = (name: string, f16: boolean, vec4: boolean, shaderF16: boolean) =>
  f16 && shaderF16
    ? { width: 4, type: "vec4<f16>", fetch: (i: string) => `${name}[${i}]`, zero: "vec4<f16>(0.0h)", tile: "f16" }
    : f16
    ? { width: 2, type: "u32", fetch: (i: string) => `unpack2x16float(${name}[${i}])`, zero: "vec2f(0.0)", tile: "f32" }
    : vec4
    ? { width: 4, type: "vec4f", fetch: (i: string) => `${name}[${i}]`, zero: "vec4f(0.0)", tile: "f32" }
    : { width: 1, type: "f32", fetch: (i: string) => `${name}[${i}]`, zero: "0.0", tile: "f32" }

/**
 * General tiled matmul with the same parameters and epilogue as {@link matmul}. Each of the 16×16 threads
 * owns (tm/16)×(tn/16) outputs strided by 16, so neighbouring threads read neighbouring workgroup-memory
 * words (no bank conflicts) and write neighbouring outputs. Global loads read 1, 2 (packed f16) or 4 (vec4)
 * elements along each operand's contiguous dimension.
 */
export const matmulTiledShader = (o: { transA: boolean; transB: boolean; bias: boolean }, t: MatmulTiling) => {
  const { tk: TK, tm: TM, tn: TN } = t
  const RM = TM / 16
  const RN = TN / 16
  const half = t.shaderF16 === true
  const A = operand("A", t.f16A === true, t.vec4, half)
  const B = operand("B", t.f16B === true, t.vec4, half)
  const wa = A.width
  const wb = B.width
  const loadA = o.transA
    ? `let kk = idx / ${TM / wa}u; let mq = idx % ${TM / wa}u; let gr = row0 + mq * ${wa}u; let gk = k0 + kk;
      var v = ${A.zero}; if (gr < p.m && gk < p.k) { v = ${A.fetch(`(p.aOff + gk * p.lda + gr) / ${wa}u`)}; }
      ${lanes(wa, (e, c) => `As[kk * ${TM}u + mq * ${wa}u + ${e}u] = v${c};`)}`
    : `let r = idx / ${TK / wa}u; let kq = idx % ${TK / wa}u; let gr = row0 + r; let gk = k0 + kq * ${wa}u;
      var v = ${A.zero}; if (gr < p.m && gk < p.k) { v = ${A.fetch(`(p.aOff + gr * p.lda + gk) / ${wa}u`)}; }
      ${lanes(wa, (e, c) => `As[(kq * ${wa}u + ${e}u) * ${TM}u + r] = v${c};`)}`
  const loadB = o.transB
    ? `let bc = idx / ${TK / wb}u; let kq = idx % ${TK / wb}u; let gc = col0 + bc; let gk = k0 + kq * ${wb}u;
      var w = ${B.zero}; if (gk < p.k && gc < p.n) { w = ${B.fetch(`(p.bOff + gc * p.ldb + gk) / ${wb}u`)}; }
      ${lanes(wb, (e, c) => `Bs[(kq * ${wb}u + ${e}u) * ${TN}u + bc] = w${c};`)}`
    : `let bk = idx / ${TN / wb}u; let nq = idx % ${TN / wb}u; let gbk = k0 + bk; let gc = col0 + nq * ${wb}u;
      var w = ${B.zero}; if (gbk < p.k && gc < p.n) { w = ${B.fetch(`(p.bOff + gbk * p.ldb + gc) / ${wb}u`)}; }
      ${lanes(wb, (e, c) => `Bs[bk * ${TN}u + nq * ${wb}u + ${e}u] = w${c};`)}`
  const bias = o.bias ? "\n@group(0) @binding(4) var<storage, read> Bias: array<f32>;" : ""
  const enable = A.tile === "f16" || B.tile === "f16" ? "enable f16;\n" : ""
  return `${enable}struct P { m: u32, n: u32, k: u32, aOff: u32, bOff: u32, cOff: u32, biasOff: u32, alpha: f32, beta: f32, lda: u32, ldb: u32, ldc: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> A: array<${A.type}>;
@group(0) @binding(2) var<storage, read> B: array<${B.type}>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;${bias}
var<workgroup> As: array<${A.tile}, ${TM * TK}>; // [TK][TM]
var<workgroup> Bs: array<${B.tile}, ${TK * TN}>; // [TK][TN]
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
  let tid = lid.y * 16u + lid.x;
  let row0 = wid.y * ${TM}u;
  let col0 = wid.x * ${TN}u;
  var acc: array<f32, ${RM * RN}>;
  ${
    t.f16Math === true
      ? `var a: array<f16, ${RM}>;
  var b: array<vec2<f16>, ${RN / 2}>;
  var part: array<vec2<f16>, ${(RM * RN) / 2}>;`
      : `var a: array<f32, ${RM}>;
  var b: array<f32, ${RN}>;`
  }
  for (var k0 = 0u; k0 < p.k; k0 += ${TK}u) {
    for (var q = 0u; q < ${(TM * TK) / (256 * wa)}u; q++) {
      let idx = tid + q * 256u;
      ${loadA}
    }
    for (var q = 0u; q < ${(TK * TN) / (256 * wb)}u; q++) {
      let idx = tid + q * 256u;
      ${loadB}
    }
    workgroupBarrier();
    ${t.f16Math === true ? f16Inner(TM, TN, TK, RM, RN) : f32Inner(TM, TN, TK, RM, RN)}
    workgroupBarrier();
  }
  for (var i = 0u; i < ${RM}u; i++) {
    let r = row0 + lid.y + i * 16u;
    for (var j = 0u; j < ${RN}u; j++) {
      let c = col0 + lid.x + j * 16u;
      if (r < p.m && c < p.n) {
        let at = p.cOff + r * p.ldc + c;
        var v = p.alpha * acc[i * ${RN}u + j];
        if (p.beta != 0.0) { v += p.beta * C[at]; }
        ${o.bias ? "v += Bias[p.biasOff + c];" : ""}
        C[at] = v;
      }
    }
  }
}`
}

/** The register-tile inner loop over one K step: f32 products and sums. */
const f32Inner = (TM: number, TN: number, TK: number, RM: number, RN: number) =>
  `for (var kk = 0u; kk < ${TK}u; kk++) {
      for (var i = 0u; i < ${RM}u; i++) { a[i] = f32(As[kk * ${TM}u + lid.y + i * 16u]); }
      for (var j = 0u; j < ${RN}u; j++) { b[j] = f32(Bs[kk * ${TN}u + lid.x + j * 16u]); }
      for (var i = 0u; i < ${RM}u; i++) {
        for (var j = 0u; j < ${RN}u; j++) {
          acc[i * ${RN}u + j] = fma(a[i], b[j], acc[i * ${RN}u + j]);
        }
      }
    }`

/** The same with f16 products summed in packed pairs over the K step, then added to the f32 accumulators. */
const f16Inner = (TM: number, TN: number, TK: number, RM: number, RN: number) =>
  `for (var e = 0u; e < ${(RM * RN) / 2}u; e++) { part[e] = vec2<f16>(0.0h); }
    for (var kk = 0u; kk < ${TK}u; kk++) {
      for (var i = 0u; i < ${RM}u; i++) { a[i] = As[kk * ${TM}u + lid.y + i * 16u]; }
      for (var j = 0u; j < ${RN / 2}u; j++) {
        b[j] = vec2<f16>(Bs[kk * ${TN}u + lid.x + 2u * j * 16u], Bs[kk * ${TN}u + lid.x + (2u * j + 1u) * 16u]);
      }
      for (var i = 0u; i < ${RM}u; i++) {
        for (var j = 0u; j < ${RN / 2}u; j++) {
          part[i * ${RN / 2}u + j] = fma(vec2<f16>(a[i]), b[j], part[i * ${RN / 2}u + j]);
        }
      }
    }
    for (var i = 0u; i < ${RM}u; i++) {
      for (var j = 0u; j < ${RN / 2}u; j++) {
        let s = vec2f(part[i * ${RN / 2}u + j]);
        acc[i * ${RN}u + 2u * j] += s.x;
        acc[i * ${RN}u + 2u * j + 1u] += s.y;
      }
    }`

// Lowering

const matmulParams = (op: Matmul) => [
  u(op.m),
  u(op.n),
  u(op.k),
  u(op.aOffset),
  u(op.bOffset),
  u(op.cOffset),
  u(op.biasOffset),
  f(op.alpha),
  f(op.beta),
  u(op.lda),
  u(op.ldb),
  u(op.ldc)
]

/** The tiling of a matmul's tier (undefined: the original 64×64 kernel); vec4 only where alignment allows. */
const matmulTiling = (op: Matmul): MatmulTiling | undefined => {
  const f16A = op.a.dtype === "f16"
  const f16B = op.b.dtype === "f16"
  if (op.tier === "tiled64" && !f16A && !f16B) return undefined
  // vec4 applies to f32 operands; both must be aligned (one flag for the pair keeps the pipeline count down).
  const quad = (contiguous: number, ld: number, offset: number) =>
    contiguous % 4 === 0 && ld % 4 === 0 && offset % 4 === 0
  const aContiguous = op.transA ? op.m : op.k
  const bContiguous = op.transB ? op.k : op.n
  const aligned = (f16A || (quad(aContiguous, op.lda, op.aOffset) && op.a.offset % 16 === 0)) &&
    (f16B || (quad(bContiguous, op.ldb, op.bOffset) && op.b.offset % 16 === 0))
  // The subgroup-matrix tier falls back to the shader-f16 tier where it does not apply (an f32 operand).
  if (op.tier === "tiled128h" || op.tier === "tiled128hh" || op.tier === "subgroupMatrix") {
    // vec4<f16> loads: 4 halves (8 bytes) along the contiguous dim of each f16 operand.
    const half4 = (!f16A || (quad(aContiguous, op.lda, op.aOffset) && op.a.offset % 8 === 0)) &&
      (!f16B || (quad(bContiguous, op.ldb, op.bOffset) && op.b.offset % 8 === 0))
    const shaderF16 = (f16A || f16B) && half4
    const f16Math = op.tier === "tiled128hh" && shaderF16 && f16A && f16B
    return {
      tm: 128,
      tn: 128,
      tk: shaderF16 ? 16 : 8,
      vec4: aligned && !(f16A && f16B),
      f16A,
      f16B,
      shaderF16,
      ...(f16Math ? { f16Math } : {})
    }
  }
  const size = op.tier.startsWith("tiled128") ? { tm: 128, tn: 128, tk: 8 } : { tm: 64, tn: 64, tk: 16 }
  return { ...size, vec4: op.tier.endsWith("v4") && aligned, f16A, f16B }
}

/** The dispatches of a `matmul` op. */
export const lowerMatmul = (op: Matmul): Array<DispatchSpec> => {
  const flags = { transA: op.transA, transB: op.transB, bias: op.bias !== undefined }
  if (
    op.tier === "subgroupMatrix" && op.subgroupMatrix !== undefined && op.a.dtype === "f16" && op.b.dtype === "f16"
  ) {
    const sm = op.subgroupMatrix
    const tile = SM.tileOf(sm)
    return [{
      label: `matmul_${op.transA ? "T" : "N"}${op.transB ? "T" : "N"}${
        op.bias ? "_bias" : ""
      }_sgmat${sm.m}x${sm.n}x${sm.k}`,
      code: SM.matmulSubgroupMatrix(flags, sm),
      bindings: op.bias === undefined ? [op.a, op.b, op.c] : [op.a, op.b, op.c, op.bias],
      params: matmulParams(op),
      groups: [Math.ceil(op.n / tile.tn), Math.ceil(op.m / tile.tm), 1],
      flops: 2 * op.m * op.n * op.k,
      bytes: 2 * op.m * op.k + 2 * op.k * op.n + 4 * op.m * op.n * (op.beta !== 0 ? 2 : 1),
      features: ["chromium-experimental-subgroup-matrix", "shader-f16", "subgroups"]
    }]
  }
  const tiling = matmulTiling(op)
  const half = `${tiling?.f16A === true ? "_f16a" : ""}${tiling?.f16B === true ? "_f16b" : ""}`
  const shaderF16 = tiling?.shaderF16 === true
  const h = shaderF16 ? (tiling?.f16Math === true ? "hh" : "h") : ""
  const tier = tiling === undefined ? "" : `_${tiling.tm}${h}${tiling.vec4 ? "v4" : ""}${half}`
  const label = `matmul_${op.transA ? "T" : "N"}${op.transB ? "T" : "N"}${op.bias ? "_bias" : ""}${tier}`
  const tile = tiling ?? { tm: MM_TILE.m, tn: MM_TILE.n }
  return [{
    label,
    code: tiling === undefined ? matmulShader(flags) : matmulTiledShader(flags, tiling),
    bindings: op.bias === undefined ? [op.a, op.b, op.c] : [op.a, op.b, op.c, op.bias],
    params: matmulParams(op),
    groups: [Math.ceil(op.n / tile.tn), Math.ceil(op.m / tile.tm), 1],
    flops: 2 * op.m * op.n * op.k,
    bytes: op.a.bytes / op.a.size * op.m * op.k + op.b.bytes / op.b.size * op.k * op.n +
      4 * op.m * op.n * (op.beta !== 0 ? 2 : 1),
    ...(shaderF16 ? { features: ["shader-f16"] } : {})
  }]
}

// CPU specification

type Num = ArrayLike<number>

/** C[M,N] = A[M,K] · B[K,N], all row-major. */
export const cpuMatmul = (
  a: Float32Array,
  b: Float32Array,
  m: number,
  n: number,
  k: number
): Float32Array => {
  const c = new Float32Array(m * n)
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let p = 0; p < k; p++) acc += a[i * k + p] * b[p * n + j]
      c[i * n + j] = acc
    }
  }
  return c
}

/** Shape and epilogue of a general multiply: C = alpha · op(A) · op(B) (+ beta · C) (+ bias). */
export interface GemmSpec {
  readonly m: number
  readonly n: number
  readonly k: number
  /** A is stored [K, M] (so op(A) = Aᵀ). */
  readonly transA?: boolean
  /** B is stored [N, K] (so op(B) = Bᵀ). */
  readonly transB?: boolean
  readonly alpha?: number
  readonly beta?: number
}

/** C = alpha · op(A)·op(B) + beta · C0 + bias (bias broadcast over rows). */
export const gemm = (a: Num, b: Num, s: GemmSpec, c0?: Num, bias?: Num): Float64Array => {
  const { k, m, n } = s
  const alpha = s.alpha ?? 1
  const beta = s.beta ?? 0
  const c = new Float64Array(m * n)
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let p = 0; p < k; p++) {
        const x = s.transA === true ? a[p * m + i] : a[i * k + p]
        const y = s.transB === true ? b[j * k + p] : b[p * n + j]
        acc += x * y
      }
      let v = alpha * acc
      if (beta !== 0 && c0 !== undefined) v += beta * c0[i * n + j]
      if (bias !== undefined) v += bias[j]
      c[i * n + j] = v
    }
  }
  return c
}

// CPU twin

/** Runs a `matmul` op on a host arena with the CPU specification. */
export const twinMatmul = (h: HostArena, op: Matmul): void => {
  const [ar, ac] = op.transA ? [op.k, op.m] : [op.m, op.k]
  const [br, bc] = op.transB ? [op.n, op.k] : [op.k, op.n]
  const c = strided(h, op.c, op.cOffset, op.m, op.n, op.ldc)
  const out = gemm(
    strided(h, op.a, op.aOffset, ar, ac, op.lda),
    strided(h, op.b, op.bOffset, br, bc, op.ldb),
    op,
    op.beta !== 0 ? c : undefined,
    op.bias === undefined ? undefined : view(h, op.bias, op.biasOffset, op.n)
  )
  for (let r = 0; r < op.m; r++) {
    view(h, op.c, op.cOffset + r * op.ldc, op.n).set(out.subarray(r * op.n, (r + 1) * op.n))
  }
}
