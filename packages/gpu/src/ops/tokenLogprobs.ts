/**
 * Token logprobs: the LM head's loss end, log p(target), entropy and logsumexp per row at a temperature, and dLogits.
 *
 * One file per op: the op (plain data naming arena tensors), its WGSL kernels, its lowering to dispatches, its
 * naive CPU specification and the CPU twin that runs the specification on a host arena.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32 } from "./internal/check.js"
import { type Bind, type DispatchSpec, f, grid, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { type Binding, builtins, header, linear } from "./internal/wgsl.js"

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

type Num = ArrayLike<number>

/**
 * Per row of logits[rows, vocab] at temperature T (z = logits / T): log p(target), entropy of p, logsumexp of z.
 */
export const cpuTokenLogprobs = (
  logits: Num,
  targets: ArrayLike<number>,
  rows: number,
  vocab: number,
  invTemp: number
) => {
  const logp = new Float64Array(rows)
  const entropy = new Float64Array(rows)
  const lse = new Float64Array(rows)
  for (let r = 0; r < rows; r++) {
    let mx = -Infinity
    for (let j = 0; j < vocab; j++) mx = Math.max(mx, logits[r * vocab + j] * invTemp)
    let se = 0
    let sz = 0
    for (let j = 0; j < vocab; j++) {
      const z = logits[r * vocab + j] * invTemp
      const e = Math.exp(z - mx)
      se += e
      sz += e * z
    }
    lse[r] = mx + Math.log(se)
    logp[r] = logits[r * vocab + targets[r]] * invTemp - lse[r]
    entropy[r] = lse[r] - sz / se
  }
  return { logp, entropy, lse }
}

/** dLogits from upstream gradients of the chosen logprob (and optionally of the entropy). */
export const cpuTokenLogprobsBackward = (
  logits: Num,
  targets: ArrayLike<number>,
  rows: number,
  vocab: number,
  invTemp: number,
  dLogp: Num,
  dEntropy?: Num
): Float64Array => {
  const { entropy, lse } = cpuTokenLogprobs(logits, targets, rows, vocab, invTemp)
  const d = new Float64Array(rows * vocab)
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < vocab; j++) {
      const z = logits[r * vocab + j] * invTemp
      const p = Math.exp(z - lse[r])
      let g = dLogp[r] * ((j === targets[r] ? 1 : 0) - p)
      if (dEntropy !== undefined) g += dEntropy[r] * -p * (z - lse[r] + entropy[r])
      d[r * vocab + j] = g * invTemp
    }
  }
  return d
}

// CPU twin

/** Runs a `tokenLogprobs` op on a host arena with the CPU specification. */
export const twinTokenLogprobs = (h: HostArena, op: TokenLogprobs): void => {
  const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
  const r = cpuTokenLogprobs(
    view(h, op.logits, 0, op.rows * op.vocab),
    targets,
    op.rows,
    op.vocab,
    op.invTemperature
  )
  view(h, op.logp, op.rowOffset, op.rows).set(r.logp)
  view(h, op.entropy, op.rowOffset, op.rows).set(r.entropy)
  view(h, op.lse, op.rowOffset, op.rows).set(r.lse)
  return
}

/** Runs a `tokenLogprobsBackward` op on a host arena with the CPU specification. */
export const twinTokenLogprobsBackward = (h: HostArena, op: TokenLogprobsBackward): void => {
  const z = view(h, op.logits, 0, op.rows * op.vocab)
  const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
  z.set(cpuTokenLogprobsBackward(
    z,
    targets,
    op.rows,
    op.vocab,
    op.invTemperature,
    view(h, op.dLogp, op.rowOffset, op.rows),
    op.dEntropy === undefined ? undefined : view(h, op.dEntropy, op.rowOffset, op.rows)
  ))
  return
}
