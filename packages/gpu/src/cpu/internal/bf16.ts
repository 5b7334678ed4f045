/**
 * bf16 storage of frozen weights on the CPU device: rounding f32 values into u16 bf16 bits once (as weights are
 * copied in), and widening a range of them back into an f32 scratch before a matmul reads it. Widening is exact:
 * bf16 is the top half of an f32.
 *
 * @internal
 */

const one = new Float32Array(1)
const oneBits = new Uint32Array(one.buffer)

/** f32 bits → bf16 bits, round to nearest even (as torch's `.to(torch.bfloat16)`); a NaN stays a quiet NaN. */
export const roundBits = (x: number): number =>
  (x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0
    ? (x >>> 16) | 0x40
    : ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff

/** Rounds `source` (values as f32: an f64 source is first rounded to f32) into `out` as bf16 bits. */
export const roundInto = (source: ArrayLike<number>, out: Uint16Array): void => {
  if (source instanceof Float32Array) {
    const bits = new Uint32Array(source.buffer, source.byteOffset, source.length)
    for (let i = 0; i < out.length; i++) out[i] = roundBits(bits[i])
    return
  }
  for (let i = 0; i < out.length; i++) {
    one[0] = source[i]
    out[i] = roundBits(oneBits[0])
  }
}

/**
 * Widens bf16 bits `source[from … from+n)` into f32 bits `out[at … at+n)` (a u32 view of an f32 array). `pairs` is
 * a u32 view of `source`'s bytes (offset 0): at an even `from` and `n`, each read takes two values (little-endian:
 * the first in the low half), which measured about twice as fast as one u16 read per value.
 */
export const widen = (
  source: Uint16Array,
  pairs: Uint32Array,
  from: number,
  n: number,
  out: Uint32Array,
  at: number
): void => {
  if (((from | n) & 1) === 0) {
    for (let i = from >> 1, j = at, end = (from + n) >> 1; i < end; i++, j += 2) {
      const w = pairs[i]
      out[j] = w << 16
      out[j + 1] = w & 0xffff0000
    }
    return
  }
  for (let i = 0; i < n; i++) out[at + i] = source[from + i] << 16
}

/** A u32 view of a bf16 array's bytes, for {@link widen}'s paired reads (its last odd value, if any, is left out). */
export const pairsOf = (source: Uint16Array): Uint32Array =>
  new Uint32Array(source.buffer, source.byteOffset, source.length >> 1)
