/**
 * The WGSL of the GRPO loss (see `GrpoLoss.ts`): one workgroup walks the packed batch row by row. Phase 1 reduces
 * each row's token count and the sums behind the sequence-level ratios (GSPO's mean log-ratio, the sampler
 * correction's summed log-ratio, the off-policy mask's mean); phase 2 forms every token's loss and its derivative
 * d loss / d logprob (written to DLP, the seed of the backward), then adds the micro-batch's loss and metric values
 * to `step.results`. Rows are few (the micro-batch), so the row loop is cheap next to the model's matmuls.
 */

/** Words of the per-micro-batch parameter block before the per-row advantages. */
export const HEADER = 32

/** Slots of the parameter block (f32; flags are 0 / 1, modes small integers). */
export const Prm = {
  lossType: 0,
  epsLo: 1,
  epsHi: 2,
  hasDelta: 3,
  delta: 4,
  beta: 5,
  biasKl: 6,
  sequenceLevel: 7,
  sapoPos: 8,
  sapoNeg: 9,
  isMode: 10,
  clipMin: 11,
  clipMax: 12,
  hasOld: 13,
  rows: 14,
  gaNorm: 15,
  dapoNorm: 16,
  maxLen: 17,
  hasOffPolicy: 18,
  offPolicyThreshold: 19,
  hasSampler: 20
} as const

/** Loss type codes. */
export const LossCode = { grpo: 0, bnpo: 1, dr_grpo: 2, dapo: 3, cispo: 4, sapo: 5 } as const

/** Sampler-correction codes: 0 off, token_truncate, token_mask, sequence_truncate, sequence_mask. */
export const IsCode = { off: 0, token_truncate: 1, token_mask: 2, sequence_truncate: 3, sequence_mask: 4 } as const

/** Slots of `step.results` the kernel adds to (sums over micro-batches; counts where a value can be missing). */
export const Res = {
  loss: 0,
  kl: 4,
  entropy: 5,
  lowMean: 6,
  highMean: 7,
  regionMean: 8,
  lowMin: 9,
  lowMinCount: 10,
  highMax: 11,
  highMaxCount: 12,
  cispo: 13,
  microBatches: 14
} as const

/** The kernel for `rows` packed rows (the row statistics live in workgroup memory sized by it). */
export const grpoLoss = (rows: number) =>
  `struct P { n: u32, seq: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> LP: array<f32>;
@group(0) @binding(2) var<storage, read> ENT: array<f32>;
@group(0) @binding(3) var<storage, read> TOK: array<f32>;
@group(0) @binding(4) var<storage, read> PRM: array<f32>;
@group(0) @binding(5) var<storage, read_write> DLP: array<f32>;
@group(0) @binding(6) var<storage, read_write> Res: array<f32>;
const ROWS = ${rows}u;
const BIG = 3.0e38;
var<workgroup> red: array<vec4f, 256>;
var<workgroup> rowStat: array<vec4f, ROWS>;

fn reduce4(lid: u32, v: vec4f) -> vec4f {
  workgroupBarrier();
  red[lid] = v;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  return red[0];
}

fn applyIs(r: f32, mode: u32, lo: f32, hi: f32) -> f32 {
  if (mode == 1u || mode == 3u) { return clamp(r, lo, hi); }
  if (r < lo || r > hi) { return 0.0; }
  return r;
}

@compute @workgroup_size(256) fn main(@builtin(local_invocation_index) lid: u32) {
  let n = p.n;
  let S = p.seq;
  let lossType = u32(PRM[${Prm.lossType}]);
  let epsLo = PRM[${Prm.epsLo}];
  let epsHi = PRM[${Prm.epsHi}];
  let hasDelta = PRM[${Prm.hasDelta}] != 0.0;
  let delta = PRM[${Prm.delta}];
  let beta = PRM[${Prm.beta}];
  let biasKl = PRM[${Prm.biasKl}] != 0.0;
  let seqLevel = PRM[${Prm.sequenceLevel}] != 0.0;
  let sapoPos = PRM[${Prm.sapoPos}];
  let sapoNeg = PRM[${Prm.sapoNeg}];
  let isMode = u32(PRM[${Prm.isMode}]);
  let clipMin = PRM[${Prm.clipMin}];
  let clipMax = PRM[${Prm.clipMax}];
  let hasOld = PRM[${Prm.hasOld}] != 0.0;
  let B = PRM[${Prm.rows}];
  let realRows = u32(B);
  let ga = PRM[${Prm.gaNorm}];
  let dapoNorm = PRM[${Prm.dapoNorm}];
  let maxLen = PRM[${Prm.maxLen}];
  let hasOff = PRM[${Prm.hasOffPolicy}] != 0.0;
  let offThr = PRM[${Prm.offPolicyThreshold}];
  let hasSamp = PRM[${Prm.hasSampler}] != 0.0;
  let clipped = lossType <= ${LossCode.dapo}u;

  // Phase 1: per row, tokens, Σ m(l − old), Σ m(old − samp), Σ m(samp' − l).
  var total = 0.0;
  for (var i = 0u; i < ROWS; i++) {
    var v = vec4f(0.0);
    for (var t = lid; t < S; t += 256u) {
      let j = i * S + t;
      let m = TOK[3u * n + j];
      if (m == 0.0) { continue; }
      let l = LP[j];
      let old = select(l, TOK[j], hasOld);
      let samp = TOK[2u * n + j];
      let sampOff = select(old, samp, hasSamp);
      v += vec4f(m, (l - old) * m, (old - samp) * m, (sampOff - l) * m);
    }
    let r = reduce4(lid, v);
    if (lid == 0u) { rowStat[i] = r; }
    total += r.x;
  }
  workgroupBarrier();

  // Phase 2: every token's loss and d loss / d l; the metric sums.
  var loss = 0.0;
  var klSum = 0.0;
  var entSum = 0.0;
  var low = 0.0;
  var high = 0.0;
  var region = 0.0;
  var cispo = 0.0;
  var lowMin = BIG;
  var highMax = -BIG;
  for (var i = 0u; i < ROWS; i++) {
    let st = rowStat[i];
    let count = st.x;
    let A = PRM[${HEADER}u + i];
    let seqW = exp(st.y / max(1.0, count));
    var seqIs = 1.0;
    if (isMode >= 3u) { seqIs = applyIs(exp(st.z), isMode, clipMin, clipMax); }
    var off = 1.0;
    if (hasOff && !(A >= 0.0 || st.w / max(1.0, count) <= offThr)) { off = 0.0; }
    var base: f32;
    switch lossType {
      case ${LossCode.grpo}u, ${LossCode.sapo}u: { base = 1.0 / max(1.0, count) / B / ga; }
      case ${LossCode.bnpo}u: { base = 1.0 / max(1.0, total) / ga; }
      case ${LossCode.dr_grpo}u: { base = 1.0 / (B * maxLen) / ga; }
      default: { base = 1.0 / dapoNorm; }
    }
    var acc = vec4f(0.0);
    var flags = vec4f(0.0);
    for (var t = lid; t < S; t += 256u) {
      let j = i * S + t;
      let m = TOK[3u * n + j];
      if (m == 0.0) { DLP[j] = 0.0; continue; }
      let l = LP[j];
      let old = select(l, TOK[j], hasOld);
      let w = select(exp(l - old), seqW, seqLevel);
      var policy = 0.0;
      var dPdw = 0.0;
      var dPdl = 0.0;
      var clipW = w;
      if (clipped) {
        let c2 = clamp(w, 1.0 - epsLo, 1.0 + epsHi);
        let c1 = select(w, min(w, delta), hasDelta);
        clipW = c1;
        let a = c1 * A;
        let b = c2 * A;
        policy = -min(a, b);
        var ga2 = 0.0;
        if (a < b) { ga2 = 1.0; } else if (a == b) { ga2 = 0.5; }
        let dc1 = select(0.0, 1.0, !hasDelta || w <= delta);
        let dc2 = select(0.0, 1.0, w >= 1.0 - epsLo && w <= 1.0 + epsHi);
        dPdw = -(ga2 * A * dc1 + (1.0 - ga2) * A * dc2);
      } else if (lossType == ${LossCode.cispo}u) {
        let capped = min(w, epsHi);
        policy = -capped * A * l;
        dPdl = -capped * A;
      } else {
        let tau = select(sapoNeg, sapoPos, A > 0.0);
        let s = 1.0 / (1.0 + exp(-tau * (w - 1.0)));
        policy = -s * (4.0 / tau) * A;
        dPdw = -4.0 * s * (1.0 - s) * A;
      }
      var factor = off;
      if (isMode == 1u || isMode == 2u) {
        factor *= applyIs(exp((old - TOK[2u * n + j]) * m), isMode, clipMin, clipMax);
      } else if (isMode >= 3u) {
        factor *= seqIs;
      }
      var kl = 0.0;
      var dKLdl = 0.0;
      var dKLdw = 0.0;
      if (beta != 0.0) {
        let d = TOK[n + j] - l;
        let k3 = exp(d) - d - 1.0;
        let dk3 = 1.0 - exp(d);
        if (biasKl) { kl = k3 * w; dKLdl = dk3 * w; dKLdw = k3; } else { kl = k3; dKLdl = dk3; }
      }
      let c = base * m;
      acc.x += c * (policy * factor + beta * kl);
      acc.y += kl * m;
      acc.z += ENT[j] * m;
      var g = c * (factor * dPdl + beta * dKLdl);
      let viaW = c * (factor * dPdw + beta * dKLdw);
      if (seqLevel) { acc.w += viaW; } else { g += viaW * w; }
      DLP[j] = g;
      if (!seqLevel) {
        let isLow = clipW < 1.0 - epsLo && A < 0.0;
        let isHigh = clipW > 1.0 + epsHi && A > 0.0;
        flags += m * vec4f(select(0.0, 1.0, isLow), select(0.0, 1.0, isHigh), select(0.0, 1.0, isLow || isHigh),
          select(0.0, 1.0, w > epsHi && A > 0.0));
      }
    }
    let r = reduce4(lid, acc);
    let f = reduce4(lid, flags);
    loss += r.x;
    klSum += r.y;
    entSum += r.z;
    if (seqLevel) {
      let scale = r.w * seqW / max(1.0, count);
      for (var t = lid; t < S; t += 256u) {
        let j = i * S + t;
        let m = TOK[3u * n + j];
        if (m != 0.0) { DLP[j] += scale * m; }
      }
      if (i < realRows) {
        let clipW = select(seqW, min(seqW, delta), hasDelta);
        let isLow = select(0.0, 1.0, clipW < 1.0 - epsLo && A < 0.0);
        let isHigh = select(0.0, 1.0, clipW > 1.0 + epsHi && A > 0.0);
        low += isLow;
        high += isHigh;
        region += max(isLow, isHigh);
        cispo += select(0.0, 1.0, seqW > epsHi && A > 0.0);
        lowMin = min(lowMin, isLow);
        highMax = max(highMax, isHigh);
      }
    } else {
      low += f.x;
      high += f.y;
      region += f.z;
      cispo += f.w;
      if (count > 0.0) {
        lowMin = min(lowMin, f.x / count);
        highMax = max(highMax, f.y / count);
      }
    }
  }
  if (lid == 0u) {
    let den = select(max(1.0, total), max(1.0, B), seqLevel);
    Res[${Res.loss}] += loss;
    Res[${Res.kl}] += klSum / max(1.0, total);
    Res[${Res.entropy}] += entSum / max(1.0, total);
    Res[${Res.lowMean}] += low / den;
    Res[${Res.highMean}] += high / den;
    Res[${Res.regionMean}] += region / den;
    if (lowMin < BIG) { Res[${Res.lowMin}] += lowMin; Res[${Res.lowMinCount}] += 1.0; }
    if (highMax > -BIG) { Res[${Res.highMax}] += highMax; Res[${Res.highMaxCount}] += 1.0; }
    Res[${Res.cispo}] += cispo / den;
    Res[${Res.microBatches}] += 1.0;
  }
}`
