/**
 * Token logprobs: the LM head's loss end, log p(target), entropy and logsumexp per row at a temperature, and dLogits.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32 } from "./internal/check.js"
import { type Bind, type DispatchSpec, f, grid, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { type FloatArray, type Numerics, numerics } from "./Numerics.js"
import { type Binding, builtins, header, linear } from "./Wgsl.js"

/** The tempered logprob of each target token (and the entropy) from a chunk of logits. */
export interface TokenLogprobs {
  readonly kind: "tokenLogprobs"
  /** A chunk of logits [rows, vocab] (row r is token rowOffset + r). */
  readonly logits: Tensor
  readonly targets: Tensor
  readonly logp: Tensor
  readonly entropy: Tensor
  readonly lse: Tensor
  readonly rows: number
  readonly vocab: number
  readonly rowOffset: number
  readonly invTemperature: number
}

/** The backward of {@link TokenLogprobs}: dLogits from d logprob (and d entropy). */
export interface TokenLogprobsBackward {
  readonly kind: "tokenLogprobsBackward"
  /** Overwritten in place with dLogits. */
  readonly logits: Tensor
  readonly targets: Tensor
  readonly lse: Tensor
  readonly entropy: Tensor
  readonly dLogp: Tensor
  readonly dEntropy: Tensor | undefined
  readonly rows: number
  readonly vocab: number
  readonly rowOffset: number
  readonly invTemperature: number
}

/** Makes a {@link TokenLogprobs} op. */
export const tokenLogprobs = (o: {
  logits: Tensor
  targets: Tensor
  logp: Tensor
  entropy: Tensor
  lse: Tensor
  rows: number
  vocab: number
  rowOffset?: number
  temperature?: number
}): TokenLogprobs => {
  const rowOffset = o.rowOffset ?? 0
  atLeast(o.logits, o.rows * o.vocab, "tokenLogprobs logits")
  isU32(o.targets, "tokenLogprobs targets")
  for (const t of [o.targets, o.logp, o.entropy, o.lse]) atLeast(t, rowOffset + o.rows, "tokenLogprobs")
  return {
    kind: "tokenLogprobs",
    logits: o.logits,
    targets: o.targets,
    logp: o.logp,
    entropy: o.entropy,
    lse: o.lse,
    rows: o.rows,
    vocab: o.vocab,
    rowOffset,
    invTemperature: 1 / (o.temperature ?? 1)
  }
}

/** Makes a {@link TokenLogprobsBackward} op. */
export const tokenLogprobsBackward = (o: {
  logits: Tensor
  targets: Tensor
  lse: Tensor
  entropy: Tensor
  dLogp: Tensor
  dEntropy?: Tensor
  rows: number
  vocab: number
  rowOffset?: number
  temperature?: number
}): TokenLogprobsBackward => ({
  kind: "tokenLogprobsBackward",
  logits: o.logits,
  targets: o.targets,
  lse: o.lse,
  entropy: o.entropy,
  dLogp: o.dLogp,
  dEntropy: o.dEntropy,
  rows: o.rows,
  vocab: o.vocab,
  rowOffset: o.rowOffset ?? 0,
  invTemperature: 1 / (o.temperature ?? 1)
})

// WGSL

const lpParams = "rows: u32, vocab: u32, rowOff: u32, invTemp: f32"

/**
 * One 256-thread workgroup per logits row of a chunk: max, then Σe and Σe·z in one more sweep, so the row is
 * read twice and nothing of size vocab is written. Outputs go to row `rowOff + r` of the per-token tensors.
 */
export const tokenLogprobsShader = header(lpParams, [["Z", "read"], ["T", "read", "u32"], ["LP", "read_write"], [
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
export const tokenLogprobsBackwardShader = (entropy: boolean) => {
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

// Lowering

/** The dispatches of a `tokenLogprobs` op. */
export const lowerTokenLogprobs = (op: TokenLogprobs): Array<DispatchSpec> => {
  return [{
    label: "token_logprobs",
    code: tokenLogprobsShader,
    bindings: [op.logits, op.targets, op.logp, op.entropy, op.lse],
    params: [u(op.rows), u(op.vocab), u(op.rowOffset), f(op.invTemperature)],
    groups: grid(op.rows),
    flops: 5 * op.rows * op.vocab,
    bytes: 8 * op.rows * op.vocab
  }]
}

/** The dispatches of a `tokenLogprobsBackward` op. */
export const lowerTokenLogprobsBackward = (op: TokenLogprobsBackward): Array<DispatchSpec> => {
  const entropy = op.dEntropy !== undefined
  const bindings: Array<Bind> = [op.logits, op.targets, op.lse, op.entropy, op.dLogp]
  if (op.dEntropy !== undefined) bindings.push(op.dEntropy)
  return [{
    label: `token_logprobs_backward${entropy ? "_entropy" : ""}`,
    code: tokenLogprobsBackwardShader(entropy),
    bindings,
    params: [u(op.rows), u(op.vocab), u(op.rowOffset), f(op.invTemperature)],
    groups: over(op.rows * op.vocab, 256),
    flops: 8 * op.rows * op.vocab,
    bytes: 8 * op.rows * op.vocab
  }]
}

// CPU specification

/**
 * One row of softmax(logits / temperature): z_v = logits_v / T (rounded to the stored type), p_v = exp(z_v − lse),
 * all f64; returns lse. The forward and the backward share it, so they agree bit for bit.
 */
const softmaxRow = (
  logits: ArrayLike<number>,
  offset: number,
  vocab: number,
  temperature: number,
  round: (x: number) => number,
  z: Float64Array,
  p: Float64Array
): number => {
  let max = -Infinity
  for (let v = 0; v < vocab; v++) {
    const zv = round(logits[offset + v] / temperature)
    z[v] = zv
    if (zv > max) max = zv
  }
  let sum = 0
  for (let v = 0; v < vocab; v++) sum += Math.exp(z[v] - max)
  const lse = max + Math.log(sum)
  for (let v = 0; v < vocab; v++) p[v] = Math.exp(z[v] - lse)
  return lse
}

/**
 * Per row of logits [rows, vocab]: the log-probability of the row's target and the entropy under
 * softmax(logits / temperature), as TRL computes them (logits divided by the temperature in the stored type,
 * then log-softmax, f64 sums), and the logsumexp of the scaled logits. A target < 0 means "none": logprob 0.
 */
export const cpuTokenLogprobs = (
  logits: ArrayLike<number>,
  vocab: number,
  targets: ArrayLike<number>,
  temperature: number,
  nm: Numerics
): { readonly logprobs: Float64Array; readonly entropy: Float64Array; readonly lse: Float64Array } => {
  const rows = targets.length
  const logprobs = new Float64Array(rows)
  const entropy = new Float64Array(rows)
  const lses = new Float64Array(rows)
  const z = new Float64Array(vocab)
  const p = new Float64Array(vocab)
  for (let n = 0; n < rows; n++) {
    const lse = softmaxRow(logits, n * vocab, vocab, temperature, nm.round, z, p)
    let expected = 0
    for (let v = 0; v < vocab; v++) expected += p[v] * z[v]
    entropy[n] = lse - expected
    logprobs[n] = targets[n] < 0 ? 0 : z[targets[n]] - lse
    lses[n] = lse
  }
  return { logprobs, entropy, lse: lses }
}

/**
 * dL/dlogits of L = Σ w·logprob + Σ e·entropy (w = dLogp, e = dEntropy per row; rows with a target < 0 get no
 * logprob term), with the logprobs and L. d/dz of w·log_softmax(z/T)[y] = (w/T)·(onehot(y) − softmax(z/T)); one
 * softmax per row serves the logprob, the entropy (as {@link cpuTokenLogprobs} computes them) and the gradient.
 */
export const cpuTokenLogprobsBackward = (
  logits: ArrayLike<number>,
  vocab: number,
  targets: ArrayLike<number>,
  temperature: number,
  dLogp: ArrayLike<number>,
  dEntropy: ArrayLike<number> | undefined,
  nm: Numerics
): { readonly dLogits: FloatArray; readonly logprobs: Float64Array; readonly loss: number } => {
  const N = targets.length
  const V = vocab
  const logprobs = new Float64Array(N)
  let loss = 0
  const dLogits = nm.alloc(N * V)
  const z = new Float64Array(V)
  const p = new Float64Array(V)
  for (let n = 0; n < N; n++) {
    const lse = softmaxRow(logits, n * V, V, temperature, nm.round, z, p)
    let expected = 0
    for (let v = 0; v < V; v++) expected += p[v] * z[v]
    const hn = lse - expected
    const target = targets[n]
    logprobs[n] = target < 0 ? 0 : z[target] - lse
    const w = target < 0 ? 0 : dLogp[n]
    const e = dEntropy === undefined ? 0 : dEntropy[n]
    if (w === 0 && e === 0) continue
    loss += w * logprobs[n] + e * hn
    const o = n * V
    for (let v = 0; v < V; v++) {
      // d logprob/dz_v = onehot − p; d entropy/dz_v = −p·(z_v − lse + H).
      const dz = w * ((v === target ? 1 : 0) - p[v]) - e * p[v] * (z[v] - lse + hn)
      dLogits[o + v] = dz / temperature
    }
  }
  return { dLogits, logprobs, loss }
}

// CPU twin

/** Runs a `tokenLogprobs` op on a host arena with the CPU specification (f64, temperature 1/invTemperature). */
export const twinTokenLogprobs = (h: HostArena, op: TokenLogprobs): void => {
  const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
  const logits = view(h, op.logits, 0, op.rows * op.vocab)
  const r = cpuTokenLogprobs(logits, op.vocab, targets, 1 / op.invTemperature, numerics("f64"))
  view(h, op.logp, op.rowOffset, op.rows).set(r.logprobs)
  view(h, op.entropy, op.rowOffset, op.rows).set(r.entropy)
  view(h, op.lse, op.rowOffset, op.rows).set(r.lse)
}

/** Runs a `tokenLogprobsBackward` op on a host arena with the CPU specification (dLogits in place of the logits). */
export const twinTokenLogprobsBackward = (h: HostArena, op: TokenLogprobsBackward): void => {
  const z = view(h, op.logits, 0, op.rows * op.vocab)
  const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
  const dEntropy = op.dEntropy === undefined ? undefined : view(h, op.dEntropy, op.rowOffset, op.rows)
  const dLogp = view(h, op.dLogp, op.rowOffset, op.rows)
  z.set(cpuTokenLogprobsBackward(z, op.vocab, targets, 1 / op.invTemperature, dLogp, dEntropy, numerics("f64")).dLogits)
}
