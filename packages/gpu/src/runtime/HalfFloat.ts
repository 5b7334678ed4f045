/**
 * Exact conversions from the 16-bit float formats that checkpoints use (bf16, IEEE f16) to f32, done once at
 * load time: Dawn has no bf16 at all, and the training path computes in f32.
 *
 * Both conversions are exact (every bf16 and every f16 value, including subnormals, infinities and NaN, is
 * representable in f32). The f32 → 16-bit directions round to nearest even, for saving checkpoints.
 *
 * @example
 * ```ts
 * import { HalfFloat } from "@envtrain/gpu"
 * const f32 = HalfFloat.bf16ToF32(new Uint16Array([0x3f80])) // Float32Array [1]
 * ```
 *
 * @since 0.0.0
 */

/** bf16 is the top half of an f32: shifting the bits back up is exact. */
export const bf16ToF32 = (bits: Uint16Array): Float32Array => {
  const out = new Uint32Array(bits.length)
  for (let i = 0; i < bits.length; i++) out[i] = bits[i] << 16
  return new Float32Array(out.buffer)
}

/** IEEE binary16 → f32, exact for normals, subnormals, ±0, ±∞ and NaN (payload kept). */
export const f16ToF32 = (bits: Uint16Array): Float32Array => {
  const out = new Uint32Array(bits.length)
  for (let i = 0; i < bits.length; i++) out[i] = f16BitsToF32Bits(bits[i])
  return new Float32Array(out.buffer)
}

const f16BitsToF32Bits = (h: number): number => {
  const sign = (h & 0x8000) << 16
  const exp = (h >> 10) & 0x1f
  let mant = h & 0x3ff
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0
  if (exp !== 0) return (sign | ((exp - 15 + 127) << 23) | (mant << 13)) >>> 0
  if (mant === 0) return sign >>> 0
  // Subnormal f16: normalise the mantissa; every such value is a normal f32.
  let e = -14
  while ((mant & 0x400) === 0) {
    mant <<= 1
    e--
  }
  return (sign | ((e + 127) << 23) | ((mant & 0x3ff) << 13)) >>> 0
}

/** f32 → bf16 bits, round to nearest even; NaN stays a (quiet) NaN. */
export const f32ToBf16 = (values: Float32Array): Uint16Array => {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length)
  const out = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) {
    const x = bits[i]
    if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) {
      out[i] = (x >>> 16) | 0x40
      continue
    }
    out[i] = ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff
  }
  return out
}

/** f32 → IEEE f16 bits, round to nearest even, overflow to ±∞, underflow through subnormals to ±0. */
export const f32ToF16 = (values: Float32Array): Uint16Array => {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length)
  const out = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) {
    const x = bits[i]
    const sign = (x >>> 16) & 0x8000
    const exp = (x >>> 23) & 0xff
    const mant = x & 0x7fffff
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0)
      continue
    }
    const e = exp - 127 + 15
    if (e >= 0x1f) {
      out[i] = sign | 0x7c00
      continue
    }
    if (e <= 0) {
      if (e < -10) {
        out[i] = sign
        continue
      }
      // Subnormal: shift the full mantissa (with its implicit 1) and round to nearest even.
      const m = mant | 0x800000
      const shift = 14 - e
      const half = 1 << (shift - 1)
      const rest = m & ((1 << shift) - 1)
      let r = m >>> shift
      if (rest > half || (rest === half && (r & 1) === 1)) r++
      out[i] = sign | r
      continue
    }
    let r = (e << 10) | (mant >>> 13)
    const rest = mant & 0x1fff
    if (rest > 0x1000 || (rest === 0x1000 && (r & 1) === 1)) r++ // may carry into the exponent: still correct
    out[i] = sign | r
  }
  return out
}
