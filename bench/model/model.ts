/**
 * Qwen3 model benchmark: training tokens/s (one micro-batch per step, full step: forward, loss, backward, grad
 * norm, AdamW) with model FLOPs utilisation against a given peak, and generation tokens/s at batch 1 and at a
 * large batch (continuous batching, GPU sampling, several decode steps per submit).
 * Results go to bench/results/model-<name>.{json,md}.
 *
 *   npx tsx bench/model/model.ts                                   # tiny preset (in memory), lavapipe-sized
 *   npx tsx bench/model/model.ts --model=/models/Qwen3-0.6B --batch=4 --seq=512 --steps=10 \
 *     --gen-tokens=128 --gen-batch=64 --peak-tflops=67 --require-hardware --out=qwen3-0.6b-h200
 *
 * Flags: --model=DIR  --preset=tiny|small  --batch=N --seq=N --chunk=N --steps=N  --gen-tokens=N --prompt-tokens=N
 * --gen-batch=N (default 64)  --steps-per-submit=N  --peak-tflops=X (f32 peak for MFU; default 67, H200 FMA)
 * --require-hardware  --out=NAME  --skip-train  --skip-gen
 */
import { NodeContext } from "@effect/platform-node"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import * as Checkpoint from "../../packages/gpu/src/formats/Checkpoint.js"
import * as ModelConfig from "../../packages/gpu/src/formats/ModelConfig.js"
import * as Generation from "../../packages/gpu/src/model/Generation.js"
import type { PresetName } from "../../packages/gpu/src/model/Preset.js"
import * as Qwen3 from "../../packages/gpu/src/model/Qwen3.js"
import { describe, Gpu } from "../../packages/gpu/src/runtime/Gpu.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const num = (name: string, d: number) => (flag(name) === undefined ? d : Number(flag(name)))

const main = Effect.gen(function*() {
  const gpu = yield* Gpu
  const dir = flag("model")
  const ckpt = dir === undefined
    ? yield* Checkpoint.makeModel((flag("preset") ?? "tiny") as PresetName, 0)
    : yield* Checkpoint.load(dir)
  const c = ckpt.config
  const params = ModelConfig.parameterCount(c)
  const name = flag("out") ??
    (dir === undefined ? `${flag("preset") ?? "tiny"}-${gpu.adapter.isSoftware ? "lavapipe" : "gpu"}` : "model")
  const batch = num("batch", 2)
  const seq = num("seq", 64)
  const steps = num("steps", 5)
  const peak = num("peak-tflops", 67) * 1e12
  console.log(`adapter: ${describe(gpu.adapter)}`)
  console.log(
    `model: ${dir ?? flag("preset") ?? "tiny"}, ${
      params.toLocaleString("en-US")
    } parameters, ${c.num_hidden_layers} layers`
  )
  const result: Record<string, unknown> = {
    adapter: describe(gpu.adapter),
    model: dir ?? `preset:${flag("preset") ?? "tiny"}`,
    parameters: params,
    config: ModelConfig.toJson(c)
  }

  if (flag("skip-train") === undefined) {
    yield* Effect.scoped(Effect.gen(function*() {
      const t0 = performance.now()
      const model = yield* Qwen3.make(ckpt, { batch, seq, chunk: num("chunk", 256) })
      const makeMillis = performance.now() - t0
      const n = batch * seq
      const tokens = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % c.vocab_size)
      const coef = Array.from({ length: n }, () => -1 / n)
      const hyper = { lr: 1e-5, maxGradNorm: 1, weightDecay: 0.01 }
      yield* model.step([{ tokens, coef }], { ...hyper, step: 1 }) // warm-up (first dispatch of every pipeline)
      const w0 = performance.now()
      let last = 0
      let counters: unknown
      for (let s = 2; s <= steps + 1; s++) {
        const r = yield* model.step([{ tokens, coef }], { ...hyper, step: s })
        last = r.loss
        counters = r.counters
      }
      const seconds = (performance.now() - w0) / 1000
      const tokensPerSecond = n * steps / seconds
      // Model FLOPs per token: 6·params (matmuls, forward + backward) + causal attention 6·L·T·(q dims).
      const flopsPerToken = 6 * params + 6 * c.num_hidden_layers * seq * c.num_attention_heads * c.head_dim
      const tflops = tokensPerSecond * flopsPerToken / 1e12
      result.train = {
        batch,
        seq,
        steps,
        makeMillis,
        stepMillis: seconds * 1000 / steps,
        tokensPerSecond,
        modelTflops: tflops,
        mfu: tflops * 1e12 / peak,
        peakTflops: peak / 1e12,
        lossLast: last,
        counters
      }
      console.log(
        `train: ${tokensPerSecond.toFixed(1)} tokens/s, ${(seconds * 1000 / steps).toFixed(1)} ms/step, ` +
          `${tflops.toFixed(4)} TFLOP/s model FLOPs, MFU ${(100 * tflops * 1e12 / peak).toFixed(3)}% of ${peak / 1e12}`
      )
    }))
  }

  if (flag("skip-gen") === undefined) {
    const genTokens = num("gen-tokens", 32)
    const promptTokens = num("prompt-tokens", 16)
    const gen: Record<string, unknown> = {}
    for (const slots of [1, num("gen-batch", 64)]) {
      yield* Effect.scoped(Effect.gen(function*() {
        const model = yield* Qwen3.make(ckpt, {
          batch: 1,
          seq: 1,
          trainable: false,
          generation: {
            slots,
            capacity: promptTokens + genTokens,
            prefillChunk: Math.min(256, slots * promptTokens),
            stepsPerSubmit: num("steps-per-submit", 8)
          }
        })
        const generator = yield* Generation.make(model)
        const request = (i: number) => ({
          prompt: Array.from({ length: promptTokens }, (_, j) => (i * 31 + j * 17 + 5) % c.vocab_size),
          maxNewTokens: genTokens,
          temperature: 1,
          topP: 0.95,
          seed: 1,
          sequence: i
        })
        yield* generator.generate({ ...request(0), maxNewTokens: Math.min(genTokens, 4) }) // warm-up
        const before = generator.stats()
        const w0 = performance.now()
        const outs = yield* Effect.forEach(Array.from({ length: slots }, (_, i) => request(i)), generator.generate, {
          concurrency: "unbounded"
        })
        const seconds = (performance.now() - w0) / 1000
        const produced = outs.reduce((a, o) => a + o.tokens.length, 0)
        const after = generator.stats()
        gen[`batch${slots}`] = {
          slots,
          promptTokens,
          genTokens,
          seconds,
          tokens: produced,
          tokensPerSecond: produced / seconds,
          perSequenceTokensPerSecond: produced / slots / seconds,
          submits: after.submits - before.submits,
          decodeSteps: after.steps - before.steps
        }
        console.log(
          `generate batch ${slots}: ${(produced / seconds).toFixed(1)} tokens/s (${produced} tokens in ${
            seconds.toFixed(2)
          } s)`
        )
      }))
    }
    result.generation = gen
  }

  mkdirSync("bench/results", { recursive: true })
  writeFileSync(`bench/results/model-${name}.json`, JSON.stringify(result, null, 2) + "\n")
  const t = result.train as Record<string, number> | undefined
  const g = result.generation as Record<string, Record<string, number>> | undefined
  const md = [
    `# Qwen3 model benchmark: ${result.model as string}`,
    "",
    `Adapter: ${result.adapter as string}. Parameters: ${params.toLocaleString("en-US")}.`,
    "",
    "| measure | value |",
    "| --- | --- |",
    ...(t === undefined ? [] : [
      `| training (batch ${t.batch} × seq ${t.seq}) | ${t.tokensPerSecond.toFixed(1)} tokens/s, ${
        t.stepMillis.toFixed(1)
      } ms/step |`,
      `| training model FLOPs | ${t.modelTflops.toFixed(4)} TFLOP/s (MFU ${
        (100 * t.mfu).toFixed(3)
      }% of ${t.peakTflops} TFLOP/s) |`
    ]),
    ...Object.values(g ?? {}).map((r) =>
      `| generation batch ${r.slots} (${r.promptTokens} prompt + ${r.genTokens} new) | ${
        r.tokensPerSecond.toFixed(1)
      } tokens/s total, ${r.perSequenceTokensPerSecond.toFixed(1)} per sequence |`
    ),
    ""
  ].join("\n")
  writeFileSync(`bench/results/model-${name}.md`, md)
  console.log(`saved bench/results/model-${name}.json and .md`)
})

Effect.runPromise(
  main.pipe(
    Effect.provide(Gpu.layer({ requireHardware: flag("require-hardware") !== undefined })),
    Effect.provide(NodeContext.layer)
  )
).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
