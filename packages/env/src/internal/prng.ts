/**
 * A small seeded PRNG (sfc32 seeded through splitmix32) so that a seed fully determines an episode.
 * Not cryptographic; chosen because it is fast, has a 128-bit state and passes PractRand at these sizes.
 */
export interface Prng {
  /** Uniform float in [0, 1). */
  readonly next: () => number
  /** Uniform integer in [0, n). */
  readonly int: (n: number) => number
  /** In-place Fisher–Yates shuffle (the same walk as Python's `random.shuffle`). */
  readonly shuffle: <A>(items: Array<A>) => Array<A>
  /** One uniformly chosen element. */
  readonly choice: <A>(items: ReadonlyArray<A>) => A
}

const splitmix32 = (seed: number) => {
  let s = seed >>> 0
  return () => {
    s = (s + 0x9e3779b9) >>> 0
    let z = s
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
    return (z ^ (z >>> 16)) >>> 0
  }
}

/** Makes a generator from any finite number (the integer part modulo 2^32 and the high bits are both mixed in). */
export const make = (seed: number): Prng => {
  const hi = Math.floor(seed / 4294967296)
  const mix = splitmix32((seed >>> 0) ^ Math.imul(hi >>> 0, 0x27d4eb2d))
  let a = mix()
  let b = mix()
  let c = mix()
  let d = mix() | 1
  const next32 = () => {
    const t = (((a + b) >>> 0) + d) >>> 0
    d = (d + 1) >>> 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) >>> 0
    c = (c << 21) | (c >>> 11)
    c = (c + t) >>> 0
    return t
  }
  for (let i = 0; i < 12; i++) next32()
  const next = () => next32() / 4294967296
  const int = (n: number) => Math.floor(next() * n)
  return {
    next,
    int,
    shuffle: (items) => {
      for (let i = items.length - 1; i > 0; i--) {
        const j = int(i + 1)
        const tmp = items[i]
        items[i] = items[j]
        items[j] = tmp
      }
      return items
    },
    choice: (items) => items[int(items.length)]
  }
}
