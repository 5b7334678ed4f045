/**
 * CPU reference model benchmark: generation tokens/s (Qwen3Reference.generate, KV cache, one sequence, sampling at
 * temperature 1 as GRPO does, prefill included) and training tokens/s (forward + tokenLogprobs + backward of a
 * sequence whose last part carries per-token loss weights, as the trainer's `accumulate`), for an older commit's
 * implementation (the baseline, checked out once as a git worktree under build/bench-baseline/<commit>, its
 * node_modules a link to this checkout's) and the current one, side by side in one process.
 * Old and new runs alternate; tokens/s are medians over the repeats and the speed-up is the median of the paired
 * (back-to-back) ratios, so load from other processes affects both alike.
 * It also checks that both give the same tokens and the same gradients.
 * Results go to bench/results/model-cpu-reference.{json,md}.
 *
 *   npx tsx bench/model/cpu-reference.ts                 # tiny and small presets
 *   npx tsx bench/model/cpu-reference.ts --presets=tiny --repeats=3
 *   npx tsx bench/model/cpu-reference.ts --baseline=23e055e      # against another commit
 *
 * Flags: --presets=tiny,small  --repeats=N (default 5)  --clock=cpu|wall (default cpu: process CPU time, see `time`)
 * --baseline=COMMIT (default 0feb089, the last commit before the CPU model's speed-ups)  --no-save
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import * as Path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { paddedVocab, type PresetName, presets } from "../../packages/gpu/src/model/Preset.js"
import * as New from "../../packages/gpu/src/model/Qwen3Reference.js"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const repeats = Number(flag("repeats") ?? 5)
const presetNames = (flag("presets") ?? "tiny,small").split(",") as Array<PresetName>

// The baseline: Qwen3Reference.ts as it was at an older commit, imported from a worktree of that commit (made once,
// reused by later runs). The default is the commit before "faster CPU reference" (git log on Qwen3Reference.ts).
const root = fileURLToPath(new URL("../..", import.meta.url))
const git = (...args: Array<string>) => execFileSync("git", args, { cwd: root, encoding: "utf8" }).trim()
const baselineCommit = git("rev-parse", "--verify", `${flag("baseline") ?? "0feb089"}^{commit}`)
const baselineDir = Path.join(root, "build", "bench-baseline", baselineCommit.slice(0, 12))
if (!existsSync(Path.join(baselineDir, ".git"))) {
  mkdirSync(Path.dirname(baselineDir), { recursive: true })
  git("worktree", "add", "--detach", baselineDir, baselineCommit)
}
if (!existsSync(Path.join(baselineDir, "node_modules"))) {
  symlinkSync(Path.join(root, "node_modules"), Path.join(baselineDir, "node_modules"), "dir")
}
/** What the benchmark calls; every version since the reference was written has these. */
type Baseline = Pick<typeof New, "generate" | "forward" | "nextTokenTargets" | "tokenLogprobs" | "backward">
const Old = (await import(pathToFileURL(Path.join(baselineDir, "packages/gpu/src/Qwen3Reference.ts")).href)) as Baseline
console.log(`baseline: ${baselineCommit.slice(0, 12)} (${git("log", "-1", "--format=%s", baselineCommit)})`)

/** Sizes per preset: the old implementation needs tens of seconds for the small preset at tiny's sizes. */
const sizes: Record<
  PresetName,
  { prompt: number; generate: number; batch: number; seqLen: number; completion: number }
> = {
  tiny: { prompt: 100, generate: 300, batch: 8, seqLen: 300, completion: 200 },
  small: { prompt: 32, generate: 48, batch: 4, seqLen: 96, completion: 64 }
}

type Impl = Baseline & Partial<Pick<typeof New, "generateBatch">>

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** Median of the per-repeat ratios new/old: each pair ran back to back, so a load spike hits both. */
const pairedSpeedup = (olds: ReadonlyArray<number>, news: ReadonlyArray<number>) =>
  median(olds.map((o, i) => news[i] / o))

const clock = flag("clock") ?? "cpu"
if (clock !== "cpu" && clock !== "wall") throw new Error(`--clock=${clock}: use cpu or wall.`)

/**
 * Seconds taken by f: process CPU time by default (the model is single-threaded, so on an idle machine it equals
 * the wall clock, and on a shared one it leaves out the time other processes hold the cores), or wall time.
 */
const time = <A>(f: () => A): { readonly value: A; readonly seconds: number } => {
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const value = f()
  if (clock === "wall") return { value, seconds: (performance.now() - t0) / 1000 }
  const cpu = process.cpuUsage(cpu0)
  return { value, seconds: (cpu.user + cpu.system) / 1e6 }
}

const runPreset = (name: PresetName) => {
  const p = presets[name]
  const size = sizes[name]
  const config: New.Config = {
    vocab_size: paddedVocab(p.tokenizerVocabSize),
    hidden_size: p.hidden_size,
    intermediate_size: p.intermediate_size,
    num_hidden_layers: p.num_hidden_layers,
    num_attention_heads: p.num_attention_heads,
    num_key_value_heads: p.num_key_value_heads,
    head_dim: p.head_dim,
    rms_norm_eps: p.rms_norm_eps,
    rope_theta: p.rope_theta,
    tie_word_embeddings: true
  }
  const weights = New.randomWeights(config, { seed: 1 })
  const V = config.vocab_size
  const prompt = Array.from({ length: size.prompt }, (_, i) => New.philox4x32([i, 1, 0, 0], [2, 3])[0] % V)
  const sequence = Array.from({ length: size.seqLen }, (_, i) => New.philox4x32([i, 2, 0, 0], [2, 3])[0] % V)

  const generate = (impl: Impl, seed: number) =>
    impl.generate(config, weights, prompt, { temperature: 1, maxNewTokens: size.generate, seed })

  // A batch of episodes: the old implementation generates them one after another, the new one together.
  const batchRequests = Array.from({ length: size.batch }, (_, i) => ({
    prompt: prompt.slice(i),
    options: { temperature: 1, maxNewTokens: size.generate, seed: 11, sequence: i }
  }))
  const generateMany = (impl: Impl) =>
    impl.generateBatch !== undefined
      ? impl.generateBatch(config, weights, batchRequests)
      : batchRequests.map((r) => impl.generate(config, weights, r.prompt, r.options))

  const train = (impl: Impl) => {
    const fwd = impl.forward(config, weights, { tokens: sequence, batch: 1, seqLen: size.seqLen })
    const targets = impl.nextTokenTargets(fwd)
    const scores = impl.tokenLogprobs(fwd.logits, V, targets, 1)
    // Loss weights on the completion part only, as the trainer passes d loss / d logprob.
    const lossWeights = new Float64Array(size.seqLen)
    for (let t = size.seqLen - size.completion - 1; t < size.seqLen - 1; t++) lossWeights[t] = -1 / size.completion
    return { scores, gradients: impl.backward(config, weights, fwd, targets, lossWeights, 1) }
  }

  // Same results: generated tokens and gradients of both implementations.
  const oldGen = generate(Old, 7)
  const newGen = generate(New, 7)
  const sameTokens = oldGen.tokens.join(",") === newGen.tokens.join(",")
  let logprobDiff = 0
  oldGen.logprobs.forEach((lp, i) => logprobDiff = Math.max(logprobDiff, Math.abs(lp - newGen.logprobs[i])))
  const oldTrain = train(Old)
  const newTrain = train(New)
  let gradDiff = 0
  for (const [tensor, g] of Object.entries(oldTrain.gradients.grads)) {
    const h = newTrain.gradients.grads[tensor]
    for (let i = 0; i < g.length; i++) gradDiff = Math.max(gradDiff, Math.abs(g[i] - h[i]))
  }
  const lossDiff = Math.abs(oldTrain.gradients.loss - newTrain.gradients.loss)

  const oldMany = generateMany(Old)
  const newMany = generateMany(New)
  const sameBatchTokens = oldMany.every((g, i) => g.tokens.join(",") === newMany[i].tokens.join(","))

  const samples = {
    oldGen: [] as Array<number>,
    newGen: [] as Array<number>,
    oldBatch: [] as Array<number>,
    newBatch: [] as Array<number>,
    oldTrain: [] as Array<number>,
    newTrain: [] as Array<number>
  }
  const countTokens = (gs: ReadonlyArray<{ readonly tokens: ReadonlyArray<number> }>) =>
    gs.reduce((a, g) => a + g.tokens.length, 0)
  for (let r = 0; r < repeats; r++) {
    samples.oldGen.push(size.generate / time(() => generate(Old, r)).seconds)
    samples.newGen.push(size.generate / time(() => generate(New, r)).seconds)
    if (r < Math.ceil(repeats / 2)) {
      const o = time(() => generateMany(Old))
      samples.oldBatch.push(countTokens(o.value) / o.seconds)
      const n = time(() => generateMany(New))
      samples.newBatch.push(countTokens(n.value) / n.seconds)
    }
    samples.oldTrain.push(size.seqLen / time(() => train(Old)).seconds)
    samples.newTrain.push(size.seqLen / time(() => train(New)).seconds)
  }
  const result = {
    preset: name,
    parameters: Object.values(weights).reduce((a, w) => a + w.length, 0),
    sizes: size,
    generation: {
      oldTokensPerSecond: median(samples.oldGen),
      newTokensPerSecond: median(samples.newGen),
      speedup: pairedSpeedup(samples.oldGen, samples.newGen)
    },
    batchGeneration: {
      sequences: size.batch,
      oldTokensPerSecond: median(samples.oldBatch),
      newTokensPerSecond: median(samples.newBatch),
      speedup: pairedSpeedup(samples.oldBatch, samples.newBatch)
    },
    training: {
      oldTokensPerSecond: median(samples.oldTrain),
      newTokensPerSecond: median(samples.newTrain),
      speedup: pairedSpeedup(samples.oldTrain, samples.newTrain)
    },
    sameResults: {
      tokens: sameTokens && sameBatchTokens,
      maxLogprobDiff: logprobDiff,
      maxGradDiff: gradDiff,
      lossDiff
    },
    samples
  }
  console.log(
    `${name} (${result.parameters.toLocaleString("en-US")} params): generation ` +
      `${result.generation.oldTokensPerSecond.toFixed(0)} → ${result.generation.newTokensPerSecond.toFixed(0)} tok/s ` +
      `(${result.generation.speedup.toFixed(2)}×); ${size.batch} sequences ` +
      `${result.batchGeneration.oldTokensPerSecond.toFixed(0)} → ${
        result.batchGeneration.newTokensPerSecond.toFixed(0)
      } ` +
      `tok/s (${result.batchGeneration.speedup.toFixed(2)}×); training ${
        result.training.oldTokensPerSecond.toFixed(0)
      } → ` +
      `${result.training.newTokensPerSecond.toFixed(0)} tok/s (${result.training.speedup.toFixed(2)}×); same tokens: ` +
      `${sameTokens}, max |Δ grad| ${gradDiff.toExponential(2)}, max |Δ logprob| ${logprobDiff.toExponential(2)}`
  )
  return result
}

const loadBefore = loadavg()[0]
const results = presetNames.map(runPreset)
const cpu = cpus()[0]?.model ?? "unknown CPU"
const out = {
  date: new Date().toISOString(),
  baseline: baselineCommit,
  node: process.version,
  cpu: `${cpu} (${cpus().length} cores)`,
  repeats,
  clock,
  loadAverage: { before: loadBefore, after: loadavg()[0] },
  results
}
if (flag("no-save") === undefined) {
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/model-cpu-reference.json", JSON.stringify(out, null, 2) + "\n")
  const fmt = (x: number) => x.toFixed(0)
  const md = [
    "# CPU reference model (Qwen3Reference): old vs new",
    "",
    `${out.date}, Node ${out.node}, ${out.cpu}; ${
      clock === "cpu" ? "tokens per CPU-second of the process" : "wall clock"
    }; ` +
    `1-minute load average ${out.loadAverage.before.toFixed(1)} before, ${out.loadAverage.after.toFixed(1)} after; ` +
    `old = commit ${baselineCommit.slice(0, 12)}; medians of ${repeats} alternating repeats in one process, × = ` +
    "median of the paired new/old ratios " +
    "(`npx tsx bench/model/cpu-reference.ts`). Generation: `generate` at temperature 1 with the KV cache, prefill " +
    "included; batch gen: that many episodes (old: one after another, new: generateBatch). Training: forward + tokenLogprobs + backward of one sequence with loss weights on its completion.",
    "",
    "| preset | params | gen sizes (prompt+new) | gen old tok/s | gen new tok/s | gen × | batch gen (sequences) | " +
    "batch old tok/s | batch new tok/s | batch × | train seq (completion) | train old tok/s | train new tok/s | " +
    "train × | same tokens | max \\|Δ grad\\| |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...results.map((r) =>
      `| ${r.preset} | ${r.parameters.toLocaleString("en-US")} | ${r.sizes.prompt}+${r.sizes.generate} | ` +
      `${fmt(r.generation.oldTokensPerSecond)} | ${fmt(r.generation.newTokensPerSecond)} | ` +
      `${r.generation.speedup.toFixed(2)} | ${r.sizes.batch} | ${fmt(r.batchGeneration.oldTokensPerSecond)} | ` +
      `${fmt(r.batchGeneration.newTokensPerSecond)} | ${r.batchGeneration.speedup.toFixed(2)} | ` +
      `${r.sizes.seqLen} (${r.sizes.completion}) | ` +
      `${fmt(r.training.oldTokensPerSecond)} | ${fmt(r.training.newTokensPerSecond)} | ` +
      `${r.training.speedup.toFixed(2)} | ${r.sameResults.tokens ? "yes" : "no"} | ` +
      `${r.sameResults.maxGradDiff.toExponential(1)} |`
    ),
    ""
  ].join("\n")
  writeFileSync("bench/results/model-cpu-reference.md", md)
  console.log("saved bench/results/model-cpu-reference.{json,md}")
}
