/**
 * GPU benchmark: adapter report, matmul GFLOP/s per kernel tier and size, and the counters of a replayed
 * training step of the one-block transformer (CPU µs per dispatch, submits, objects created per step, per-kernel
 * timestamp profile). Results go to bench/results/gpu-<adapter>.{json,md}.
 *
 *   npx tsx bench/gpu/bench.ts                          # defaults: sizes 256,512 on a software adapter, 256..4096 on a GPU
 *   npx tsx bench/gpu/bench.ts --sizes=1024,4096 --stack=medium --steps=20 --out=gpu-h200
 *   npx tsx bench/gpu/bench.ts --require-hardware       # fail instead of falling back to lavapipe
 *
 * Flags: --sizes=a,b,c  --tiers=tiled64,tiled64v4,tiled128,tiled128v4,tiled128h,tiled128hh,subgroupMatrix (default: the
 * f32 tiers for f32 operands; tiled128 (packed pairs), tiled128h and tiled128hh (shader-f16) and subgroupMatrix (where the
 * adapter has it) for f16 operands)  --forms=NN,NT,TN (default NN on a software adapter, where each new pipeline
 * costs seconds of LLVM time)  --stack=tiny|small|medium  --steps=N  --precisions=f32,f16 (f16: both operands
 * stored as f16, f32 accumulation)  --out=NAME  --no-profile
 */
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as Matmul from "../../packages/gpu/src/Matmul.js"
import * as TinyTransformer from "../../packages/gpu/src/model/TinyTransformer.js"
import * as CpuTwin from "../../packages/gpu/src/ops/CpuTwin.js"
import * as Ops from "../../packages/gpu/src/ops/Ops.js"
import * as Arena from "../../packages/gpu/src/runtime/Arena.js"
import { describe, Gpu } from "../../packages/gpu/src/runtime/Gpu.js"
import * as HalfFloat from "../../packages/gpu/src/runtime/HalfFloat.js"
import * as Program from "../../packages/gpu/src/runtime/Program.js"
import * as StepProgram from "../../packages/gpu/src/runtime/StepProgram.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}

const STACKS = {
  tiny: { vocab: 64, dim: 32, heads: 4, kvHeads: 2, ffn: 64, batch: 2, seq: 16, chunk: 32 },
  small: { vocab: 512, dim: 128, heads: 4, kvHeads: 2, ffn: 256, batch: 2, seq: 64, chunk: 64 },
  medium: { vocab: 32768, dim: 512, heads: 8, kvHeads: 4, ffn: 1536, batch: 4, seq: 256, chunk: 256 }
} as const

interface MatmulRow {
  readonly tier: string
  readonly precision: "f32" | "f16"
  readonly form: string
  readonly size: number
  readonly reps: number
  readonly millis: number
  readonly gflops: number
  readonly timing: "timestamp" | "wall"
}

/**
 * Correctness of a tier on this device before its speed is believed: a ragged 70×36×40 multiply of the form
 * against the CPU twin (which decodes the same f16 bits); max |gpu − twin| / (1 + |twin|).
 */
const parity = (choice: Matmul.TierChoice, form: string, precision: "f32" | "f16") =>
  Effect.gen(function*() {
    const [m, n, k] = [70, 36, 40]
    const transA = form[0] === "T"
    const transB = form[1] === "T"
    const plan = Arena.plan({
      a: { shape: transA ? [k, m] : [m, k], dtype: precision },
      b: { shape: transB ? [n, k] : [k, n], dtype: precision },
      c: { shape: [m, n] }
    })
    const h = Arena.host(plan)
    let seed = 12345
    const next = () => {
      seed = (seed * 1103515245 + 12345) >>> 0
      return (seed / 2 ** 32) * 2 - 1
    }
    for (const name of ["a", "b"]) {
      const values = Float32Array.from({ length: m * k + k * n }, next).subarray(0, plan.tensors.get(name)!.size)
      if (precision === "f16") h.f16(name).set(HalfFloat.f32ToF16(values))
      else h.f32(name).set(values)
    }
    const arena = yield* Arena.allocate(plan)
    arena.upload(h)
    const t = (name: string) => arena.tensor(name)
    const ops = [
      Ops.matmul({
        a: t("a"),
        b: t("b"),
        c: t("c"),
        m,
        n,
        k,
        transA,
        transB,
        tier: choice.tier,
        subgroupMatrix: choice.subgroupMatrix
      })
    ]
    yield* Program.submit(yield* Program.compile(arena, ops))
    const gpu = yield* arena.read("c")
    CpuTwin.run(h, ops)
    const want = h.f32("c")
    let worst = 0
    for (let i = 0; i < want.length; i++) {
      const e = Math.abs(gpu[i] - want[i]) / (1 + Math.abs(want[i]))
      worst = Number.isNaN(e) ? Infinity : Math.max(worst, e)
    }
    return worst
  }).pipe(Effect.scoped)

const matmulTier = (size: number, choice: Matmul.TierChoice, form: string, precision: "f32" | "f16") =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const plan = Arena.plan({
      a: { shape: [size, size], dtype: precision },
      b: { shape: [size, size], dtype: precision },
      c: { shape: [size, size] }
    })
    const arena = yield* Arena.allocate(plan)
    const t = (n: string) => arena.tensor(n)
    const program = yield* Program.compile(arena, [
      Ops.matmul({
        a: t("a"),
        b: t("b"),
        c: t("c"),
        m: size,
        n: size,
        k: size,
        transA: form[0] === "T",
        transB: form[1] === "T",
        tier: choice.tier,
        subgroupMatrix: choice.subgroupMatrix
      })
    ])
    const stamps = gpu.hasFeature("timestamp-query")
    const run = (reps: number) =>
      Effect.gen(function*() {
        const querySet = stamps ? gpu.device.createQuerySet({ type: "timestamp", count: 2 }) : undefined
        const resolve = stamps
          ? gpu.device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC })
          : undefined
        const t0 = performance.now()
        const encoder = gpu.device.createCommandEncoder()
        const pass = encoder.beginComputePass(
          querySet === undefined
            ? {}
            : { timestampWrites: { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } }
        )
        for (let i = 0; i < reps; i++) program.encode(pass)
        pass.end()
        if (querySet !== undefined && resolve !== undefined) encoder.resolveQuerySet(querySet, 0, 2, resolve, 0)
        gpu.device.queue.submit([encoder.finish()])
        yield* gpu.fence
        const wall = performance.now() - t0
        if (resolve === undefined) return { millis: wall, timing: "wall" as const }
        const ns = new BigUint64Array(yield* gpu.read(resolve, 16))
        querySet?.destroy()
        resolve.destroy()
        return { millis: Number(ns[1] - ns[0]) / 1e6, timing: "timestamp" as const }
      })
    const warm = yield* run(1) // compiles and warms the pipeline
    const reps = Math.max(2, Math.min(50, Math.round(500 / Math.max(warm.millis, 0.01))))
    // Best of three trials: the host is shared, and lavapipe's time is host CPU time.
    const trials = [yield* run(reps), yield* run(reps), yield* run(reps)]
    const r = trials.reduce((best, t) => (t.millis < best.millis ? t : best))
    const row: MatmulRow = {
      tier: `${precision}in-${choice.tier}-${form}`,
      precision,
      form,
      size,
      reps,
      millis: r.millis / reps,
      gflops: (2 * size ** 3 * reps) / (r.millis * 1e6),
      timing: r.timing
    }
    return row
  }).pipe(Effect.scoped)

const stepBench = (stackName: keyof typeof STACKS, steps: number, profile: boolean) =>
  Effect.gen(function*() {
    const cfg = TinyTransformer.config({ ...STACKS[stackName], tie: true })
    const plan = Arena.plan(TinyTransformer.specs(cfg), {
      maxShardBytes: (yield* Gpu).adapter.limits.maxStorageBufferBindingSize
    })
    const h = Arena.host(plan)
    TinyTransformer.init(h, cfg, 1)
    const arena = yield* Arena.allocate(plan)
    arena.upload(h)
    const t0 = performance.now()
    const program = yield* StepProgram.make(arena, { microBatch: TinyTransformer.ops(plan, cfg) })
    const compileMillis = performance.now() - t0
    const n = cfg.batch * cfg.seq
    const mb = TinyTransformer.batch(cfg, Uint32Array.from({ length: n }, (_, i) => (i * 7 + (i >> 3)) % cfg.vocab))
    const hyper = { lr: 1e-3, weightDecay: 0.1, maxGradNorm: 1 }
    const first = yield* program.step({ ...hyper, step: 1 }, [mb])
    const results: Array<StepProgram.StepResult> = []
    for (let s = 2; s <= steps + 1; s++) results.push(yield* program.step({ ...hyper, step: s }, [mb]))
    const avg = (f: (r: StepProgram.StepResult) => number) => results.reduce((a, r) => a + f(r), 0) / results.length
    const max = (f: (r: StepProgram.StepResult) => number) => Math.max(...results.map(f))
    const kernels = profile ? yield* Effect.either(program.profile({ ...hyper, step: steps + 2 }, [mb])) : undefined
    // Pure replay cost: record the step's dispatch list many times into one pass and never submit it.
    const { device } = yield* Gpu
    const replays = 50
    const r0 = performance.now()
    const encoder = device.createCommandEncoder()
    const pass = encoder.beginComputePass()
    for (let i = 0; i < replays; i++) {
      program.microBatch.encode(pass)
      program.optimizer.encode(pass)
    }
    pass.end()
    encoder.finish()
    const replayMicrosPerDispatch = (performance.now() - r0) * 1000 /
      (replays * (program.microBatch.dispatches.length + program.optimizer.dispatches.length))
    return {
      stack: stackName,
      config: cfg,
      parameters: [...plan.tensors.values()].filter((t) => t.group === Arena.PARAM).reduce((a, t) => a + t.size, 0),
      arenaBytes: plan.totalBytes,
      compileMillis,
      firstStepMillis: first.counters.wallMillis,
      steps: results.length,
      lossFirst: first.loss,
      lossLast: results[results.length - 1].loss,
      dispatchesPerStep: results[0].counters.dispatches,
      submitsPerStep: results[0].counters.submits,
      maxBuffersCreatedPerStep: max((r) => r.counters.buffersCreated),
      maxBindGroupsCreatedPerStep: max((r) => r.counters.bindGroupsCreated),
      maxPipelinesCreatedPerStep: max((r) => r.counters.pipelinesCreated),
      cpuMicrosPerDispatch: avg((r) => r.counters.cpuMicrosPerDispatch),
      encodeMicrosPerStep: avg((r) => r.counters.encodeMicros),
      submitMicrosPerStep: avg((r) => r.counters.submitMicros),
      millisPerStep: avg((r) => r.counters.wallMillis),
      tokensPerSecond: n / (avg((r) => r.counters.wallMillis) / 1000),
      replayMicrosPerDispatch,
      profile: kernels === undefined ? undefined : kernels._tag === "Right" ? kernels.right : String(kernels.left)
    }
  }).pipe(Effect.scoped)

/** For each size and form, the fastest f32-input and f16-input rows. */
const sideBySide = (rows: ReadonlyArray<MatmulRow>) => {
  const keys = [...new Set(rows.map((r) => `${r.size} ${r.form}`))]
  const best = (list: ReadonlyArray<MatmulRow>) =>
    list.reduce<MatmulRow | undefined>((b, r) => (b === undefined || r.gflops > b.gflops ? r : b), undefined)
  return keys.map((key) => {
    const here = rows.filter((r) => `${r.size} ${r.form}` === key)
    return {
      size: here[0].size,
      form: here[0].form,
      f32: best(here.filter((r) => r.precision === "f32")),
      f16: best(here.filter((r) => r.precision === "f16"))
    }
  })
}

const main = Effect.gen(function*() {
  const gpu = yield* Gpu
  const a = gpu.adapter
  console.log(`adapter: ${describe(a)}`)
  console.log(`features: ${a.features.join(", ")}`)
  console.log(`adapter features: ${a.adapterFeatures.join(", ")}`)
  console.log(
    `subgroup-matrix configs: ${a.subgroupMatrixConfigs.length === 0 ? "none" : a.subgroupMatrixConfigs.join("; ")}`
  )
  console.log(`limits: ${JSON.stringify(a.limits)}`)
  const sizes = (flag("sizes") ?? (a.isSoftware ? "256,512" : "256,512,1024,2048,4096")).split(",").map(Number)
  const forms = (flag("forms") ?? (a.isSoftware ? "NN" : "NN,NT,TN")).split(",")
  const precisions = (flag("precisions") ?? "f32,f16").split(",") as ReadonlyArray<"f32" | "f16">
  const best16 = Matmul.chooseTier(a, "f16")
  console.log(`f16 tier choice: ${best16.tier} (${best16.reason})`)
  const tierChoices = (precision: "f32" | "f16"): ReadonlyArray<Matmul.TierChoice> => {
    const asked = flag("tiers")?.split(",") as ReadonlyArray<Ops.MatmulTier> | undefined
    const names = asked ?? (precision === "f32"
      ? Ops.MATMUL_TIERS.filter((t) => t !== "tiled128h" && t !== "tiled128hh")
      : ["tiled128", ...(a.features.includes("shader-f16") ? ["tiled128h", "tiled128hh"] as const : []), best16.tier])
    return [...new Set(names)].flatMap((tier) =>
      tier !== "subgroupMatrix"
        ? [{ tier, reason: "asked" }]
        : best16.tier === "subgroupMatrix"
        ? [best16]
        : []
    )
  }
  const matmul: Array<MatmulRow> = []
  const failures: Array<{ tier: string; size: number; error: string }> = []
  const checked = new Map<string, number | string>()
  for (const size of sizes) {
    for (const precision of precisions) {
      for (const tier of tierChoices(precision)) {
        for (const form of forms) {
          // A tier that fails (e.g. the hardware-untested subgroup-matrix kernel) is reported, not fatal.
          const result = yield* Effect.either(matmulTier(size, tier, form, precision))
          if (result._tag === "Left") {
            const message = String(result.left.message ?? result.left)
            console.log(`matmul ${precision}in-${tier.tier}-${form} ${size}³ FAILED: ${message}`)
            failures.push({ tier: `${precision}in-${tier.tier}-${form}`, size, error: message })
            continue
          }
          const row = result.right
          const how = `${row.millis.toFixed(2)} ms, ${row.reps} reps, ${row.timing}`
          console.log(`matmul ${row.tier} ${size}³: ${row.gflops.toFixed(2)} GFLOP/s (${how})`)
          matmul.push(row)
          const key = row.tier
          if (!checked.has(key)) {
            const e = yield* Effect.either(parity(tier, form, precision))
            const value = e._tag === "Right" ? e.right : String(e.left.message ?? e.left)
            checked.set(key, value)
            console.log(
              `  parity ${key} (70×36×40 vs CPU twin): ${typeof value === "number" ? value.toExponential(2) : value}`
            )
          }
        }
      }
    }
  }
  for (const r of sideBySide(matmul)) {
    if (r.f32 === undefined || r.f16 === undefined) continue
    console.log(
      `f16 vs f32 ${r.size}³ ${r.form}: ${r.f16.gflops.toFixed(2)} (${r.f16.tier}) vs ${
        r.f32.gflops.toFixed(2)
      } (${r.f32.tier}) ` +
        `GFLOP/s = ${(r.f16.gflops / r.f32.gflops).toFixed(2)}×`
    )
  }
  const stack = (flag("stack") ?? (a.isSoftware ? "small" : "medium")) as keyof typeof STACKS
  const step = yield* stepBench(
    stack,
    Number(flag("steps") ?? (a.isSoftware ? 5 : 20)),
    flag("no-profile") === undefined
  )
  console.log(
    `step (${stack}, ${step.parameters} params): ${JSON.stringify({ ...step, config: undefined, profile: undefined })}`
  )
  if (Array.isArray(step.profile)) {
    for (const k of step.profile) {
      console.log(
        `  ${k.label.padEnd(32)} ${k.calls}× ${k.micros.toFixed(1)} µs  ${k.gflops.toFixed(2)} GFLOP/s  ${
          k.gbytesPerSecond.toFixed(2)
        } GB/s`
      )
    }
  }
  const name = flag("out") ??
    `gpu-${a.isSoftware ? "lavapipe" : (a.device || a.description || "gpu").toLowerCase().replace(/[^a-z0-9]+/g, "-")}`
  const result = {
    date: new Date().toISOString(),
    host: { cpus: cpus().length, loadAverage1m: loadavg()[0] },
    adapter: a,
    softwareAdapterNote: a.isSoftware
      ? "lavapipe (CPU) adapter: matmul sizes limited to what runs in reasonable time; numbers are not GPU numbers"
      : undefined,
    matmul,
    matmulFailures: failures,
    matmulParity: Object.fromEntries(checked),
    step
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync(`bench/results/${name}.json`, JSON.stringify(result, null, 2) + "\n")
  const md = [
    `# GPU benchmark: ${describe(a)}`,
    "",
    `Date: ${result.date}. Features: ${a.features.join(", ")}. Subgroup-matrix configs: ${
      a.subgroupMatrixConfigs.length || "none"
    }.`,
    a.isSoftware ? `\n${result.softwareAdapterNote}.\n` : "",
    `Host: ${result.host.cpus} CPUs, 1-minute load average ${
      result.host.loadAverage1m.toFixed(1)
    } at the end of the run.`,
    "",
    "## Matmul",
    "",
    "| tier | size | ms | GFLOP/s | timing |",
    "|---|---|---|---|---|",
    ...matmul.map((r) => `| ${r.tier} | ${r.size}³ | ${r.millis.toFixed(2)} | ${r.gflops.toFixed(2)} | ${r.timing} |`),
    "",
    ...(failures.length === 0 ? [] : [
      "Failed tiers:",
      "",
      ...failures.map((f) => `- ${f.tier} ${f.size}³: ${f.error.replace(/\s+/g, " ").slice(0, 300)}`),
      ""
    ]),
    "Parity of each tier and form on this device (70×36×40 against the CPU twin, max |Δ| / (1 + |twin|); f32",
    "tiers ~1e-7, f16-input tiers ~1e-7 (the twin decodes the same f16 bits), tiled128hh ~1e-2 by design):",
    "",
    ...[...checked].map(([k, v]) => `- ${k}: ${typeof v === "number" ? v.toExponential(2) : v}`),
    "",
    "### f16 inputs vs f32 (best tier of each per size and form)",
    "",
    "| size | form | best f32 tier | f32 GFLOP/s | best f16 tier | f16 GFLOP/s | f16 / f32 |",
    "|---|---|---|---|---|---|---|",
    ...sideBySide(matmul).map((r) =>
      `| ${r.size}³ | ${r.form} | ${r.f32?.tier ?? "-"} | ${r.f32?.gflops.toFixed(2) ?? "-"} | ${
        r.f16?.tier ?? "-"
      } | ${r.f16?.gflops.toFixed(2) ?? "-"} | ${
        r.f32 !== undefined && r.f16 !== undefined ? (r.f16.gflops / r.f32.gflops).toFixed(2) : "-"
      } |`
    ),
    "",
    "Tiers: tiled64 = 64×64 tile, 4×4 per thread, scalar loads; tiled128 = 128×128, 8×8 per thread, K step 8;",
    "v4 = vec4 global loads (f32 operands); f16in = both operands stored as f16 (half the bytes), f32",
    "accumulation: tiled64/tiled128 unpack packed pairs (core WGSL unpack2x16float), tiled128h reads vec4<f16> and",
    "stages f16 tiles (shader-f16, K step 16), tiled128hh also sums products in f16 (vec2<f16> fma) within each",
    "K step before f32 accumulation (experimental), subgroupMatrix uses the adapter's f16→f32 subgroup-matrix",
    `configuration (${best16.tier === "subgroupMatrix" ? best16.reason : "not offered by this adapter"}).`,
    "",
    `## Training step: one-block transformer, stack "${stack}" (${step.parameters} parameters)`,
    "",
    "| counter | value |",
    "|---|---|",
    ...Object.entries(step).filter(([k]) => k !== "config" && k !== "profile" && k !== "stack").map(([k, v]) =>
      `| ${k} | ${typeof v === "number" ? (Number.isInteger(v) ? v : Number(v.toPrecision(4))) : String(v)} |`
    ),
    "",
    ...(Array.isArray(step.profile)
      ? [
        "### Per-kernel timestamp profile (one step, each dispatch in its own pass)",
        "",
        "| kernel | calls | µs | GFLOP/s | GB/s |",
        "|---|---|---|---|---|",
        ...step.profile.map((k) =>
          `| ${k.label} | ${k.calls} | ${k.micros.toFixed(1)} | ${k.gflops.toFixed(2)} | ${
            k.gbytesPerSecond.toFixed(2)
          } |`
        )
      ]
      : [`Profile: ${String(step.profile)}`]),
    ""
  ].join("\n")
  writeFileSync(`bench/results/${name}.md`, md)
  console.log(`saved bench/results/${name}.json and .md`)
})

Effect.runPromise(
  main.pipe(Effect.provide(Gpu.layer({ requireHardware: flag("require-hardware") !== undefined })), Effect.scoped)
).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
