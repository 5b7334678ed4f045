/**
 * Bit-exact conversions between f32 and the 16-bit float formats found in checkpoints.
 *
 * bf16 is the top half of an f32, so widening is a shift and is exact. Narrowing rounds to nearest, ties to
 * even, as torch does, so a tensor saved here in bf16 equals `tensor.to(torch.bfloat16)`.
 */

const f32 = new Float32Array(1)
const u32 = new Uint32Array(f32.buffer)

/** bf16 bits (little-endian u16 pairs in `bytes`) → f32. Exact. */
export const bf16ToF32 = (bytes: Uint8Array): Float32Array => {
  const n = bytes.length >>> 1
  const out = new Float32Array(n)
  const bits = new Uint32Array(out.buffer)
  for (let i = 0; i < n; i++) bits[i] = (bytes[2 * i] | (bytes[2 * i + 1] << 8)) << 16
  return out
}

/** f32 → bf16 bits, round to nearest even; NaN stays a (quiet) NaN of the same sign. */
export const f32ToBf16Bits = (x: number): number => {
  f32[0] = x
  const b = u32[0]
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) return ((b >>> 16) | 0x0040) & 0xffff
  const rounded = b + 0x7fff + ((b >>> 16) & 1)
  return (rounded >>> 16) & 0xffff
}

export const f32ToBf16 = (values: Float32Array): Uint8Array => {
  const out = new Uint8Array(values.length * 2)
  for (let i = 0; i < values.length; i++) {
    const h = f32ToBf16Bits(values[i])
    out[2 * i] = h & 0xff
    out[2 * i + 1] = h >>> 8
  }
  return out
}

/** IEEE half bits → f32 value. Exact, including subnormals, infinities and NaN. */
export const f16BitsToF32 = (h: number): number => {
  const sign = h & 0x8000 ? -1 : 1
  const exp = (h >>> 10) & 0x1f
  const frac = h & 0x3ff
  if (exp === 0) return sign * frac * 2 ** -24
  if (exp === 0x1f) return frac === 0 ? sign * Infinity : NaN
  return sign * (1 + frac / 1024) * 2 ** (exp - 15)
}

export const f16ToF32 = (bytes: Uint8Array): Float32Array => {
  const n = bytes.length >>> 1
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) out[i] = f16BitsToF32(bytes[2 * i] | (bytes[2 * i + 1] << 8))
  return out
}

/** f32 → IEEE half bits, round to nearest even, overflow to infinity, subnormals kept. */
export const f32ToF16Bits = (x: number): number => {
  f32[0] = x
  const b = u32[0]
  const sign = (b >>> 16) & 0x8000
  const exp = (b >>> 23) & 0xff
  const mant = b & 0x7fffff
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0)
  const e = exp - 127 + 15
  if (e >= 0x1f) return sign | 0x7c00
  if (e <= 0) {
    if (e < -10) return sign
    // Subnormal half: shift the mantissa (with its implicit 1) right and round to nearest even.
    const m = mant | 0x800000
    const shift = 14 - e
    const half = 1 << (shift - 1)
    const rest = m & ((1 << shift) - 1)
    let v = m >>> shift
    if (rest > half || (rest === half && (v & 1) === 1)) v++
    return sign | v
  }
  let v = (e << 10) | (mant >>> 13)
  const rest = mant & 0x1fff
  if (rest > 0x1000 || (rest === 0x1000 && (v & 1) === 1)) v++
  return sign | v
}

export const f32ToF16 = (values: Float32Array): Uint8Array => {
  const out = new Uint8Array(values.length * 2)
  for (let i = 0; i < values.length; i++) {
    const h = f32ToF16Bits(values[i])
    out[2 * i] = h & 0xff
    out[2 * i + 1] = h >>> 8
  }
  return out
}

/** Little-endian f32 bytes → Float32Array (copying, so the result is aligned and owns its memory). */
export const bytesToF32 = (bytes: Uint8Array): Float32Array => {
  const out = new Float32Array(bytes.length >>> 2)
  new Uint8Array(out.buffer).set(bytes.subarray(0, out.length * 4))
  return out
}

/** Float32Array → its little-endian bytes (a view, no copy). */
export const f32ToBytes = (values: Float32Array): Uint8Array =>
  new Uint8Array(values.buffer, values.byteOffset, values.byteLength)

/**
 * Round an f64 to the nearest value of a binary float format with `bits` significand bits (implicit bit included),
 * smallest normal exponent `minExp` and largest finite value `max`: ties to even, subnormals kept, overflow to
 * infinity. Rounding once from f64 avoids the double rounding of f64 → f32 → bf16.
 */
const roundTo = (x: number, bits: number, minExp: number, max: number): number => {
  if (x === 0 || !Number.isFinite(x)) return x
  const a = Math.abs(x)
  let e = Math.max(Math.floor(Math.log2(a)), minExp)
  // log2 can be off by one next to a power of two.
  if (e > minExp && 2 ** e > a) e--
  if (2 ** (e + 1) <= a) e++
  const ulp = 2 ** (e - bits + 1)
  const q = x / ulp
  const f = Math.floor(q)
  const d = q - f
  const r = d > 0.5 ? f + 1 : d < 0.5 ? f : f % 2 === 0 ? f : f + 1
  const v = r * ulp
  return Math.abs(v) > max ? Math.sign(v) * Infinity : v
}

/** An f64 rounded once to the nearest value a stored dtype holds (returned as a number, exact in f32). */
export const roundToDtype = (x: number, dtype: "F32" | "BF16" | "F16"): number =>
  dtype === "F32"
    ? Math.fround(x)
    : dtype === "BF16"
    ? roundTo(x, 8, -126, (2 - 2 ** -7) * 2 ** 127)
    : roundTo(x, 11, -14, 65504)
