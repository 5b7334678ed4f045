/**
 * Where a CPU-device training step spends its time: the tiny and small presets' training step (forward, backward,
 * grad norm, AdamW on a batch, as bench/interop/pytorch-vs-envtrain.ts runs it) with CpuModel's per-op profile on,
 * at 1 and 2 matmul threads on the route Gemm.select picks. Milliseconds per step per op, medians over repeats.
 *
 *   npx tsx bench/cpu/step.ts [--repeats=5] [--no-save]
 *
 * Results go to bench/results/cpu-step-profile.{json,md}.
 */
import { Checkpoint, CpuModel, Gemm, Qwen3Reference as Q } from "@envtrain/gpu"
import type { Preset } from "@envtrain/gpu"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"

const flag = (name: string) => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const repeats = Number(flag("repeats") ?? 5)
const sizes: Record<Preset.PresetName, { batch: number; seq: number }> = {
  tiny: { batch: 4, seq: 256 },
  small: { batch: 2, seq: 128 }
}
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

const main = async () => {
  const loadStart = loadavg()
  const rows: Array<Record<string, unknown>> = []
  for (const preset of ["tiny", "small"] as const) {
    const { batch, seq } = sizes[preset]
    const model = await Effect.runPromise(Checkpoint.makeModel(preset, 0))
    const weights: Record<string, Float32Array> = {}
    for (const [name, t] of model.tensors) weights[name] = Float32Array.from(t.data)
    const V = model.config.vocab_size
    const tokens = Array.from({ length: batch * seq }, (_, i) => Q.philox4x32([i, 1, 0, 0], [2, 3])[0] % (V - 64))
    const targets = Q.nextTokenTargets({
      batch,
      seqLen: seq,
      tokens: Int32Array.from(tokens),
      segmentStart: new Int32Array(tokens.length)
    })
    const lossWeights = new Float64Array(tokens.length).fill(-1 / tokens.length)
    for (const threads of [1, 2]) {
      const selected = await Effect.runPromise(Gemm.select({ threads }))
      const m = CpuModel.make(model.config, weights, selected.gemm, { profile: true })
      const perOp = new Map<string, Array<number>>()
      const totals: Array<number> = []
      for (let r = 0; r < repeats + 1; r++) {
        m.resetProfile()
        const t0 = performance.now()
        m.forward(tokens, batch, seq)
        m.backward(targets, lossWeights, 1)
        const norm = m.gradNorm()
        m.adamW(Math.min(1, 1 / (norm + 1e-6)), { lr: 1e-5 })
        const total = performance.now() - t0
        if (r === 0) continue // warm-up: allocation and JIT
        totals.push(total)
        for (const [op, ms] of m.profile) perOp.set(op, [...(perOp.get(op) ?? []), ms])
      }
      const ops = Object.fromEntries([...perOp].map(([op, xs]) => [op, median(xs)]))
      const row = { preset, batch, seq, threads, device: selected.description, stepMs: median(totals), ops }
      console.log(JSON.stringify(row))
      rows.push(row)
    }
  }
  if (flag("no-save") !== undefined) return
  const out = {
    date: new Date().toISOString(),
    command: `npx tsx bench/cpu/step.ts ${process.argv.slice(2).join(" ")}`.trim(),
    machine: { cpu: cpus()[0]?.model, cores: cpus().length, loadAverage: { start: loadStart, end: loadavg() } },
    repeats,
    rows
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/cpu-step-profile.json", JSON.stringify(out, null, 2) + "\n")
  const opNames = [...new Set(rows.flatMap((r) => Object.keys(r.ops as object)))]
  const md = [
    "# Where a CPU-device training step spends its time",
    "",
    `${out.date}; \`${out.command}\`; ${out.machine.cpu}, ${out.machine.cores} cores, 1-minute load average ` +
    `${loadStart[0].toFixed(2)} at the start, ${out.machine.loadAverage.end[0].toFixed(2)} at the end. One training ` +
    "step (forward, backward of the mean NLL, grad norm, AdamW), milliseconds, medians of " +
    `${repeats} repeats after a warm-up. Op times are measured around each call (the profile's own cost is in ` +
    "the total); \"other\" is the total minus the listed ops.",
    "",
    `| preset | batch | threads | device | step ms | ${opNames.join(" | ")} | other |`,
    `|---|---|---:|---|---:|${opNames.map(() => "---:").join("|")}|---:|`,
    ...rows.map((r) => {
      const ops = r.ops as Record<string, number>
      const listed = Object.values(ops).reduce((a, b) => a + b, 0)
      return `| ${r.preset} | ${r.batch} × ${r.seq} | ${r.threads} | ${r.device} | ${
        (r.stepMs as number).toFixed(1)
      } | ` +
        `${opNames.map((o) => (ops[o] ?? 0).toFixed(1)).join(" | ")} | ${((r.stepMs as number) - listed).toFixed(1)} |`
    }),
    ""
  ].join("\n")
  writeFileSync("bench/results/cpu-step-profile.md", md)
  console.log("saved bench/results/cpu-step-profile.{json,md}")
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
