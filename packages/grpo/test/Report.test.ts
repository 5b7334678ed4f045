import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { EnvironmentRow, EvaluationResult } from "../src/Evaluation.js"
import * as BrowserCheck from "../src/internal/browserCheck.js"
import * as Metrics from "../src/Metrics.js"
import * as Report from "../src/Report.js"

const row = (environment: string, successRate: number): EnvironmentRow => ({
  environment,
  episodes: 4,
  successRate,
  meanReward: successRate,
  rewardStd: 0.1,
  meanLength: 12,
  toolCallsPerEpisode: 2,
  toolFailureFrequency: 0.25,
  unscoreable: 0
})

const evaluation = (step: number, rate: number): EvaluationResult => ({
  step,
  label: `step ${step}`,
  rows: [row("catch", rate), row("wordle", rate / 2)],
  overall: row("all", rate * 0.75),
  metrics: { "eval/success_rate": rate * 0.75, "eval/mean_reward": rate },
  seconds: 1
})

const metrics: Array<Metrics.MetricsRecord> = [1, 2, 3].map((step) => ({
  step,
  epoch: 0,
  reward: step / 10,
  reward_std: 0.1,
  "rewards/catch/mean": step / 5,
  "rewards/wordle/mean": null,
  loss: 0.01 * step,
  "completions/mean_length": 10 + step,
  "tools/failure_frequency": 0.5 / step
}))

describe("Report", () => {
  it("renders every chart, the before/after table and escaped completions", () => {
    const html = Report.render({
      title: "catch <run>",
      metrics,
      evaluations: [evaluation(0, 0.2), evaluation(3, 0.8)],
      completions: [{
        step: 3,
        prompt: "<script>alert(1)</script>",
        completion: "ok",
        rewards: { catch: 1 },
        advantage: 1
      }]
    })
    for (const id of ["reward", "rewards-per-function", "loss", "kl", "completion-length", "tool-failures", "eval"]) {
      assert.include(html, `data-metric="${id}"`)
    }
    assert.include(html, "catch &lt;run&gt;")
    assert.include(html, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assert.notInclude(html, "<script>alert(1)")
    // Curves are drawn from the data: the per-function chart has the catch series and no wordle line (all null).
    assert.include(html, `data-series="catch"`)
    assert.include(html, "no data yet") // kl was never logged
    // Before/after columns for both steps, per environment and overall.
    assert.include(html, "step 0</th>")
    assert.include(html, "step 3</th>")
    assert.include(html, "<td>0.200</td><td>0.800</td>")
    assert.include(html, `<td class="left">all</td>`)
    assert.notInclude(html, "http://cdn")
    assert.notInclude(html, "<link")
  })

  it("says when there is nothing yet", () => {
    const html = Report.render({ title: "empty", metrics: [] })
    assert.include(html, "No evaluation yet.")
    assert.include(html, "no data yet")
  })

  it.scoped("writes report.html from the output directory's files", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* Metrics.append(path.join(dir, Metrics.files.metrics), metrics)
      yield* Metrics.append(path.join(dir, Metrics.files.evaluations), [evaluation(0, 0.1)])
      const target = yield* Report.write(dir, { title: "t" })
      const html = yield* fs.readFileString(target)
      assert.include(html, "Last logged step 3")
      assert.include(html, "<td>0.100</td>")
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Report: flat steps", () => {
  const record = (step: number, frac: number | null): Metrics.MetricsRecord => ({
    step,
    epoch: 0,
    reward: 0.5,
    frac_reward_zero_std: frac
  })

  it("counts and lists the flat steps, a step with no scoreable group among them, and charts the metric", () => {
    const html = Report.render({
      title: "flat",
      metrics: [record(1, 1), record(2, 0.5), record(3, 1), record(4, 1), record(5, null), record(6, 0), record(7, 1)]
    })
    assert.include(html, "nothing learnt): 5 of 7: steps 1, 3–5, 7 (no scoreable group at 5).")
    assert.include(html, `data-metric="zero-std"`)
    assert.include(html, `data-series="frac_reward_zero_std"`)
    assert.include(Report.render({ title: "t", metrics: [record(1, 0.25)] }), "nothing learnt): 0 of 1.</p>")
  })

  it.scoped("counts a resumed run once, from metrics.jsonl", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const file = path.join(dir, Metrics.files.metrics)
      // The first run logged steps 1..4 (1 and 4 flat) and was interrupted; its checkpoint is at step 3.
      yield* Metrics.append(file, [record(1, 1), record(2, 0.5), record(3, 0.25), record(4, 1)])
      // The resumed run drops what follows the checkpoint (as the trainer does) and logs steps 4..6 again.
      yield* Metrics.truncateAfter(file, 3)
      yield* Metrics.append(file, [record(4, 0.5), record(5, 1), record(6, 1)])
      const html = yield* fs.readFileString(yield* Report.write(dir, { title: "resumed" }))
      assert.include(html, "nothing learnt): 3 of 6: steps 1, 5–6.")
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Report in a headless browser", () => {
  it.scoped(
    "renders in Chromium: the script runs, every chart is in the DOM, the screenshot is not blank (the set-up installs Debian's chromium)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* Metrics.append(path.join(dir, Metrics.files.metrics), metrics)
        yield* Metrics.append(path.join(dir, Metrics.files.evaluations), [evaluation(0, 0.2), evaluation(3, 0.8)])
        const target = yield* Report.write(dir, { title: "browser check" })
        const result = yield* BrowserCheck.check(target, path.join(dir, "shot.png"))
        assert.isAtLeast(result.renderedCharts, 7)
        assert.isAbove(result.screenshot.nonBackground, 1000)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
