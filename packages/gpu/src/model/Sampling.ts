/**
 * Sampling settings of GPU generation and their per-slot encoding for the sampler kernel. The kernel
 * (internal/samplingKernel.ts) reproduces `Qwen3Reference.sampleToken`: repetition penalty, temperature (0 is
 * greedy), top-k, top-p, min-p, then inverse-CDF sampling in vocabulary order with the Philox4x32-10 uniform of
 * (seed, sequence, step) — so the same seed gives the same tokens, on the GPU and in the reference.
 *
 * @example
 * ```ts
 * const problem = Sampling.validate({ temperature: 0.7, topP: 0.95 }) // undefined when valid
 * ```
 *
 * @since 0.0.0
 */
import { seedKey } from "./internal/qwen3refSampling.js"
import { MAX_STOPS, NONE, SLOT_U, TOP_WORD } from "./internal/samplingKernel.js"

/** Sampling settings, with the neutral values of transformers / vLLM. */
export interface SamplingOptions {
  /** 0 is greedy (default 1). */
  readonly temperature?: number
  /** 0 disables (default). */
  readonly topK?: number
  /** 1 disables (default). */
  readonly topP?: number
  /** 0 disables (default). */
  readonly minP?: number
  /** 1 disables (default). */
  readonly repetitionPenalty?: number
  readonly seed?: number
  readonly sequence?: number
}

/** A message naming the bad setting, or undefined. */
export const validate = (o: SamplingOptions): string | undefined => {
  const t = o.temperature ?? 1
  if (!(t >= 0) || !Number.isFinite(t)) return `temperature ${t} must be a finite number ≥ 0.`
  const k = o.topK ?? 0
  if (!Number.isInteger(k) || k < 0) return `topK ${k} must be an integer ≥ 0 (0 disables).`
  const p = o.topP ?? 1
  if (!(p > 0 && p <= 1)) return `topP ${p} must be in (0, 1].`
  const m = o.minP ?? 0
  if (!(m >= 0 && m <= 1)) return `minP ${m} must be in [0, 1].`
  const r = o.repetitionPenalty ?? 1
  if (!(r > 0) || !Number.isFinite(r)) return `repetitionPenalty ${r} must be > 0 (1 disables).`
  const seed = o.seed ?? 0
  if (!Number.isSafeInteger(seed) || seed < 0) return `seed ${seed} must be a non-negative safe integer.`
  const seq = o.sequence ?? 0
  if (!Number.isInteger(seq) || seq < 0 || seq > 0xffffffff) return `sequence ${seq} must be a u32.`
  return undefined
}

/** The slot's u32 words: active, seed, sequence, generated, max new tokens, top-k, stop ids, top logprobs. */
export const slotWords = (
  o: SamplingOptions,
  maxNewTokens: number,
  stops: ReadonlyArray<number>,
  topLogprobs = 0
): Uint32Array => {
  const w = new Uint32Array(SLOT_U).fill(NONE, 8, 8 + MAX_STOPS)
  const [lo, hi] = seedKey(o.seed ?? 0)
  w[0] = 1
  w[1] = lo
  w[2] = hi
  w[3] = o.sequence ?? 0
  w[4] = 0
  w[5] = maxNewTokens
  w[6] = o.topK ?? 0
  w[7] = Math.min(stops.length, MAX_STOPS)
  stops.slice(0, MAX_STOPS).forEach((t, i) => (w[8 + i] = t))
  w[TOP_WORD] = topLogprobs
  return w
}

/** The slot's f32 words: temperature, top-p, min-p, repetition penalty. */
export const slotFloats = (o: SamplingOptions): Float32Array =>
  Float32Array.of(o.temperature ?? 1, o.topP ?? 1, o.minP ?? 0, o.repetitionPenalty ?? 1)
