/**
 * WGSL sources of the kernels. Binding 0 of every kernel is its uniform parameter block (one 256-byte slot of
 * the program's parameter buffer); bindings 1.. are tensors, in the order the lowering lists them.
 * Large 1-D launches use a 2-D grid (the per-dimension limit is 65535 workgroups): the linear workgroup index
 * is `wid.y * nwg.x + wid.x`.
 */

type Access = "read" | "read_write"
type Binding = readonly [name: string, access: Access, type?: "f32" | "u32"]

const header = (params: string, bindings: ReadonlyArray<Binding>) =>
  `struct P { ${params} }\n@group(0) @binding(0) var<uniform> p: P;\n` +
  bindings.map(([name, access, type], i) =>
    `@group(0) @binding(${i + 1}) var<storage, ${access}> ${name}: array<${type ?? "f32"}>;`
  ).join("\n") + "\n"

const builtins =
  "@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32"
const linear = (wg: number) => `let wg = wid.y * nwg.x + wid.x;\n  let i = wg * ${wg}u + lid;`

/** y = beta·y + alpha·x (beta = 0 writes without reading y). Also a fill when bound with x = y and alpha = 0. */
export const axpy = header("n: u32, alpha: f32, beta: f32", [["X", "read"], ["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  var v = p.alpha * X[i];
  if (p.beta != 0.0) { v += p.beta * Y[i]; }
  Y[i] = v;
}`

export const fill = header("n: u32, value: f32", [["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  Y[i] = p.value;
}`

/** Matmul tile: 64×64 outputs per 256-thread workgroup, 4×4 per thread, K staged 16 at a time. */
export const MM_TILE = { m: 64, n: 64, k: 16 } as const

/**
 * C[cOff + r·N + c] = alpha · Σ_k op(A)[r,k] · op(B)[k,c] (+ beta · C) (+ bias[c]).
 * op(A) = A[K,M]ᵀ when transA; op(B) = B[N,K]ᵀ when transB. Loads are arranged so neighbouring threads read
 * neighbouring addresses in every layout. `vec4` reads A and B with vec4 loads (needs K, M, N as the layout
 * requires to be multiples of 4 and 16-byte aligned offsets; the lowering checks).
 */
export const matmul = (o: { transA: boolean; transB: boolean; bias: boolean }) => {
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
export const matmulTiled = (o: { transA: boolean; transB: boolean; bias: boolean }, t: MatmulTiling) => {
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

/** f32 → packed f16 pairs (round to nearest even), and back. n counts elements. */
export const castToF16 = header("n: u32", [["X", "read"], ["Y", "read_write", "u32"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (2u * i >= p.n) { return; }
  var hi = 0.0;
  if (2u * i + 1u < p.n) { hi = X[2u * i + 1u]; }
  Y[i] = pack2x16float(vec2f(X[2u * i], hi));
}`

export const castToF32 = header("n: u32", [["X", "read", "u32"], ["Y", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (2u * i >= p.n) { return; }
  let v = unpack2x16float(X[i]);
  Y[2u * i] = v.x;
  if (2u * i + 1u < p.n) { Y[2u * i + 1u] = v.y; }
}`

/**
 * Gather of table rows; the table may be a row block holding vocabulary rows [row0, row0 + vocab): other ids
 * get zeros when `zero` is set, and are left alone otherwise (another block writes them).
 */
export const embedding = header("n: u32, dim: u32, vocab: u32, row0: u32, zero: u32", [
  ["Table", "read"],
  ["Ids", "read", "u32"],
  ["Out", "read_write"]
]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let t = i / p.dim;
  let id = Ids[t];
  if (id >= p.row0 && id - p.row0 < p.vocab) {
    Out[i] = Table[(id - p.row0) * p.dim + i % p.dim];
  } else if (p.zero != 0u) {
    Out[i] = 0.0;
  }
}`

/**
 * Deterministic embedding backward without float atomics: one workgroup per token position; only the first
 * occurrence of each id does work, summing dOut over every later position with the same id in increasing
 * order, so each table row has exactly one writer and a fixed summation order.
 */
export const embeddingBackward = header("tokens: u32, dim: u32, vocab: u32, row0: u32", [["Ids", "read", "u32"], [
  "DOut",
  "read"
], ["DTable", "read_write"]]) + `
var<workgroup> flag: array<u32, 64>;
@compute @workgroup_size(64) fn main(${builtins}) {
  let t = wid.y * nwg.x + wid.x;
  if (t >= p.tokens) { return; }
  let id = Ids[t];
  if (id < p.row0 || id - p.row0 >= p.vocab) { return; }
  let row = id - p.row0;
  var seen = 0u;
  for (var s = lid; s < t; s += 64u) { if (Ids[s] == id) { seen = 1u; } }
  flag[lid] = seen;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) { flag[lid] = flag[lid] | flag[lid + w]; }
    workgroupBarrier();
  }
  let earlier = workgroupUniformLoad(&flag[0]);
  if (earlier != 0u) { return; }
  for (var t0 = t; t0 < p.tokens; t0 += 64u) {
    let s = t0 + lid;
    var hit = 0u;
    if (s < p.tokens) { if (Ids[s] == id) { hit = 1u; } }
    workgroupBarrier();
    flag[lid] = hit;
    workgroupBarrier();
    for (var d = lid; d < p.dim; d += 64u) {
      var acc = DTable[row * p.dim + d];
      for (var j = 0u; j < 64u; j++) {
        if (flag[j] != 0u) { acc += DOut[(t0 + j) * p.dim + d]; }
      }
      DTable[row * p.dim + d] = acc;
    }
  }
}`

const reduce64 = (arr: string, op: (a: string, b: string) => string) => `
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) { ${arr}[lid] = ${op(`${arr}[lid]`, `${arr}[lid + w]`)}; }
    workgroupBarrier();
  }`

/** One 64-thread workgroup per row: rstd = 1/sqrt(mean(x²)+eps), y = x·rstd·w. */
export const rmsNorm = header("rows: u32, dim: u32, eps: f32", [["X", "read"], ["W", "read"], ["Y", "read_write"], [
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
export const rmsNormBackwardX = header("rows: u32, dim: u32, beta: f32", [
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
export const rmsNormBackwardWPartial = header("rows: u32, dim: u32, rowsPerBlock: u32", [["X", "read"], ["R", "read"], [
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
export const rmsNormBackwardWFinish = header("dim: u32, blocks: u32", [["Part", "read"], ["DW", "read_write"]]) + `
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.dim) { return; }
  var acc = 0.0;
  for (var b = 0u; b < p.blocks; b++) { acc += Part[b * p.dim + i]; }
  DW[i] += acc;
}`

/** In-place rotate_half RoPE over x[tokens, heads, headDim]; sign −1 is the backward (inverse) rotation. */
export const rope = header("tokens: u32, heads: u32, headDim: u32, theta: f32, sign: f32", [["X", "read_write"], [
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

const attnParams = "batch: u32, seq: u32, heads: u32, kvHeads: u32, scale: f32"
/** Packed variants bind the positions last and mask keys before i − pos[i] (the query's sequence start). */
const pos = (packed: boolean, bindings: Array<Binding>): Array<Binding> =>
  packed ? [...bindings, ["Pos", "read", "u32"]] : bindings
const start = (packed: boolean) =>
  packed
    ? `fn segStart(b: u32, i: u32) -> u32 { let q = Pos[b * p.seq + i]; return select(i - q, 0u, q > i); }`
    : `fn segStart(b: u32, i: u32) -> u32 { return 0u; }`

/**
 * Causal GQA forward, streaming (online) softmax: one invocation per (token, head) walks keys 0..i, keeping
 * the running max, normaliser and output in registers; saves lse = max + log(sum).
 */
export const attention = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["O", "read_write"], ["L", "read_write"]])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.heads) { return; }
  let h = i % p.heads;
  let tok = i / p.heads;
  let b = tok / p.seq;
  let qi = tok % p.seq;
  let g = h / (p.heads / p.kvHeads);
  let qBase = i * HD;
  var q: array<f32, HD>;
  var acc: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { q[d] = Q[qBase + d] * p.scale; acc[d] = 0.0; }
  var mx = -3.0e38;
  var l = 0.0;
  for (var j = segStart(b, qi); j <= qi; j++) {
    let kBase = ((b * p.seq + j) * p.kvHeads + g) * HD;
    var s = 0.0;
    for (var d = 0u; d < HD; d++) { s = fma(q[d], K[kBase + d], s); }
    let mNew = max(mx, s);
    let corr = exp(mx - mNew);
    let e = exp(s - mNew);
    l = l * corr + e;
    for (var d = 0u; d < HD; d++) { acc[d] = fma(e, V[kBase + d], acc[d] * corr); }
    mx = mNew;
  }
  for (var d = 0u; d < HD; d++) { O[qBase + d] = acc[d] / l; }
  L[i] = mx + log(l);
}`

/**
 * Stages rows [row0, row0 + rows) of two [batch, seq, heads, HD] tensors of one head into workgroup tiles
 * (zeros past the sequence end), 64 threads striding over rows·HD elements. Shared by every tiled attention
 * kernel for its K/V tiles (and Q/dO tiles): `x` and `y` are [source, tile, tile row stride, scale].
 */
const stageRows = (o: {
  readonly rows: string
  readonly row0: string
  readonly heads: string
  readonly head: string
  readonly x: readonly [src: string, tile: string, stride: string, scale?: string]
  readonly y: readonly [src: string, tile: string, stride: string]
}) => {
  const [xs, xt, xStride, xScale] = o.x
  const [ys, yt, yStride] = o.y
  return `for (var e = lid; e < ${o.rows} * HD; e += 64u) {
      let tr = e / HD;
      let td = e % HD;
      var xv = 0.0;
      var yv = 0.0;
      if (${o.row0} + tr < p.seq) {
        let at = ((b * p.seq + ${o.row0} + tr) * ${o.heads} + ${o.head}) * HD + td;
        xv = ${xs}[at]${xScale === undefined ? "" : ` * ${xScale}`};
        yv = ${ys}[at];
      }
      ${xt}[tr * ${xStride} + td] = xv;
      ${yt}[tr * ${yStride} + td] = yv;
    }`
}
const kvTile = (rows: string, kStride: string, vStride: string) =>
  stageRows({ rows, row0: "k0", heads: "p.kvHeads", head: "g", x: ["K", "Ks", kStride], y: ["V", "Vs", vStride] })

/** Query and key rows per tile of the tiled attention forward. */
export const ATTN_TILE = 16

/**
 * Tiled causal GQA forward (FlashAttention-style): one 64-thread workgroup per (batch, head, 16 queries)
 * stages the query block and 16-key K/V tiles in workgroup memory, computes the 16×16 score tile (4 per
 * thread), updates each row's running max / normaliser (online softmax), and accumulates the output with
 * each thread owning headDim/4 columns of one row. K rows are padded by one word against bank conflicts.
 * Saves lse = max + log(sum). Needs headDim % 4 = 0 and 48·headDim + 16·17 words of workgroup memory.
 */
export const attentionTiled = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["O", "read_write"], ["L", "read_write"]])
  ) + `
const HD = ${hd}u;
const KS = ${hd + 1}u;
const BQ = ${ATTN_TILE}u;
const BK = ${ATTN_TILE}u;
const CPT = ${hd / 4}u;
${start(packed)}
var<workgroup> Qs: array<f32, ${ATTN_TILE * hd}>;
var<workgroup> Ks: array<f32, ${ATTN_TILE * (hd + 1)}>;
var<workgroup> Vs: array<f32, ${ATTN_TILE * hd}>;
var<workgroup> S: array<f32, ${ATTN_TILE * ATTN_TILE}>;
var<workgroup> rowM: array<f32, ${ATTN_TILE}>;
var<workgroup> rowL: array<f32, ${ATTN_TILE}>;
var<workgroup> rowC: array<f32, ${ATTN_TILE}>;
var<workgroup> rowStart: array<u32, ${ATTN_TILE}>;
var<workgroup> lo: u32;
@compute @workgroup_size(64) fn main(${builtins}) {
  let wg = wid.y * nwg.x + wid.x;
  let nqb = (p.seq + BQ - 1u) / BQ;
  if (wg >= p.batch * p.heads * nqb) { return; }
  let qb = wg % nqb;
  let h = (wg / nqb) % p.heads;
  let b = wg / (nqb * p.heads);
  let g = h / (p.heads / p.kvHeads);
  let q0 = qb * BQ;
  for (var e = lid; e < BQ * HD; e += 64u) {
    let qi = q0 + e / HD;
    var v = 0.0;
    if (qi < p.seq) { v = Q[((b * p.seq + qi) * p.heads + h) * HD + e % HD] * p.scale; }
    Qs[e] = v;
  }
  if (lid < BQ) {
    rowM[lid] = -3.0e38;
    rowL[lid] = 0.0;
    rowStart[lid] = segStart(b, min(q0 + lid, p.seq - 1u));
  }
  workgroupBarrier();
  if (lid == 0u) {
    var m = rowStart[0];
    for (var r = 1u; r < BQ; r++) { m = min(m, rowStart[r]); }
    lo = m;
  }
  let kFirst = workgroupUniformLoad(&lo) / BK;
  let kLast = min(q0 + BQ - 1u, p.seq - 1u) / BK;
  let orow = lid / 4u;
  let ocol = lid % 4u;
  let qi = q0 + orow;
  var acc: array<f32, CPT>;
  for (var c = 0u; c < CPT; c++) { acc[c] = 0.0; }
  for (var kb = kFirst; kb <= kLast; kb++) {
    let k0 = kb * BK;
    ${kvTile("BK", "KS", "HD")}
    workgroupBarrier();
    for (var c = 0u; c < 4u; c++) {
      let kj = ocol * 4u + c;
      var s = 0.0;
      for (var d = 0u; d < HD; d++) { s = fma(Qs[orow * HD + d], Ks[kj * KS + d], s); }
      let key = k0 + kj;
      if (qi >= p.seq || key > qi || key < rowStart[orow]) { s = -3.0e38; }
      S[orow * BK + kj] = s;
    }
    workgroupBarrier();
    if (lid < BQ) {
      var m = rowM[lid];
      for (var j = 0u; j < BK; j++) { m = max(m, S[lid * BK + j]); }
      let corr = exp(rowM[lid] - m);
      var l = rowL[lid] * corr;
      for (var j = 0u; j < BK; j++) {
        let s = S[lid * BK + j];
        var pr = 0.0;
        if (s > -1.0e38) { pr = exp(s - m); }
        S[lid * BK + j] = pr;
        l += pr;
      }
      rowM[lid] = m;
      rowL[lid] = l;
      rowC[lid] = corr;
    }
    workgroupBarrier();
    let corr = rowC[orow];
    for (var c = 0u; c < CPT; c++) {
      let d = ocol + 4u * c;
      var a = acc[c] * corr;
      for (var j = 0u; j < BK; j++) { a = fma(S[orow * BK + j], Vs[j * HD + d], a); }
      acc[c] = a;
    }
    workgroupBarrier();
  }
  if (qi < p.seq) {
    let l = rowL[orow];
    let base = ((b * p.seq + qi) * p.heads + h) * HD;
    for (var c = 0u; c < CPT; c++) { O[base + ocol + 4u * c] = acc[c] / l; }
    if (ocol == 0u) { L[(b * p.seq + qi) * p.heads + h] = rowM[orow] + log(l); }
  }
}`

/**
 * Tiled dQ: one 64-thread workgroup per (batch, head, 16 queries); Q and dO blocks and 8-key K/V tiles in
 * workgroup memory (rows padded by one word); each thread computes two dS entries per tile, then accumulates
 * headDim/4 columns of one dQ row. No atomics.
 */
export const attentionBackwardQTiled = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["DO", "read"], ["L", "read"], ["Dl", "read"], [
      "DQ",
      "read_write"
    ]])
  ) + `
const HD = ${hd}u;
const QS = ${hd + 1}u;
const BQ = 16u;
const BK = 8u;
const CPT = ${hd / 4}u;
${start(packed)}
var<workgroup> Qs: array<f32, ${16 * (hd + 1)}>;
var<workgroup> dOs: array<f32, ${16 * (hd + 1)}>;
var<workgroup> Ks: array<f32, ${8 * (hd + 1)}>;
var<workgroup> Vs: array<f32, ${8 * (hd + 1)}>;
var<workgroup> dS: array<f32, 128>;
var<workgroup> rowL: array<f32, 16>;
var<workgroup> rowD: array<f32, 16>;
var<workgroup> rowStart: array<u32, 16>;
var<workgroup> lo: u32;
@compute @workgroup_size(64) fn main(${builtins}) {
  let wg = wid.y * nwg.x + wid.x;
  let nqb = (p.seq + BQ - 1u) / BQ;
  if (wg >= p.batch * p.heads * nqb) { return; }
  let qb = wg % nqb;
  let h = (wg / nqb) % p.heads;
  let b = wg / (nqb * p.heads);
  let g = h / (p.heads / p.kvHeads);
  let q0 = qb * BQ;
  ${
    stageRows({
      rows: "BQ",
      row0: "q0",
      heads: "p.heads",
      head: "h",
      x: ["Q", "Qs", "QS", "p.scale"],
      y: ["DO", "dOs", "QS"]
    })
  }
  if (lid < BQ) {
    let q = min(q0 + lid, p.seq - 1u);
    let row = (b * p.seq + q) * p.heads + h;
    rowL[lid] = L[row];
    rowD[lid] = Dl[row];
    rowStart[lid] = segStart(b, q);
  }
  workgroupBarrier();
  if (lid == 0u) {
    var m = rowStart[0];
    for (var r = 1u; r < BQ; r++) { m = min(m, rowStart[r]); }
    lo = m;
  }
  let kFirst = workgroupUniformLoad(&lo) / BK;
  let kLast = min(q0 + BQ - 1u, p.seq - 1u) / BK;
  let orow = lid / 4u;
  let ocol = lid % 4u;
  var acc: array<f32, CPT>;
  for (var c = 0u; c < CPT; c++) { acc[c] = 0.0; }
  for (var kb = kFirst; kb <= kLast; kb++) {
    let k0 = kb * BK;
    ${kvTile("BK", "QS", "QS")}
    workgroupBarrier();
    for (var c = 0u; c < 2u; c++) {
      let idx = lid * 2u + c;
      let row = idx / BK;
      let kj = idx % BK;
      var s = 0.0;
      var dp = 0.0;
      for (var d = 0u; d < HD; d++) {
        s = fma(Qs[row * QS + d], Ks[kj * QS + d], s);
        dp = fma(dOs[row * QS + d], Vs[kj * QS + d], dp);
      }
      let q = q0 + row;
      let key = k0 + kj;
      var ds = 0.0;
      if (q < p.seq && key <= q && key >= rowStart[row]) { ds = exp(s - rowL[row]) * (dp - rowD[row]); }
      dS[row * BK + kj] = ds;
    }
    workgroupBarrier();
    for (var c = 0u; c < CPT; c++) {
      let d = ocol + 4u * c;
      var a = acc[c];
      for (var j = 0u; j < BK; j++) { a = fma(dS[orow * BK + j], Ks[j * QS + d], a); }
      acc[c] = a;
    }
    workgroupBarrier();
  }
  let qi = q0 + orow;
  if (qi < p.seq) {
    let base = ((b * p.seq + qi) * p.heads + h) * HD;
    for (var c = 0u; c < CPT; c++) { DQ[base + ocol + 4u * c] = acc[c] * p.scale; }
  }
}`

/**
 * Tiled dK, dV: one 64-thread workgroup per (batch, kv head, 16 keys) keeps its K/V tile in workgroup memory
 * and sweeps every query head of its group and 8-query tiles from the tile's first key on; each thread owns
 * headDim/4 columns of one key row for both dK and dV. No atomics.
 */
export const attentionBackwardKVTiled = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["DO", "read"], ["L", "read"], ["Dl", "read"], [
      "DK",
      "read_write"
    ], ["DV", "read_write"]])
  ) + `
const HD = ${hd}u;
const QS = ${hd + 1}u;
const BK = 16u;
const BQ = 8u;
const CPT = ${hd / 4}u;
${start(packed)}
var<workgroup> Ks: array<f32, ${16 * (hd + 1)}>;
var<workgroup> Vs: array<f32, ${16 * (hd + 1)}>;
var<workgroup> Qs: array<f32, ${8 * (hd + 1)}>;
var<workgroup> dOs: array<f32, ${8 * (hd + 1)}>;
var<workgroup> Pt: array<f32, 128>;
var<workgroup> dSt: array<f32, 128>;
var<workgroup> rowL: array<f32, 8>;
var<workgroup> rowD: array<f32, 8>;
var<workgroup> rowStart: array<u32, 8>;
@compute @workgroup_size(64) fn main(${builtins}) {
  let wg = wid.y * nwg.x + wid.x;
  let nkb = (p.seq + BK - 1u) / BK;
  if (wg >= p.batch * p.kvHeads * nkb) { return; }
  let kb = wg % nkb;
  let g = (wg / nkb) % p.kvHeads;
  let b = wg / (nkb * p.kvHeads);
  let k0 = kb * BK;
  ${kvTile("BK", "QS", "QS")}
  let krow = lid / 4u;
  let ocol = lid % 4u;
  var dk: array<f32, CPT>;
  var dv: array<f32, CPT>;
  for (var c = 0u; c < CPT; c++) { dk[c] = 0.0; dv[c] = 0.0; }
  let rep = p.heads / p.kvHeads;
  let nqb = (p.seq + BQ - 1u) / BQ;
  for (var r = 0u; r < rep; r++) {
    let h = g * rep + r;
    for (var qb = k0 / BQ; qb < nqb; qb++) {
      let q0 = qb * BQ;
      workgroupBarrier();
      ${
    stageRows({ rows: "BQ", row0: "q0", heads: "p.heads", head: "h", x: ["Q", "Qs", "QS"], y: ["DO", "dOs", "QS"] })
  }
      if (lid < BQ) {
        let q = min(q0 + lid, p.seq - 1u);
        let row = (b * p.seq + q) * p.heads + h;
        rowL[lid] = L[row];
        rowD[lid] = Dl[row];
        rowStart[lid] = segStart(b, q);
      }
      workgroupBarrier();
      for (var c = 0u; c < 2u; c++) {
        let idx = lid * 2u + c;
        let kj = idx / BQ;
        let qr = idx % BQ;
        var s = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < HD; d++) {
          s = fma(Qs[qr * QS + d], Ks[kj * QS + d], s);
          dp = fma(dOs[qr * QS + d], Vs[kj * QS + d], dp);
        }
        let q = q0 + qr;
        let key = k0 + kj;
        var pr = 0.0;
        var ds = 0.0;
        if (q < p.seq && key < p.seq && key <= q && key >= rowStart[qr]) {
          pr = exp(s * p.scale - rowL[qr]);
          ds = pr * (dp - rowD[qr]);
        }
        Pt[kj * BQ + qr] = pr;
        dSt[kj * BQ + qr] = ds;
      }
      workgroupBarrier();
      for (var c = 0u; c < CPT; c++) {
        let d = ocol + 4u * c;
        var a = dv[c];
        var k = dk[c];
        for (var j = 0u; j < BQ; j++) {
          a = fma(Pt[krow * BQ + j], dOs[j * QS + d], a);
          k = fma(dSt[krow * BQ + j], Qs[j * QS + d], k);
        }
        dv[c] = a;
        dk[c] = k;
      }
    }
  }
  let key = k0 + krow;
  if (key < p.seq) {
    let base = ((b * p.seq + key) * p.kvHeads + g) * HD;
    for (var c = 0u; c < CPT; c++) {
      DK[base + ocol + 4u * c] = dk[c] * p.scale;
      DV[base + ocol + 4u * c] = dv[c];
    }
  }
}`

/** delta[token, head] = Σ_d dO·O (the softmax-backward row term). */
export const attentionDelta = (hd: number) =>
  header("rows: u32", [["O", "read"], ["DO", "read"], ["Dl", "read_write"]]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.rows) { return; }
  var s = 0.0;
  for (var d = 0u; d < HD; d++) { s = fma(DO[i * HD + d], O[i * HD + d], s); }
  Dl[i] = s;
}`

/** dQ: one invocation per (token, head) over keys 0..i; no atomics. */
export const attentionBackwardQ = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["DO", "read"], ["L", "read"], ["Dl", "read"], [
      "DQ",
      "read_write"
    ]])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.heads) { return; }
  let h = i % p.heads;
  let tok = i / p.heads;
  let b = tok / p.seq;
  let qi = tok % p.seq;
  let g = h / (p.heads / p.kvHeads);
  var q: array<f32, HD>;
  var dO: array<f32, HD>;
  var acc: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { q[d] = Q[i * HD + d] * p.scale; dO[d] = DO[i * HD + d]; acc[d] = 0.0; }
  let lse = L[i];
  let delta = Dl[i];
  for (var j = segStart(b, qi); j <= qi; j++) {
    let kBase = ((b * p.seq + j) * p.kvHeads + g) * HD;
    var s = 0.0;
    var dp = 0.0;
    for (var d = 0u; d < HD; d++) { s = fma(q[d], K[kBase + d], s); dp = fma(dO[d], V[kBase + d], dp); }
    let ds = exp(s - lse) * (dp - delta);
    for (var d = 0u; d < HD; d++) { acc[d] = fma(ds, K[kBase + d], acc[d]); }
  }
  for (var d = 0u; d < HD; d++) { DQ[i * HD + d] = acc[d] * p.scale; }
}`

/** dK, dV: one invocation per (token, kv head) over every query head of its group and queries j..seq−1. */
export const attentionBackwardKV = (hd: number, packed: boolean) =>
  header(
    attnParams,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["DO", "read"], ["L", "read"], ["Dl", "read"], [
      "DK",
      "read_write"
    ], [
      "DV",
      "read_write"
    ]])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.kvHeads) { return; }
  let g = i % p.kvHeads;
  let tok = i / p.kvHeads;
  let b = tok / p.seq;
  let kj = tok % p.seq;
  let rep = p.heads / p.kvHeads;
  var k: array<f32, HD>;
  var v: array<f32, HD>;
  var dk: array<f32, HD>;
  var dv: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { k[d] = K[i * HD + d]; v[d] = V[i * HD + d]; dk[d] = 0.0; dv[d] = 0.0; }
  for (var r = 0u; r < rep; r++) {
    let h = g * rep + r;
    for (var qi = kj; qi < p.seq; qi++) {
      if (segStart(b, qi) > kj) { continue; }
      let row = (b * p.seq + qi) * p.heads + h;
      var s = 0.0;
      var dp = 0.0;
      for (var d = 0u; d < HD; d++) { s = fma(Q[row * HD + d], k[d], s); dp = fma(DO[row * HD + d], v[d], dp); }
      let pr = exp(s * p.scale - L[row]);
      let ds = pr * (dp - Dl[row]);
      for (var d = 0u; d < HD; d++) {
        dv[d] = fma(pr, DO[row * HD + d], dv[d]);
        dk[d] = fma(ds, Q[row * HD + d], dk[d]);
      }
    }
  }
  for (var d = 0u; d < HD; d++) { DK[i * HD + d] = dk[d] * p.scale; DV[i * HD + d] = dv[d]; }
}`

export const swiglu = header("n: u32", [["G", "read"], ["U", "read"], ["O", "read_write"]]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let g = G[i];
  O[i] = g / (1.0 + exp(-g)) * U[i];
}`

export const swigluBackward = header("n: u32", [["G", "read"], ["U", "read"], ["DO", "read"], [
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

const lpParams = "rows: u32, vocab: u32, rowOff: u32, invTemp: f32"

/**
 * One 256-thread workgroup per logits row of a chunk: max, then Σe and Σe·z in one more sweep, so the row is
 * read twice and nothing of size vocab is written. Outputs go to row `rowOff + r` of the per-token tensors.
 */
export const tokenLogprobs = header(lpParams, [["Z", "read"], ["T", "read", "u32"], ["LP", "read_write"], [
  "H",
  "read_write"
], ["LSE", "read_write"]]) + `
var<workgroup> ra: array<f32, 256>;
var<workgroup> rb: array<f32, 256>;
@compute @workgroup_size(256) fn main(${builtins}) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.rows) { return; }
  let base = row * p.vocab;
  var mx = -3.0e38;
  for (var j = lid; j < p.vocab; j += 256u) { mx = max(mx, Z[base + j] * p.invTemp); }
  ra[lid] = mx;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { ra[lid] = max(ra[lid], ra[lid + w]); }
    workgroupBarrier();
  }
  let m = ra[0];
  workgroupBarrier();
  var se = 0.0;
  var sz = 0.0;
  for (var j = lid; j < p.vocab; j += 256u) {
    let z = Z[base + j] * p.invTemp;
    let e = exp(z - m);
    se += e;
    sz = fma(e, z, sz);
  }
  ra[lid] = se;
  rb[lid] = sz;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { ra[lid] += ra[lid + w]; rb[lid] += rb[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let lse = m + log(ra[0]);
    let at = p.rowOff + row;
    LP[at] = Z[base + T[at]] * p.invTemp - lse;
    H[at] = lse - rb[0] / ra[0];
    LSE[at] = lse;
  }
}`

/** In place: logits chunk → dLogits from dLogp (and dEntropy when `entropy`). */
export const tokenLogprobsBackward = (entropy: boolean) => {
  const bindings: Array<Binding> = [["Z", "read_write"], ["T", "read", "u32"], ["LSE", "read"], ["H", "read"], [
    "DLP",
    "read"
  ]]
  if (entropy) bindings.push(["DH", "read"])
  return header(lpParams, bindings) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.rows * p.vocab) { return; }
  let at = p.rowOff + i / p.vocab;
  let j = i % p.vocab;
  let z = Z[i] * p.invTemp;
  let lse = LSE[at];
  let pr = exp(z - lse);
  var onehot = 0.0;
  if (T[at] == j) { onehot = 1.0; }
  var g = DLP[at] * (onehot - pr);
  ${entropy ? "g += DH[at] * (-pr * (z - lse + H[at]));" : "_ = H[at];"}
  Z[i] = g * p.invTemp;
}`
}

/**
 * Per row (one workgroup): out[outIndex + r] (+)= scale·Σ m·x / max(Σ m, 1); with `grad`, also
 * dx = gradScale·scale·m / max(Σm, 1). Summation order is fixed (deterministic).
 */
export const maskedMean = (grad: boolean) => {
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

/** Gradient norm stage 1: each workgroup sums squares of a strided slice of one shard into one partial. */
export const normPartials = header("n: u32, partialOff: u32", [["G", "read"], ["Part", "read_write"]]) + `
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
    @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = wid.x * 256u + lid; i < p.n; i += nwg.x * 256u) { let g = G[i]; s = fma(g, g, s); }
  red[lid] = s;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { Part[p.partialOff + wid.x] = red[0]; }
}`

/**
 * Stage 2: one workgroup sums the partials; writes norm, clip scale = min(1, max/(norm+1e-6)) (max ≤ 0: 1),
 * and skipped = 1 when the norm is not finite (then AdamW leaves everything untouched). Finite-ness is tested
 * on the bits, since WGSL may assume NaN never occurs.
 */
export const normFinish = header("count: u32", [["Part", "read"], ["S", "read"], ["Res", "read_write"]]) + `
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.count; i += 256u) { s += Part[i]; }
  red[lid] = s;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let norm = sqrt(red[0]);
    let finite = (bitcast<u32>(norm) & 0x7f800000u) != 0x7f800000u;
    let mx = S[7];
    var clip = 1.0;
    if (mx > 0.0) { clip = min(1.0, mx / (norm + 1e-6)); }
    if (!finite) { clip = 0.0; }
    Res[1] = norm;
    Res[2] = clip;
    Res[3] = select(1.0, 0.0, finite);
  }
}`

/** Fused AdamW over one shard of every parameter, with the clip scale and skip flag read on the device. */
export const adamw = header("n: u32", [
  ["Pm", "read_write"],
  ["G", "read"],
  ["Mm", "read_write"],
  [
    "Vm",
    "read_write"
  ],
  ["Decay", "read", "u32"],
  ["S", "read"],
  ["Res", "read"]
]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n || Res[3] != 0.0) { return; }
  let lr = S[0];
  let b1 = S[1];
  let b2 = S[2];
  let g = G[i] * Res[2];
  let m = b1 * Mm[i] + (1.0 - b1) * g;
  let v = b2 * Vm[i] + (1.0 - b2) * g * g;
  Mm[i] = m;
  Vm[i] = v;
  var keep = 1.0;
  if (Decay[i / 256u] != 0u) { keep = 1.0 - lr * S[4]; }
  Pm[i] = Pm[i] * keep - lr * (m / S[5]) / (sqrt(v / S[6]) + S[3]);
}`
