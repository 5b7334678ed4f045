/**
 * Attention: causal grouped-query attention over packed sequences (flash-style, logsumexp saved), and its backward.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32, need } from "./internal/check.js"
import { type Bind, type DispatchSpec, f, grid, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { type Numerics, numerics } from "./Numerics.js"
import { type Binding, builtins, header, linear } from "./Wgsl.js"

/** Causal grouped-query attention (forward). */
export interface Attention {
  readonly kind: "attention"
  readonly q: Tensor
  readonly k: Tensor
  readonly v: Tensor
  readonly o: Tensor
  readonly lse: Tensor
  readonly shape: AttentionShape
  /** Packed sequences: u32 positions [batch·seq] counting from 0 in each sequence (keys before i − pos[i] are masked). */
  readonly positions: Tensor | undefined
  /**
   * "tiled" (default where headDim % 4 = 0 and headDim ≤ 128): 16×16 query/key tiles in workgroup memory;
   * "rows": one invocation per (token, head) walking its keys (any headDim).
   */
  readonly kernel: "tiled" | "rows"
}

/** The backward of {@link Attention}. */
export interface AttentionBackward {
  readonly kind: "attentionBackward"
  readonly q: Tensor
  readonly k: Tensor
  readonly v: Tensor
  readonly o: Tensor
  readonly lse: Tensor
  readonly dO: Tensor
  /** Scratch [tokens·heads]. */
  readonly delta: Tensor
  readonly dq: Tensor
  readonly dk: Tensor
  readonly dv: Tensor
  readonly shape: AttentionShape
  readonly positions: Tensor | undefined
  /** As for {@link Attention}: "tiled" (default where possible) or "rows". */
  readonly kernel: "tiled" | "rows"
}

const checkAttention = (s: AttentionShape, q: Tensor, k: Tensor, v: Tensor) => {
  need(s.heads % s.kvHeads === 0, "attention: heads must be a multiple of kvHeads")
  const tokens = s.batch * s.seq
  atLeast(q, tokens * s.heads * s.headDim, "attention q")
  atLeast(k, tokens * s.kvHeads * s.headDim, "attention k")
  atLeast(v, tokens * s.kvHeads * s.headDim, "attention v")
}

const checkPositions = (s: AttentionShape, positions: Tensor | undefined) => {
  if (positions === undefined) return
  isU32(positions, "attention positions")
  atLeast(positions, s.batch * s.seq, "attention positions")
}

/** Causal GQA attention forward (saves lse); with `positions`, packed sequences do not see each other. */
export const attention = (
  o: {
    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor
    lse: Tensor
    shape: AttentionShape
    positions?: Tensor
    kernel?: "tiled" | "rows"
  }
): Attention => {
  checkAttention(o.shape, o.q, o.k, o.v)
  checkPositions(o.shape, o.positions)
  atLeast(o.lse, o.shape.batch * o.shape.seq * o.shape.heads, "attention lse")
  const tileable = o.shape.headDim % 4 === 0 && o.shape.headDim <= 128
  const kernel = o.kernel ?? (tileable ? "tiled" : "rows")
  need(kernel === "rows" || tileable, "attention: the tiled kernel needs headDim % 4 = 0 and headDim ≤ 128")
  return { ...o, kind: "attention", positions: o.positions, kernel }
}

/** Makes an {@link AttentionBackward} op. */
export const attentionBackward = (
  o: Omit<AttentionBackward, "kind" | "positions" | "kernel"> & {
    readonly positions?: Tensor
    readonly kernel?: "tiled" | "rows"
  }
): AttentionBackward => {
  checkAttention(o.shape, o.q, o.k, o.v)
  checkPositions(o.shape, o.positions)
  atLeast(o.delta, o.shape.batch * o.shape.seq * o.shape.heads, "attentionBackward delta")
  const tileable = o.shape.headDim % 4 === 0 && o.shape.headDim <= 128
  const kernel = o.kernel ?? (tileable ? "tiled" : "rows")
  need(kernel === "rows" || tileable, "attentionBackward: the tiled kernels need headDim % 4 = 0 and headDim ≤ 128")
  return { ...o, kind: "attentionBackward", positions: o.positions, kernel }
}

// WGSL

const attnParamsWgsl = "batch: u32, seq: u32, heads: u32, kvHeads: u32, scale: f32"

/** Packed variants bind the positions last and mask keys before i − pos[i] (the query's sequence start). */
const pos = (packed: boolean, bindings: Array<Binding>): Array<Binding> =>
  packed ? [...bindings, ["Pos", "read", "u32"]] : bindings

const start = (packed: boolean) =>
  packed
    ? `fn segStart(b: u32, i: u32) -> u32 { let q = Pos[b * p.seq + i]; return select(i - q, 0u, q > i); }`
    : `fn segStart(b: u32, i: u32) -> u32 { return 0u; }`

/** Joins WGSL lines, each after the first indented by `pad` (where the snippet stands in its kernel). */
const lines = (pad: string, ...ls: ReadonlyArray<string>) => ls.join(`\n${pad}`)

/**
 * The row a row kernel's invocation owns, from its linear index: token (b, `row`) and head `head` of `heads`
 * (query heads for the forward and dQ, KV heads for dK/dV); out-of-range invocations return.
 */
const rowInvocation = (o: { heads: string; head: string; row: string }) =>
  lines(
    "  ",
    linear(64),
    `if (i >= p.batch * p.seq * ${o.heads}) { return; }`,
    `let ${o.head} = i % ${o.heads};`,
    `let tok = i / ${o.heads};`,
    "let b = tok / p.seq;",
    `let ${o.row} = tok % p.seq;`
  )

/** A query row's invocation: token (b, qi), head h and the KV head g of its group. */
const queryRow = lines(
  "  ",
  rowInvocation({ heads: "p.heads", head: "h", row: "qi" }),
  "let g = h / (p.heads / p.kvHeads);"
)

/**
 * Causal GQA forward, streaming (online) softmax: one invocation per (token, head) walks keys 0..i, keeping
 * the running max, normaliser and output in registers; saves lse = max + log(sum).
 */
export const attentionShader = (hd: number, packed: boolean) =>
  header(
    attnParamsWgsl,
    pos(packed, [["Q", "read"], ["K", "read"], ["V", "read"], ["O", "read_write"], ["L", "read_write"]])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${queryRow}
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

/**
 * The (batch, head, row block) a tiled kernel's workgroup owns, from its linear index: `n` blocks of `tile`
 * rows per sequence, over `heads` heads (query heads for the query-block kernels, KV heads for dK/dV).
 */
const tileBlock = (o: { n: string; tile: string; heads: string; block: string; head: string }) =>
  lines(
    "  ",
    "let wg = wid.y * nwg.x + wid.x;",
    `let ${o.n} = (p.seq + ${o.tile} - 1u) / ${o.tile};`,
    `if (wg >= p.batch * ${o.heads} * ${o.n}) { return; }`,
    `let ${o.block} = wg % ${o.n};`,
    `let ${o.head} = (wg / ${o.n}) % ${o.heads};`,
    `let b = wg / (${o.n} * ${o.heads});`
  )

/** A query block's workgroup: its (batch, head, 16 queries) and the KV head of its group. */
const queryBlock = lines(
  "  ",
  tileBlock({ n: "nqb", tile: "BQ", heads: "p.heads", block: "qb", head: "h" }),
  "let g = h / (p.heads / p.kvHeads);",
  "let q0 = qb * BQ;"
)

/**
 * The key tiles a query block sees (from the earliest segment start of its rows to its last row), after each
 * row's start is in `rowStart`; then each thread's output row and column group.
 */
const queryKeyTiles = lines(
  "  ",
  "workgroupBarrier();",
  "if (lid == 0u) {",
  "  var m = rowStart[0];",
  "  for (var r = 1u; r < BQ; r++) { m = min(m, rowStart[r]); }",
  "  lo = m;",
  "}",
  "let kFirst = workgroupUniformLoad(&lo) / BK;",
  "let kLast = min(q0 + BQ - 1u, p.seq - 1u) / BK;",
  "let orow = lid / 4u;",
  "let ocol = lid % 4u;"
)

/** Bindings of the backward kernels: the forward's inputs, dO, the saved lse and delta, then the gradients. */
const backwardBindings = (packed: boolean, grads: ReadonlyArray<string>): Array<Binding> =>
  pos(packed, [
    ["Q", "read"],
    ["K", "read"],
    ["V", "read"],
    ["DO", "read"],
    ["L", "read"],
    ["Dl", "read"],
    ...grads.map((name): Binding => [name, "read_write"])
  ])

/**
 * Header, constants and workgroup memory of a tiled backward kernel. The workgroup owns a block of 16 rows
 * (`queries` for dQ, `keys` for dK/dV) and sweeps tiles of 8 rows of the other side; Q/dO and K/V tiles have
 * rows padded by one word (stride QS) against bank conflicts; `scratch` holds the 16×8 score-gradient tiles;
 * rowL/rowD/rowStart the statistics (lse, delta, segment start) of the query rows in hand.
 */
const backwardKernelHead = (hd: number, packed: boolean, owner: "queries" | "keys") => {
  const q = owner === "queries"
  const tiles = (names: readonly [string, string], rows: number) =>
    names.map((name) => `var<workgroup> ${name}: array<f32, ${rows * (hd + 1)}>;`).join("\n")
  const queryRows = q ? 16 : 8
  return header(attnParamsWgsl, backwardBindings(packed, q ? ["DQ"] : ["DK", "DV"])) + `
const HD = ${hd}u;
const QS = ${hd + 1}u;
${q ? "const BQ = 16u;\nconst BK = 8u;" : "const BK = 16u;\nconst BQ = 8u;"}
const CPT = ${hd / 4}u;
${start(packed)}
${q ? tiles(["Qs", "dOs"], 16) : tiles(["Ks", "Vs"], 16)}
${q ? tiles(["Ks", "Vs"], 8) : tiles(["Qs", "dOs"], 8)}
${(q ? ["dS"] : ["Pt", "dSt"]).map((name) => `var<workgroup> ${name}: array<f32, 128>;`).join("\n")}
var<workgroup> rowL: array<f32, ${queryRows}>;
var<workgroup> rowD: array<f32, ${queryRows}>;
var<workgroup> rowStart: array<u32, ${queryRows}>;
`
}

/** Loads the statistics of query rows q0..q0 + BQ of head h (rows past the end repeat the last row). */
const rowStatsLoad = (pad: string) =>
  lines(
    pad,
    "if (lid < BQ) {",
    "  let q = min(q0 + lid, p.seq - 1u);",
    "  let row = (b * p.seq + q) * p.heads + h;",
    "  rowL[lid] = L[row];",
    "  rowD[lid] = Dl[row];",
    "  rowStart[lid] = segStart(b, q);",
    "}"
  )

/** s = q·k and dp = dO·v of query tile row `qRow` and key tile row kj (q already scaled in the dQ kernel). */
const scoreAndDp = (pad: string, qRow: string) =>
  lines(
    pad,
    "var s = 0.0;",
    "var dp = 0.0;",
    "for (var d = 0u; d < HD; d++) {",
    `  s = fma(Qs[${qRow} * QS + d], Ks[kj * QS + d], s);`,
    `  dp = fma(dOs[${qRow} * QS + d], Vs[kj * QS + d], dp);`,
    "}"
  )

/** Query and key rows per tile of the tiled attention forward. */
export const ATTN_TILE = 16

/**
 * Tiled causal GQA forward (FlashAttention-style): one 64-thread workgroup per (batch, head, 16 queries)
 * stages the query block and 16-key K/V tiles in workgroup memory, computes the 16×16 score tile (4 per
 * thread), updates each row's running max / normaliser (online softmax), and accumulates the output with
 * each thread owning headDim/4 columns of one row. K rows are padded by one word against bank conflicts.
 * Saves lse = max + log(sum). Needs headDim % 4 = 0 and 48·headDim + 16·17 words of workgroup memory.
 */
export const attentionTiledShader = (hd: number, packed: boolean) =>
  header(
    attnParamsWgsl,
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
  ${queryBlock}
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
  ${queryKeyTiles}
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
export const attentionBackwardQTiledShader = (hd: number, packed: boolean) =>
  backwardKernelHead(hd, packed, "queries") + `var<workgroup> lo: u32;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${queryBlock}
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
  ${rowStatsLoad("  ")}
  ${queryKeyTiles}
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
      ${scoreAndDp("      ", "row")}
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
export const attentionBackwardKVTiledShader = (hd: number, packed: boolean) =>
  backwardKernelHead(hd, packed, "keys") + `@compute @workgroup_size(64) fn main(${builtins}) {
  ${tileBlock({ n: "nkb", tile: "BK", heads: "p.kvHeads", block: "kb", head: "g" })}
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
      ${rowStatsLoad("      ")}
      workgroupBarrier();
      for (var c = 0u; c < 2u; c++) {
        let idx = lid * 2u + c;
        let kj = idx / BQ;
        let qr = idx % BQ;
        ${scoreAndDp("        ", "qr")}
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
export const attentionDeltaShader = (hd: number) =>
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
export const attentionBackwardQShader = (hd: number, packed: boolean) =>
  header(
    attnParamsWgsl,
    backwardBindings(packed, ["DQ"])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${queryRow}
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
export const attentionBackwardKVShader = (hd: number, packed: boolean) =>
  header(
    attnParamsWgsl,
    backwardBindings(packed, ["DK", "DV"])
  ) + `
const HD = ${hd}u;
${start(packed)}
@compute @workgroup_size(64) fn main(${builtins}) {
  ${rowInvocation({ heads: "p.kvHeads", head: "g", row: "kj" })}
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

// Lowering

const packed = (positions: Tensor | undefined) => (positions === undefined ? "" : "_packed")

const withPositions = (bindings: Array<Bind>, positions: Tensor | undefined) =>
  positions === undefined ? bindings : [...bindings, positions]

const attnParams = (s: { batch: number; seq: number; heads: number; kvHeads: number; scale: number }) => [
  u(s.batch),
  u(s.seq),
  u(s.heads),
  u(s.kvHeads),
  f(s.scale)
]

/** The dispatches of a `attention` op. */
export const lowerAttention = (op: Attention): Array<DispatchSpec> => {
  const s = op.shape
  const rows = s.batch * s.seq * s.heads
  const pairs = s.batch * s.heads * s.seq * (s.seq + 1) / 2
  return [{
    label: `attention${op.kernel === "tiled" ? "_tiled" : ""}_hd${s.headDim}${packed(op.positions)}`,
    code: op.kernel === "tiled"
      ? attentionTiledShader(s.headDim, op.positions !== undefined)
      : attentionShader(s.headDim, op.positions !== undefined),
    bindings: withPositions([op.q, op.k, op.v, op.o, op.lse], op.positions),
    params: attnParams(s),
    groups: op.kernel === "tiled"
      ? grid(s.batch * s.heads * Math.ceil(s.seq / ATTN_TILE))
      : over(rows, 64),
    flops: 4 * pairs * s.headDim,
    bytes: 8 * pairs * s.headDim
  }]
}

/** The dispatches of a `attentionBackward` op. */
export const lowerAttentionBackward = (op: AttentionBackward): Array<DispatchSpec> => {
  const s = op.shape
  const tiled = op.kernel === "tiled" ? "_tiled" : ""
  const rows = s.batch * s.seq * s.heads
  const pairs = s.batch * s.heads * s.seq * (s.seq + 1) / 2
  return [{
    label: `attention_delta_hd${s.headDim}`,
    code: attentionDeltaShader(s.headDim),
    bindings: [op.o, op.dO, op.delta],
    params: [u(rows)],
    groups: over(rows, 64),
    flops: 2 * rows * s.headDim,
    bytes: 8 * rows * s.headDim
  }, {
    label: `attention_backward_q${tiled}_hd${s.headDim}${packed(op.positions)}`,
    code: op.kernel === "tiled"
      ? attentionBackwardQTiledShader(s.headDim, op.positions !== undefined)
      : attentionBackwardQShader(s.headDim, op.positions !== undefined),
    bindings: withPositions([op.q, op.k, op.v, op.dO, op.lse, op.delta, op.dq], op.positions),
    params: attnParams(s),
    groups: op.kernel === "tiled" ? grid(s.batch * s.heads * Math.ceil(s.seq / 16)) : over(rows, 64),
    flops: 6 * pairs * s.headDim,
    bytes: 12 * pairs * s.headDim
  }, {
    label: `attention_backward_kv${tiled}_hd${s.headDim}${packed(op.positions)}`,
    code: op.kernel === "tiled"
      ? attentionBackwardKVTiledShader(s.headDim, op.positions !== undefined)
      : attentionBackwardKVShader(s.headDim, op.positions !== undefined),
    bindings: withPositions([op.q, op.k, op.v, op.dO, op.lse, op.delta, op.dk, op.dv], op.positions),
    params: attnParams(s),
    groups: op.kernel === "tiled"
      ? grid(s.batch * s.kvHeads * Math.ceil(s.seq / 16))
      : over(s.batch * s.seq * s.kvHeads, 64),
    flops: 8 * pairs * s.headDim,
    bytes: 8 * pairs * s.headDim
  }]
}

// CPU specification

type Num = ArrayLike<number>

/** Shape of causal grouped-query attention over packed sequences: q[batch·seq, heads, headDim], k/v[batch·seq, kvHeads, headDim]. */
export interface AttentionShape {
  readonly batch: number
  readonly seq: number
  readonly heads: number
  readonly kvHeads: number
  readonly headDim: number
  /** Usually 1/sqrt(headDim). */
  readonly scale: number
}

/**
 * First key a query may see. Without positions: 0 (plain causal). With packed sequences, positions count up
 * by one from 0 within each sequence, so query i's sequence starts at i − pos[i].
 */
export const segmentStart = (positions: ArrayLike<number> | undefined, b: number, seq: number, i: number) =>
  positions === undefined ? 0 : Math.max(0, i - positions[b * seq + i])

/** {@link segmentStart} of every row n = b·seq + i. */
export const segmentStarts = (positions: ArrayLike<number> | undefined, s: AttentionShape): Int32Array => {
  const start = new Int32Array(s.batch * s.seq)
  for (let b = 0; b < s.batch; b++) {
    for (let i = 0; i < s.seq; i++) start[b * s.seq + i] = segmentStart(positions, b, s.seq, i)
  }
  return start
}

/**
 * Causal GQA over a packed batch, as the reference model computes it. Query row n = b·T + t, head h (KV head
 * h / (H/KV)) sees keys j = start[n]..t of its batch row: s_j = round(round(q·k_j)·scale),
 * p_j = round(exp(s_j − max) / Σ exp(s − max)), o = Σ_j p_j·v_j; every sum in f64 in index order, results stored
 * as `nm` says. Returns o [N, H·D], the probabilities [B, H, T (query), T (key)] (0 where masked) and the
 * logsumexp max + log Σ exp(s − max) per (row, head) [N, H] (what the GPU kernel saves for its backward).
 */
export const cpuAttention = (q: Num, k: Num, v: Num, start: ArrayLike<number>, s: AttentionShape, nm: Numerics) => {
  const { batch: B, headDim: D, heads: H, kvHeads: KV, scale, seq: T } = s
  const round = nm.round
  const o = nm.alloc(B * T * H * D)
  const probs = nm.alloc(B * H * T * T)
  const lse = new Float64Array(B * T * H)
  const e = new Float64Array(T)
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / (H / KV))
      for (let t = 0; t < T; t++) {
        const n = b * T + t
        const qo = (n * H + h) * D
        const j0 = start[n]
        let max = -Infinity
        for (let j = j0; j <= t; j++) {
          const ko = ((b * T + j) * KV + g) * D
          let dot = 0
          for (let d = 0; d < D; d++) dot += q[qo + d] * k[ko + d]
          e[j] = round(round(dot) * scale)
          if (e[j] > max) max = e[j]
        }
        let sum = 0
        for (let j = j0; j <= t; j++) {
          e[j] = Math.exp(e[j] - max)
          sum += e[j]
        }
        lse[n * H + h] = max + Math.log(sum)
        const pBase = ((b * H + h) * T + t) * T
        for (let j = j0; j <= t; j++) probs[pBase + j] = round(e[j] / sum)
        for (let d = 0; d < D; d++) {
          let acc = 0
          for (let j = j0; j <= t; j++) acc += probs[pBase + j] * v[((b * T + j) * KV + g) * D + d]
          o[qo + d] = acc
        }
      }
    }
  }
  return { o, probs, lse }
}

/**
 * Backward of {@link cpuAttention} from dOut [N, H·D] and its probabilities: adds into dq [N, H·D], dk and dv
 * [N, KV·D] (f64). dP_j = dOut·v_j, dS_j = p_j·(dP_j − Σ p·dP)·scale, dq += Σ_j dS_j·k_j, dk_j += dS_j·q,
 * dv_j += p_j·dOut; heads in order, then queries in order, so each dk/dv element adds its terms head by head and
 * query by query.
 */
export const cpuAttentionBackward = (
  dOut: Num,
  q: Num,
  k: Num,
  v: Num,
  probs: Num,
  start: ArrayLike<number>,
  s: AttentionShape,
  dq: Float64Array,
  dk: Float64Array,
  dv: Float64Array
): void => {
  const { batch: B, headDim: D, heads: H, kvHeads: KV, scale, seq: T } = s
  const dP = new Float64Array(T)
  const dS = new Float64Array(T)
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / (H / KV))
      for (let t = 0; t < T; t++) {
        const n = b * T + t
        const qo = (n * H + h) * D
        const pBase = ((b * H + h) * T + t) * T
        const j0 = start[n]
        for (let j = j0; j <= t; j++) {
          const vo = ((b * T + j) * KV + g) * D
          let acc = 0
          for (let d = 0; d < D; d++) acc += dOut[qo + d] * v[vo + d]
          dP[j] = acc
        }
        let dot = 0
        for (let j = j0; j <= t; j++) dot += probs[pBase + j] * dP[j]
        for (let j = j0; j <= t; j++) dS[j] = probs[pBase + j] * (dP[j] - dot) * scale
        for (let j = j0; j <= t; j++) {
          const ko = ((b * T + j) * KV + g) * D
          for (let d = 0; d < D; d++) dq[qo + d] += dS[j] * k[ko + d]
        }
        for (let j = j0; j <= t; j++) {
          const ko = ((b * T + j) * KV + g) * D
          for (let d = 0; d < D; d++) {
            dk[ko + d] += dS[j] * q[qo + d]
            dv[ko + d] += probs[pBase + j] * dOut[qo + d]
          }
        }
      }
    }
  }
}

// CPU twin

/** Runs an `attention` op on a host arena with the CPU specification (f64 storage). */
export const twinAttention = (h: HostArena, op: Attention): void => {
  const start = segmentStarts(op.positions === undefined ? undefined : ids(h, op.positions), op.shape)
  const { lse, o } = cpuAttention(view(h, op.q), view(h, op.k), view(h, op.v), start, op.shape, numerics("f64"))
  view(h, op.o, 0, o.length).set(o)
  view(h, op.lse, 0, lse.length).set(lse)
}

/**
 * Runs an `attentionBackward` op on a host arena with the CPU specification: the probabilities come from the
 * forward specification again (the device recomputes them from the saved logsumexp).
 */
export const twinAttentionBackward = (h: HostArena, op: AttentionBackward): void => {
  const s = op.shape
  const nq = s.batch * s.seq * s.heads * s.headDim
  const nk = s.batch * s.seq * s.kvHeads * s.headDim
  const start = segmentStarts(op.positions === undefined ? undefined : ids(h, op.positions), s)
  const q = view(h, op.q, 0, nq)
  const k = view(h, op.k, 0, nk)
  const v = view(h, op.v, 0, nk)
  const { probs } = cpuAttention(q, k, v, start, s, numerics("f64"))
  const dq = new Float64Array(nq)
  const dk = new Float64Array(nk)
  const dv = new Float64Array(nk)
  cpuAttentionBackward(view(h, op.dO, 0, nq), q, k, v, probs, start, s, dq, dk, dv)
  view(h, op.dq, 0, nq).set(dq)
  view(h, op.dk, 0, nk).set(dk)
  view(h, op.dv, 0, nk).set(dv)
}
