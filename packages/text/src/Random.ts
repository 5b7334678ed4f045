/**
 * A small deterministic PRNG (mulberry32): same seed, same stream. The tokenizer's training corpus draws from it,
 * and so does the model's random initialisation in `@envtrain/gpu`, which is why it is public here, in the leaf
 * package, rather than private to either.
 *
 * @example
 * ```ts
 * import { Random } from "@envtrain/text"
 *
 * const rand = Random.mulberry32(1)
 * const u = rand() // a number in [0, 1), the same one for every run with seed 1
 * ```
 *
 * @since 0.0.0
 */

/** A generator of uniforms in [0, 1) seeded by `seed` (taken as an unsigned 32-bit integer). */
export const mulberry32 = (seed: number): () => number => {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
