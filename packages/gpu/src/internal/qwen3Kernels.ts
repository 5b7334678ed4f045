/**
 * WGSL kernels the Qwen3 model adds to the shared ones (`wgsl.ts`): packed-sequence (segment-aware) causal GQA
 * attention and its backward, the per-token policy loss, the KV-cache write and cache attention of generation.
 * Binding 0 is the uniform parameter block (as in `wgsl.ts`); bindings 1.. are tensors in the order listed.
 * The sampler lives in `sampling.ts`.
 */

type Access = "read" | "read_write"
type Binding = readonly [name: string, access: Access, type?: "f32" | "u32"]

export const header = (params: string, bindings: ReadonlyArray<Binding>) =>
  `struct P { ${params} }\n@group(0) @binding(0) var<uniform> p: P;\n` +
  bindings.map(([name, access, type], i) =>
    `@group(0) @binding(${i + 1}) var<storage, ${access}> ${name}: array<${type ?? "f32"}>;`
  ).join("\n") + "\n"

export const builtins =
  "@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32"
const linear = (wg: number) => `let wg = wid.y * nwg.x + wid.x;\n  let i = wg * ${wg}u + lid;`

const attnParams = "batch: u32, seq: u32, heads: u32, kvHeads: u32, scale: f32"

/**
 * Causal GQA attention over packed rows: token i of a row attends to keys i − pos[i] … i, so a position id
 * of 0 starts a new sequence (the reference's segment rule, positions counting 0, 1, 2, … inside each sequence).
 * One invocation per (token, head), streaming softmax; saves lse.
 */
export const segAttention = (hd: number) =>
  header(attnParams, [["Q", "read"], ["K", "read"], ["V", "read"], ["Pos", "read", "u32"], ["O", "read_write"], [
    "L",
    "read_write"
  ]]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.heads) { return; }
  let h = i % p.heads;
  let tok = i / p.heads;
  let b = tok / p.seq;
  let qi = tok % p.seq;
  let j0 = qi - min(Pos[tok], qi);
  let g = h / (p.heads / p.kvHeads);
  let qBase = i * HD;
  var q: array<f32, HD>;
  var acc: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { q[d] = Q[qBase + d]; acc[d] = 0.0; }
  var mx = -3.0e38;
  var l = 0.0;
  for (var j = j0; j <= qi; j++) {
    let kBase = ((b * p.seq + j) * p.kvHeads + g) * HD;
    var s = 0.0;
    for (var d = 0u; d < HD; d++) { s = fma(q[d], K[kBase + d], s); }
    s = s * p.scale;
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

/** delta[token, head] = Σ_d dO·O. */
export const attnDelta = (hd: number) =>
  header("rows: u32", [["O", "read"], ["DO", "read"], ["Dl", "read_write"]]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.rows) { return; }
  var s = 0.0;
  for (var d = 0u; d < HD; d++) { s = fma(DO[i * HD + d], O[i * HD + d], s); }
  Dl[i] = s;
}`

/** dQ of {@link segAttention}: one invocation per (token, head) over its keys; no atomics. */
export const segAttentionBackwardQ = (hd: number) =>
  header(attnParams, [
    ["Q", "read"],
    ["K", "read"],
    ["V", "read"],
    ["Pos", "read", "u32"],
    ["DO", "read"],
    [
      "L",
      "read"
    ],
    ["Dl", "read"],
    ["DQ", "read_write"]
  ]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.heads) { return; }
  let h = i % p.heads;
  let tok = i / p.heads;
  let b = tok / p.seq;
  let qi = tok % p.seq;
  let j0 = qi - min(Pos[tok], qi);
  let g = h / (p.heads / p.kvHeads);
  var q: array<f32, HD>;
  var dO: array<f32, HD>;
  var acc: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { q[d] = Q[i * HD + d]; dO[d] = DO[i * HD + d]; acc[d] = 0.0; }
  let lse = L[i];
  let delta = Dl[i];
  for (var j = j0; j <= qi; j++) {
    let kBase = ((b * p.seq + j) * p.kvHeads + g) * HD;
    var s = 0.0;
    var dp = 0.0;
    for (var d = 0u; d < HD; d++) { s = fma(q[d], K[kBase + d], s); dp = fma(dO[d], V[kBase + d], dp); }
    let ds = exp(s * p.scale - lse) * (dp - delta);
    for (var d = 0u; d < HD; d++) { acc[d] = fma(ds, K[kBase + d], acc[d]); }
  }
  for (var d = 0u; d < HD; d++) { DQ[i * HD + d] = acc[d] * p.scale; }
}`

/**
 * dK, dV of {@link segAttention}: one invocation per (token, kv head) over every query head of its group and the
 * queries of its own sequence from itself on (the walk stops at the next sequence start).
 */
export const segAttentionBackwardKV = (hd: number) =>
  header(attnParams, [
    ["Q", "read"],
    ["K", "read"],
    ["V", "read"],
    ["Pos", "read", "u32"],
    ["DO", "read"],
    [
      "L",
      "read"
    ],
    ["Dl", "read"],
    ["DK", "read_write"],
    ["DV", "read_write"]
  ]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.batch * p.seq * p.kvHeads) { return; }
  let g = i % p.kvHeads;
  let tok = i / p.kvHeads;
  let b = tok / p.seq;
  let kj = tok % p.seq;
  let rep = p.heads / p.kvHeads;
  var qEnd = kj + 1u;
  while (qEnd < p.seq && Pos[b * p.seq + qEnd] != 0u) { qEnd++; }
  var k: array<f32, HD>;
  var v: array<f32, HD>;
  var dk: array<f32, HD>;
  var dv: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { k[d] = K[i * HD + d]; v[d] = V[i * HD + d]; dk[d] = 0.0; dv[d] = 0.0; }
  for (var r = 0u; r < rep; r++) {
    let h = g * rep + r;
    for (var qi = kj; qi < qEnd; qi++) {
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

/**
 * The per-token policy loss of one micro-batch, in one workgroup. With c the per-token coefficient (mask,
 * aggregation weight and sign folded in by the caller), lp the policy logprob:
 * - mode 0 ("weighted"): L_t = c·lp, dL/dlp = c;
 * - mode 1 ("clipped"): r = exp(lp − old), L_t = c·(−min(r·A, clamp(r, 1−εlo, 1+εhi)·A) + β·(exp(ref − lp) −
 *   (ref − lp) − 1)), dL/dlp = c·(−r·A·[unclipped branch] + β·(1 − exp(ref − lp))) (the min splits evenly on ties,
 *   as torch does).
 * Mode, ε and β come from step.scalars slots 8…11. Adds Σ L_t to Res[0], Σ c·kl to Res[4] and the count of clipped tokens (c ≠ 0) to Res[5]; writes DLP.
 */
export const tokenLoss = header("n: u32", [
  ["LP", "read"],
  ["OLD", "read"],
  ["REF", "read"],
  ["ADV", "read"],
  ["C", "read"],
  ["DLP", "read_write"],
  ["S", "read"],
  ["Res", "read_write"]
]) + `
var<workgroup> ra: array<f32, 256>;
var<workgroup> rb: array<f32, 256>;
var<workgroup> rc: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) lid: u32) {
  var loss = 0.0;
  var kl = 0.0;
  var clipped = 0.0;
  let mode = u32(S[8]);
  let epsLow = S[9];
  let epsHigh = S[10];
  let beta = S[11];
  for (var t = lid; t < p.n; t += 256u) {
    let c = C[t];
    let lp = LP[t];
    if (mode == 0u) {
      loss = fma(c, lp, loss);
      DLP[t] = c;
      continue;
    }
    let r = exp(lp - OLD[t]);
    let a = ADV[t];
    let un = r * a;
    let cl = clamp(r, 1.0 - epsLow, 1.0 + epsHigh) * a;
    var g = 0.0;
    if (un < cl) { g = -un; } else if (un == cl) { g = -0.5 * un; if (r >= 1.0 - epsLow && r <= 1.0 + epsHigh) { g = -un; } }
    else if (c != 0.0) { clipped += 1.0; }
    var term = -min(un, cl);
    if (beta != 0.0) {
      let d = REF[t] - lp;
      let k3 = exp(d) - d - 1.0;
      term += beta * k3;
      g += beta * (1.0 - exp(d));
      kl = fma(c, k3, kl);
    }
    loss = fma(c, term, loss);
    DLP[t] = c * g;
  }
  ra[lid] = loss;
  rb[lid] = kl;
  rc[lid] = clipped;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { ra[lid] += ra[lid + w]; rb[lid] += rb[lid + w]; rc[lid] += rc[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { Res[0] += ra[0]; Res[4] += rb[0]; Res[5] += rc[0]; }
}`

/** Sentinel of an unused row (no slot) in generation. */
export const NO_SLOT = 0xffffffff

/**
 * Appends the k and v of each row to its slot's cache at its position: cache layout [slots, kvHeads, cap, hd]
 * per layer. Rows with no slot or a position past the capacity are skipped.
 */
export const kvWrite = header("rows: u32, kvHeads: u32, cap: u32, hd: u32", [
  ["K", "read"],
  ["V", "read"],
  ["Slot", "read", "u32"],
  ["Pos", "read", "u32"],
  ["KC", "read_write"],
  ["VC", "read_write"]
]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  let width = p.kvHeads * p.hd;
  if (i >= p.rows * width) { return; }
  let row = i / width;
  let s = Slot[row];
  let pos = Pos[row];
  if (s == ${NO_SLOT}u || pos >= p.cap) { return; }
  let g = (i % width) / p.hd;
  let d = i % p.hd;
  let at = ((s * p.kvHeads + g) * p.cap + pos) * p.hd + d;
  KC[at] = K[i];
  VC[at] = V[i];
}`

/**
 * Attention of each row's query against its slot's cache, keys 0 … pos (its own k/v already written), one
 * invocation per (row, head), streaming softmax. Rows with no slot write zeros.
 */
export const cacheAttention = (hd: number) =>
  header("rows: u32, heads: u32, kvHeads: u32, cap: u32, scale: f32", [
    ["Q", "read"],
    ["KC", "read"],
    ["VC", "read"],
    ["Slot", "read", "u32"],
    ["Pos", "read", "u32"],
    ["O", "read_write"]
  ]) + `
const HD = ${hd}u;
@compute @workgroup_size(64) fn main(${builtins}) {
  ${linear(64)}
  if (i >= p.rows * p.heads) { return; }
  let h = i % p.heads;
  let row = i / p.heads;
  let s = Slot[row];
  let pos = min(Pos[row], p.cap - 1u);
  let qBase = i * HD;
  var acc: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { acc[d] = 0.0; }
  if (s == ${NO_SLOT}u) {
    for (var d = 0u; d < HD; d++) { O[qBase + d] = 0.0; }
    return;
  }
  let g = h / (p.heads / p.kvHeads);
  var q: array<f32, HD>;
  for (var d = 0u; d < HD; d++) { q[d] = Q[qBase + d]; }
  let base = (s * p.kvHeads + g) * p.cap * HD;
  var mx = -3.0e38;
  var l = 0.0;
  for (var j = 0u; j <= pos; j++) {
    let kBase = base + j * HD;
    var sc = 0.0;
    for (var d = 0u; d < HD; d++) { sc = fma(q[d], KC[kBase + d], sc); }
    sc = sc * p.scale;
    let mNew = max(mx, sc);
    let corr = exp(mx - mNew);
    let e = exp(sc - mNew);
    l = l * corr + e;
    for (var d = 0u; d < HD; d++) { acc[d] = fma(e, VC[kBase + d], acc[d] * corr); }
    mx = mNew;
  }
  for (var d = 0u; d < HD; d++) { O[qBase + d] = acc[d] / l; }
}`

/** Increments Ctl[0] (the decode ring index) by one: one invocation. */
export const ringAdvance = header("unused: u32", [["Ctl", "read_write", "u32"]]) + `
@compute @workgroup_size(1) fn main() { Ctl[0] = Ctl[0] + 1u + p.unused; }`
