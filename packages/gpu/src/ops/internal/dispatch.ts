/** What lowering an op produces (a dispatch spec) and the helpers every op's lowering uses. */
import type { Tensor } from "../../runtime/Arena.js"

export type Word = readonly ["u" | "f", number]

export const u = (x: number): Word => ["u", x]

export const f = (x: number): Word => ["f", x]

/**
 * A buffer range to bind: a planned tensor, a whole buffer of the plan (a group shard), or the program's
 * scratch buffer (live only within one op; the program allocates the largest any op asks for).
 */
export type Bind = Tensor | { readonly shard: number; readonly bytes: number } | { readonly scratch: number }

/** One compute dispatch of a lowered op: its WGSL, bindings, parameter words and workgroup grid. */
export interface DispatchSpec {
  readonly label: string
  readonly code: string
  readonly bindings: ReadonlyArray<Bind>
  readonly params: ReadonlyArray<Word>
  readonly groups: readonly [number, number, number]
  /** Estimated floating-point operations and bytes moved, for the profile's GFLOP/s and GB/s. */
  readonly flops: number
  readonly bytes: number
  /** Device features the kernel needs (checked by `Program.compile` before compiling). */
  readonly features?: ReadonlyArray<string>
}

const MAX_DIM = 65535

/** A 1-D launch of `count` workgroups folded into a 2-D grid. */
export const grid = (count: number): readonly [number, number, number] =>
  count <= MAX_DIM ? [Math.max(1, count), 1, 1] : [MAX_DIM, Math.ceil(count / MAX_DIM), 1]

export const over = (n: number, wg: number) => grid(Math.ceil(n / wg))
