/**
 * Activation recomputation (`gradient_checkpointing`) on the CPU device: peak RSS, the workspace's activation bytes
 * and the seconds of one training step (forward, backward, AdamW), with and without it, for a model with
 * Qwen3-0.6B's layer shapes (hidden 1024, 16 query / 8 KV heads of 128, FFN 3072) but 6 layers and a 16k
 * vocabulary, so that it runs in seconds; LoRA r 16 on all seven projections (as a 0.6B run trains) or full
 * fine-tuning. Each setting runs in its own child process (its peak RSS is its own). The gradients are the same
 * bits either way (packages/gpu/test/CpuRecompute.test.ts).
 *
 *   nice npx tsx bench/cpu/recompute.ts [--tokens=2048] [--no-save]
 *
 * Results: bench/results/cpu-recompute.{md,json}, with the load average (this machine's 2 cores are shared).
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

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}

const config: Ref.Config = { ...qwen3_0_6b, vocab_size: 16384, num_hidden_layers: 6 }
const tokens = Number(flag("tokens") ?? 2048)
const lora = { r: 16, alpha: 32, dropout: 0, targetModules: LORA_TARGETS, useRsLora: false }
const GiB = 2 ** 30

const run = (setting: string) => {
  const [training, checkpointing] = setting.split(":")
  const weights = Ref.randomWeights(config, { seed: 1 })
  const gemm = Effect.runSync(Gemm.select({ route: "openblas", threads: cpus().length })).gemm
  const model = CpuModel.make(config, weights, gemm, {
    elementwise: "js",
    attention: "matmul",
    gradientCheckpointing: checkpointing === "recompute",
    ...(training === "lora" ? { lora: { config: lora, adapters: Ref.initAdapters(config, lora, { seed: 2 }) } } : {})
  })
  // Four sequences of tokens/4 packed into one row, as the trainer packs a micro-batch.
  const ids = Array.from({ length: tokens }, (_, i) => (i * 7919) % config.vocab_size)
  const positions = Array.from({ length: tokens }, (_, i) => i % (tokens / 4))
  const targets = Array.from({ length: tokens }, (_, i) => (i * 104729) % config.vocab_size)
  const lw = Array.from({ length: tokens }, () => -1 / tokens)
  const t0 = performance.now()
  model.forward(ids, 1, tokens, positions)
  model.backward(targets, lw, 1)
  model.adamW(1, { lr: 1e-5 })
  return {
    setting,
    stepSeconds: (performance.now() - t0) / 1000,
    workspaceBytes: model.workspaceBytes(),
    peakRssBytes: process.resourceUsage().maxRSS * 1024
  }
}

const setting = flag("setting")
if (setting !== undefined) process.stdout.write(`RESULT ${JSON.stringify(run(setting))}\n`)
else {
  const loadStart = loadavg()
  const results = ["lora:keep", "lora:recompute", "full:keep", "full:recompute"].map((s) => {
    const child = spawnSync(
      process.execPath,
      ["--import", "tsx", fileURLToPath(import.meta.url), `--setting=${s}`, `--tokens=${tokens}`],
      { encoding: "utf8" }
    )
    const line = child.stdout.split("\n").find((l) => l.startsWith("RESULT "))
    if (line === undefined) throw new Error(`setting ${s} failed (${child.status}): ${child.stderr.slice(-2000)}`)
    const r = JSON.parse(line.slice(7)) as ReturnType<typeof run>
    console.log(JSON.stringify(r))
    return r
  })
  const loadEnd = loadavg()
  const gb = (b: number) => `${(b / GiB).toFixed(2)} GiB`
  const md = [
    "# Activation recomputation on the CPU device",
    "",
    `Written by bench/cpu/recompute.ts on ${new Date().toISOString()}: ${cpus().length} cores (${cpus()[0]?.model}), ` +
    `load average ${loadStart.map((x) => x.toFixed(2)).join(" ")} at start, ${
      loadEnd.map((x) => x.toFixed(2)).join(" ")
    } at end. The cores are shared with other work: the seconds are noisy; the bytes are not.`,
    "",
    `Model: Qwen3-0.6B's layer shapes, ${config.num_hidden_layers} layers, vocabulary ${config.vocab_size}; one ` +
    `packed pass of ${tokens} tokens (4 sequences); OpenBLAS, JS element-wise kernels, matmul attention. LoRA: r ` +
    `${lora.r} on all seven projections.`,
    "",
    "| training | gradient checkpointing | activation workspace | peak RSS | step (s) |",
    "| --- | --- | --- | --- | --- |",
    ...results.map((r) => {
      const [training, mode] = r.setting.split(":")
      return `| ${training} | ${mode === "recompute"} | ${gb(r.workspaceBytes)} | ${gb(r.peakRssBytes)} | ${
        r.stepSeconds.toFixed(2)
      } |`
    }),
    ""
  ].join("\n")
  if (flag("no-save") === undefined) {
    const root = nodePath.resolve(nodePath.dirname(fileURLToPath(import.meta.url)), "../..")
    writeFileSync(nodePath.join(root, "bench/results/cpu-recompute.md"), md)
    writeFileSync(
      nodePath.join(root, "bench/results/cpu-recompute.json"),
      JSON.stringify({ loadStart, loadEnd, config, tokens, lora, results }, null, 2) + "\n"
    )
  }
  console.log(md)
}
