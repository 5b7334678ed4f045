/**
 * PyTorch (the .venv's torch, through transformers' Qwen3ForCausalLM) vs envtrain's CPU device (CpuModel: f32
 * kernels, matmuls on the route Gemm.select picks — OpenBLAS where installed), at 1 and 2 threads, with the
 * plain-TypeScript reference model (Qwen3Reference, the CPU backend before the device) beside them: training tokens/s (forward + backward + grad-norm clip + AdamW on a batch) and generation
 * tokens/s (greedy KV-cache decode of a batch of sequences, prefill included) on the tiny and small presets, torch at
 * 1 and 2 threads. Both load the same model directory (the preset made by envtrain, saved with Checkpoint.save) and
 * get the same token ids. Measurements alternate (envtrain, torch 1 thread, torch 2 threads, the order rotating each
 * repeat) in one invocation; tokens/s are medians over the repeats and each ratio is the median of the per-repeat
 * ratios, so load from other processes hits both sides alike. Wall clock throughout (torch's second thread only
 * shows in wall time); process CPU seconds are recorded too.
 *
 * Each side runs with the same thread count: envtrain's device with Gemm.select({ threads }) (the matmuls use that many
 * threads; the element-wise kernels and attention run on one), torch with torch.set_num_threads.
 *
 *   npx tsx bench/interop/pytorch-vs-envtrain.ts                    # tiny and small, 5 repeats
 *   npx tsx bench/interop/pytorch-vs-envtrain.ts --presets=tiny --repeats=3 --no-save
 *
 * Results go to bench/results/interop-pytorch.{json,md}.
 */
import { NodeContext } from "@effect/platform-node"
import { Checkpoint, CpuModel, Gemm, Qwen3Reference as Q } from "@envtrain/gpu"
import type { Preset } from "@envtrain/gpu"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const repeats = Number(flag("repeats") ?? 5)
const presetNames = (flag("presets") ?? "tiny,small").split(",") as Array<Preset.PresetName>
const genBatches = [1, 8]

/** Batch sizes per preset (the small preset is ~22x the work per token). */
const sizes: Record<
  Preset.PresetName,
  { trainBatch: number; trainSeq: number; genPrompt: number; genNew: number }
> = {
  tiny: { trainBatch: 4, trainSeq: 256, genPrompt: 32, genNew: 128 },
  small: { trainBatch: 2, trainSeq: 128, genPrompt: 16, genNew: 32 }
}

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

// ---------------------------------------------------------------------------------------------------------------
// The torch worker
// ---------------------------------------------------------------------------------------------------------------

const worker = spawn(".venv/bin/python", ["bench/interop/pytorch_model.py"], {
  stdio: ["pipe", "pipe", "inherit"],
  env: { ...process.env, HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1", PYTHONWARNINGS: "ignore" }
})
const lines = createInterface({ input: worker.stdout })
const waiting: Array<(line: string) => void> = []
lines.on("line", (line) => waiting.shift()?.(line))
worker.on("exit", (code) => {
  if (waiting.length > 0) {
    console.error(`pytorch_model.py exited with ${code}`)
    process.exit(1)
  }
})
const ask = (request: Record<string, unknown>): Promise<Record<string, any>> =>
  new Promise((resolve, reject) => {
    waiting.push((line) => {
      const answer = JSON.parse(line) as Record<string, any>
      if (answer.error !== undefined) reject(new Error(`pytorch_model.py: ${answer.error}`))
      else resolve(answer)
    })
    worker.stdin.write(JSON.stringify(request) + "\n")
  })

// ---------------------------------------------------------------------------------------------------------------
// envtrain
// ---------------------------------------------------------------------------------------------------------------

const timed = <A>(f: () => A) => {
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const value = f()
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  return { value, seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6 }
}

const runPreset = async (name: Preset.PresetName) => {
  const size = sizes[name]
  const dir = join(tmpdir(), "envtrain-interop-pytorch", name)
  const model = await Effect.runPromise(
    Effect.gen(function*() {
      const m = yield* Checkpoint.makeModel(name, 0)
      yield* Checkpoint.save(dir, m)
      return m
    }).pipe(Effect.provide(NodeContext.layer))
  )
  const c = model.config
  const config: Q.Config = {
    vocab_size: c.vocab_size,
    hidden_size: c.hidden_size,
    intermediate_size: c.intermediate_size,
    num_hidden_layers: c.num_hidden_layers,
    num_attention_heads: c.num_attention_heads,
    num_key_value_heads: c.num_key_value_heads,
    head_dim: c.head_dim,
    rms_norm_eps: c.rms_norm_eps,
    rope_theta: c.rope_theta,
    tie_word_embeddings: c.tie_word_embeddings
  }
  const weights: Q.Weights = {}
  for (const [tensor, t] of model.tensors) weights[tensor] = Float32Array.from(t.data)
  const adam = Q.makeAdamWState(weights)
  const torchInfo = await ask({ cmd: "load", model: dir })
  const V = c.vocab_size
  // Token ids drawn with the reference's Philox (as bench/model does), avoiding the special tokens at the top.
  const ids = (n: number, stream: number) =>
    Array.from({ length: n }, (_, i) => Q.philox4x32([i, stream, 0, 0], [2, 3])[0] % (V - 64))
  const trainTokens = ids(size.trainBatch * size.trainSeq, 1)
  // Greedy decode is measured at batch 1 and 8 (sequence b's prompt is the same in both).
  const promptsOf = (n: number) => Array.from({ length: n }, (_, b) => ids(size.genPrompt, 10 + b))

  // Mean next-token NLL over every position that has a target (torch's labels = input_ids loss).
  const lossWeights = new Float64Array(size.trainBatch * size.trainSeq)
  for (let b = 0; b < size.trainBatch; b++) {
    for (let t = 0; t < size.trainSeq - 1; t++) {
      lossWeights[b * size.trainSeq + t] = -1 / (size.trainBatch * (size.trainSeq - 1))
    }
  }
  const referenceTrain = () =>
    timed(() => {
      const fwd = Q.forward(config, weights, { tokens: trainTokens, batch: size.trainBatch, seqLen: size.trainSeq })
      const targets = Q.nextTokenTargets(fwd)
      Q.tokenLogprobs(fwd.logits, V, targets, 1)
      const { grads, loss } = Q.backward(config, weights, fwd, targets, lossWeights, 1)
      Q.clipGradNorm(grads, 1)
      Q.adamWStep(weights, grads, adam, { lr: 1e-5 })
      return loss
    })
  const referenceGenerate = (prompts: ReadonlyArray<ReadonlyArray<number>>) =>
    timed(() =>
      Q.generateBatch(
        config,
        weights,
        prompts.map((prompt) => ({ prompt, options: { temperature: 0, maxNewTokens: size.genNew } }))
      ).reduce((n, g) => n + g.tokens.length, 0)
    )
  // The device on each thread count (one model per route instance: the weights start equal).
  const devices = new Map<number, { model: CpuModel.CpuModel; description: string }>()
  for (const threads of [1, 2]) {
    const selected = await Effect.runPromise(Gemm.select({ threads }))
    devices.set(threads, { model: CpuModel.make(config, weights, selected.gemm), description: selected.description })
  }
  const targets = Q.nextTokenTargets({
    batch: size.trainBatch,
    seqLen: size.trainSeq,
    tokens: Int32Array.from(trainTokens),
    segmentStart: new Int32Array(trainTokens.length)
  })
  const deviceTrain = (threads: number) =>
    timed(() => {
      const m = devices.get(threads)!.model
      m.forward(trainTokens, size.trainBatch, size.trainSeq)
      const { loss } = m.backward(targets, lossWeights, 1)
      const norm = m.gradNorm()
      m.adamW(Math.min(1, 1 / (norm + 1e-6)), { lr: 1e-5 })
      return loss
    })
  const deviceGenerate = (threads: number, prompts: ReadonlyArray<ReadonlyArray<number>>) =>
    timed(() => {
      const m = devices.get(threads)!.model
      const caches = prompts.map((p) => m.makeKvCache(p.length + size.genNew))
      let chunks: Array<Array<number>> = prompts.map((p) => [...p])
      const first: Array<number> = []
      let n = 0
      for (let step = 0; step < size.genNew; step++) {
        const logits = m.extendBatch(caches, chunks)
        chunks = caches.map((_, s) => {
          let best = 0
          for (let v = 1; v < V; v++) if (logits[s * V + v] > logits[s * V + best]) best = v
          return [best]
        })
        first.push(chunks[0][0])
        n += caches.length
      }
      return { n, first }
    })
  const torchTrain = (threads: number) =>
    ask({ cmd: "train", threads, batch: size.trainBatch, seqLen: size.trainSeq, tokens: trainTokens })
  const torchGenerate = (threads: number, prompts: ReadonlyArray<ReadonlyArray<number>>) =>
    ask({ cmd: "generate", threads, prompts, maxNewTokens: size.genNew })

  // Greedy agreement before any training step changes the weights: the first tokens of sequence 0.
  const eGen0 = deviceGenerate(1, promptsOf(1)).value.first.slice(0, 16)
  const tGen0 = (await torchGenerate(1, promptsOf(1))).first as Array<number>
  const greedyAgree = eGen0.every((t, i) => t === tGen0[i])
  // Warm-up of every shape on every side (first calls allocate, JIT-compile, pick kernels).
  const eTrain0 = deviceTrain(1)
  deviceTrain(2)
  for (const n of genBatches) {
    deviceGenerate(2, promptsOf(n))
    referenceGenerate(promptsOf(n))
    await torchGenerate(2, promptsOf(n))
  }
  const tTrain0 = await torchTrain(1)
  await torchTrain(2)

  const trainTok = size.trainBatch * size.trainSeq
  const sides = ["device1", "device2", "torch1", "torch2", "reference"] as const
  type Side = typeof sides[number]
  const series = () => Object.fromEntries(sides.map((k) => [k, [] as Array<number>])) as Record<Side, Array<number>>
  const samples = {
    train: series(),
    cpuSeconds: series(),
    generate: Object.fromEntries(genBatches.map((n) => [n, series()])) as Record<number, Record<Side, Array<number>>>
  }
  for (let r = 0; r < repeats; r++) {
    const order = [...sides]
    for (let k = 0; k < r % order.length; k++) order.push(order.shift()!)
    for (const side of order) {
      if (side === "reference") {
        const t = referenceTrain()
        samples.train.reference.push(trainTok / t.seconds)
        samples.cpuSeconds.reference.push(t.cpuSeconds)
        for (const n of genBatches) {
          const g = referenceGenerate(promptsOf(n))
          samples.generate[n].reference.push(g.value / g.seconds)
        }
      } else if (side === "device1" || side === "device2") {
        const threads = side === "device1" ? 1 : 2
        const t = deviceTrain(threads)
        samples.train[side].push(trainTok / t.seconds)
        samples.cpuSeconds[side].push(t.cpuSeconds)
        for (const n of genBatches) {
          const g = deviceGenerate(threads, promptsOf(n))
          samples.generate[n][side].push(g.value.n / g.seconds)
        }
      } else {
        const threads = side === "torch1" ? 1 : 2
        const t = await torchTrain(threads)
        samples.train[side].push(trainTok / t.seconds)
        samples.cpuSeconds[side].push(t.cpuSeconds)
        for (const n of genBatches) {
          const g = await torchGenerate(threads, promptsOf(n))
          samples.generate[n][side].push(g.tokens / g.seconds)
        }
      }
    }
    const line = (xs: Record<Side, Array<number>>) => sides.map((x) => `${x} ${xs[x][r].toFixed(0)}`).join(", ")
    console.log(
      `${name} repeat ${r + 1}/${repeats}: train tok/s ${line(samples.train)}; ` +
        genBatches.map((n) => `generate ×${n} tok/s ${line(samples.generate[n])}`).join("; ") +
        ` (load ${loadavg()[0].toFixed(2)})`
    )
  }
  const paired = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => median(a.map((x, i) => x / b[i]))
  const summary = (xs: Record<Side, Array<number>>) => ({
    ...Object.fromEntries(sides.map((x) => [x, median(xs[x])])) as Record<Side, number>,
    ratio1: paired(xs.device1, xs.torch1),
    ratio2: paired(xs.device2, xs.torch2),
    speedupOverReference: paired(xs.device1, xs.reference)
  })
  return {
    preset: name,
    parameters: Object.values(weights).reduce((a, w) => a + w.length, 0),
    sizes: size,
    torch: torchInfo,
    device: { 1: devices.get(1)!.description, 2: devices.get(2)!.description },
    training: {
      tokensPerStep: trainTok,
      ...summary(samples.train),
      firstLoss: { envtrain: eTrain0.value, torch: tTrain0.loss }
    },
    generation: Object.fromEntries(
      genBatches.map((n) => [n, { tokensPerCall: n * size.genNew, ...summary(samples.generate[n]) }])
    ) as Record<number, ReturnType<typeof summary> & { readonly tokensPerCall: number }>,
    greedyFirst16Agree: greedyAgree,
    trainCpuSecondsMedian: Object.fromEntries(sides.map((x) => [x, median(samples.cpuSeconds[x])])) as Record<
      Side,
      number
    >,
    samples
  }
}

const main = async () => {
  const loadStart = loadavg()
  const date = new Date().toISOString()
  const results: Array<Awaited<ReturnType<typeof runPreset>>> = []
  for (const name of presetNames) results.push(await runPreset(name))
  worker.stdin.end(JSON.stringify({ cmd: "quit" }) + "\n")
  const out = {
    date,
    command: `npx tsx bench/interop/pytorch-vs-envtrain.ts ${process.argv.slice(2).join(" ")}`.trim(),
    machine: {
      cpu: cpus()[0]?.model ?? "unknown",
      cores: cpus().length,
      loadAverage: { start: loadStart, end: loadavg() }
    },
    node: process.version,
    repeats,
    clock: "wall",
    results
  }
  console.log(JSON.stringify(results.map(({ samples: _s, torch: _t, ...r }) => r), null, 2))
  if (flag("no-save") !== undefined) return
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/interop-pytorch.json", JSON.stringify(out, null, 2) + "\n")
  const f = (x: number) => x.toFixed(0)
  const r2 = (x: number) => x.toFixed(2)
  const torch = results[0]?.torch ?? {}
  type Row = Awaited<ReturnType<typeof runPreset>>
  type Summary = Pick<
    Row["training"],
    "device1" | "torch1" | "ratio1" | "device2" | "torch2" | "ratio2" | "reference" | "speedupOverReference"
  >
  const table = (pick: (r: Row) => Summary, shape: (r: Row) => string) => [
    "| preset | params | batch | envtrain device 1 thread | torch 1 thread | ratio | envtrain device 2 threads | " +
    "torch 2 threads | ratio | reference (before) | device 1 thread / reference |",
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...results.map((r) => {
      const x = pick(r)
      return `| ${r.preset} | ${r.parameters.toLocaleString("en-US")} | ${shape(r)} | ${f(x.device1)} | ${
        f(x.torch1)
      } | ` +
        `**${r2(x.ratio1)}** | ${f(x.device2)} | ${f(x.torch2)} | **${r2(x.ratio2)}** | ${f(x.reference)} | ` +
        `${r2(x.speedupOverReference)} |`
    })
  ]
  const md = [
    "# PyTorch vs envtrain's CPU device",
    "",
    `${date}; \`${out.command}\`; ${out.machine.cpu}, ${out.machine.cores} cores, 1-minute load average ` +
    `${loadStart[0].toFixed(2)} at the start, ${out.machine.loadAverage.end[0].toFixed(2)} at the end. Node ` +
    `${process.version}; torch ${torch.torch} (the PyPI wheel, CPU), transformers ${torch.transformers} ` +
    `(Qwen3ForCausalLM, attention ${torch.attn_implementation}). envtrain's device: ${
      results.map((r) => `${r.preset}: ${r.device[1]} / ${r.device[2]}`).join("; ")
    }. Wall clock; medians of ${repeats} repeats; the five sides alternate within each repeat, the order rotating; ` +
    "**ratio = envtrain / torch at the same thread count, the median of the per-repeat ratios**.",
    "",
    "Training: forward + backward + clip_grad_norm(1) + AdamW step on a batch (mean next-token NLL over every " +
    "position). Generation: greedy decode with the KV cache, the whole batch together, prefill included, a fixed " +
    "number of new tokens (torch: `model.generate`, `min_new_tokens` = `max_new_tokens`); tokens/s counts new tokens. " +
    "The reference column is the plain-TypeScript Qwen3Reference (f64 sums, one thread), the CPU backend before the " +
    "device.",
    "",
    "## Training tokens/s",
    "",
    ...table((r) => r.training, (r) => `${r.sizes.trainBatch} × ${r.sizes.trainSeq}`),
    "",
    ...genBatches.flatMap((n) => [
      `## Greedy decode tokens/s, batch ${n}`,
      "",
      ...table(
        (r) => r.generation[n],
        (r) => `${n} × (${r.sizes.genPrompt} + ${r.sizes.genNew})`
      ),
      ""
    ]),
    "",
    "Checks on the same weights before any update: " +
    results.map((r) =>
      `${r.preset}: greedy tokens (first 16 of sequence 1) ${
        r.greedyFirst16Agree ? "identical" : "differ"
      }, first training loss envtrain ${r.training.firstLoss.envtrain.toFixed(5)} vs torch ${
        r.training.firstLoss.torch.toFixed(5)
      }`
    ).join("; ") + ".",
    "",
    "Median process CPU seconds of one training step: " +
    results.map((r) =>
      `${r.preset}: ${Object.entries(r.trainCpuSecondsMedian).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(", ")}`
    ).join("; ") + ".",
    ""
  ].join("\n")
  writeFileSync("bench/results/interop-pytorch.md", md)
  console.log("saved bench/results/interop-pytorch.{json,md}")
}

main().then(() => process.exit(0)).catch((e) => {
  console.error(e)
  worker.kill()
  process.exit(1)
})
