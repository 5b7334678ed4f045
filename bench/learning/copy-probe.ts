// Can a model learn, by SFT, to copy a fact from its context? (issue 36: the tiny preset's Catch moves stay at chance.)
// A synthetic set, deterministic from the seed: the user says "The ball is N column(s) to the SIDE of the paddle."
// (N in {1, 2}, SIDE in {LEFT, RIGHT}); the assistant repeats that sentence and adds " Move: side.". Every template
// token is learnable without reading the context; the copy tokens (N, SIDE, the move) are not. Each setting runs
// `envtrain sft` (the real CLI, CPU backend) from the same init-model checkpoint, then the f64 reference scores the
// trained checkpoint teacher-forced on held-out rows: the mean p of each copy token (chance is 0.5) and of the rest.
//
// With --torch, PyTorch + transformers trains the same checkpoint on the same token ids and assistant mask
// (bench/learning/copy_probe_torch.py, the interop .venv) with the same AdamW settings, and is scored the same way.
//
// Usage: tsx bench/learning/copy-probe.ts [--lr=1e-2,1e-3] [--epochs=2] [--batch=4] [--rows=400] [--seed=1]
//          [--preset=tiny] [--extra=warmupSteps=10,weightDecay=0.01] [--torch] [--no-save]
// Results: bench/results/experiments/copy-probe.{md,json} (appended: one section per invocation).
import { NodeContext } from "@effect/platform-node"
import { Checkpoint, Qwen3Reference } from "@envtrain/gpu"
import { SftTrainer } from "@envtrain/grpo"
import * as TrainingTemplate from "@envtrain/rollout/TrainingTemplate"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"

const flag = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const lrs = flag("lr", "1e-2,1e-3").split(",")
const epochs = flag("epochs", "2")
const batch = flag("batch", "4")
const rowCount = Number(flag("rows", "400"))
const seed = Number(flag("seed", "1"))
const preset = flag("preset", "tiny")
const extra = flag("extra", "").split(",").filter((s) => s !== "")
const save = !process.argv.includes("--no-save")
const torch = process.argv.includes("--torch")
const HELD_OUT = 32

const SYSTEM = "Play Catch: a ball falls down a 10x5 grid; move the paddle under it. Tools: move(direction) with " +
  "left or right, and stay(). One tool call per turn."

// A small LCG so that the set is the same on every machine for a seed.
const rng = (s: number) => () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648
const transcripts = (n: number, s: number): Array<SftTrainer.Transcript> => {
  const next = rng(s)
  return Array.from({ length: n }, () => {
    const cols = next() < 0.5 ? 1 : 2
    const side = next() < 0.5 ? "LEFT" : "RIGHT"
    const fact = `The ball is ${cols} column(s) to the ${side} of the paddle.`
    return {
      messages: [
        { role: "system", content: SYSTEM },
        { role: "user", content: `Catch the ball.\n${fact}` },
        { role: "assistant", content: `${fact} Move: ${side.toLowerCase()}.` }
      ]
    }
  })
}

const envtrain = (args: ReadonlyArray<string>) =>
  execFileSync("npx", ["tsx", "packages/harness/src/bin.ts", ...args], { stdio: ["ignore", "pipe", "inherit"] })
    .toString()

/** Teacher-forced p of every assistant token of the held-out rows, averaged per assistant position. */
const score = (dir: string, rows: ReadonlyArray<SftTrainer.Transcript>) =>
  Effect.gen(function*() {
    const m = yield* Checkpoint.load(dir)
    const weights: Record<string, Float32Array> = {}
    for (const [k, t] of m.tensors) weights[k] = t.data as Float32Array
    const chatTemplate = yield* TrainingTemplate.resolve(m.chatTemplate, m.tokenizer)
    const V = m.config.vocab_size
    const perRow: Array<{ ids: Array<number>; p: Array<number> }> = []
    for (const row of rows) {
      const { ids, mask } = yield* SftTrainer.tokenize({ tokenizer: m.tokenizer, chatTemplate }, row, {
        enableThinking: false
      })
      const out = Qwen3Reference.forward(m.config, weights as never, { tokens: ids, batch: 1, seqLen: ids.length })
      const targets: Array<number> = []
      const p: Array<number> = []
      for (let t = 1; t < ids.length; t++) {
        if (mask[t] !== 1) continue
        const at = (t - 1) * V
        let max = -Infinity
        for (let v = 0; v < V; v++) max = Math.max(max, out.logits[at + v])
        let z = 0
        for (let v = 0; v < V; v++) z += Math.exp(out.logits[at + v] - max)
        targets.push(ids[t])
        p.push(Math.exp(out.logits[at + ids[t]] - max) / z)
      }
      perRow.push({ ids: targets, p })
    }
    // Copy tokens: the assistant positions whose token differs between rows (the rest is the template).
    const L = perRow[0].ids.length
    const copy = Array.from({ length: L }, (_, k) => k).filter((k) => new Set(perRow.map((r) => r.ids[k])).size > 1)
    const mean = (k: number) => perRow.reduce((s, r) => s + r.p[k], 0) / perRow.length
    const template = Array.from({ length: L }, (_, k) => k).filter((k) => !copy.includes(k))
    return {
      copy: copy.map((k) => ({ token: m.tokenizer.decode([perRow[0].ids[k]]), p: mean(k) })),
      template: template.reduce((s, k) => s + mean(k), 0) / template.length
    }
  })

const work = mkdtempSync(join(tmpdir(), "copy-probe-"))
const all = transcripts(rowCount + HELD_OUT, seed)
const data = join(work, "sft.jsonl")
writeFileSync(data, all.slice(0, rowCount).map((t) => JSON.stringify(t)).join("\n") + "\n")
const model = join(work, "model")
envtrain(["init-model", "--preset", preset, "--out", model, "--seed", String(seed)])
const load0 = loadavg()[0]

/** The training rows as envtrain tokenises them (ids and assistant mask), for the PyTorch side. */
const dumpRows = Effect.gen(function*() {
  const m = yield* Checkpoint.load(model)
  const chatTemplate = yield* TrainingTemplate.resolve(m.chatTemplate, m.tokenizer)
  const rows: Array<{ ids: ReadonlyArray<number>; mask: ReadonlyArray<number> }> = []
  for (const t of all) {
    const r = yield* SftTrainer.tokenize({ tokenizer: m.tokenizer, chatTemplate }, t, { enableThinking: false })
    rows.push({ ids: Array.from(r.ids), mask: Array.from(r.mask) })
  }
  const file = join(work, "rows.json")
  writeFileSync(file, JSON.stringify({ train: rows.slice(0, rowCount), heldOut: rows.slice(rowCount) }))
  return file
})
const rowsFile = torch ? await Effect.runPromise(dumpRows.pipe(Effect.provide(NodeContext.layer))) : ""

const results: Array<Record<string, unknown>> = []
for (const lr of lrs) {
  const out = join(work, `out-lr${lr}`)
  const config = join(work, `sft-lr${lr}.yaml`)
  writeFileSync(
    config,
    [
      `model: ${model}`,
      "backend: cpu",
      `sftData: ${data}`,
      "maxLength: 300",
      `outputDir: ${out}`,
      `learningRate: ${lr}`,
      `perDeviceTrainBatchSize: ${batch}`,
      `numTrainEpochs: ${epochs}`,
      `seed: ${seed}`
    ].join("\n") + "\n"
  )
  const started = Date.now()
  envtrain(["sft", config, ...extra])
  const seconds = (Date.now() - started) / 1000
  const metrics = readFileSync(join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
  const last = metrics[metrics.length - 1]
  const checkpoint = join(out, `checkpoint-${last.step}`)
  const s = await Effect.runPromise(score(checkpoint, all.slice(rowCount)).pipe(Effect.provide(NodeContext.layer)))
  const r = { lr, epochs, batch, extra, steps: last.step, finalLoss: last.loss, seconds, ...s }
  results.push(r)
  if (torch) {
    const py = execFileSync(".venv/bin/python", [
      "bench/learning/copy_probe_torch.py",
      `--model=${model}`,
      `--rows=${rowsFile}`,
      `--lr=${lr}`,
      `--steps=${last.step}`,
      `--batch=${batch}`,
      `--seed=${seed}`
    ], { stdio: ["ignore", "pipe", "inherit"] }).toString().trim().split("\n")
    const t = JSON.parse(py[py.length - 1])
    results.push({
      lr: `${lr} (torch)`,
      epochs,
      batch,
      extra: [],
      steps: last.step,
      finalLoss: t.loss,
      seconds: t.seconds,
      copy: t.copy,
      template: t.template
    })
    console.log(
      `torch lr ${lr}: copy p ${t.copy.map((c: any) => c.p.toFixed(3)).join(", ")}, template ${t.template.toFixed(3)}`
    )
  }
  console.log(
    `lr ${lr}: ${last.step} steps, loss ${last.loss.toFixed(4)}, copy p ${
      s.copy.map((c) => `${JSON.stringify(c.token)} ${c.p.toFixed(3)}`).join(", ")
    }, template p ${s.template.toFixed(3)} (${seconds.toFixed(0)} s)`
  )
}

if (save) {
  const dir = "bench/results/experiments"
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true })
  const when = new Date().toISOString()
  const lines = [
    "",
    `## ${when}: \`npx tsx bench/learning/copy-probe.ts ${process.argv.slice(2).join(" ")}\``,
    "",
    `Preset ${preset} (seed ${seed}), ${rowCount} training rows, ${HELD_OUT} held-out rows scored teacher-forced by ` +
    `the f64 reference; CPU backend; linear decay, no warmup, no weight decay, clip 1 unless extra says otherwise ` +
    `(extra: ${extra.join(" ") || "none"}). 1-minute load average ${load0.toFixed(2)} at the start, ` +
    `${loadavg()[0].toFixed(2)} at the end (2 cores shared: timings are noisy, the p values are not).`,
    "",
    "| lr | epochs | batch | steps | final loss | copy p (chance 0.5) | template p | seconds |",
    "|---|---:|---:|---:|---:|---|---:|---:|",
    ...results.map((r: any) =>
      `| ${r.lr} | ${r.epochs} | ${r.batch} | ${r.steps} | ${r.finalLoss.toFixed(4)} | ${
        r.copy.map((c: any) => `${JSON.stringify(c.token)} ${c.p.toFixed(3)}`).join(", ")
      } | ${r.template.toFixed(3)} | ${r.seconds.toFixed(0)} |`
    )
  ]
  appendFileSync(join(dir, "copy-probe.md"), lines.join("\n") + "\n")
  appendFileSync(join(dir, "copy-probe.jsonl"), JSON.stringify({ when, load: loadavg()[0], results }) + "\n")
}
