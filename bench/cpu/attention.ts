/**
 * The CPU device's tiled attention (packages/gpu/src/cpu/attention.ts, on its js and its wasm-simd route) and the
 * CPU model's matmul-route attention (internal/gemmAttention.ts, on OpenBLAS and WebAssembly relaxed SIMD) against
 * the reference model's attention
 * (qwen3refFast.ts: attendPair/attendRow per query row with the T×T probabilities kept, then attentionBackward from
 * them — the path Qwen3Reference's forward and backward take), on one thread, at the presets' attention shapes and
 * a long one (Qwen3-0.6B's heads over 4096 tokens).
 *
 * Every (shape, kernel) runs in its own child process, so its peak RSS is its own; each reports the median of its
 * repeats for the forward and for the backward (after warm-up calls at the shape, or at 256 tokens for the long
 * shape, until V8 has tiered up: ≥ 5 calls and ≥ 2 s), its working memory beyond inputs and outputs (tiled: the scratch; reference: the probabilities and the
 * backward's per-head transposed dS), and the largest difference of its outputs from the reference's. The reference
 * runs where its probabilities fit `--ref-limit` MiB (default 1024); beyond that only its forward runs, without
 * probabilities (as its KV-cache path does), and its backward is reported as not run.
 * Results go to bench/results/cpu-attention.{md,json}, with the load average at start and end.
 *
 *   nice npx tsx bench/cpu/attention.ts
 *   npx tsx bench/cpu/attention.ts --shapes=tiny,small --repeats=9 --no-save
 *
 * Flags: --shapes=tiny,small,long  --repeats=N (default 15; 3 for long)  --tile=QxK (default the kernel's)
 * --ref-limit=MiB  --no-save
 */
import { spawnSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { fileURLToPath } from "node:url"
import * as CpuAttention from "../../packages/gpu/src/cpu/attention.js"
import * as Blas from "../../packages/gpu/src/cpu/Blas.js"
import type { Gemm } from "../../packages/gpu/src/cpu/Gemm.js"
import * as GemmAttention from "../../packages/gpu/src/cpu/internal/gemmAttention.js"
import * as WasmGemm from "../../packages/gpu/src/cpu/WasmGemm.js"
import { attendPair, attendRow, attentionBackward } from "../../packages/gpu/src/model/internal/qwen3refFast.js"
import { type AttentionShape, segmentStarts } from "../../packages/gpu/src/ops/attention.js"
import { numerics } from "../../packages/gpu/src/ops/Numerics.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}

const shapes = {
  tiny: { batch: 4, seq: 256, heads: 4, kvHeads: 2, headDim: 16 },
  small: { batch: 2, seq: 128, heads: 8, kvHeads: 4, headDim: 32 },
  long: { batch: 1, seq: 4096, heads: 16, kvHeads: 8, headDim: 128 }
} as const
type ShapeName = keyof typeof shapes
type Kernel = "js" | "wasm-simd" | "gemm-openblas" | "gemm-wasm-relaxed" | "reference"
const kernels: ReadonlyArray<Kernel> = ["js", "wasm-simd", "gemm-openblas", "gemm-wasm-relaxed", "reference"]

const shapeOf = (name: ShapeName): AttentionShape => ({ ...shapes[name], scale: 1 / Math.sqrt(shapes[name].headDim) })

const tileFlag = flag("tile")
const tile: CpuAttention.Tile = tileFlag === undefined
  ? CpuAttention.defaultTile
  : { query: Number(tileFlag.split("x")[0]), key: Number(tileFlag.split("x")[1]) }
const refLimitMiB = Number(flag("ref-limit") ?? 1024)

/** xorshift in [-1, 1) (q scaled so the softmax is not flat). */
const random = (n: number, seed: number, scale = 1) => {
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

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** One (shape, kernel): what a child process measures and prints as its last line. */
interface Measured {
  readonly shape: ShapeName
  readonly kernel: Kernel
  readonly forwardMs: ReadonlyArray<number>
  readonly backwardMs: ReadonlyArray<number>
  /** Process CPU time (user + system) of the same calls: less sensitive to other processes on shared cores. */
  readonly forwardCpuMs: ReadonlyArray<number>
  readonly backwardCpuMs: ReadonlyArray<number>
  /** One decode call (the last token of batch row 0 against a cache of its T keys), per call; none for GemmAttention. */
  readonly decodeMs: ReadonlyArray<number>
  readonly decodeCpuMs: ReadonlyArray<number>
  readonly decodeSample: ReadonlyArray<number>
  readonly backwardRun: boolean
  readonly probabilities: boolean
  readonly workingBytes: number
  readonly peakRssBytes: number
  /** Σ of out, lse, dq, dk, dv (a checksum the parent compares between kernels), and out itself sampled. */
  readonly sample: ReadonlyArray<number>
}

/** The inputs of a shape: q, k, v, dOut, and rows packed as two sequences (3/4 and 1/4 of T) where T > 1. */
const inputsOf = (s: AttentionShape) => {
  const N = s.batch * s.seq
  const cut = Math.floor((3 * s.seq) / 4)
  const positions = Array.from({ length: N }, (_, n) => (n % s.seq < cut ? n % s.seq : n % s.seq - cut))
  return {
    q: random(N * s.heads * s.headDim, 1, 2),
    k: random(N * s.kvHeads * s.headDim, 2),
    v: random(N * s.kvHeads * s.headDim, 3),
    dOut: random(N * s.heads * s.headDim, 4),
    segmentStart: segmentStarts(positions, s)
  }
}

/** Every 97th output element (enough to compare kernels without shipping whole tensors between processes). */
const sampleOf = (xs: ReadonlyArray<ArrayLike<number>>) =>
  xs.flatMap((x) => Array.from({ length: Math.ceil(x.length / 97) }, (_, i) => x[i * 97]))

// One wasm-simd route per process, shared by the warm-up and the measured runner: a second instance would bring new
// wrapper functions, and V8 would re-optimise the driver for them during the measured calls.
let wasmRoute: CpuAttention.WasmRoute | undefined

/** The tiled kernel on a route: the wasm-simd route's tensors live in its memory (allocated there, inputs copied). */
const tiledRunner = (s: AttentionShape, routeName: "js" | "wasm-simd") => {
  const wasm = routeName === "wasm-simd" ? (wasmRoute ??= CpuAttention.wasmSimd()) : undefined
  const route = wasm ?? CpuAttention.js
  const alloc = (n: number, from?: Float32Array) => {
    const a = wasm === undefined ? new Float32Array(n) : wasm.alloc(n)
    if (from !== undefined) a.set(from)
    return a
  }
  const inp = inputsOf(s)
  const x = {
    q: alloc(inp.q.length, inp.q),
    k: alloc(inp.k.length, inp.k),
    v: alloc(inp.v.length, inp.v),
    dOut: alloc(inp.dOut.length, inp.dOut)
  }
  const N = s.batch * s.seq
  const out = alloc(x.q.length)
  const lse = new Float32Array(N * s.heads)
  const dq = alloc(x.q.length)
  const dk = alloc(x.k.length)
  const dv = alloc(x.v.length)
  const scratch = alloc(CpuAttention.scratchSize(s, tile))
  const fwd = { shape: s, q: x.q, k: x.k, v: x.v, segmentStart: inp.segmentStart, out, lse, scratch, tile, route }
  const bwd = { ...fwd, dOut: x.dOut, dq, dk, dv }
  // Decode: batch row 0's last token attending to a cache of the row's T keys ([KV, T, D]).
  const { headDim: D, heads: H, kvHeads: KV, seq: T } = s
  const layer = {
    shape: s,
    q: x.q,
    keys: alloc(KV * T * D),
    values: alloc(KV * T * D),
    capacity: T,
    out: alloc(x.q.length),
    scratch,
    tile,
    route
  }
  CpuAttention.storeCache(layer, x.k, x.v, 0, T, 0)
  return {
    forward: () => CpuAttention.forward(fwd),
    backward: () => CpuAttention.backward(bwd),
    decode: () => CpuAttention.decode(layer, T - 1, 1, T - 1),
    decodeOut: () => layer.out.subarray((T - 1) * H * D, T * H * D),
    hasBackward: true,
    probabilities: false,
    workingBytes: scratch.byteLength,
    sample: () => sampleOf([out, dq, dk, dv])
  }
}

/**
 * The CPU model's other attention (internal/gemmAttention.ts): blocks of 128 query rows, their scores and products
 * as matmuls on a Gemm route (OpenBLAS on one thread, or WebAssembly relaxed SIMD). It has no decode path.
 */
const gemmRunner = (s: AttentionShape, gemm: Gemm) => {
  const inp = inputsOf(s)
  const alloc = (n: number, from?: Float32Array) => {
    const a = gemm.alloc(n)
    if (from !== undefined) a.set(from)
    return a
  }
  const { batch: B, heads: H, seq: T } = s
  const q = alloc(inp.q.length, inp.q)
  const k = alloc(inp.k.length, inp.k)
  const v = alloc(inp.v.length, inp.v)
  const dOut = alloc(inp.dOut.length, inp.dOut)
  const out = alloc(q.length)
  const lse = alloc(B * T * H)
  const dq = alloc(q.length)
  const dk = alloc(k.length)
  const dv = alloc(v.length)
  const scratch = alloc(GemmAttention.scratchSize(T))
  return {
    forward: () =>
      GemmAttention.forward(gemm, { shape: s, q, k, v, segmentStart: inp.segmentStart, out, lse, scratch }),
    backward: () =>
      GemmAttention.backward(gemm, {
        shape: s,
        q,
        k,
        v,
        segmentStart: inp.segmentStart,
        out,
        lse,
        dOut,
        dq,
        dk,
        dv,
        scratch
      }),
    decode: undefined,
    decodeOut: () => new Float32Array(0),
    hasBackward: true,
    probabilities: false,
    workingBytes: scratch.byteLength,
    sample: () => sampleOf([out, dq, dk, dv])
  }
}

/** The Gemm of a gemm-* kernel, or why this machine has none. */
const gemmOf = (kernel: "gemm-openblas" | "gemm-wasm-relaxed"): Gemm | string => {
  const got = kernel === "gemm-openblas" ? Blas.load({ threads: 1 }) : WasmGemm.make("relaxed-simd")
  return got._tag === "Right" ? got.right : `${got.left.reason} (${got.left.fix})`
}

/** Qwen3Reference's attention: attendCausal's loop (a GQA pair of heads at a time) and attentionBackward. */
const referenceRunner = (s: AttentionShape) => {
  const x = inputsOf(s)
  const { batch: B, headDim: D, heads: H, kvHeads: KV, seq: T } = s
  const nm = numerics("f32")
  const group = H / KV
  const probBytes = B * H * T * T * 4
  const keep = probBytes <= refLimitMiB * 2 ** 20
  const probs = keep ? new Float32Array(B * H * T * T) : undefined
  const out = new Float32Array(x.q.length)
  const dq = new Float64Array(x.q.length)
  const dk = new Float64Array(x.k.length)
  const dv = new Float64Array(x.v.length)
  const forward = () => {
    for (let b = 0; b < B; b++) {
      for (let h = 0; h < H; h++) {
        const g = Math.floor(h / group)
        const paired = h + 1 < H && Math.floor((h + 1) / group) === g
        for (let t = 0; t < T; t++) {
          const n = b * T + t
          const o = (n * H + h) * D
          const kBase = b * T * KV * D + g * D
          const pBase = ((b * H + h) * T + t) * T
          const j0 = x.segmentStart[n]
          if (paired) {
            attendPair(
              x.q,
              o,
              o + D,
              x.k,
              x.v,
              kBase,
              KV * D,
              j0,
              t,
              D,
              s.scale,
              out,
              probs,
              pBase,
              pBase + T * T,
              nm.round
            )
          } else attendRow(x.q, o, x.k, x.v, kBase, KV * D, j0, t, D, s.scale, out, o, probs, pBase, nm)
        }
        if (paired) h++
      }
    }
  }
  const backward = () => {
    if (probs === undefined) return
    // The model's backward starts from fresh gradient arrays (attentionBackward adds into them).
    dq.fill(0)
    dk.fill(0)
    dv.fill(0)
    attentionBackward(x.dOut, x.q, x.k, x.v, probs, x.segmentStart, B, T, H, KV, D, s.scale, dq, dk, dv)
  }
  // Decode as Qwen3Reference's attendCache does it: batch row 0's last token against a [KV, T, D] cache.
  const cacheK = new Float32Array(KV * T * D)
  const cacheV = new Float32Array(KV * T * D)
  for (let t = 0; t < T; t++) {
    for (let g = 0; g < KV; g++) {
      for (let d = 0; d < D; d++) {
        cacheK[(g * T + t) * D + d] = x.k[(t * KV + g) * D + d]
        cacheV[(g * T + t) * D + d] = x.v[(t * KV + g) * D + d]
      }
    }
  }
  const decodeOut = new Float32Array(x.q.length)
  const decode = () => {
    const t = T - 1
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / group)
      const o = (t * H + h) * D
      if (h + 1 < H && Math.floor((h + 1) / group) === g) {
        attendPair(x.q, o, o + D, cacheK, cacheV, g * T * D, D, 0, t, D, s.scale, decodeOut, undefined, 0, 0, nm.round)
        h++
      } else attendRow(x.q, o, cacheK, cacheV, g * T * D, D, 0, t, D, s.scale, decodeOut, o, undefined, 0, nm)
    }
  }
  return {
    forward,
    backward,
    decode,
    decodeOut: () => decodeOut.subarray((T - 1) * H * D, T * H * D),
    hasBackward: keep,
    probabilities: keep,
    // Probabilities, and attentionBackward's dS of one head transposed (T×T f64) plus its two T-long rows.
    workingBytes: (keep ? probBytes + T * T * 8 : 0) + 2 * T * 8,
    sample: () => sampleOf([out, dq, dk, dv])
  }
}

const child = (shapeName: ShapeName, kernel: Kernel, repeats: number): Measured | { readonly unavailable: string } => {
  const s = shapeOf(shapeName)
  const gemm = kernel === "gemm-openblas" || kernel === "gemm-wasm-relaxed" ? gemmOf(kernel) : undefined
  if (typeof gemm === "string") return { unavailable: gemm }
  // Warm the JIT at the shape (or at 256 tokens of the long shape's heads, where one call takes seconds).
  const warmShape = s.seq > 256 ? { ...s, seq: 256 } : s
  const runner = (shape: AttentionShape) =>
    kernel === "reference"
      ? referenceRunner(shape)
      : kernel === "js" || kernel === "wasm-simd"
      ? tiledRunner(shape, kernel)
      : gemmRunner(shape, gemm!)
  const warm = runner(warmShape)
  // Until both tiers of V8 have compiled the hot code (WebAssembly starts in its baseline compiler and tiers up on
  // background threads, whose CPU time would otherwise land in the first measured calls): ≥ 5 calls and ≥ 2 s.
  const warmStart = performance.now()
  for (let i = 0; i < 5 || performance.now() - warmStart < 2000; i++) {
    warm.forward()
    warm.backward()
  }
  const r = runner(s)
  const forwardMs: Array<number> = []
  const backwardMs: Array<number> = []
  const forwardCpuMs: Array<number> = []
  const backwardCpuMs: Array<number> = []
  const timed = (f: () => void, wall: Array<number>, cpu: Array<number>) => {
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    f()
    wall.push(performance.now() - t0)
    const c = process.cpuUsage(c0)
    cpu.push((c.user + c.system) / 1000)
  }
  for (let i = 0; i < repeats; i++) {
    timed(r.forward, forwardMs, forwardCpuMs)
    if (r.hasBackward) timed(r.backward, backwardMs, backwardCpuMs)
  }
  // Decode: one token against the full cache, timed over batches of calls (each call is short).
  const decodeCalls = Math.max(1, Math.round(2e6 / (s.seq * s.heads * s.headDim)))
  const decode = r.decode
  const decodeBatch = () => {
    for (let i = 0; i < decodeCalls; i++) decode?.()
  }
  const decodeMs: Array<number> = []
  const decodeCpuMs: Array<number> = []
  if (decode !== undefined) {
    for (let i = 0; i < 3; i++) decodeBatch()
    for (let i = 0; i < 2 * repeats; i++) timed(decodeBatch, decodeMs, decodeCpuMs)
  }
  return {
    shape: shapeName,
    kernel,
    forwardMs,
    backwardMs,
    forwardCpuMs,
    backwardCpuMs,
    decodeMs: decodeMs.map((t) => t / decodeCalls),
    decodeCpuMs: decodeCpuMs.map((t) => t / decodeCalls),
    decodeSample: Array.from(r.decodeOut()).filter((_, i) => i % 7 === 0),
    backwardRun: r.hasBackward,
    probabilities: r.probabilities,
    workingBytes: r.workingBytes,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    sample: r.sample()
  }
}

const childArg = flag("child")
if (childArg !== undefined) {
  const [shapeName, kernel, repeats] = childArg.split(":")
  console.log(JSON.stringify(child(shapeName as ShapeName, kernel as Kernel, Number(repeats))))
} else {
  const names = (flag("shapes") ?? "tiny,small,long").split(",") as Array<ShapeName>
  const load0 = loadavg()
  const startedAt = new Date().toISOString()
  console.log(`load average at start: ${load0.map((x) => x.toFixed(2)).join(" ")} (${cpus().length} cpus)`)
  const results: Array<Measured> = []
  const unavailable: Array<string> = []
  for (const name of names) {
    const repeats = Number(flag("repeats") ?? (name === "long" ? 3 : 15))
    for (const kernel of kernels) {
      const args = [...process.execArgv, fileURLToPath(import.meta.url), `--child=${name}:${kernel}:${repeats}`]
      if (tileFlag !== undefined) args.push(`--tile=${tileFlag}`)
      args.push(`--ref-limit=${refLimitMiB}`)
      const run = spawnSync(process.execPath, args, { encoding: "utf8", maxBuffer: 1 << 28 })
      if (run.status !== 0) throw new Error(`${name}/${kernel} failed (${run.status}): ${run.stderr}`)
      const got = JSON.parse(run.stdout.trim().split("\n").at(-1) ?? "") as Measured | { readonly unavailable: string }
      if ("unavailable" in got) {
        console.log(`${name} ${kernel}: not run: ${got.unavailable}`)
        if (!unavailable.some((u) => u.startsWith(`${kernel}:`))) unavailable.push(`${kernel}: ${got.unavailable}`)
        continue
      }
      const m = got
      results.push(m)
      console.log(
        `${name} ${kernel}: forward ${median(m.forwardMs).toFixed(2)} ms, backward ${
          m.backwardRun ? `${median(m.backwardMs).toFixed(2)} ms` : "not run"
        }, peak RSS ${(m.peakRssBytes / 2 ** 20).toFixed(0)} MiB`
      )
    }
  }
  const load1 = loadavg()
  console.log(`load average at end: ${load1.map((x) => x.toFixed(2)).join(" ")}`)

  // Medians, with the runs they come from (the sample stays out of the saved report).
  const summary = (m: Measured) => ({
    ...m,
    sample: undefined,
    forwardRunsMs: m.forwardMs,
    backwardRunsMs: m.backwardMs,
    forwardMs: median(m.forwardMs),
    backwardMs: m.backwardRun ? median(m.backwardMs) : null,
    forwardCpuRunsMs: m.forwardCpuMs,
    backwardCpuRunsMs: m.backwardCpuMs,
    forwardCpuMs: median(m.forwardCpuMs),
    backwardCpuMs: m.backwardRun ? median(m.backwardCpuMs) : null,
    decodeSample: undefined,
    decodeRunsMs: m.decodeMs,
    decodeCpuRunsMs: m.decodeCpuMs,
    decodeMs: m.decodeMs.length === 0 ? null : median(m.decodeMs),
    decodeCpuMs: m.decodeCpuMs.length === 0 ? null : median(m.decodeCpuMs)
  })
  const rows = names.flatMap((name) => {
    const s = shapeOf(name)
    const ref = results.find((r) => r.shape === name && r.kernel === "reference")!
    // (query, key) pairs attended, packing included.
    const starts = inputsOf(s).segmentStart
    let pairs = 0
    for (let n = 0; n < starts.length; n++) pairs += s.heads * ((n % s.seq) - starts[n] + 1)
    // FLOPs as the GPU lowering counts them (4·pairs·D forward; 10·pairs·D backward, the recomputed scores not
    // counted), over the pairs attended.
    const forwardGflop = (4 * pairs * s.headDim) / 1e9
    const backwardGflop = (10 * pairs * s.headDim) / 1e9
    return results.filter((r) => r.shape === name).map((m) => {
      // Sampled outputs both share (out always; the gradients where the reference's backward ran).
      const compared = ref.backwardRun ? m.sample.length : Math.ceil((s.batch * s.seq * s.heads * s.headDim) / 97)
      let diff = 0
      for (let i = 0; i < compared; i++) {
        diff = Math.max(diff, Math.abs(m.sample[i] - ref.sample[i]) / (1 + Math.abs(ref.sample[i])))
      }
      let decodeDiff = 0
      for (let i = 0; i < ref.decodeSample.length; i++) {
        const e = Math.abs(m.decodeSample[i] - ref.decodeSample[i]) / (1 + Math.abs(ref.decodeSample[i]))
        decodeDiff = Math.max(decodeDiff, e)
      }
      const sm = summary(m)
      return {
        dims: `B=${s.batch} T=${s.seq} H=${s.heads} KV=${s.kvHeads} D=${s.headDim}`,
        pairs,
        forwardGflop,
        backwardGflop,
        ...sm,
        forwardGflops: forwardGflop / (sm.forwardCpuMs / 1000),
        backwardGflops: sm.backwardCpuMs === null ? null : backwardGflop / (sm.backwardCpuMs / 1000),
        forwardSpeedup: median(ref.forwardCpuMs) / sm.forwardCpuMs,
        backwardSpeedup: ref.backwardRun && sm.backwardCpuMs !== null
          ? median(ref.backwardCpuMs) / sm.backwardCpuMs
          : null,
        maxRelDifferenceToReference: diff,
        decodeSpeedup: sm.decodeCpuMs === null ? null : median(ref.decodeCpuMs) / sm.decodeCpuMs,
        decodeMaxRelDifferenceToReference: decodeDiff
      }
    })
  })
  const report = {
    startedAt,
    command: process.argv.slice(1).join(" "),
    node: process.version,
    cpu: cpus()[0]?.model,
    cpus: cpus().length,
    loadAverageStart: load0,
    loadAverageEnd: load1,
    tile,
    refLimitMiB,
    unavailable,
    rows
  }
  const mib = (b: number) => (b / 2 ** 20).toFixed(b < 2 ** 20 ? 2 : 0)
  const ms = (x: number | null) => (x === null ? "not run" : x < 100 ? x.toFixed(2) : x.toFixed(0))
  const times = (x: number | null) => (x === null ? "–" : `${x.toFixed(2)}×`)
  const gflops = (x: number | null) => (x === null ? "–" : x.toFixed(2))
  const md = [
    "# CPU attention: the tiled kernel (js and wasm-simd routes), the matmul-route attention and the reference",
    "",
    `Run ${startedAt} by \`nice npx tsx bench/cpu/attention.ts ${process.argv.slice(2).join(" ")}\` on ${report.cpu} ` +
    `(${report.cpus} cpus, shared with other jobs), Node ${process.version}, one thread. Load average (1/5/15 min) ` +
    `at start ${load0.map((x) => x.toFixed(2)).join(" ")}, at end ${load1.map((x) => x.toFixed(2)).join(" ")}.`,
    "",
    `Medians of repeats (${
      names.map((n) => `${n}: ${results.find((r) => r.shape === n)!.forwardMs.length}`).join(", ")
    }), ` +
    `each (shape, kernel) in its own process after warm-up calls (≥ 5 and ≥ 2 s). Tiled: tile ${tile.query}×${tile.key}, f32; ` +
    "js = plain TypeScript loops, wasm-simd = WebAssembly SIMD128 inner loops (tensors in its memory); " +
    "gemm-* = internal/gemmAttention.ts (128-row query blocks against every key they see, products on a matmul " +
    "route: OpenBLAS on 1 thread, WebAssembly relaxed SIMD). " +
    (unavailable.length === 0 ? "" : `Not run here: ${unavailable.join("; ")}. `) +
    "Reference: qwen3refFast's attendPair/attendRow per query row keeping the [B, H, T, T] probabilities, then " +
    "its attentionBackward (f64 gradients), as Qwen3Reference runs them" +
    (rows.some((r) => r.kernel === "reference" && !r.probabilities)
      ? `; where the probabilities pass ${refLimitMiB} MiB only its forward runs, without them`
      : "") +
    ". Rows are packed as two sequences (¾ and ¼ of T). " +
    "Speed-up and GFLOP/s from CPU time (user + system; wall time on shared cores also counts other jobs), speed-up = " +
    "reference CPU ms / kernel CPU ms; " +
    "FLOPs counted as the GPU lowering does (4·pairs·D forward, 10·pairs·D backward) over the pairs attended. " +
    "Working memory = beyond inputs and outputs (tiled: scratch; reference: probabilities and the backward's " +
    "transposed dS of one head). Peak RSS is the child process's, inputs and Node included. Max rel diff = " +
    "largest |kernel − reference| / (1 + |reference|) over every 97th element of out, dq, dk, dv.",
    "",
    "| shape | dims | kernel | fwd ms | bwd ms | fwd CPU ms | bwd CPU ms | fwd GFLOP/s | bwd GFLOP/s | fwd speed-up | bwd speed-up | working memory | peak RSS | max rel diff |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((r) =>
      `| ${r.shape} | ${r.dims} | ${r.kernel}${r.kernel === "reference" && !r.probabilities ? " (no probs)" : ""} | ` +
      `${ms(r.forwardMs)} | ${ms(r.backwardMs)} | ${ms(r.forwardCpuMs)} | ${ms(r.backwardCpuMs)} | ` +
      `${gflops(r.forwardGflops)} | ${gflops(r.backwardGflops)} | ${times(r.forwardSpeedup)} | ` +
      `${times(r.backwardSpeedup)} | ${mib(r.workingBytes)} MiB | ${mib(r.peakRssBytes)} MiB | ` +
      `${r.kernel === "reference" ? "–" : r.maxRelDifferenceToReference.toExponential(1)} |`
    ),
    "",
    "Decode: the last token of batch row 0 (position T − 1) against a KV cache of the row's T keys, one call per " +
    "token and layer (reference: Qwen3Reference's attendCache loop, attendPair/attendRow without probabilities); " +
    "medians over batches of calls.",
    "",
    "| shape | kernel | decode µs | decode CPU µs | speed-up | max rel diff |",
    "| --- | --- | ---: | ---: | ---: | ---: |",
    ...rows.filter((r) => r.decodeMs !== null && r.decodeCpuMs !== null).map((r) =>
      `| ${r.shape} | ${r.kernel} | ${(1000 * r.decodeMs!).toFixed(1)} | ${(1000 * r.decodeCpuMs!).toFixed(1)} | ` +
      `${times(r.decodeSpeedup)} | ${
        r.kernel === "reference" ? "–" : r.decodeMaxRelDifferenceToReference.toExponential(1)
      } |`
    ),
    ""
  ].join("\n")
  console.log(md)
  if (flag("no-save") === undefined) {
    const dir = fileURLToPath(new URL("../results/", import.meta.url))
    writeFileSync(`${dir}cpu-attention.json`, JSON.stringify(report, null, 2) + "\n")
    writeFileSync(`${dir}cpu-attention.md`, md)
    console.log(`saved ${dir}cpu-attention.{md,json}`)
  }
}
