/**
 * The GRPO update on the GPU model, two ways side by side on the same model, data and settings (dapo, TRL's
 * default sampler correction sequence_mask with cap 3, old and sampler logprobs given, GA micro-batches):
 *
 * - "weighted" (the previous path): per micro-batch a scoring forward, `Loss.compute` on the host from the
 *   read-back logprobs, the per-token coefficients uploaded, then the weighted step (forward + backward);
 * - "grpo" (the device loss): the inputs uploaded with the batch and one step program per micro-batch (forward,
 *   the `GrpoLoss` kernel, backward); only the loss and metrics come back.
 *
 * Steps alternate between the two (after warm-up) so that load on a shared machine hits both alike; the median
 * and the fastest step of each are reported, with the load average. Prints and saves
 * bench/results/grpo/loss-bench-<preset>-<seq>.json.
 *
 *   npx tsx bench/grpo/loss-bench.ts [steps] [completion] [preset]
 */
import { NodeContext } from "@effect/platform-node"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import type { Preset } from "@envtrain/gpu"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { gpuModel } from "../../packages/grpo/src/internal/gpuModel.js"
import { batchOf, type LossInputs, type TrainableModel } from "../../packages/grpo/src/internal/model.js"
import * as Loss from "../../packages/grpo/src/Loss.js"

const steps = Number(process.argv[2] ?? 5)
const completion = Number(process.argv[3] ?? 48)
const preset = (process.argv[4] ?? "tiny") as Preset.PresetName
const batch = 8
const prompt = 16
const accumulation = 2

let seed = 12345
const random = () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff
  return seed / 0x7fffffff
}

const program = Effect.gen(function*() {
  const checkpoint = yield* Checkpoint.makeModel(preset, 1)
  const V = checkpoint.config.vocab_size
  const model = yield* gpuModel(checkpoint, { batch, seq: prompt + completion, temperature: 1, slots: 2 })
  const options: Loss.LossOptions = { ...Loss.defaultOptions, gradientAccumulationSteps: accumulation }
  const correction = { mode: "sequence_mask", clipMin: null, clipMax: 3 } as const
  const micro = Array.from({ length: accumulation }, () => {
    const prompts = Array.from({ length: batch }, () => Array.from({ length: prompt }, () => Math.floor(random() * V)))
    const completions = Array.from(
      { length: batch },
      (_, i) => Array.from({ length: completion - (i % 3) * 4 }, () => Math.floor(random() * V))
    )
    const b = batchOf(prompts, completions)
    const T = b.length
    const mask = Float64Array.from(
      { length: batch * T },
      (_, j) => (j % T < completions[Math.floor(j / T)].length ? 1 : 0)
    )
    return { batch: b, T, mask, advantages: Float64Array.from({ length: batch }, () => random() * 2 - 1) }
  })
  // Old and sampler logprobs near the current policy's (as after one generation).
  const inputs: Array<LossInputs> = []
  for (const m of micro) {
    const scores = yield* model.score(m.batch, 1)
    const old = Float64Array.from(scores.logprobs, (l) => l + (random() - 0.5) * 0.05)
    const sampler = Float64Array.from(old, (l) => l + (random() - 0.5) * 0.02)
    const ratio = Loss.samplerCorrection({
      rows: batch,
      length: m.T,
      oldLogprobs: old,
      samplerLogprobs: sampler,
      mask: m.mask,
      ...correction
    })
    inputs.push({
      mask: m.mask,
      advantages: m.advantages,
      oldLogprobs: old,
      samplerLogprobs: sampler,
      importanceSampling: ratio,
      samplerCorrection: correction,
      numItemsInBatch: micro.reduce((s, x) => s + Loss.countTokens(x.mask), 0)
    })
  }
  const hyper = { learningRate: 1e-6, maxGradNorm: 1, beta1: 0.9, beta2: 0.999, epsilon: 1e-8, weightDecay: 0 }
  let hostLossMillis = 0
  const weightedStep = (m: TrainableModel) =>
    Effect.gen(function*() {
      let loss = 0
      for (let k = 0; k < accumulation; k++) {
        yield* m.accumulate(micro[k].batch, 1, (scores) => {
          const t0 = performance.now()
          const r = Loss.compute({
            ...inputs[k],
            rows: batch,
            length: micro[k].T,
            logprobs: scores.logprobs,
            entropies: scores.entropies
          }, options)
          hostLossMillis += performance.now() - t0
          loss += r.loss
          return r.gradient
        })
      }
      const r = yield* m.step(hyper)
      return { loss, gradNorm: r.gradNorm }
    })
  const deviceStep = (m: TrainableModel) =>
    Effect.gen(function*() {
      for (let k = 0; k < accumulation; k++) {
        yield* m.accumulateLoss!(micro[k].batch, 1, inputs[k], options)
      }
      const r = yield* m.step(hyper)
      return { loss: r.loss ?? NaN, gradNorm: r.gradNorm }
    })
  const paths = { weighted: weightedStep, grpo: deviceStep } as const
  const times: Record<string, Array<number>> = { weighted: [], grpo: [] }
  // CPU time of this process (lavapipe's threads included): the work done, less sensitive to other load than wall time.
  const cpu: Record<string, Array<number>> = { weighted: [], grpo: [] }
  const first: Record<string, number> = {}
  const losses: Record<string, Array<number>> = { weighted: [], grpo: [] }
  for (let s = 0; s < steps + 1; s++) {
    const order: ReadonlyArray<keyof typeof paths> = s % 2 === 0 ? ["weighted", "grpo"] : ["grpo", "weighted"]
    for (const name of order) {
      const t0 = performance.now()
      const c0 = process.cpuUsage()
      const r = yield* paths[name](model)
      const ms = performance.now() - t0
      const c = process.cpuUsage(c0)
      if (s === 0) first[name] = ms
      else {
        times[name].push(ms)
        cpu[name].push((c.user + c.system) / 1000)
      }
      losses[name].push(r.loss)
    }
  }
  const median = (xs: Array<number>) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  const tokens = accumulation * batch * (prompt + completion)
  const summary = (name: string) => ({
    firstStepMillis: Math.round(first[name]),
    medianStepMillis: Math.round(median(times[name])),
    // The fastest step: the least disturbed by other load on a shared machine.
    minStepMillis: Math.round(Math.min(...times[name])),
    stepMillis: times[name].map(Math.round),
    tokensPerSecond: Math.round(tokens / (median(times[name]) / 1000)),
    medianCpuMillis: Math.round(median(cpu[name])),
    losses: losses[name]
  })
  const results = {
    date: new Date().toISOString(),
    // Dawn on this machine's adapter (lavapipe, software Vulkan, where there is no GPU).
    cpu: `${cpus().length} × ${cpus()[0]?.model ?? "?"}`,
    preset,
    batch,
    seq: prompt + completion,
    microBatches: accumulation,
    lossType: options.lossType,
    samplerCorrection: correction,
    measuredSteps: steps,
    weighted: { ...summary("weighted"), hostLossComputeMillisPerStep: hostLossMillis / (steps + 1) },
    grpo: summary("grpo"),
    speedupMedian: median(times["weighted"]) / median(times["grpo"]),
    speedupMin: Math.min(...times["weighted"]) / Math.min(...times["grpo"]),
    cpuTimeRatio: median(cpu["weighted"]) / median(cpu["grpo"]),
    loadAverage: loadavg()
  }
  mkdirSync("bench/results/grpo", { recursive: true })
  writeFileSync(
    `bench/results/grpo/loss-bench-${preset}-${prompt + completion}.json`,
    JSON.stringify(results, null, 2) + "\n"
  )
  console.log(JSON.stringify(results, null, 2))
}).pipe(Effect.scoped, Effect.provide(Gpu.layer()), Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0)).catch((e) => {
  console.error(e)
  process.exit(1)
})
