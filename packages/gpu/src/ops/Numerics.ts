/**
 * How a CPU specification stores its tensors: `f32` rounds once per stored value (the GPU's f32 tensors), `f64`
 * does not round at all (finite-difference gradient checks, and the kernel twins). Every dot product and
 * reduction of a specification accumulates in f64 either way.
 *
 * @since 0.0.0
 */

export type FloatArray = Float32Array | Float64Array

/** How a reference run stores its tensors: `f32` is the GPU specification, `f64` is for finite differences. */
export type Precision = "f32" | "f64"

/** How a CPU specification allocates and rounds at one precision. */
export interface Numerics {
  readonly precision: Precision
  readonly alloc: (n: number) => FloatArray
  /** Rounds an intermediate scalar the way the stored type would (f32: Math.fround, f64: identity). */
  readonly round: (x: number) => number
}

const identity = (x: number) => x

// One object per precision, so every op sees the same shape and the same call targets (no deoptimisation loops).
const F32: Numerics = { precision: "f32", alloc: (n) => new Float32Array(n), round: Math.fround }
const F64: Numerics = { precision: "f64", alloc: (n) => new Float64Array(n), round: identity }

/** The {@link Numerics} of a precision (one shared object each). */
export const numerics = (precision: Precision): Numerics => precision === "f32" ? F32 : F64
