/**
 * `envtrain doctor`: checks that this machine can run envtrain, end to end, in a few seconds.
 *
 * Opens the GPU and prints what it is (vendor, architecture, features, limits), compiles and runs a matmul op as
 * training does and checks it against its CPU twin, and plays one episode of a built-in environment through its
 * tools.
 * Every check prints one line; the first failure stops the run with its typed error.
 *
 * @example
 * ```ts
 * import { Doctor, Main } from "@envtrain/harness"
 * Main.run(Doctor.run())
 * ```
 *
 * @since 0.0.0
 */
import { Catch, Environment } from "@envtrain/env"
import { Arena, CpuTwin, Gpu, Ops, Program } from "@envtrain/gpu"
import { Console, Data, Effect } from "effect"

/** A check whose result was wrong (as opposed to a GPU error, which keeps its own type). */
export class DoctorCheckFailed extends Data.TaggedError("DoctorCheckFailed")<{
  readonly check: string
  readonly detail: string
}> {
  override get message() {
    return `envtrain doctor: ${this.check} failed: ${this.detail}`
  }
}

const SHOWN_LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupsPerDimension"
]

/** Prints the adapter: identity, features and the limits that matter for training. */
export const printAdapter = Effect.gen(function*() {
  const gpu = yield* Gpu.Gpu
  const a = gpu.adapter
  yield* Console.log(`GPU adapter`)
  yield* Console.log(`  vendor        ${a.vendor || "(none reported)"}`)
  yield* Console.log(`  architecture  ${a.architecture || "(none reported)"}`)
  yield* Console.log(
    `  device        ${a.device || a.description || "(none reported)"}${a.isSoftware ? "  [software]" : ""}`
  )
  yield* Console.log(`  features      ${a.features.join(", ")}`)
  yield* Console.log(`  limits`)
  for (const name of SHOWN_LIMITS) {
    yield* Console.log(`    ${name.padEnd(36)} ${a.limits[name]?.toLocaleString("en-US") ?? "-"}`)
  }
  if (a.subgroupMatrixConfigs.length > 0) {
    yield* Console.log(`  subgroup-matrix configs: ${a.subgroupMatrixConfigs.join("; ")}`)
  }
})

const pseudoRandom = (n: number, seed: number): Float32Array => {
  const out = new Float32Array(n)
  let s = seed
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    out[i] = s / 0x100000000 - 0.5
  }
  return out
}

/**
 * Compiles one matmul op the way training does (an op list through `Program.compile`; the linear layers' form,
 * x · Wᵀ at the default tier), runs it on the GPU and compares it with the same op list run by `CpuTwin`.
 */
export const checkKernel = Effect.fn("Doctor.checkKernel")(function*(shape = { m: 96, n: 80, k: 72 }) {
  const { k, m, n } = shape
  const plan = Arena.plan({ x: { shape: [m, k] }, w: { shape: [n, k] }, y: { shape: [m, n] } })
  const host = Arena.host(plan)
  host.f32("x").set(pseudoRandom(m * k, 7))
  host.f32("w").set(pseudoRandom(n * k, 11))
  const t = (name: string) => Arena.tensorOf(plan, name)
  const ops = [Ops.matmul({ a: t("x"), b: t("w"), c: t("y"), m, n, k, transB: true })]
  const started = performance.now()
  const arena = yield* Arena.allocate(plan)
  arena.upload(host)
  yield* Program.submit(yield* Program.compile(arena, ops, "doctor"))
  const got = yield* arena.read("y")
  const ms = performance.now() - started
  CpuTwin.run(host, ops)
  const want = host.f32("y")
  let worst = 0
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]))
  const ok = worst < 1e-4
  yield* Console.log(
    `kernel  matmul ${m}×${k} · ${k}×${n} on the GPU: max |GPU − CPU twin| = ` +
      `${worst.toExponential(2)} (${ok ? "ok" : "WRONG"}, ${ms.toFixed(1)} ms incl. first compile)`
  )
  if (!ok) {
    return yield* Effect.fail(
      new DoctorCheckFailed({ check: "matmul kernel", detail: `max abs error ${worst} exceeds 1e-4` })
    )
  }
}, Effect.scoped)

/** Plays one seeded episode of the built-in Catch environment with its perfect solver, through the tools. */
export const checkEpisode = Effect.fn("Doctor.checkEpisode")(function*(seed = 7) {
  const result = yield* Environment.run(Catch.environment, { seed }, Catch.solver())
  const moves = result.steps.map((s) => s.tool === "move" ? (s.args as { direction: string }).direction : "stay")
  yield* Console.log(
    `episode catch (seed ${seed}): ${result.steps.length} tool calls [${moves.join(" ")}] → ` +
      `${result.state.caught ? "caught" : "missed"}, reward ${result.state.reward}, ` +
      `${result.counters.failures} tool failures`
  )
  if (!result.state.done || !result.state.caught || result.counters.failures > 0) {
    return yield* Effect.fail(
      new DoctorCheckFailed({
        check: "catch episode",
        detail: `the perfect solver did not catch the ball (seed ${seed})`
      })
    )
  }
})

/** All checks, with the GPU opened for their duration. */
export const run = (options: Gpu.GpuOptions = {}) =>
  Effect.gen(function*() {
    yield* printAdapter
    yield* checkKernel()
    yield* checkEpisode()
  }).pipe(Effect.provide(Gpu.Gpu.layer(options)))
