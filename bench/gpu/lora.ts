/**
 * LoRA on the WebGPU model: what it saves and what it costs. Two parts:
 * - device memory by arena group (the plan is pure data, no device needed) for Qwen3-0.6B's shapes, full
 *   fine-tuning against LoRA r 16 on all seven projections: parameters, gradients, AdamW moments, the frozen base;
 * - seconds per training step (weighted mode) and dispatches per step of a small model on the adapter at hand
 *   (lavapipe here: a software rasteriser on the CPU, so the times are of the CPU's cores, and noisy under load).
 * Results go to bench/results/<out>.{json,md} (default gpu-lora; bench/device/run.sh names its own on a GPU).
 *
 *   npx tsx bench/gpu/lora.ts [--steps=5] [--out=gpu-lora]
 */
import { Effect } from "effect"
import { execSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { adaptedProjections, LORA_TARGETS, type LoraConfig } from "../../packages/gpu/src/formats/LoraConfig.js"
import { expectedTensors, type ModelConfig } from "../../packages/gpu/src/formats/ModelConfig.js"
import * as G from "../../packages/gpu/src/model/internal/qwen3Graph.js"
import * as Qwen3 from "../../packages/gpu/src/model/Qwen3.js"
import * as Ref from "../../packages/gpu/src/model/Qwen3Reference.js"
import * as GrpoLoss from "../../packages/gpu/src/ops/GrpoLoss.js"
import * as Arena from "../../packages/gpu/src/runtime/Arena.js"
import { describe, Gpu } from "../../packages/gpu/src/runtime/Gpu.js"
import { qwen3_0_6b } from "../model/qwen3-0_6b.js"

const steps = Number(process.argv.find((a) => a.startsWith("--steps="))?.slice(8) ?? 5)
const out = process.argv.find((a) => a.startsWith("--out="))?.slice(6) ?? "gpu-lora"

const config = (o: Partial<ModelConfig>): ModelConfig => ({
  architecture: "Qwen3ForCausalLM",
  ...qwen3_0_6b,
  max_position_embeddings: 40960,
  torch_dtype: "bfloat16",
  bos_token_id: null,
  eos_token_ids: [],
  pad_token_id: null,
  initializer_range: 0.02,
  extra: {},
  ...o
})

const lora: LoraConfig = { r: 16, alpha: 32, dropout: 0.05, targetModules: LORA_TARGETS, useRsLora: false }
const MiB = 1024 * 1024

/** Bytes of each arena group (ungrouped tensors: "activations and scratch") of a training plan. */
const planBytes = (c: ModelConfig, withLora: LoraConfig | undefined, batch: number, seq: number) => {
  const train: G.TrainShape = { batch, seq, chunk: 220, temperature: 1, ...(withLora ? { lora: withLora } : {}) }
  const plan = Arena.plan({
    ...G.parameterSpecs(c, true, withLora),
    ...G.trainSpecs(c, train, true),
    ...GrpoLoss.specs(train)
  }, { maxShardBytes: 128 * MiB })
  const out: Record<string, number> = {}
  for (const b of plan.buffers) {
    const key = b.group ?? "activations and scratch"
    out[key] = (out[key] ?? 0) + b.bytes
  }
  return { groups: out, total: plan.totalBytes }
}

const memory = () => {
  const c = config({})
  const tokens = 1024
  const full = planBytes(c, undefined, 1, tokens)
  const adapted = planBytes(c, lora, 1, tokens)
  const trained = adaptedProjections(c, lora).reduce(
    (a, p) => a + p.a.shape[0] * p.a.shape[1] + p.b.shape[0] * p.b.shape[1],
    0
  )
  const params = expectedTensors(c).reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0)
  return { model: "Qwen3-0.6B shapes", tokens, params, trainedLora: trained, full, lora: adapted }
}

const small = config({
  vocab_size: 512,
  hidden_size: 128,
  intermediate_size: 384,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 32
})

const timeSteps = (withLora: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const w = Ref.randomWeights(small, { seed: 1, std: 0.05 })
    const tensors = new Map(
      expectedTensors(small).map((s) => [s.name, { shape: s.shape, data: Float32Array.from(w[s.name]) }])
    )
    const adapters = Ref.initAdapters(small, lora, { seed: 2 })
    const model = yield* Qwen3.make({ config: small, tensors }, {
      batch: 2,
      seq: 64,
      ...(withLora
        ? { lora: { config: lora, adapters: new Map(Object.entries(adapters).map(([n, data]) => [n, { data }])) } }
        : {})
    })
    const tokens = Array.from({ length: 128 }, (_, i) => (i * 37) % 512)
    const coef = tokens.map(() => -1 / 128)
    const times: Array<number> = []
    let dispatches = 0
    for (let step = 1; step <= steps + 1; step++) {
      const t0 = performance.now()
      const r = yield* model.step([{ tokens, coef, dropoutSeed: step }], { lr: 1e-3, step, maxGradNorm: 1 })
      // The first step includes pipeline compilation on lavapipe.
      if (step > 1) times.push((performance.now() - t0) / 1000)
      dispatches = r.counters.dispatches
    }
    times.sort((a, b) => a - b)
    return { medianSeconds: times[Math.floor(times.length / 2)], minSeconds: times[0], dispatches }
  }))

const main = Effect.gen(function*() {
  const gpu = yield* Gpu
  const load0 = execSync("uptime").toString().trim()
  const mem = memory()
  const full = yield* timeSteps(false)
  const adapted = yield* timeSteps(true)
  const load1 = execSync("uptime").toString().trim()
  const result = {
    adapter: describe(gpu.adapter),
    host: { cpus: cpus().length, loadAverage1m: loadavg()[0], uptimeBefore: load0, uptimeAfter: load1 },
    lora,
    memory: mem,
    stepTime: { model: "hidden 128, 2 layers, vocab 512, batch 2 × seq 64", steps, full, lora: adapted }
  }
  writeFileSync(`bench/results/${out}.json`, JSON.stringify(result, null, 2) + "\n")
  const mib = (b: number | undefined) => b === undefined ? "—" : (b / MiB).toFixed(1)
  const groups = ["param", "grad", "adam.m", "adam.v", "frozen", "activations and scratch"]
  const md = [
    "# LoRA on the WebGPU model",
    "",
    `\`npx tsx bench/gpu/lora.ts --steps=${steps}\` on ${result.adapter} (${cpus().length} cores).`,
    `Load: before \`${load0}\`; after \`${load1}\`. The machine is shared by 4 workers: the step times are noisy.`,
    "",
    `## Device memory by arena group (MiB), ${mem.model}, ${mem.tokens} tokens, f32`,
    "",
    `${mem.params.toLocaleString("en")} parameters; LoRA r ${lora.r} on all seven projections trains ${
      mem.trainedLora.toLocaleString("en")
    }.`,
    "Computed from the arena plan (exact bytes the model allocates; no device needed).",
    "",
    "| group | full fine-tuning | LoRA |",
    "| --- | --- | --- |",
    ...groups.map((g) => `| ${g} | ${mib(mem.full.groups[g])} | ${mib(mem.lora.groups[g])} |`),
    `| total | ${mib(mem.full.total)} | ${mib(mem.lora.total)} |`,
    "",
    `## Training step (weighted mode), ${result.stepTime.model}`,
    "",
    "| | median s/step | min s/step | dispatches/step |",
    "| --- | --- | --- | --- |",
    `| full fine-tuning | ${full.medianSeconds.toFixed(3)} | ${full.minSeconds.toFixed(3)} | ${full.dispatches} |`,
    `| LoRA (dropout ${lora.dropout}) | ${adapted.medianSeconds.toFixed(3)} | ${
      adapted.minSeconds.toFixed(3)
    } | ${adapted.dispatches} |`,
    ""
  ].join("\n")
  writeFileSync(`bench/results/${out}.md`, md)
  console.log(md)
})

Effect.runPromise(main.pipe(Effect.provide(Gpu.layer()))).catch((e) => {
  console.error(e)
  process.exit(1)
})
