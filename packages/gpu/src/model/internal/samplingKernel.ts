/**
 * The GPU sampler: one 256-thread workgroup per generation slot reproduces `Qwen3Reference.sampleToken` (same
 * processor order, same Philox4x32-10 uniform, inverse CDF in vocabulary order) in f32. Filters that the
 * reference computes by sorting are found by binary search over order-preserving u32 keys of the f32 values:
 * top-k's threshold is the k-th largest key; top-p's cut is the smallest value whose strictly-greater mass is
 * below topP·total, with ties at the cut kept in index order while the mass before them stays below topP·total.
 * Each thread owns a contiguous block of the vocabulary, so block prefix sums give vocabulary-order running sums.
 *
 * Per-slot state (u32 `SU` [slots, 20]): 0 active, 1 seed low, 2 seed high, 3 sequence, 4 generated, 5 max new
 * tokens, 6 top-k, 7 number of stop ids, 8…15 stop ids, 16 top logprobs asked (0…MAX_TOP). f32 `SF` [slots, 4]:
 * temperature, top-p, min-p, repetition penalty. `Seen` [slots, vocab] flags the context tokens (repetition penalty).
 * Outputs per step: `OutTok[slot, ring]` (0xffffffff when the slot was idle), `OutLp[slot, ring, 2]`
 * (logprob under softmax(logits / T), sampled logprob) and, for a slot that asks for n top logprobs,
 * `OutTop[slot, ring, j, 2]` for j < n: the j-th most likely token of log_softmax(logits / T) (T = 1 when greedy;
 * raw logits, before penalty and filters; ties by lower id) as an f32 id, and its logprob — n more passes over the
 * slot's logits, only for slots that ask.
 */
import { header } from "../../ops/Wgsl.js"

/** Per-slot u32 words. */
export const SLOT_U = 20
/** The SU word that holds how many top logprobs the slot reports. */
export const TOP_WORD = 16
/** Most top logprobs a slot reports per token. */
export const MAX_TOP = 20
/** Per-slot f32 words. */
export const SLOT_F = 4
/** Stop ids a slot can hold. */
export const MAX_STOPS = 8
export const NONE = 0xffffffff

/**
 * A 256-thread tree reduction through the workgroup array `buf` (`combine` writes buf[lid] from itself and
 * buf[lid + w]); every thread gets the result.
 */
const tree = (name: string, type: "f32" | "u32", buf: string, combine: (a: string, b: string) => string) => {
  const step = combine(`${buf}[lid]`, `${buf}[lid + w]`)
  return `fn ${name}(v: ${type}, lid: u32) -> ${type} {
  ${buf}[lid] = v;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) { if (lid < w) { ${step}; } workgroupBarrier(); }
  let r = workgroupUniformLoad(&${buf}[0]);
  workgroupBarrier();
  return r;
}`
}

/** A 256-thread exclusive prefix sum through the workgroup array `buf` (Hillis-Steele). */
const scan = (name: string, type: "f32" | "u32", buf: string, zero: string) =>
  `fn ${name}(v: ${type}, lid: u32) -> ${type} {
  ${buf}[lid] = v;
  workgroupBarrier();
  for (var off = 1u; off < 256u; off <<= 1u) {
    var add = ${zero};
    if (lid >= off) { add = ${buf}[lid - off]; }
    workgroupBarrier();
    ${buf}[lid] += add;
    workgroupBarrier();
  }
  let r = ${buf}[lid] - v;
  workgroupBarrier();
  return r;
}`

/** WGSL Philox4x32-10 (`philox(counter, key)`, as `Qwen3Reference.philox4x32`), with its 32×32 → high-32 multiply. */
export const PHILOX = `fn mulhi(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
  let ll = al * bl; let lh = al * bh; let hl = ah * bl;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}
fn philox(counter: vec4u, key: vec2u) -> vec4u {
  var c = counter;
  var k = key;
  for (var round = 0u; round < 10u; round++) {
    if (round > 0u) { k = k + vec2u(0x9e3779b9u, 0xbb67ae85u); }
    let hi0 = mulhi(0xd2511f53u, c.x); let lo0 = 0xd2511f53u * c.x;
    let hi1 = mulhi(0xcd9e8d57u, c.z); let lo1 = 0xcd9e8d57u * c.z;
    c = vec4u(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}`

export const sampler = header("slots: u32, vocab: u32, ring: u32", [
  ["Z", "read"],
  ["SU", "read_write", "u32"],
  ["SF", "read"],
  ["Seen", "read_write", "u32"],
  ["W", "read_write"],
  ["Ids", "read_write", "u32"],
  ["Pos", "read_write", "u32"],
  ["OutTok", "read_write", "u32"],
  ["OutLp", "read_write"],
  ["OutTop", "read_write"],
  ["Ctl", "read", "u32"]
]) + `
const DROP = -3.4e38;
const KEPT = -3.0e38;
const NONE = 0xffffffffu;
var<workgroup> rf: array<f32, 256>;
var<workgroup> ru: array<u32, 256>;
var<workgroup> bu: array<u32, 16>;
const SLOT_U = ${SLOT_U}u;
const MAX_TOP = ${MAX_TOP}u;
var<workgroup> bf: array<f32, 8>;

fn okey(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn unkey(k: u32) -> f32 {
  return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}
${tree("sumF", "f32", "rf", (a, b) => `${a} += ${b}`)}
${tree("maxF", "f32", "rf", (a, b) => `${a} = max(${a}, ${b})`)}
${tree("sumU", "u32", "ru", (a, b) => `${a} += ${b}`)}
${tree("minU", "u32", "ru", (a, b) => `${a} = min(${a}, ${b})`)}
${tree("maxU", "u32", "ru", (a, b) => `${a} = max(${a}, ${b})`)}
/** Exclusive prefix sum over threads (Hillis-Steele). */
${scan("scanF", "f32", "rf", "0.0")}
${scan("scanU", "u32", "ru", "0u")}
${PHILOX}
fn philoxX0(counter: vec4u, key: vec2u) -> u32 { return philox(counter, key).x; }

@compute @workgroup_size(256) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let s = wid.x;
  let V = p.vocab;
  let zb = s * V;
  if (lid == 0u) {
    for (var i = 0u; i < 8u; i++) { bu[i] = SU[s * SLOT_U + i]; }
    for (var i = 0u; i < 4u; i++) { bf[i] = SF[s * 4u + i]; }
    bu[8] = Ctl[0];
    bu[9] = min(SU[s * SLOT_U + ${TOP_WORD}u], MAX_TOP);
  }
  let isActive = workgroupUniformLoad(&bu[0]);
  let ring = workgroupUniformLoad(&bu[8]) % p.ring;
  if (isActive == 0u) {
    if (lid == 0u) { OutTok[s * p.ring + ring] = NONE; }
    return;
  }
  let temp = workgroupUniformLoad(&bf[0]);
  let topP = workgroupUniformLoad(&bf[1]);
  let minP = workgroupUniformLoad(&bf[2]);
  let pen = workgroupUniformLoad(&bf[3]);
  let topK = workgroupUniformLoad(&bu[6]);
  let chunk = (V + 255u) / 256u;
  let v0 = min(lid * chunk, V);
  let v1 = min(v0 + chunk, V);

  // 1. Repetition penalty on the raw logits, then temperature (none when greedy).
  for (var v = v0; v < v1; v++) {
    var z = Z[zb + v];
    if (pen != 1.0 && Seen[zb + v] != 0u) { z = select(z / pen, z * pen, z < 0.0); }
    if (temp != 0.0) { z = z / temp; }
    W[zb + v] = z;
  }
  var token = 0u;
  var logprob = 0.0;
  var sampled = 0.0;
  // log-sum-exp of the raw logits / T (T = 1 when greedy), which the returned logprobs subtract.
  var lse = 0.0;
  if (temp == 0.0) {
    // Greedy: argmax, lowest index on ties; logprob under softmax(logits).
    var best = DROP;
    var bestI = NONE;
    var mx = DROP;
    for (var v = v0; v < v1; v++) {
      let z = W[zb + v];
      if (bestI == NONE || z > best) { best = z; bestI = v; }
      mx = max(mx, Z[zb + v]);
    }
    let top = maxF(select(DROP, best, bestI != NONE), lid);
    let idx = minU(select(NONE, bestI, bestI != NONE && best == top), lid);
    let m = maxF(mx, lid);
    var se = 0.0;
    for (var v = v0; v < v1; v++) { se += exp(Z[zb + v] - m); }
    let total = sumF(se, lid);
    token = idx;
    lse = m + log(total);
    if (lid == 0u) { logprob = Z[zb + token] - lse; }
  } else {
    // log-softmax of the raw logits at temperature T, for the returned logprob.
    var rmx = DROP;
    for (var v = v0; v < v1; v++) { rmx = max(rmx, Z[zb + v] / temp); }
    let rm = maxF(rmx, lid);
    var rse = 0.0;
    for (var v = v0; v < v1; v++) { rse += exp(Z[zb + v] / temp - rm); }
    let rawLse = rm + log(sumF(rse, lid));
    lse = rawLse;

    // 2. top-k: the k-th largest key is the largest t with count(key ≥ t) ≥ k.
    if (topK > 0u && topK < V) {
      var t = 0u;
      for (var bit = 31i; bit >= 0i; bit--) {
        let cand = t | (1u << u32(bit));
        var cnt = 0u;
        for (var v = v0; v < v1; v++) { if (okey(W[zb + v]) >= cand) { cnt++; } }
        if (sumU(cnt, lid) >= topK) { t = cand; }
      }
      for (var v = v0; v < v1; v++) { if (okey(W[zb + v]) < t) { W[zb + v] = DROP; } }
    }
    var lmx = DROP;
    for (var v = v0; v < v1; v++) { lmx = max(lmx, W[zb + v]); }
    let mz = maxF(lmx, lid);

    // 3. top-p over the survivors sorted by (value desc, index asc).
    if (topP < 1.0) {
      var le = 0.0;
      for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT) { le += exp(z - mz); } }
      let pe = topP * sumF(le, lid);
      // G(t) = mass of survivors with key > t, non-increasing in t; find t0 = min t with G(t) < pe.
      var g0 = 0.0;
      for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT && okey(z) > 0u) { g0 += exp(z - mz); } }
      var t0 = 0u;
      if (sumF(g0, lid) >= pe) {
        var t = 0u;
        for (var bit = 31i; bit >= 0i; bit--) {
          let cand = t | (1u << u32(bit));
          var gs = 0.0;
          for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT && okey(z) > cand) { gs += exp(z - mz); } }
          if (sumF(gs, lid) >= pe) { t = cand; }
        }
        t0 = t + 1u;
      }
      var lk = NONE;
      for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT && okey(z) >= t0) { lk = min(lk, okey(z)); } }
      let cutKey = minU(lk, lid);
      let cutE = exp(unkey(cutKey) - mz);
      var gc = 0.0;
      var ties = 0u;
      for (var v = v0; v < v1; v++) {
        let z = W[zb + v];
        if (z > KEPT && okey(z) > cutKey) { gc += exp(z - mz); }
        if (z > KEPT && okey(z) == cutKey) { ties++; }
      }
      let before = sumF(gc, lid);
      var rank = scanU(ties, lid);
      for (var v = v0; v < v1; v++) {
        let z = W[zb + v];
        if (z <= KEPT) { continue; }
        let k = okey(z);
        if (k < cutKey) { W[zb + v] = DROP; }
        if (k == cutKey) {
          if (before + f32(rank) * cutE >= pe) { W[zb + v] = DROP; }
          rank++;
        }
      }
    }

    // 4. min-p relative to the largest survivor.
    if (minP > 0.0) {
      for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT && exp(z - mz) < minP) { W[zb + v] = DROP; } }
    }

    // 5. Inverse CDF in vocabulary order with the Philox uniform of (seed, sequence, step).
    var ls = 0.0;
    var lastKept = 0u;
    var anyKept = 0u;
    for (var v = v0; v < v1; v++) { let z = W[zb + v]; if (z > KEPT) { ls += exp(z - mz); lastKept = v; anyKept = 1u; } }
    let total = sumF(ls, lid);
    let start = scanF(ls, lid);
    let seedLo = workgroupUniformLoad(&bu[1]);
    let seedHi = workgroupUniformLoad(&bu[2]);
    let sequence = workgroupUniformLoad(&bu[3]);
    let step = workgroupUniformLoad(&bu[4]);
    let x0 = philoxX0(vec4u(step, sequence, 0u, 0u), vec2u(seedLo, seedHi));
    let u = f32(x0 >> 8u) / 16777216.0;
    let goal = u * total;
    var acc = start;
    var found = NONE;
    for (var v = v0; v < v1; v++) {
      let z = W[zb + v];
      if (z <= KEPT) { continue; }
      acc += exp(z - mz);
      if (acc > goal) { found = v; break; }
    }
    let first = minU(found, lid);
    let last = maxU(select(0u, lastKept, anyKept != 0u), lid);
    token = select(first, last, first == NONE);
    storageBarrier();
    workgroupBarrier();
    if (lid == 0u) {
      logprob = Z[zb + token] / temp - rawLse;
      sampled = W[zb + token] - mz - log(total);
    }
  }
  // 6. Top logprobs: the n most likely tokens of the raw logits, one selection pass each, in the order
  // (logit descending, id ascending): pass j takes the best token after pass j-1's (key kp, id ip).
  let nTop = workgroupUniformLoad(&bu[9]);
  if (nTop > 0u) {
    let tdiv = select(temp, 1.0, temp == 0.0);
    var kp = 0u;
    var ip = NONE;
    for (var j = 0u; j < nTop; j++) {
      var bk = 0u;
      var bi = NONE;
      for (var v = v0; v < v1; v++) {
        let k = okey(Z[zb + v]);
        let after = j == 0u || k < kp || (k == kp && v > ip);
        if (after && (bi == NONE || k > bk)) { bk = k; bi = v; }
      }
      let topKey = maxU(select(0u, bk, bi != NONE), lid);
      let topId = minU(select(NONE, bi, bi != NONE && bk == topKey), lid);
      if (lid == 0u) {
        let o = ((s * p.ring + ring) * MAX_TOP + j) * 2u;
        OutTop[o] = f32(topId);
        OutTop[o + 1u] = Z[zb + topId] / tdiv - lse;
      }
      kp = topKey;
      ip = topId;
    }
  }
  if (lid == 0u) {
    OutTok[s * p.ring + ring] = token;
    OutLp[(s * p.ring + ring) * 2u] = logprob;
    OutLp[(s * p.ring + ring) * 2u + 1u] = sampled;
    Seen[zb + token] = 1u;
    Ids[s] = token;
    Pos[s] = Pos[s] + 1u;
    let generated = bu[4] + 1u;
    SU[s * SLOT_U + 4u] = generated;
    var done = generated >= bu[5];
    let stops = min(bu[7], 8u);
    for (var i = 0u; i < stops; i++) { if (SU[s * SLOT_U + 8u + i] == token) { done = true; } }
    if (done) { SU[s * SLOT_U] = 0u; }
  }
}`
