import { Effect } from "effect"
import * as CpuTwin from "../src/ops/CpuTwin.js"
import type { Op } from "../src/ops/Ops.js"
import * as Arena from "../src/runtime/Arena.js"
import * as Program from "../src/runtime/Program.js"

/** xorshift in [-1, 1): deterministic inputs so a failure reproduces. */
export const random = (n: number, seed: number, scale = 1) => {
  let s = seed >>> 0 || 1
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    out[i] = (((s >>> 0) / 0xffffffff) * 2 - 1) * scale
  }
  return out
}

export const maxRelError = (got: ArrayLike<number>, want: ArrayLike<number>) => {
  let worst = 0
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i]))
    worst = Number.isNaN(e) ? Infinity : Math.max(worst, e)
  }
  return worst
}

/** Fills every f32 tensor of the plan with random values (u32 tensors are left for the caller). */
export const randomize = (h: Arena.HostArena, seed: number, skip: ReadonlyArray<string> = []) => {
  let k = seed
  for (const t of h.plan.tensors.values()) {
    if (t.dtype !== "f32" || skip.includes(t.name) || t.name.startsWith("step.") || t.name.startsWith("opt.")) continue
    h.f32(t.name).set(random(t.size, k++))
  }
}

/** A host arena laid out from `specs`, every f32 tensor random (`randomize`), and its tensors by name. */
export const seeded = (specs: Record<string, Arena.TensorSpec>, seed: number) => {
  const plan = Arena.plan(specs)
  const h = Arena.host(plan)
  randomize(h, seed)
  return { plan, h, t: (name: string) => Arena.tensorOf(plan, name) }
}

/**
 * Runs `ops` on the device and on the CPU twin from the same host state, returning both host arenas.
 */
export const runBoth = (h: Arena.HostArena, ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const arena = yield* Arena.allocate(h.plan)
    arena.upload(h)
    const program = yield* Program.compile(arena, ops)
    yield* Program.submit(program)
    const gpu = yield* arena.download
    const cpu = Arena.host(h.plan, h.buffers.map((b) => b.slice(0)))
    CpuTwin.run(cpu, ops)
    return { gpu, cpu }
  })

/** Central finite difference of a scalar function of one input, checked against an analytic gradient. */
export const finiteDifference = (
  x: Float64Array,
  loss: (x: Float64Array) => number,
  grad: ArrayLike<number>,
  h = 1e-6
) => {
  let worst = 0
  for (let i = 0; i < x.length; i++) {
    const keep = x[i]
    x[i] = keep + h
    const up = loss(x)
    x[i] = keep - h
    const down = loss(x)
    x[i] = keep
    const fd = (up - down) / (2 * h)
    worst = Math.max(worst, Math.abs(fd - grad[i]) / (1e-3 + Math.abs(fd)))
  }
  return worst
}

/** A fixed random projection, so Σ w·f(x) is a scalar loss whose gradient w.r.t. f(x) is w. */
export const weights = (n: number, seed: number) => Float64Array.from(random(n, seed))
export const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0
  for (let i = 0; i < a.length; i++) s += a[i] * b[i]
  return s
}
