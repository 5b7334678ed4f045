/**
 * The CPU device's matmul routes side by side (GFLOP/s, medians of repeats) on the model presets' real shapes, a
 * few Qwen3-0.6B shapes and decoding's small batches: the plain-TypeScript spec, WebAssembly SIMD128, WebAssembly
 * relaxed SIMD on 1 and 2 threads, OpenBLAS on 1 and 2 threads, and PyTorch's torch.matmul (the project's .venv, 1 and 2 threads: the baseline users run). It also
 * measures this machine's single-core peak (OpenBLAS, 1 thread, a 2048³ square) and the FFI's per-call overhead.
 * Results go to bench/results/cpu-matmul.{md,json}.
 *
 *   nice npx tsx bench/cpu/matmul.ts                   # everything
 *   nice npx tsx bench/cpu/matmul.ts --repeats=3 --no-save --groups=tiny,small   # not Qwen3-0.6B
 *   nice npx tsx bench/cpu/matmul.ts --python=../main/.venv/bin/python            # torch from another checkout
 *
 * Each cell: one warm-up call, then `repeats` timings, each of enough calls to last ≥ 40 ms; the median is reported
 * (--clock=cpu, the default: one-thread cells by CPU time, see `seconds`; --clock=wall: all by the wall clock).
 * Operands of the WebAssembly routes live in the route's own memory (as the CPU model's tensors do), so no copy is
 * timed. The spec runs only shapes under 300 MFLOP (it does ~0.3 GFLOP/s); PyTorch only where .venv has torch.
 */
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Gemm from "../../packages/gpu/src/cpu/Gemm.js"
import { presets } from "../../packages/gpu/src/model/Preset.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const repeats = Number(flag("repeats") ?? 5)
// --clock=cpu (default): one-thread cells divide by the process's CPU time, so other jobs on the machine slow them
// less (they still share caches); cells on 2 threads always use the wall clock (CPU time would hide idle waits).
const clock = flag("clock") ?? "cpu"
const seconds = (
  t: { wall: number; cpu: number },
  threads: number
) => (clock === "cpu" && threads === 1 ? t.cpu : t.wall)
const save = flag("no-save") === undefined
const root = fileURLToPath(new URL("../..", import.meta.url))

interface Shape {
  readonly group: string
  readonly what: string
  readonly ta: boolean
  readonly tb: boolean
  readonly M: number
  readonly N: number
  readonly K: number
}

// Linear layers store W as [out × in] and compute y = x·Wᵀ (NT); the backward's dX = dY·W (NN) and dW = dYᵀ·X (TN).
const linear = (group: string, what: string, tokens: number, inF: number, outF: number): Array<Shape> => [
  { group, what: `${what} forward`, ta: false, tb: true, M: tokens, N: outF, K: inF },
  { group, what: `${what} dX`, ta: false, tb: false, M: tokens, N: inF, K: outF },
  { group, what: `${what} dW`, ta: true, tb: false, M: outF, N: inF, K: tokens }
]
const tiny = presets.tiny, small = presets.small
const shapes: Array<Shape> = [
  // tiny: 1024 tokens; q/o projections 64→64, k/v 64→32, gate/up 64→192, down 192→64, tied LM head 64→1024.
  ...linear("tiny", "q/o proj", 1024, tiny.hidden_size, tiny.num_attention_heads * tiny.head_dim),
  { group: "tiny", what: "k/v proj forward", ta: false, tb: true, M: 1024, N: 32, K: 64 },
  ...linear("tiny", "gate/up", 1024, tiny.hidden_size, tiny.intermediate_size),
  { group: "tiny", what: "down forward", ta: false, tb: true, M: 1024, N: 64, K: tiny.intermediate_size },
  ...linear("tiny", "LM head", 1024, tiny.hidden_size, tiny.tokenizerVocabSize),
  // small: 256 tokens; 256→256, gate/up 256→768, down 768→256, LM head 256→2048.
  ...linear("small", "q/o proj", 256, small.hidden_size, small.num_attention_heads * small.head_dim),
  ...linear("small", "gate/up", 256, small.hidden_size, small.intermediate_size),
  { group: "small", what: "down forward", ta: false, tb: true, M: 256, N: 256, K: small.intermediate_size },
  ...linear("small", "LM head", 256, small.hidden_size, small.tokenizerVocabSize),
  // Qwen3-0.6B (hidden 1024, 16×128 query heads, intermediate 3072, vocab 151936) at 1024 tokens; the LM head at
  // 128 tokens (its weight alone is 622 MB of f32; 1024 tokens would add 622 MB of logits per route).
  { group: "Qwen3-0.6B", what: "q proj forward", ta: false, tb: true, M: 1024, N: 2048, K: 1024 },
  { group: "Qwen3-0.6B", what: "gate/up forward", ta: false, tb: true, M: 1024, N: 3072, K: 1024 },
  { group: "Qwen3-0.6B", what: "down forward", ta: false, tb: true, M: 1024, N: 1024, K: 3072 },
  { group: "Qwen3-0.6B", what: "gate/up dW", ta: true, tb: false, M: 3072, N: 1024, K: 1024 },
  { group: "Qwen3-0.6B", what: "LM head forward (128 tokens)", ta: false, tb: true, M: 128, N: 151936, K: 1024 },
  // Decoding: a batch of 1 or 8 sequences, one token each (the forward products only).
  ...[1, 8].flatMap((batch): Array<Shape> => [
    { group: "decode", what: `tiny gate/up, batch ${batch}`, ta: false, tb: true, M: batch, N: 192, K: 64 },
    { group: "decode", what: `tiny LM head, batch ${batch}`, ta: false, tb: true, M: batch, N: 1024, K: 64 },
    { group: "decode", what: `small gate/up, batch ${batch}`, ta: false, tb: true, M: batch, N: 768, K: 256 },
    { group: "decode", what: `small LM head, batch ${batch}`, ta: false, tb: true, M: batch, N: 2048, K: 256 }
  ])
]
const only = flag("groups")?.split(",")
if (only !== undefined) shapes.splice(0, shapes.length, ...shapes.filter((s) => only.includes(s.group)))
const flops = (s: Shape) => 2 * s.M * s.N * s.K
const label = (s: Shape) => `${s.ta ? "T" : "N"}${s.tb ? "T" : "N"} ${s.M}×${s.N}×${s.K}`

const median = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** Seconds per call, median of `repeats` timings of enough calls to last ≥ 40 ms: by the wall clock, and by the
 * process's CPU time (all its threads), which a busy machine inflates less for one thread. */
const time = (call: () => void, estimate: number) => {
  call()
  const t0 = performance.now()
  call()
  const once = Math.max((performance.now() - t0) / 1000, estimate * 0.1, 1e-7)
  const calls = Math.max(1, Math.ceil(0.04 / once))
  const wall: Array<number> = [], cpu: Array<number> = []
  for (let r = 0; r < repeats; r++) {
    const t = performance.now(), c = process.cpuUsage()
    for (let i = 0; i < calls; i++) call()
    const used = process.cpuUsage(c)
    wall.push((performance.now() - t) / 1000 / calls)
    cpu.push((used.user + used.system) / 1e6 / calls)
  }
  return { wall: median(wall), cpu: median(cpu) }
}

const fill = (x: Float32Array, seed: number) => {
  let s = seed >>> 0
  for (let i = 0; i < x.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    x[i] = s / 2 ** 32 - 0.5
  }
  return x
}

const gflops = (g: Gemm.Gemm, s: Shape) => {
  const A = fill(g.alloc(s.M * s.K), 1), B = fill(g.alloc(s.K * s.N), 2), C = g.alloc(s.M * s.N)
  const lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N
  const t = time(() => g.sgemm(s.ta, s.tb, s.M, s.N, s.K, 1, A, lda, B, ldb, 0, C, s.N), flops(s) / 40e9)
  return flops(s) / seconds(t, g.threads) / 1e9
}

const pick = (route: Gemm.GemmRoute, threads: number) => Effect.runSync(Gemm.select({ route, threads }))

const load0 = loadavg()[0]
console.log(`CPU: ${cpus()[0]?.model ?? "?"} × ${cpus().length}; Node ${process.version}`)
console.log(`load average (1 min) at start: ${load0.toFixed(2)}`)

// Peak: OpenBLAS (its AVX-512 kernels here) on one thread, a square big enough that packing is noise.
const blas1 = pick("openblas", 1)
const peakShape: Shape = { group: "peak", what: "square", ta: false, tb: false, M: 2048, N: 2048, K: 2048 }
const peak = gflops(blas1.gemm, peakShape)
console.log(`single-core peak (OpenBLAS, 1 thread, NN 2048³): ${peak.toFixed(1)} GFLOP/s`)

// Per-call overhead: a 2×2×1 call through each route (argument checks included; 2 rows, so BLAS takes sgemm).
const overhead: Record<string, number> = {}
for (const route of ["openblas", "wasm-relaxed-simd"] as const) {
  const g = pick(route, 1).gemm
  const a = g.alloc(2), b = g.alloc(2), c = g.alloc(4)
  // The least CPU time per call over 5 runs of 200,000 calls: the cost of the call itself, not of the machine's load.
  const runs: Array<number> = []
  for (let r = 0; r < 5; r++) {
    const u = process.cpuUsage()
    for (let i = 0; i < 200_000; i++) g.sgemm(false, false, 2, 2, 1, 1, a, 1, b, 2, 0, c, 2)
    const d = process.cpuUsage(u)
    runs.push((d.user + d.system) / 200_000)
  }
  overhead[route] = Math.min(...runs)
  console.log(`per-call overhead, ${route} (2×2×1): ${overhead[route].toFixed(2)} µs`)
}

const columns = [
  { key: "spec", route: "spec" as const, threads: 1 },
  { key: "wasm-simd", route: "wasm-simd" as const, threads: 1 },
  { key: "wasm-relaxed", route: "wasm-relaxed-simd" as const, threads: 1 },
  { key: "wasm-relaxed-2t", route: "wasm-relaxed-simd" as const, threads: 2 },
  { key: "openblas-1t", route: "openblas" as const, threads: 1 },
  { key: "openblas-2t", route: "openblas" as const, threads: 2 }
]
const descriptions: Record<string, string> = {}
const rows: Array<Shape & { gflops: Record<string, number | null> }> = []
for (const s of shapes) {
  const cell: Record<string, number | null> = {}
  for (const col of columns) {
    if (col.route === "spec" && flops(s) > 300e6) {
      cell[col.key] = null
      continue
    }
    // A fresh route per shape: the WebAssembly memory of the previous shape can be collected.
    const sel = pick(col.route, col.threads)
    descriptions[col.key] = sel.description
    cell[col.key] = gflops(sel.gemm, s)
    sel.close()
  }
  rows.push({ ...s, gflops: cell })
  console.log(
    `${s.group.padEnd(10)} ${s.what.padEnd(28)} ${label(s).padEnd(20)} ` +
      columns.map((c) => `${c.key} ${cell[c.key]?.toFixed(1) ?? "-"}`).join("  ")
  )
}

// PyTorch: the same shapes and method (warm-up, then medians of timings ≥ 40 ms) in the project's .venv.
// --python=PATH: another checkout's .venv (a git worktree has none of its own).
const python = flag("python") ?? Path.join(root, ".venv/bin/python")
const torchScript = `
import json, sys, time, statistics, torch
shapes, repeats, clock = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = {"version": torch.__version__, "results": {}}
for threads in (1, 2):
    torch.set_num_threads(threads)
    res = []
    for s in shapes:
        g = torch.Generator().manual_seed(1)
        a = torch.rand((s["K"], s["M"]) if s["ta"] else (s["M"], s["K"]), generator=g) - 0.5
        b = torch.rand((s["N"], s["K"]) if s["tb"] else (s["K"], s["N"]), generator=g) - 0.5
        A = a.t() if s["ta"] else a
        B = b.t() if s["tb"] else b
        C = torch.empty((s["M"], s["N"]))
        call = lambda: torch.matmul(A, B, out=C)
        call(); t0 = time.perf_counter(); call()
        once = max(time.perf_counter() - t0, 1e-7)
        calls = max(1, int(0.04 / once + 0.999))
        wall, cpu = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            for _ in range(calls): call()
            cpu.append((time.process_time() - c) / calls)
            wall.append((time.perf_counter() - t) / calls)
        sec = statistics.median(cpu if clock == "cpu" and threads == 1 else wall)
        res.append(2 * s["M"] * s["N"] * s["K"] / sec / 1e9)
    out["results"][str(threads)] = res
print(json.dumps(out))
`
let torch: { version: string; results: Record<string, Array<number>> } | null = null
let torchNote = ""
if (existsSync(python)) {
  try {
    torch = JSON.parse(
      execFileSync(python, ["-c", torchScript, JSON.stringify(shapes), String(repeats), clock], {
        encoding: "utf8",
        maxBuffer: 1 << 24
      })
    )
    torchNote = `PyTorch ${torch!.version} (torch.matmul, MKL) from .venv`
  } catch (e) {
    torchNote = `PyTorch columns skipped: .venv's python failed (${String(e).split("\n")[0]})`
  }
} else {
  torchNote = `PyTorch columns skipped: ${python} does not exist yet (scripts/ensure-venv.sh makes .venv)`
}
console.log(torchNote)
rows.forEach((r, i) => {
  r.gflops["torch-1t"] = torch?.results["1"][i] ?? null
  r.gflops["torch-2t"] = torch?.results["2"][i] ?? null
})

const load1 = loadavg()[0]
console.log(`load average (1 min) at end: ${load1.toFixed(2)}`)

if (save) {
  const keys = [...columns.map((c) => c.key), "torch-1t", "torch-2t"]
  // No free core for a second thread: the two-thread cells measure contention (see the note in the page).
  const busy = Math.max(load0, load1) > cpus().length - 1
  const fmt = (v: number | null | undefined) => (v === null || v === undefined ? "–" : v.toFixed(1))
  const date = new Date().toISOString().slice(0, 16).replace("T", " ")
  const md = [
    `# CPU matmul routes (GFLOP/s)`,
    ``,
    `\`nice npx tsx bench/cpu/matmul.ts\`, ${date} UTC, ${cpus()[0]?.model ?? "?"} × ${cpus().length} (shared with ` +
    `other jobs), Node ${process.version}. 1-minute load average ${load0.toFixed(2)} at start, ${
      load1.toFixed(2)
    } at end: ` +
    `on 2 cores, a load above 2 means the timed thread shared its core, so every column reads low by up to that factor.`,
    ``,
    ...(busy
      ? [
        `**The two-thread columns (ours and torch's) are not meaningful at this load**: a second thread found no ` +
        `free core, so they measure contention (torch's OpenMP threads spin-wait and collapse). Compare routes by ` +
        `the one-thread columns, timed by CPU time.`,
        ``
      ]
      : []),
    `Single-core peak measured here: **${peak.toFixed(1)} GFLOP/s** (OpenBLAS, 1 thread, NN 2048³). ` +
    `Per-call overhead (2×2×1, argument checks included; least CPU time per call over 5 runs of 200,000 calls): OpenBLAS through koffi ${
      overhead.openblas.toFixed(2)
    } µs, ` +
    `WebAssembly ${overhead["wasm-relaxed-simd"].toFixed(2)} µs.`,
    ``,
    `Medians of ${repeats} timings, each ≥ 40 ms of calls after a warm-up call, ` +
    (clock === "cpu"
      ? `one-thread columns by the process's CPU time (a busy machine inflates it less), two-thread columns by the ` +
        `wall clock. `
      : `by the wall clock. `) +
    `WebAssembly operands live in the ` +
    `route's memory (no copy). Routes: ${columns.map((c) => `${c.key} = ${descriptions[c.key]}`).join("; ")}; ` +
    `${torchNote}. The spec runs only shapes under 300 MFLOP.`,
    ``,
    `| preset | product | shape (op, M×N×K) | ${keys.join(" | ")} | best ours / torch (same threads${
      busy ? "; 2t left out at this load" : ""
    }) |`,
    `| --- | --- | --- | ${keys.map(() => "---:").join(" | ")} | ---: |`,
    ...rows.map((r) => {
      const ours1 = Math.max(r.gflops["openblas-1t"] ?? 0, r.gflops["wasm-relaxed"] ?? 0)
      const ours2 = Math.max(r.gflops["openblas-2t"] ?? 0, r.gflops["wasm-relaxed-2t"] ?? 0)
      const ratio = !r.gflops["torch-1t"]
        ? "–"
        : `${(ours1 / r.gflops["torch-1t"]).toFixed(2)}× (1t)` +
          (busy || !r.gflops["torch-2t"] ? "" : `, ${(ours2 / r.gflops["torch-2t"]).toFixed(2)}× (2t)`)
      return `| ${r.group} | ${r.what} | ${label(r)} | ${keys.map((k) => fmt(r.gflops[k])).join(" | ")} | ${ratio} |`
    }),
    ``
  ].join("\n")
  const out = Path.join(root, "bench/results")
  mkdirSync(out, { recursive: true })
  writeFileSync(Path.join(out, "cpu-matmul.md"), md)
  writeFileSync(
    Path.join(out, "cpu-matmul.json"),
    JSON.stringify(
      {
        date,
        cpu: cpus()[0]?.model,
        cores: cpus().length,
        node: process.version,
        loadAverage: { start: load0, end: load1 },
        repeats,
        clock: clock === "cpu" ? "one-thread cells: process CPU time; two-thread cells: wall" : "wall",
        peak: { gflops: peak, how: "OpenBLAS 1 thread, NN 2048x2048x2048" },
        perCallOverheadMicroseconds: overhead,
        routes: descriptions,
        torch: torchNote,
        rows
      },
      null,
      2
    ) + "\n"
  )
  console.log("wrote bench/results/cpu-matmul.{md,json}")
}
