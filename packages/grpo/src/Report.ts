/**
 * The training report: one self-contained HTML file (inline CSS, inline SVG charts, a few lines of inline JS; no
 * network) with curves for reward, per-function reward, the fraction of groups with zero reward variance, loss, KL,
 * completion length, tool-failure frequency and the evaluation metrics, the flat steps (`Advantage.flatSteps`: no
 * advantage signal, nothing learnt), the before/after evaluation table and sample completions. The trainer rewrites it at every
 * logging step and evaluation, so it can be reloaded in a browser while training runs.
 *
 * @example
 * ```ts
 * import { Report } from "@envtrain/grpo"
 * const html = Report.render({ title: "catch", metrics, evaluations, completions })
 * yield* Report.write("out", { title: "catch" }) // reads out/metrics.jsonl, eval.jsonl, completions.jsonl
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Effect } from "effect"
import * as Advantage from "./Advantage.js"
import type { EnvironmentRow, EvaluationResult } from "./Evaluation.js"
import { escapeHtml, lineChart, type Series } from "./internal/svg.js"
import * as Metrics from "./Metrics.js"

/**
 * What the report shows.
 *
 * @since 0.0.0
 */
export interface ReportInput {
  readonly title: string
  readonly metrics: ReadonlyArray<Metrics.MetricsRecord>
  readonly evaluations?: ReadonlyArray<EvaluationResult>
  readonly completions?: ReadonlyArray<Metrics.CompletionSample>
  /** Configuration summary shown at the top (key → value). */
  readonly config?: Readonly<Record<string, unknown>>
  /** Free text under the title (e.g. "training", "finished", "interrupted at step 12"). */
  readonly status?: string
  /** How many sample completions to show (the latest first); default 24. */
  readonly maxCompletions?: number
}

const seriesOf = (records: ReadonlyArray<Metrics.MetricsRecord>, key: string, name = key): Series => ({
  name,
  points: records.flatMap((r) => {
    const v = r[key]
    return typeof v === "number" && Number.isFinite(v) ? [[r.step, v] as const] : []
  })
})

const keysMatching = (records: ReadonlyArray<Metrics.MetricsRecord>, re: RegExp): Array<string> => {
  const keys = new Set<string>()
  for (const r of records) for (const k of Object.keys(r)) if (re.test(k)) keys.add(k)
  return [...keys].sort()
}

const css = `
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#111;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.status{color:#555;margin-bottom:12px}.charts{display:flex;flex-wrap:wrap;gap:12px}
.chart{background:#fff;border:1px solid #ddd;border-radius:6px}
.chart-title{font-size:13px;font-weight:600;fill:#222}.tick{font-size:10px;fill:#555}
.grid{stroke:#eee}.axis{stroke:#999}.empty{font-size:12px;fill:#999}
.legend{cursor:pointer}.legend.off{opacity:.35}.series.off{display:none}
table{border-collapse:collapse;background:#fff;margin:6px 0}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f0f0f0}td.text{text-align:left;font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;
max-width:640px;overflow-wrap:anywhere}td.left,th.left{text-align:left}
details{margin:4px 0}code{font-size:12px}
`

// Legend clicks toggle a series; `data-rendered` tells a headless check that the script ran without throwing.
const script = `
document.querySelectorAll(".legend").forEach(function (g) {
  g.addEventListener("click", function () {
    var svg = g.closest("svg"), name = g.getAttribute("data-series")
    g.classList.toggle("off")
    svg.querySelectorAll(".series").forEach(function (s) {
      if (s.getAttribute("data-series") === name) s.classList.toggle("off")
    })
  })
})
document.body.setAttribute("data-rendered", String(document.querySelectorAll("svg.chart").length))
`

const cell = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined || !Number.isFinite(v) ? "–" : Number.isInteger(v) ? String(v) : v.toFixed(digits)

const envColumns: ReadonlyArray<readonly [keyof EnvironmentRow, string]> = [
  ["episodes", "episodes"],
  ["successRate", "success rate"],
  ["meanReward", "mean reward"],
  ["meanLength", "mean length"],
  ["toolCallsPerEpisode", "tool calls / episode"],
  ["toolFailureFrequency", "tool failure freq."],
  ["unscoreable", "unscoreable"]
]

/**
 * The evaluation table: each environment's metrics at the first evaluation and at the last (before/after).
 *
 * @since 0.0.0
 */
export const evaluationTable = (evaluations: ReadonlyArray<EvaluationResult>): string => {
  if (evaluations.length === 0) return `<p class="empty">No evaluation yet.</p>`
  const first = evaluations[0]
  const last = evaluations[evaluations.length - 1]
  const envs = [...new Set([...first.rows, ...last.rows].map((r) => r.environment))]
  const head = `<tr><th class="left">environment</th>${
    envColumns.map(([, label]) =>
      first === last
        ? `<th>${escapeHtml(label)}</th>`
        : `<th>${escapeHtml(label)}<br>step ${first.step}</th><th>${escapeHtml(label)}<br>step ${last.step}</th>`
    ).join("")
  }</tr>`
  const rowFor = (env: string, a: EnvironmentRow | undefined, b: EnvironmentRow | undefined) =>
    `<tr><td class="left">${escapeHtml(env)}</td>${
      envColumns.map(([key]) =>
        first === last
          ? `<td>${cell(a?.[key] as number | null | undefined)}</td>`
          : `<td>${cell(a?.[key] as number | null | undefined)}</td><td>${
            cell(b?.[key] as number | null | undefined)
          }</td>`
      ).join("")
    }</tr>`
  const rows = envs.map((env) =>
    rowFor(env, first.rows.find((r) => r.environment === env), last.rows.find((r) => r.environment === env))
  )
  if (envs.length > 1) rows.push(rowFor("all", first.overall, last.overall))
  return `<table class="eval">${head}${rows.join("")}</table>`
}

const completionsTable = (samples: ReadonlyArray<Metrics.CompletionSample>, max: number): string => {
  if (samples.length === 0) return `<p class="empty">No sample completions (set logCompletions: true).</p>`
  const shown = samples.slice(-max).reverse()
  const rewardNames = [...new Set(shown.flatMap((s) => Object.keys(s.rewards)))]
  const head = `<tr><th>step</th><th class="left">prompt</th><th class="left">completion</th>${
    rewardNames.map((n) => `<th>${escapeHtml(n)}</th>`).join("")
  }<th>advantage</th></tr>`
  const rows = shown.map((s) =>
    `<tr><td>${s.step}</td><td class="text">${escapeHtml(s.prompt.slice(-400))}</td><td class="text">${
      escapeHtml(s.completion.slice(0, 2000))
    }</td>${rewardNames.map((n) => `<td>${cell(s.rewards[n] ?? null)}</td>`).join("")}<td>${
      cell(s.advantage)
    }</td></tr>`
  )
  return `<table class="completions">${head}${rows.join("")}</table>`
}

/**
 * Ascending step numbers as ranges: `[1, 3, 4, 5, 8]` → `1, 3–5, 8`.
 *
 * @since 0.0.0
 */
export const formatSteps = (steps: ReadonlyArray<number>): string => {
  const parts: Array<string> = []
  for (let i = 0; i < steps.length; i++) {
    let j = i
    while (j + 1 < steps.length && steps[j + 1] === steps[j] + 1) j++
    parts.push(j === i ? String(steps[i]) : `${steps[i]}–${steps[j]}`)
    i = j
  }
  return parts.join(", ")
}

/**
 * The flat-steps line: how many logged steps had no advantage signal, and which.
 *
 * @since 0.0.0
 */
export const flatStepsSummary = (metrics: ReadonlyArray<Metrics.MetricsRecord>): string => {
  const { flat, steps, unscoreable } = Advantage.flatSteps(metrics)
  const which = flat.length === 0 ? "" : `: step${flat.length === 1 ? "" : "s"} ${formatSteps(flat)}`
  const none = unscoreable.length === 0 ? "" : ` (no scoreable group at ${formatSteps(unscoreable)})`
  return `<p class="flat">Flat steps (every advantage was 0: each group had zero reward variance or too few ` +
    `scoreable episodes to have one; nothing learnt): ` +
    `${flat.length} of ${steps}${which}${none}.</p>`
}

/**
 * The report's HTML.
 *
 * @since 0.0.0
 */
export const render = (input: ReportInput): string => {
  const m = input.metrics
  const rewardFunctions = keysMatching(m, /^rewards\/.+\/mean$/)
  const clip = keysMatching(m, /^clip_ratio\/.+_mean$/)
  const evals = input.evaluations ?? []
  const evalKeys = [...new Set(evals.flatMap((e) => Object.keys(e.metrics)))].filter((k) =>
    /success_rate|mean_reward/.test(k)
  ).sort()
  const charts = [
    lineChart("reward", "reward", [seriesOf(m, "reward"), seriesOf(m, "reward_std")]),
    lineChart(
      "rewards-per-function",
      "reward per function",
      rewardFunctions.map((k) => seriesOf(m, k, k.slice("rewards/".length, -"/mean".length)))
    ),
    lineChart("zero-std", "groups with zero reward variance (frac_reward_zero_std)", [
      seriesOf(m, "frac_reward_zero_std")
    ]),
    lineChart("loss", "loss", [seriesOf(m, "loss")]),
    lineChart("kl", "KL to the reference", [seriesOf(m, "kl")]),
    lineChart("completion-length", "completion length (model tokens)", [
      seriesOf(m, "completions/mean_length", "mean"),
      seriesOf(m, "completions/max_length", "max"),
      seriesOf(m, "completions/mean_terminated_length", "mean terminated")
    ]),
    lineChart("tool-failures", "tool calls and failures", [
      seriesOf(m, "tools/failure_frequency", "failure frequency"),
      seriesOf(m, "tools/call_frequency", "calls per episode")
    ]),
    lineChart(
      "eval",
      "evaluation",
      evalKeys.map((k) => ({
        name: k,
        points: evals.flatMap((e) => {
          const v = e.metrics[k]
          return typeof v === "number" && Number.isFinite(v) ? [[e.step, v] as const] : []
        })
      }))
    ),
    lineChart("learning-rate", "learning rate", [seriesOf(m, "learning_rate")]),
    lineChart("grad-norm", "gradient norm", [seriesOf(m, "grad_norm")]),
    lineChart("entropy", "entropy", [seriesOf(m, "entropy")]),
    lineChart("clip-ratio", "clip ratios", clip.map((k) => seriesOf(m, k, k.slice("clip_ratio/".length)))),
    lineChart("throughput", "tokens per second", [seriesOf(m, "tokens_per_second")]),
    // Async GRPO runs only (a sync run's report is unchanged).
    ...(keysMatching(m, /^async\//).length === 0 ? [] : [
      lineChart("async", "async: staleness (policy versions), drops and overlap", [
        seriesOf(m, "async/staleness/mean", "mean staleness"),
        seriesOf(m, "async/staleness/max", "max staleness"),
        seriesOf(m, "async/dropped_samples", "dropped samples"),
        seriesOf(m, "async/overlap", "generation/training overlap")
      ])
    ])
  ]
  const last = m[m.length - 1]
  const summary = last === undefined
    ? ""
    : `<p>Last logged step ${last.step}: reward ${cell(last.reward)}, loss ${cell(last.loss, 4)}, ${
      cell(last.tokens_per_second, 1)
    } tokens/s.</p>${flatStepsSummary(m)}`
  const config = input.config === undefined ?
    "" :
    `<details><summary>configuration</summary><table>${
      Object.entries(input.config).map(([k, v]) =>
        `<tr><th class="left">${escapeHtml(k)}</th><td class="text">${escapeHtml(JSON.stringify(v) ?? "")}</td></tr>`
      ).join("")
    }</table></details>`
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(input.title)} — envtrain report</title><style>${css}</style></head>
<body data-rendered="0">
<h1>${escapeHtml(input.title)}</h1>
<div class="status">${escapeHtml(input.status ?? "")} · generated ${escapeHtml(new Date().toISOString())}</div>
${summary}${config}
<h2>Curves</h2><div class="charts">${charts.join("\n")}</div>
<h2>Evaluation (before / after)</h2>${evaluationTable(evals)}
<h2>Sample completions</h2>${completionsTable(input.completions ?? [], input.maxCompletions ?? 24)}
<script>${script}</script>
</body></html>
`
}

/**
 * Reads the output directory's metrics, evaluations and completions and writes `report.html` next to them
 * (atomically: a browser reloading mid-write never sees half a file). Returns the report's path.
 *
 * @since 0.0.0
 */
export const write = Effect.fn("Report.write")(function*(
  outputDir: string,
  options: Omit<ReportInput, "metrics" | "evaluations" | "completions">
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(outputDir, Metrics.files.metrics))
  const evaluations = yield* Metrics.read<EvaluationResult>(path.join(outputDir, Metrics.files.evaluations))
  const completions = yield* Metrics.read<Metrics.CompletionSample>(path.join(outputDir, Metrics.files.completions))
  const html = render({ ...options, metrics, evaluations, completions })
  const target = path.join(outputDir, Metrics.files.report)
  const tmp = `${target}.tmp`
  yield* fs.writeFileString(tmp, html).pipe(
    Effect.zipRight(fs.rename(tmp, target)),
    Effect.mapError((e) => new Metrics.MetricsFileError({ path: target, problem: `cannot write (${e.message})` }))
  )
  return target
})
