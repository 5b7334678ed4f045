/**
 * bf16 storage of a LoRA run's frozen base on the CPU device against f32 storage: peak RSS, and what widening the
 * bf16 matrices into the f32 scratch costs (the profile's `bf16Widen` milliseconds) in a training pass (forward,
 * recomputing backward, AdamW) and in KV-cache decode steps, where the matmuls are small and the widening is not.
 * Qwen3-0.6B's layer shapes and vocabulary (151,936: the head is a quarter of the 0.6B base) with 6 of its 28
 * layers, so that it runs in a minute; LoRA r 16 on all seven projections; OpenBLAS, JS element-wise kernels. Each
 * storage runs in its own child process (its peak RSS is its own). The values are the same either way for bf16
 * weights (packages/gpu/test/CpuBf16.test.ts).
 *
 *   nice npx tsx bench/cpu/bf16.ts [--tokens=1024] [--decode-steps=8] [--no-save]
 *
 * Results: bench/results/cpu-bf16.{md,json}, with the load average (this machine's 2 cores are shared).
 */
import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as nodePath from "node:path"
import { fileURLToPath } from "node:url"
import * as CpuModel from "../../packages/gpu/src/cpu/CpuModel.js"
import * as Gemm from "../../packages/gpu/src/cpu/Gemm.js"
import { LORA_TARGETS } from "../../packages/gpu/src/formats/LoraConfig.js"
import * as Ref from "../../packages/gpu/src/model/Qwen3Reference.js"
import { qwen3_0_6b } from "../model/qwen3-0_6b.js"

const option = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback

const config: Ref.Config = { ...qwen3_0_6b, num_hidden_layers: 6 }
const tokens = Number(option("tokens", "1024"))
const decodeSteps = Number(option("decode-steps", "8"))
const lora = { r: 16, alpha: 32, dropout: 0, targetModules: LORA_TARGETS, useRsLora: false }

const measure = (frozenDtype: "f32" | "bf16") => {
  const gemm = Effect.runSync(Gemm.select({ route: "openblas", threads: cpus().length })).gemm
  const model = CpuModel.make(config, Ref.randomWeights(config, { seed: 1 }), gemm, {
    elementwise: "js",
    attention: "matmul",
    gradientCheckpointing: true,
    profile: true,
    frozenDtype,
    lora: { config: lora, adapters: Ref.initAdapters(config, lora, { seed: 2 }) }
  })
  const widenMs = () => model.profile.get("bf16Widen") ?? 0
  // One training pass: four sequences packed into one row, as the trainer packs a micro-batch.
  const ids = Array.from({ length: tokens }, (_, i) => (i * 7919) % config.vocab_size)
  const t0 = performance.now()
  model.forward(ids, 1, tokens, Array.from({ length: tokens }, (_, i) => i % (tokens / 4)))
  model.backward(ids.map((t) => (t * 31 + 7) % config.vocab_size), ids.map(() => -1 / tokens), 1)
  model.adamW(1, { lr: 1e-5 })
  const train = { seconds: (performance.now() - t0) / 1000, widenSeconds: widenMs() / 1000 }
  model.resetProfile()
  // Decode: two sequences, 64-token prompts prefilled, then one token each per step.
  const caches = [model.makeKvCache(64 + decodeSteps), model.makeKvCache(64 + decodeSteps)]
  model.extendBatch(caches, [ids.slice(0, 64), ids.slice(64, 128)])
  model.resetProfile()
  const t1 = performance.now()
  for (let s = 0; s < decodeSteps; s++) model.extendBatch(caches, [[ids[s]], [ids[s + 1]]])
  const decode = { secondsPerStep: (performance.now() - t1) / 1000 / decodeSteps, widenSecondsPerStep: 0 }
  decode.widenSecondsPerStep = widenMs() / 1000 / decodeSteps
  return { frozenDtype, train, decode, peakRssBytes: process.resourceUsage().maxRSS * 1024 }
}

const storage = option("storage", "")
if (storage === "f32" || storage === "bf16") process.stdout.write(`RESULT ${JSON.stringify(measure(storage))}\n`)
else {
  const loadStart = loadavg()
  const results = (["f32", "bf16"] as const).map((s) => {
    const args = ["--import", "tsx", fileURLToPath(import.meta.url), `--storage=${s}`, `--tokens=${tokens}`]
    const out = spawnSync(process.execPath, [...args, `--decode-steps=${decodeSteps}`], { encoding: "utf8" })
    const line = out.stdout.split("\n").find((l) => l.startsWith("RESULT "))
    if (line === undefined) throw new Error(`storage ${s} failed (${out.status}): ${out.stderr.slice(-2000)}`)
    console.log(line.slice(7))
    return JSON.parse(line.slice(7)) as ReturnType<typeof measure>
  })
  const loadEnd = loadavg()
  const s = (x: number) => x.toFixed(2)
  const md = [
    "# bf16 storage of a frozen base on the CPU device",
    "",
    `Written by bench/cpu/bf16.ts on ${new Date().toISOString()}: ${cpus().length} cores (${cpus()[0]?.model}), ` +
    `load average ${loadStart.map(s).join(" ")} at start, ${loadEnd.map(s).join(" ")} at end. The cores are ` +
    "shared with other work: the seconds are noisy (the widening's share of them less so); the bytes are not.",
    "",
    `Model: Qwen3-0.6B's layer shapes and vocabulary, ${config.num_hidden_layers} layers; LoRA r ${lora.r} on all ` +
    `seven projections; gradient checkpointing; OpenBLAS, JS element-wise kernels. Training: one packed pass of ` +
    `${tokens} tokens (forward, backward, AdamW). Decode: 2 sequences, 64-token prompts, ${decodeSteps} steps.`,
    "",
    "| frozen base | peak RSS | training pass (s) | of it widening (s) | decode step (s) | of it widening (s) |",
    "| --- | --- | --- | --- | --- | --- |",
    ...results.map((r) =>
      `| ${r.frozenDtype} | ${(r.peakRssBytes / 2 ** 30).toFixed(2)} GiB | ${s(r.train.seconds)} | ${
        s(r.train.widenSeconds)
      } | ${s(r.decode.secondsPerStep)} | ${s(r.decode.widenSecondsPerStep)} |`
    ),
    ""
  ].join("\n")
  if (!process.argv.includes("--no-save")) {
    const root = nodePath.resolve(nodePath.dirname(fileURLToPath(import.meta.url)), "../..")
    writeFileSync(nodePath.join(root, "bench/results/cpu-bf16.md"), md)
    writeFileSync(
      nodePath.join(root, "bench/results/cpu-bf16.json"),
      JSON.stringify({ loadStart, loadEnd, config, tokens, decodeSteps, lora, results }, null, 2) + "\n"
    )
  }
  console.log(md)
}
