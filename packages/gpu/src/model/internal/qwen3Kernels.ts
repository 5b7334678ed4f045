/**
 * WGSL kernels the Qwen3 model adds to the shared ones (`ops/Wgsl.ts`): the per-token policy loss, the KV-cache write
 * and cache attention of generation. Training attention is the shared `Ops.attention` with positions.
 * Binding 0 is the uniform parameter block (as in `ops/Wgsl.ts`); bindings 1.. are tensors in the order listed.
 * The sampler lives in `sampling.ts`.
 */
import { builtins, header, linear } from "../../ops/Wgsl.js"

/**
 * The per-token policy loss of one micro-batch, in one workgroup ("weighted" mode): with c the per-token
 * coefficient (mask, aggregation weight and sign folded in by the caller) and lp the policy logprob,
 * L_t = c·lp and dL/dlp = c. Adds Σ L_t to Res[0]; writes DLP. (The "grpo" mode's loss is `GrpoLoss`'s kernel.)
 */
export const tokenLoss = header("n: u32", [
  ["LP", "read"],
  ["C", "read"],
  ["DLP", "read_write"],
  ["Res", "read_write"]
]) + `
var<workgroup> ra: array<f32, 256>;
@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) lid: u32) {
  var loss = 0.0;
  for (var t = lid; t < p.n; t += 256u) {
    let c = C[t];
    let lp = LP[t];
    loss = fma(c, lp, loss);
    DLP[t] = c;
  }
  ra[lid] = loss;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { ra[lid] += ra[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { Res[0] += ra[0]; }
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
 * invocation per (row, head), streaming softmax. Rows with no slot write zeros. Kept beside `Ops.attention`
 * because the keys live in the per-slot cache ([slots, kvHeads, cap, hd], gathered by slot and position), not
 * in the query's own packed [batch, seq, kvHeads, hd] rows that `Ops.attention` reads.
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
