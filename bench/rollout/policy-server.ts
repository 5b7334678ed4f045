/**
 * Policy server benchmark: completion tokens/s of `envtrain serve-policy --backend cpu|gpu` (its own process, as
 * deployed; queried over loopback with fetch) at several numbers of concurrent requests, with continuous batching
 * and with window batching (`--batching`), against the same model generating the same batch in process
 * (cpu: `Trainer.referenceModel`; gpu: the gpu backend's own `generate`, `PolicyBackend.gpu`). Every request
 * samples `--tokens` tokens (`ignore_eos`, temperature 1, its own seed), so all sides do the same work. The two
 * servers run together and are asked in turn, round by round, so load from other jobs falls on both alike.
 *
 *   npx tsx bench/rollout/policy-server.ts                                   # tiny preset, 1,8,32 requests
 *   npx tsx bench/rollout/policy-server.ts --preset=small --concurrency=1,8 --tokens=16
 *   npx tsx bench/rollout/policy-server.ts --backend=gpu --concurrency=1,4 --tokens=16 --rounds=3 --warmup=1
 *
 * Results: bench/results/<out>.{json,md} (default out: policy-server-<preset>, policy-server-<preset>-gpu).
 */
import { NodeContext } from "@effect/platform-node"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import type { PresetName } from "@envtrain/gpu/model/Preset"
import { Gpu } from "@envtrain/gpu/runtime/Gpu"
import * as Trainer from "@envtrain/grpo/Trainer"
import { PolicyServerProcess } from "@envtrain/harness"
import { PolicyBackend } from "@envtrain/harness"
import type { GenerateRequest } from "@envtrain/rollout/Policy"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.slice(hit.indexOf("=") + 1)
}
const PRESET = (flag("preset") ?? "tiny") as PresetName
const BACKEND = (flag("backend") ?? "cpu") as "cpu" | "gpu"
// The gpu backend's KV cache per slot (the server's --max-model-len): enough for a prompt and --tokens.
const CONTEXT = 256
const CONCURRENCY = (flag("concurrency") ?? "1,8,32").split(",").map(Number)
const TOKENS = Number(flag("tokens") ?? 32)
const ROUNDS = Number(flag("rounds") ?? 5)
// Untimed rounds first at every concurrency, on every side: the first requests a fresh process serves run cold
// (JIT, caches), which at 1 request measured start-up rather than serving.
const WARMUP = Number(flag("warmup") ?? 3)
const OUT = flag("out") ?? (BACKEND === "cpu" ? `policy-server-${PRESET}` : `policy-server-${PRESET}-gpu`)
const root = Path.resolve(import.meta.dirname, "../..")

const median = (xs: ReadonlyArray<number>) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const program = Effect.gen(function*() {
  const loadBefore = Os.loadavg()
  const model = yield* Checkpoint.makeModel(PRESET, 1)
  const dir = mkdtempSync(Path.join(Os.tmpdir(), "policy-bench-"))
  yield* Checkpoint.save(dir, model)
  const prompts = (n: number) =>
    Array.from({ length: n }, (_, i) => model.tokenizer.encode(`<|im_start|>user\nPlay round ${i}.<|im_end|>\n`))
  const maxBatch = Math.max(...CONCURRENCY)

  // In process: the batch handed to the model at once (gpu: on a device that closes before the servers start).
  const scope = yield* Scope.make()
  let adapterName = ""
  const local = BACKEND === "cpu"
    ? Trainer.referenceModel(model, { maxBatchSize: maxBatch })
    : yield* Effect.gen(function*() {
      const device = yield* Layer.build(Layer.merge(Gpu.layer(), NodeContext.layer))
      const gpu = Context.get(device, Gpu)
      adapterName = `${gpu.adapter.vendor} / ${gpu.adapter.device || gpu.adapter.description}` +
        (gpu.adapter.isSoftware ? " (software)" : "")
      const backend = yield* PolicyBackend.gpu(model, { maxBatchSize: maxBatch, contextLength: CONTEXT }).pipe(
        Effect.provide(device)
      )
      return {
        generate: (requests: ReadonlyArray<GenerateRequest>) =>
          backend.generate(requests.map((r) => ({ ...r, topLogprobs: 0 })))
      }
    }).pipe(Scope.extend(scope))
  const inProcess: Record<number, number> = {}
  const inProcessCpu: Record<number, number> = {}
  for (const c of CONCURRENCY) {
    const runs: Array<number> = []
    const cpu: Array<number> = []
    for (let r = -WARMUP; r < ROUNDS; r++) {
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      const out = yield* local.generate(
        prompts(c).map((promptIds, i) => ({
          promptIds,
          sampling: { maxTokens: TOKENS, temperature: 1, seed: 1000 * (r + WARMUP) + i }
        }))
      )
      const tokens = out.reduce((s, o) => s + o.tokenIds.length, 0)
      const used = process.cpuUsage(c0)
      if (r >= 0) {
        runs.push(tokens / ((performance.now() - t0) / 1000))
        cpu.push((used.user + used.system) / tokens)
      }
    }
    inProcess[c] = median(runs)
    inProcessCpu[c] = median(cpu)
  }
  yield* Scope.close(scope, Exit.void)

  // The servers in their own processes, one per batching mode, alive together and asked in turn (each round one
  // mode then the other, the order alternating), so both are measured under the same load on a shared machine.
  type Batching = "continuous" | "window"
  const modes: ReadonlyArray<Batching> = ["continuous", "window"]
  const launched = {} as Record<Batching, string>
  for (const batching of modes) {
    launched[batching] = (yield* PolicyServerProcess.launch({
      model: dir,
      backend: BACKEND,
      ...(BACKEND === "gpu" ? { maxModelLen: CONTEXT } : {}),
      maxBatch,
      batching,
      servedModelName: "bench"
    })).url
  }
  // Per concurrency: median tokens/s and CPU per token, the occupancy, and CPU per token with idle time included.
  type Side = Record<"served" | "serverCpu" | "occupancy" | "totalCpu", Record<number, number>>
  const side = (): Side => ({ served: {}, serverCpu: {}, occupancy: {}, totalCpu: {} })
  const results: Record<Batching, Side> = { continuous: side(), window: side() }
  // The server process's CPU seconds so far (its /metrics), read outside the timed requests.
  const cpuNow = (url: string) =>
    Effect.promise(() =>
      fetch(`${url}/metrics`).then((r) => r.text()).then((text) =>
        Number(/^process_cpu_seconds_total ([\d.e+-]+)$/m.exec(text)?.[1])
      )
    )
  for (const c of CONCURRENCY) {
    const runs = { continuous: [] as Array<number>, window: [] as Array<number> }
    const cpu = { continuous: [] as Array<number>, window: [] as Array<number> }
    // Each server's CPU over all timed rounds, its idle time between them included (work it defers, such as
    // garbage collection, lands there): per token, beside the per-round median.
    const totals = { continuous: { cpu: 0, tokens: 0 }, window: { cpu: 0, tokens: 0 } }
    for (let r = -WARMUP; r < ROUNDS; r++) {
      if (r === 0) { for (const batching of modes) totals[batching].cpu = -(yield* cpuNow(launched[batching])) }
      for (const batching of r % 2 === 0 ? modes : [...modes].reverse()) {
        const url = launched[batching]
        const cpu0 = yield* cpuNow(url)
        const t0 = performance.now()
        const bodies = yield* Effect.promise(() =>
          Promise.all(
            prompts(c).map((prompt, i) =>
              fetch(`${url}/v1/completions`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({
                  model: "bench",
                  prompt,
                  max_tokens: TOKENS,
                  temperature: 1,
                  seed: 1000 * (r + WARMUP) + i,
                  ignore_eos: true,
                  logprobs: 0,
                  return_token_ids: true
                })
              }).then((res) => res.json() as Promise<{ choices: Array<{ token_ids: Array<number> }> }>)
            )
          )
        )
        const tokens = bodies.reduce((s, b) => s + b.choices[0].token_ids.length, 0)
        const seconds = (performance.now() - t0) / 1000
        const cpu1 = yield* cpuNow(url)
        if (r >= 0) {
          runs[batching].push(tokens / seconds)
          cpu[batching].push((cpu1 - cpu0) * 1e6 / tokens)
          totals[batching].tokens += tokens
        }
      }
    }
    yield* Effect.sleep("500 millis")
    for (const batching of modes) {
      totals[batching].cpu += yield* cpuNow(launched[batching])
      results[batching].totalCpu[c] = totals[batching].cpu * 1e6 / totals[batching].tokens
    }
    for (const batching of modes) {
      results[batching].served[c] = median(runs[batching])
      results[batching].serverCpu[c] = median(cpu[batching])
      const metrics = yield* Effect.promise(() => fetch(`${launched[batching]}/metrics`).then((r) => r.text()))
      // Continuous: the most sequences in one decode step so far; window: the last batch handed to the backend.
      const name = batching === "continuous" ? "decode_step_occupancy_max" : "batch_size_last"
      results[batching].occupancy[c] = Number(
        new RegExp(`^envtrain:${name}\\{[^}]*\\} (\\d+)$`, "m").exec(metrics)?.[1]
      )
    }
  }
  const { continuous, window } = results

  const rows = CONCURRENCY.map((c) => ({
    concurrency: c,
    inProcessTokensPerSecond: inProcess[c],
    continuousTokensPerSecond: continuous.served[c],
    windowTokensPerSecond: window.served[c],
    continuousRatio: continuous.served[c] / inProcess[c],
    windowRatio: window.served[c] / inProcess[c],
    continuousMaxStepOccupancy: continuous.occupancy[c],
    windowLastBatchOccupancy: window.occupancy[c],
    inProcessCpuMicrosPerToken: inProcessCpu[c],
    continuousServerCpuMicrosPerToken: continuous.serverCpu[c],
    windowServerCpuMicrosPerToken: window.serverCpu[c],
    continuousServerTotalCpuMicrosPerToken: continuous.totalCpu[c],
    windowServerTotalCpuMicrosPerToken: window.totalCpu[c]
  }))
  const loadAfter = Os.loadavg()
  const result = {
    preset: PRESET,
    backend: BACKEND,
    ...(BACKEND === "gpu" ? { adapter: adapterName } : {}),
    tokensPerRequest: TOKENS,
    rounds: ROUNDS,
    warmupRounds: WARMUP,
    cpus: Os.cpus().length,
    loadAverage1m: { before: loadBefore[0], after: loadAfter[0] },
    date: new Date().toISOString(),
    rows
  }
  mkdirSync(Path.join(root, "bench/results"), { recursive: true })
  writeFileSync(Path.join(root, `bench/results/${OUT}.json`), JSON.stringify(result, null, 2) + "\n")
  const md = [
    `# Policy server: tokens/s, ${PRESET} preset, ${BACKEND.toUpperCase()} backend` +
    (BACKEND === "gpu" ? ` (${adapterName})` : ""),
    "",
    `\`npx tsx bench/rollout/policy-server.ts --preset=${PRESET} --backend=${BACKEND} ` +
    `--concurrency=${CONCURRENCY.join(",")} --tokens=${TOKENS} --rounds=${ROUNDS} --warmup=${WARMUP}\`: ` +
    `${TOKENS} sampled tokens per request ` +
    `(ignore_eos, temperature 1), median of ${ROUNDS} rounds after ${WARMUP} untimed warm-up round(s) per ` +
    `concurrency and side, ${Os.cpus().length} CPUs shared with other jobs (load average ` +
    `${loadBefore[0].toFixed(1)} at the start, ${loadAfter[0].toFixed(1)} at the end). ` +
    (BACKEND === "cpu"
      ? "In process: `Trainer.referenceModel.generate` on the whole batch. "
      : "In process: the gpu backend's `generate` (`PolicyBackend.gpu`, 8 decode steps per submit) on the whole " +
        "batch, on the same device. ") +
    `Server: \`envtrain serve-policy --backend ${BACKEND}\` ` +
    "in its own process with `--batching continuous` (requests join the running decode between steps) and " +
    "`--batching window` (a batch decodes to its end before the next), both alive together and asked in turn (a " +
    "round of one, then of the other, the order alternating), the requests sent concurrently over loopback. " +
    "Occupancy: continuous, the most sequences in one decode step so far; window, the last batch's size. " +
    "CPU per token: the CPU time (user + system) the generating process spent per completion token, in " +
    "microseconds (in process: the bench process around `generate`; server: the server's " +
    "`process_cpu_seconds_total` before and after each round, HTTP and JSON included; \"idle included\": from " +
    "before the first timed round to 0.5 s after the last, so work a server defers to its idle time counts too), " +
    "which other jobs on the machine inflate less than they inflate wall time.",
    "",
    "| concurrent requests | in process (tokens/s) | continuous (tokens/s) | window (tokens/s) | " +
    "continuous / in process | window / in process | continuous max step occupancy | window last batch |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.concurrency} | ${r.inProcessTokensPerSecond.toFixed(0)} | ${r.continuousTokensPerSecond.toFixed(0)} | ` +
      `${r.windowTokensPerSecond.toFixed(0)} | ${r.continuousRatio.toFixed(2)} | ${r.windowRatio.toFixed(2)} | ` +
      `${r.continuousMaxStepOccupancy} | ${r.windowLastBatchOccupancy} |`
    ),
    "",
    "| concurrent requests | in process CPU (µs/token) | continuous server CPU (µs/token) | " +
    "window server CPU (µs/token) | continuous / window (CPU) | continuous / window (CPU, idle included) |",
    "| --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.concurrency} | ${r.inProcessCpuMicrosPerToken.toFixed(0)} | ` +
      `${r.continuousServerCpuMicrosPerToken.toFixed(0)} | ${r.windowServerCpuMicrosPerToken.toFixed(0)} | ` +
      `${(r.continuousServerCpuMicrosPerToken / r.windowServerCpuMicrosPerToken).toFixed(2)} | ` +
      `${(r.continuousServerTotalCpuMicrosPerToken / r.windowServerTotalCpuMicrosPerToken).toFixed(2)} |`
    ),
    ""
  ].join("\n")
  writeFileSync(Path.join(root, `bench/results/${OUT}.md`), md)
  console.log(md)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer), Effect.orDie)

Effect.runPromise(program).then(() => process.exit(0))
