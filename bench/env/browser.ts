/**
 * BrowserGym on real Chromium: steps per second and memory per session at 1, 8 and 32 concurrent sessions.
 *
 * `nice -n 10 npx tsx bench/env/browser.ts [seconds=10]`: for each N a fresh browser; N OpenEnv sessions
 * (`browsergym_env`, one isolated context each) play the scripted solver on rotating tasks and seeds, all at once,
 * starting episodes for the given time and finishing the ones started. A step = one action string run by playwright plus the observation (DOM walk → accessibility
 * tree and pruned HTML). Memory = PSS summed over the Chromium process tree (`/proc/<pid>/smaps_rollup`) with all N
 * sessions open. Saves bench/results/browser-sessions.json and .md.
 */
import { Browser, BrowserGym } from "@envtrain/env"
import { Effect, Exit, Option, Scope } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"

const seconds = Number(process.argv[2] ?? 10)
const TASKS = ["click-test", "click-button", "click-link", "enter-text", "click-checkboxes", "login-user"]

interface Row {
  readonly sessions: number
  readonly steps: number
  readonly episodes: number
  readonly won: number
  readonly seconds: number
  readonly stepsPerSecond: number
  readonly resetsPerSecond: number
  readonly medianStepMs: number
  readonly pssTotalMiB: number
  readonly pssPerSessionMiB: number
  readonly processes: number
  readonly loadBefore: ReadonlyArray<number>
}

const median = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? 0 : s[Math.floor(s.length / 2)]
}

const measure = (n: number) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const browser = yield* Scope.extend(Browser.make({ stepTimeoutMs: 60_000, actionTimeoutMs: 20_000 }), scope)
    const definition = BrowserGym.openEnvFor({ browser })
    const loadBefore = loadavg().map((x) => Number(x.toFixed(2)))
    const instances = yield* Effect.forEach(
      Array.from({ length: n }, (_, i) => i),
      () => Scope.extend(definition.make, scope),
      { concurrency: 4 }
    )
    // Every session open on a page before memory is read.
    yield* Effect.forEach(instances, (inst, i) => inst.reset({ seed: i, task_name: TASKS[i % TASKS.length] }), {
      concurrency: 4
    })
    const memory = Option.getOrThrow(yield* browser.memory)
    const stepMs: Array<number> = []
    let steps = 0
    let episodes = 0
    let resets = 0
    let won = 0
    const deadline = Date.now() + seconds * 1000
    const t0 = Date.now()
    yield* Effect.forEach(instances, (inst, i) =>
      Effect.gen(function*() {
        let k = 0
        while (Date.now() < deadline) {
          const task = TASKS[(i + k) % TASKS.length]
          let last = yield* inst.reset({ seed: 1000 * i + k, task_name: task })
          k += 1
          resets += 1
          // An episode started before the deadline is played to its end, so every size makes progress.
          while (!last.done) {
            const action = BrowserGym.solveStep(task, {
              goal: last.observation.goal as string,
              axtree: last.observation.axtree_txt as string
            }) ?? "noop(0)"
            const s = Date.now()
            last = yield* inst.step({ action_str: action })
            stepMs.push(Date.now() - s)
            steps += 1
          }
          if (last.done) {
            episodes += 1
            if (last.reward === 1) won += 1
          }
        }
      }), { concurrency: "unbounded" })
    const elapsed = (Date.now() - t0) / 1000
    yield* Scope.close(scope, Exit.void)
    const row: Row = {
      sessions: n,
      steps,
      episodes,
      won,
      seconds: Number(elapsed.toFixed(2)),
      stepsPerSecond: Number((steps / elapsed).toFixed(2)),
      resetsPerSecond: Number((resets / elapsed).toFixed(2)),
      medianStepMs: median(stepMs),
      pssTotalMiB: Number((memory.pssKiB / 1024).toFixed(1)),
      pssPerSessionMiB: Number((memory.pssKiB / 1024 / n).toFixed(1)),
      processes: memory.processes,
      loadBefore
    }
    console.log(JSON.stringify(row))
    return row
  })

const main = Effect.gen(function*() {
  const rows: Array<Row> = []
  for (const n of [1, 8, 32]) rows.push(yield* measure(n))
  const result = {
    date: new Date().toISOString(),
    cpus: cpus().length,
    secondsPerSize: seconds,
    loadavgAfter: loadavg().map((x) => Number(x.toFixed(2))),
    rows
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/browser-sessions.json", JSON.stringify(result, null, 2) + "\n")
  const base = rows[0]
  const md = [
    "# BrowserGym on Chromium: steps per second and memory per session",
    "",
    `\`nice -n 10 npx tsx bench/env/browser.ts ${seconds}\` on ${result.cpus} CPUs shared with other jobs (load average ` +
    `before each size in the table; after the run ${result.loadavgAfter.join(", ")}). Debian's Chromium through ` +
    "playwright-core, headless; N sessions = N isolated contexts in one browser, all stepping at once for " +
    `${seconds} s (episodes started by then are finished) with the scripted solver on ${
      TASKS.join(", ")
    }. A step is one action string plus the observation ` +
    "(DOM walk: accessibility tree and pruned HTML). Memory: PSS summed over the browser's process tree with all N " +
    "sessions open on a task page. Steps/s and resets/s are over the wall time of the whole size.",
    "",
    "| sessions | steps | episodes (won) | steps/s | resets/s | median step (ms) | PSS total (MiB) | PSS / session (MiB) | marginal PSS / extra session (MiB) | processes | load before |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.sessions} | ${r.steps} | ${r.episodes} (${r.won}) | ${r.stepsPerSecond} | ${r.resetsPerSecond} | ${r.medianStepMs} | ${r.pssTotalMiB} | ` +
      `${r.pssPerSessionMiB} | ${
        r.sessions === 1 ? "—" : ((r.pssTotalMiB - base.pssTotalMiB) / (r.sessions - 1)).toFixed(1)
      } | ${r.processes} | ${r.loadBefore.join(", ")} |`
    ),
    ""
  ].join("\n")
  writeFileSync("bench/results/browser-sessions.md", md)
  console.log(md)
})

Effect.runPromise(main).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
