// Summarises finished runs of examples/src/harness.ts (bench/results/learning-harness.md's numbers): per run,
// greedy success before and after GRPO (training tasks, held-out), which training tasks changed, the sampled
// rollout reward of each generation batch and how many of its groups were flat (every rollout of the task scored
// the same, so zero advantage: nothing learnt from that group), and the stage times. For a run with
// `--sft-mistakes`, also which solution each sampled training episode replayed: the right one, the wrong one (both as
// its sft.jsonl holds them), or neither (a slip, or a mix). Runs nothing.
//
// Usage: tsx bench/harness/learning-summary.ts [--save] RUN_DIR... (each an example run's --out). --save also puts
// each run in bench/results/learning-harness.json's `runs` (label: the directory's name; replaced when saved again).
import * as Fs from "node:fs"
import * as Path from "node:path"

interface Report {
  readonly episodes: number
  readonly successes: number
  readonly tasks: ReadonlyArray<{ readonly task: string; readonly successes: number }>
}
interface Evaluation {
  readonly heldOut: Report
  readonly train: Report
  /** Sampled at the GRPO temperature (`--eval-samples`); absent in older runs. */
  readonly sampled?: { readonly heldOut: Report; readonly train: Report } | null
}
interface EvalJson {
  readonly settings: {
    readonly numGenerations: number
    readonly prompts: number
    readonly gradAccum?: number
  }
  readonly before: Evaluation
  readonly after: Evaluation
  readonly seconds: { readonly sft: number; readonly grpo: number; readonly total: number }
  readonly globalStep: number
}
interface MetricsLine {
  readonly step: number
  readonly reward?: number
  readonly frac_reward_zero_std?: number
  readonly grad_norm?: number
  readonly entropy?: number
  readonly loss?: number
}

const resultsFile = new URL("../results/learning-harness.json", import.meta.url).pathname
const save = process.argv.includes("--save")
const saved: Array<Record<string, unknown>> = []

const lines = <A>(file: string): Array<A> =>
  Fs.existsSync(file)
    ? Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as A)
    : []

/** The bash commands of a transcript's tool calls, in order (an argument that is not JSON counts as itself). */
const commandsOf = (messages: ReadonlyArray<{ readonly tool_calls?: ReadonlyArray<unknown> }>) =>
  messages.flatMap((m) =>
    (m.tool_calls ?? []).map((call) => {
      const args = (call as { function?: { arguments?: unknown } }).function?.arguments
      if (typeof args !== "string") return JSON.stringify(args)
      try {
        const command = (JSON.parse(args) as { command?: unknown }).command
        return typeof command === "string" ? command : args
      } catch {
        return args
      }
    })
  )

type Replayed = { right: number; wrong: number; neither: number }

/**
 * Per training task, how many sampled episodes (traces/<label>/sampled-train) ran exactly the right solution's
 * commands, exactly the wrong one's, or neither; null when the run's SFT had no wrong solutions.
 */
const replayed = (dir: string, label: string): Record<string, Replayed> | null => {
  const sft = lines<{ task?: string; solution?: string; messages: Array<{ tool_calls?: Array<unknown> }> }>(
    Path.join(dir, "sft.jsonl")
  )
  const solutions = new Map<string, { right?: string; wrong?: string }>()
  for (const t of sft) {
    if (t.task === undefined || (t.solution !== "right" && t.solution !== "wrong")) continue
    solutions.set(t.task, { ...solutions.get(t.task), [t.solution]: JSON.stringify(commandsOf(t.messages)) })
  }
  if (![...solutions.values()].some((s) => s.wrong !== undefined)) return null
  const traces = Path.join(dir, "traces", label, "sampled-train")
  if (!Fs.existsSync(traces)) return null
  const counts: Record<string, Replayed> = {}
  for (const file of Fs.readdirSync(traces).sort()) {
    const trace = JSON.parse(Fs.readFileSync(Path.join(traces, file), "utf8")) as {
      task: string
      completion: Array<{ tool_calls?: Array<unknown> }>
    }
    const ran = JSON.stringify(commandsOf(trace.completion))
    const known = solutions.get(trace.task)
    const c = counts[trace.task] ??= { right: 0, wrong: 0, neither: 0 }
    if (ran === known?.right) c.right++
    else if (ran === known?.wrong) c.wrong++
    else c.neither++
  }
  return counts
}

const changed = (before: Report, after: Report) => {
  const was = new Map(before.tasks.map((t) => [t.task, t.successes]))
  const gained = after.tasks.filter((t) => t.successes > (was.get(t.task) ?? 0)).map((t) => t.task)
  const lost = after.tasks.filter((t) => t.successes < (was.get(t.task) ?? 0)).map((t) => t.task)
  return [...gained.map((t) => `+${t}`), ...lost.map((t) => `-${t}`)].join(" ") || "none"
}

for (const dir of process.argv.slice(2).filter((a) => a !== "--save")) {
  const e = JSON.parse(Fs.readFileSync(Path.join(dir, "eval.json"), "utf8")) as EvalJson
  // With --grad-accum 1 a generation batch logs its reward on its first optimizer step, and later steps of the
  // batch (its other micro-batches) log none. With more, a step may train on two batches and logs their average.
  const batches = lines<MetricsLine>(Path.join(dir, "metrics.jsonl")).filter((m) => m.reward !== undefined)
  const groups = e.settings.prompts
  const exact = (e.settings.gradAccum ?? 1) === 1
  const flat = batches.map((m) => m.frac_reward_zero_std ?? 0)
  const flatTotal = flat.reduce((a, b) => a + b * groups, 0)
  const frac = (r: Report) => `${r.successes}/${r.episodes}`
  console.log(`## ${dir}`)
  console.log(
    `training tasks ${frac(e.before.train)} -> ${frac(e.after.train)} (${changed(e.before.train, e.after.train)}); ` +
      `held-out ${frac(e.before.heldOut)} -> ${frac(e.after.heldOut)}`
  )
  const sb = e.before.sampled
  const sa = e.after.sampled
  if (sb != null && sa != null) {
    console.log(
      `sampled: training tasks ${frac(sb.train)} -> ${frac(sa.train)}; held-out ${frac(sb.heldOut)} -> ${
        frac(sa.heldOut)
      }`
    )
  }
  const replays = { before: replayed(dir, "before"), after: replayed(dir, "after") }
  if (replays.before !== null && replays.after !== null) {
    const total = (r: Record<string, Replayed>) =>
      Object.values(r).reduce(
        (a, c) => ({ right: a.right + c.right, wrong: a.wrong + c.wrong, neither: a.neither + c.neither }),
        {
          right: 0,
          wrong: 0,
          neither: 0
        }
      )
    const show = (c: Replayed | undefined) => c === undefined ? "-" : `${c.right}/${c.wrong}/${c.neither}`
    console.log(
      `sampled episodes replaying the right / the wrong solution / neither: ${show(total(replays.before))} -> ${
        show(total(replays.after))
      }; per task: ${
        Object.keys(replays.before).map((t) => `${t} ${show(replays.before?.[t])} -> ${show(replays.after?.[t])}`)
          .join(", ")
      }`
    )
  }
  console.log(
    `sampled reward per generation batch (or step): ${batches.map((m) => (m.reward ?? 0).toFixed(3)).join(", ")}`
  )
  console.log(
    exact
      ? `flat groups per batch (of ${groups}): ${flat.map((f) => Math.round(f * groups)).join(", ")} = ${
        Math.round(flatTotal)
      } of ${batches.length * groups}`
      : `flat-group share per step (a step may hold two batches): ${flat.map((f) => f.toFixed(2)).join(", ")}; mean ${
        (flat.reduce((a, b) => a + b, 0) / Math.max(1, flat.length)).toFixed(2)
      }`
  )
  console.log(
    `time: sft ${e.seconds.sft.toFixed(0)} s, grpo ${e.seconds.grpo.toFixed(0)} s, total ${
      (e.seconds.total / 60).toFixed(1)
    } min`
  )
  const count = (r: Report) => ({ successes: r.successes, episodes: r.episodes })
  const perTask = (r: Report) => Object.fromEntries(r.tasks.map((t) => [t.task, t.successes]))
  saved.push({
    label: Path.basename(dir),
    settings: e.settings,
    greedy: {
      train: { before: count(e.before.train), after: count(e.after.train) },
      heldOut: { before: count(e.before.heldOut), after: count(e.after.heldOut) },
      trainPerTask: { before: perTask(e.before.train), after: perTask(e.after.train) }
    },
    sampled: sb == null || sa == null ? null : {
      train: { before: count(sb.train), after: count(sa.train) },
      heldOut: { before: count(sb.heldOut), after: count(sa.heldOut) },
      trainPerTask: { before: perTask(sb.train), after: perTask(sa.train) },
      ...(replays.before === null ? {} : { replayed: replays })
    },
    grpo: {
      steps: e.globalStep,
      metrics: lines<MetricsLine>(Path.join(dir, "metrics.jsonl")).map((m) => ({
        step: m.step,
        reward: m.reward ?? null,
        frac_reward_zero_std: m.frac_reward_zero_std ?? null,
        entropy: m.entropy ?? null,
        loss: m.loss ?? null,
        grad_norm: m.grad_norm ?? null
      }))
    },
    seconds: e.seconds
  })
}

if (save) {
  const results = JSON.parse(Fs.readFileSync(resultsFile, "utf8")) as { runs: Array<{ label: string }> }
  for (const entry of saved) {
    const i = results.runs.findIndex((r) => r.label === entry["label"])
    if (i < 0) results.runs.push(entry as { label: string })
    else results.runs[i] = entry as { label: string }
  }
  Fs.writeFileSync(resultsFile, JSON.stringify(results, null, 1) + "\n")
  console.log(`saved ${saved.length} run(s) in ${resultsFile}`)
}
