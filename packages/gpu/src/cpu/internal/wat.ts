/**
 * WebAssembly-text building blocks shared by the CPU device's generated kernels (attentionWat.ts,
 * elementwiseWat.ts): s-expression helpers, the vectorised exp, and assembling with wabt. One copy, so a fix to
 * the exp reaches every kernel (and `npm run build:wasm` plus the byte tests say which .wasm files changed).
 *
 * @internal
 */

export const range = (n: number) => Array.from({ length: n }, (_, i) => i)

export const get = (name: string) => `(local.get $${name})`
export const set = (name: string, value: string) => `(local.set $${name} ${value})`
export const add = (a: string, b: string) => `(i32.add ${a} ${b})`
export const mul = (a: string, b: string) => `(i32.mul ${a} ${b})`
export const vadd = (a: string, b: string) => `(f32x4.add ${a} ${b})`
export const vmul = (a: string, b: string) => `(f32x4.mul ${a} ${b})`
export const load = (addr: string) => `(v128.load ${addr})`
export const zero = "(v128.const f32x4 0 0 0 0)"
export const splat = (x: number) => `(v128.const f32x4 ${x} ${x} ${x} ${x})`

/**
 * Statements setting v128 local `dst` to exp(`src`) lane by lane: Cephes' expf, n = round(x·log2 e),
 * r = x − n·ln 2 in two parts, a degree-7 polynomial, times 2^n built in the exponent bits. Within 2 ulp of exp in
 * f32. Below −87 x is taken as −87 (a result under 2^-125 that sums cannot tell from 0); above `hi` (give 88 where x
 * can be large: 2^n must stay a finite f32) as `hi`. Uses locals {@link expLocals}.
 */
export const vexp = (dst: string, src: string, hi?: number) => [
  set("ex", `(f32x4.max ${src} ${splat(-87)})`),
  ...(hi === undefined ? [] : [set("ex", `(f32x4.min ${get("ex")} ${splat(hi)})`)]),
  // x·log2 e + 1.5·2^23 rounds to an integer n held in the low mantissa bits (|n| < 2^22): one add gives both n
  // (subtracting the constant back) and the bits of 2^n below, cheaper than nearest plus trunc_sat (several
  // instructions each in V8's x64 code).
  set("et", vadd(vmul(get("ex"), splat(1.4426950408889634)), splat(12582912))),
  set("en", `(f32x4.sub ${get("et")} ${splat(12582912)})`),
  set(
    "ex",
    `(f32x4.sub (f32x4.sub ${get("ex")} ${vmul(get("en"), splat(0.693359375))}) ${
      vmul(get("en"), splat(-2.12194440e-4))
    })`
  ),
  set("ep", vadd(vmul(splat(1.9875691500e-4), get("ex")), splat(1.3981999507e-3))),
  ...[8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1].map((c) =>
    set("ep", vadd(vmul(get("ep"), get("ex")), splat(c)))
  ),
  set("ep", vadd(vadd(vmul(get("ep"), vmul(get("ex"), get("ex"))), get("ex")), splat(1))),
  set(
    dst,
    vmul(
      get("ep"),
      `(i32x4.shl (i32x4.add ${get("et")} ${`(v128.const i32x4 ${
        Array(4).fill(127 - 0x4b400000).join(" ")
      })`}) (i32.const 23))`
    )
  )
]

/** The locals {@link vexp} uses. */
export const expLocals = "(local $ex v128) (local $en v128) (local $ep v128) (local $et v128)"

/** What {@link assemble} uses of wabt (npm `wabt`, passed in so kernel modules do not depend on it at run time). */
export interface Wabt {
  readonly parseWat: (
    name: string,
    text: string,
    features: Record<string, boolean>
  ) => {
    readonly validate: (features: Record<string, boolean>) => void
    readonly toBinary: (o: { log: boolean; write_debug_names: boolean }) => { readonly buffer: Uint8Array }
    readonly destroy: () => void
  }
}

/** Assembles module text `wat` (SIMD128 and shared memory, nothing relaxed) into the bytes of `file`. */
export const assemble = (w: Wabt, file: string, wat: string): Uint8Array => {
  const features = { simd: true, threads: true }
  const mod = w.parseWat(file.replace(".wasm", ".wat"), wat, features)
  try {
    mod.validate(features)
    return mod.toBinary({ log: false, write_debug_names: false }).buffer
  } finally {
    mod.destroy()
  }
}
