/**
 * The reference sampler and its counter-based RNG. Everything here is specified precisely enough for a WGSL
 * sampler to reproduce it: Philox4x32-10 (Random123), one uniform per (seed, sequence, step), and a fixed order of
 * logit processors followed by inverse-CDF sampling in vocabulary order.
 */

const M0 = 0xd2511f53
const M1 = 0xcd9e8d57
const W0 = 0x9e3779b9
const W1 = 0xbb67ae85

/** High 32 bits of the 64-bit product of two u32s, from 16-bit halves (the same trick WGSL needs: no mulhi). */
export const mulhi32 = (a: number, b: number): number => {
  const al = a & 0xffff
  const ah = a >>> 16
  const bl = b & 0xffff
  const bh = b >>> 16
  const ll = al * bl
  const lh = al * bh
  const hl = ah * bl
  const mid = (ll >>> 16) + (lh & 0xffff) + (hl & 0xffff)
  return (ah * bh + (lh >>> 16) + (hl >>> 16) + Math.floor(mid / 65536)) >>> 0
}

/**
 * Philox4x32-10 of Salmon et al. (Random123): a 4×u32 counter and a 2×u32 key to 4×u32 outputs. Each of the 10
 * rounds is (hi0, lo0) = M0·c0, (hi1, lo1) = M1·c2, c = [hi1⊕c1⊕k0, lo1, hi0⊕c3⊕k1, lo0]; the key is bumped by
 * (W0, W1) between rounds.
 */
export const philox4x32 = (
  counter: readonly [number, number, number, number],
  key: readonly [number, number]
): [number, number, number, number] => {
  let c0 = counter[0] >>> 0
  let c1 = counter[1] >>> 0
  let c2 = counter[2] >>> 0
  let c3 = counter[3] >>> 0
  let k0 = key[0] >>> 0
  let k1 = key[1] >>> 0
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      k0 = (k0 + W0) >>> 0
      k1 = (k1 + W1) >>> 0
    }
    const hi0 = mulhi32(M0, c0)
    const lo0 = Math.imul(M0, c0) >>> 0
    const hi1 = mulhi32(M1, c2)
    const lo1 = Math.imul(M1, c2) >>> 0
    c0 = (hi1 ^ c1 ^ k0) >>> 0
    c1 = lo1
    c2 = (hi0 ^ c3 ^ k1) >>> 0
    c3 = lo0
  }
  return [c0, c1, c2, c3]
}

/** Splits a non-negative safe-integer seed into Philox's key words (low, high). */
export const seedKey = (seed: number): [number, number] => {
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw new Error(`Sampling seed ${seed} must be a non-negative safe integer (0 … 2^53−1).`)
  }
  return [seed % 0x100000000 >>> 0, Math.floor(seed / 0x100000000) >>> 0]
}

/**
 * The uniform in [0, 1) that decides the token of generation step `step` (0 = the first generated token) of
 * sequence `sequence` under `seed`: word 0 of Philox4x32-10 with counter [step, sequence, 0, 0] and key
 * [seed mod 2³², ⌊seed / 2³²⌋], keeping its top 24 bits: u = (x0 >>> 8) · 2⁻²⁴ (exact in f32).
 */
export const samplingUniform = (seed: number, sequence: number, step: number): number => {
  const [x0] = philox4x32([step >>> 0, sequence >>> 0, 0, 0], seedKey(seed))
  return (x0 >>> 8) / 16777216
}

/** Sampling settings, with the same meaning and neutral values as transformers / vLLM / TRL. */
export interface SamplingParams {
  /** 0 means greedy (argmax, lowest index on ties). */
  readonly temperature: number
  /** Keep the k largest logits (ties at the k-th value kept); 0 or ≥ vocab disables. */
  readonly topK?: number
  /** Keep the smallest prefix (by descending probability) whose mass reaches topP; 1 disables. */
  readonly topP?: number
  /** Drop tokens with probability < minP · (largest probability); 0 disables. */
  readonly minP?: number
  /** transformers' repetition penalty over every token already in the context (prompt + generated); 1 disables. */
  readonly repetitionPenalty?: number
}

/** One sampled token with its logprobs. */
export interface SampledToken {
  readonly token: number
  /** log_softmax(logits / T)[token] over the full vocabulary (T = 1 when greedy): what the trainer recomputes. */
  readonly logprob: number
  /**
   * The log-probability under the distribution actually sampled from (after the penalty, temperature and
   * filters, renormalised: vLLM's "processed_logprobs"); 0 when greedy.
   */
  readonly sampledLogprob: number
}

/**
 * Step 6 of {@link sampleToken} when nothing is penalised or filtered: the same sums over the whole vocabulary in
 * the same order, without the keep mask; the full log-softmax is then the sampled distribution's.
 */
const sampleUnfiltered = (z: Float64Array, u: number): SampledToken => {
  const V = z.length
  if (unfilteredScratch.length < V) unfilteredScratch = new Float64Array(V)
  const e = unfilteredScratch
  let max = -Infinity
  for (let v = 0; v < V; v++) if (z[v] > max) max = z[v]
  let total = 0
  for (let v = 0; v < V; v++) {
    e[v] = Math.exp(z[v] - max)
    total += e[v]
  }
  const target = u * total
  let acc = 0
  let token = V - 1
  for (let v = 0; v < V; v++) {
    acc += e[v]
    if (acc > target) {
      token = v
      break
    }
  }
  const logprob = z[token] - max - Math.log(total)
  return { token, logprob, sampledLogprob: logprob }
}

let unfilteredScratch = new Float64Array(0)

/** Log-softmax of x/T at index i, f64. */
export const logSoftmaxAt = (x: ArrayLike<number>, temperature: number, i: number): number => {
  let max = -Infinity
  for (let v = 0; v < x.length; v++) max = Math.max(max, x[v] / temperature)
  let sum = 0
  for (let v = 0; v < x.length; v++) sum += Math.exp(x[v] / temperature - max)
  return x[i] / temperature - max - Math.log(sum)
}

/**
 * Picks the next token from one row of logits. The order of operations (transformers' generate order):
 * 1. repetition penalty on the raw logits of every distinct token in `context`: z < 0 ? z·p : z/p;
 * 2. temperature 0 → argmax (lowest index on ties), done; otherwise z /= T;
 * 3. top-k: drop z < (k-th largest z);
 * 4. top-p: over the survivors sorted by (z descending, index ascending), keep a token while the probability mass
 *    strictly before it is < topP (so the first is always kept);
 * 5. min-p: drop exp(z − max z) < minP;
 * 6. with weights e_v = exp(z_v − max z) of the survivors and total E, return the first v in vocabulary order whose
 *    running sum of e exceeds u·E (the last survivor if rounding leaves none).
 * All arithmetic is f64; an f32 GPU sampler can differ only when u·E lands within rounding of a boundary.
 */
export const sampleToken = (
  logits: ArrayLike<number>,
  context: ArrayLike<number>,
  params: SamplingParams,
  u: number
): SampledToken => {
  const V = logits.length
  const z = Float64Array.from(logits)
  const penalty = params.repetitionPenalty ?? 1
  if (penalty !== 1) {
    const seen = new Set<number>()
    for (let i = 0; i < context.length; i++) seen.add(context[i])
    for (const t of seen) z[t] = z[t] < 0 ? z[t] * penalty : z[t] / penalty
  }
  if (params.temperature === 0) {
    let best = 0
    for (let v = 1; v < V; v++) if (z[v] > z[best]) best = v
    return { token: best, logprob: logSoftmaxAt(logits, 1, best), sampledLogprob: 0 }
  }
  const T = params.temperature
  for (let v = 0; v < V; v++) z[v] /= T
  const topK = params.topK ?? 0
  if (penalty === 1 && !(topK > 0 && topK < V) && (params.topP ?? 1) >= 1 && (params.minP ?? 0) <= 0) {
    return sampleUnfiltered(z, u)
  }
  const keep = new Uint8Array(V).fill(1)
  if (topK > 0 && topK < V) {
    const threshold = Float64Array.from(z).sort().reverse()[topK - 1]
    for (let v = 0; v < V; v++) if (z[v] < threshold) keep[v] = 0
  }
  const topP = params.topP ?? 1
  if (topP < 1) {
    const order: Array<number> = []
    for (let v = 0; v < V; v++) if (keep[v]) order.push(v)
    order.sort((a, b) => z[b] - z[a] || a - b)
    const max = z[order[0]]
    let total = 0
    for (const v of order) total += Math.exp(z[v] - max)
    let before = 0
    for (const v of order) {
      if (before / total >= topP) keep[v] = 0
      before += Math.exp(z[v] - max)
    }
  }
  let max = -Infinity
  for (let v = 0; v < V; v++) if (keep[v] && z[v] > max) max = z[v]
  const minP = params.minP ?? 0
  if (minP > 0) { for (let v = 0; v < V; v++) if (keep[v] && Math.exp(z[v] - max) < minP) keep[v] = 0 }
  // e_v computed once and reused by the inverse CDF (the same values the formula names twice).
  const e = new Float64Array(V)
  let total = 0
  let kept = 0
  for (let v = 0; v < V; v++) {
    if (!keep[v]) continue
    e[v] = Math.exp(z[v] - max)
    total += e[v]
    kept++
  }
  const target = u * total
  let acc = 0
  let token = -1
  for (let v = 0; v < V; v++) {
    if (!keep[v]) continue
    acc += e[v]
    token = v
    if (acc > target) break
  }
  const sampledLogprob = z[token] - max - Math.log(total)
  // With no penalty and no filter, z = logits / T over the whole vocabulary: the full log-softmax is the sampled one.
  if (penalty === 1 && kept === V) return { token, logprob: sampledLogprob, sampledLogprob }
  return { token, logprob: logSoftmaxAt(logits, T, token), sampledLogprob }
}
