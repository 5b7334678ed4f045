// Learning evidence for the harness example on generated tasks (TaskFamily instances), over several seeds: per seed,
// held-out success (new instances of the training families, and the family never trained on) and training-task
// success before GRPO (the SFT start) and after, then the median, worst and best of each. Each seed is one run of
// `examples/src/harness.ts --agent bash --seed N` in its own process (`--jobs` at a time); extra flags after `--`
// go to the example. Saves bench/results/learning-harness-generated.{json,md} (the md: the tables and the command).
//
// Usage: tsx bench/harness/learning-generated.ts [--seeds 0,1,2,3,4] [--jobs 1] [--runs runs/harness-generated]
//          [--from-runs] [-- EXAMPLE FLAGS]
// `--from-runs` runs nothing: it summarises <runs>/seed<N>/eval.json of finished runs.
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const root = new URL("../../", import.meta.url).pathname
const argv = process.argv.slice(2)
const dash = argv.indexOf("--")
const own = dash < 0 ? argv : argv.slice(0, dash)
const passed = dash < 0 ? [] : argv.slice(dash + 1)
const flag = (name: string, fallback: string) => {
  const i = own.indexOf(name)
  return i < 0 ? fallback : own[i + 1]
}
const seeds = flag("--seeds", "0,1,2,3,4").split(",").map(Number)
const jobs = Number(flag("--jobs", "1"))
const runs = Path.resolve(root, flag("--runs", "runs/harness-generated"))
const fromRuns = own.includes("--from-runs")

interface Report {
  readonly episodes: number
  readonly successes: number
}
interface EvalJson {
  readonly settings: Record<string, unknown>
  readonly before: { heldOut: Report; train: Report; novelFamilies: Report | null }
  readonly after: { heldOut: Report; train: Report; novelFamilies: Report | null }
  readonly seconds: { sft: number; grpo: number; total: number }
}

const runSeed = (seed: number) =>
  new Promise<void>((resolve, reject) => {
    const out = Path.join(runs, `seed${seed}`)
    const log = Fs.openSync(`${out}.log`, "w")
    const child = spawn(
      Path.join(root, "node_modules/.bin/tsx"),
      ["examples/src/harness.ts", "--agent", "bash", "--seed", String(seed), "--out", out, ...passed],
      { cwd: root, stdio: ["ignore", log, log] }
    )
    child.on(
      "exit",
      (code) => (code === 0 ? resolve() : reject(new Error(`seed ${seed}: exit ${code}, see ${out}.log`)))
    )
  })

const main = async () => {
  Fs.mkdirSync(runs, { recursive: true })
  if (!fromRuns) {
    const queue = [...seeds]
    await Promise.all(Array.from({ length: jobs }, async () => {
      for (let s = queue.shift(); s !== undefined; s = queue.shift()) await runSeed(s)
    }))
  }
  const rows = seeds.map((seed) => ({
    seed,
    ...(JSON.parse(Fs.readFileSync(Path.join(runs, `seed${seed}`, "eval.json"), "utf8")) as EvalJson)
  }))
  const rate = (r: Report | null) => (r === null || r.episodes === 0 ? null : r.successes / r.episodes)
  const stats = (xs: ReadonlyArray<number | null>) => {
    const v = xs.filter((x): x is number => x !== null).sort((a, b) => a - b)
    if (v.length === 0) return null
    const m = v.length % 2 === 1 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2
    return { median: m, worst: v[0], best: v[v.length - 1] }
  }
  const parts = [
    ["held-out instances", (e: EvalJson["before"]) => e.heldOut],
    ["held-out family", (e: EvalJson["before"]) => e.novelFamilies],
    ["training instances", (e: EvalJson["before"]) => e.train]
  ] as const
  const summary = Object.fromEntries(parts.map(([label, get]) => [label, {
    before: stats(rows.map((r) => rate(get(r.before)))),
    after: stats(rows.map((r) => rate(get(r.after)))),
    gain: stats(rows.map((r) => {
      const b = rate(get(r.before))
      const a = rate(get(r.after))
      return a === null || b === null ? null : a - b
    }))
  }]))
  const frac = (r: Report | null) => (r === null ? "-" : `${r.successes}/${r.episodes}`)
  const pct = (x: number | null | undefined) => (x === null || x === undefined ? "-" : `${(x * 100).toFixed(1)} %`)
  const md = [
    `| seed | held-out instances before → after | held-out family before → after | training instances before → after | SFT s | GRPO s | total min |`,
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((r) =>
      `| ${r.seed} | ${frac(r.before.heldOut)} → ${frac(r.after.heldOut)} | ${frac(r.before.novelFamilies)} → ${
        frac(r.after.novelFamilies)
      } | ${frac(r.before.train)} → ${frac(r.after.train)} | ${r.seconds.sft.toFixed(0)} | ${
        r.seconds.grpo.toFixed(0)
      } | ${(r.seconds.total / 60).toFixed(1)} |`
    ),
    "",
    "| success (greedy) | before GRPO: median (worst, best) | after GRPO: median (worst, best) | gain: median (worst) |",
    "| --- | ---: | ---: | ---: |",
    ...parts.map(([label]) => {
      const s = summary[label]
      return `| ${label} | ${pct(s.before?.median)} (${pct(s.before?.worst)}, ${pct(s.before?.best)}) | ${
        pct(s.after?.median)
      } (${pct(s.after?.worst)}, ${pct(s.after?.best)}) | ${pct(s.gain?.median)} (${pct(s.gain?.worst)}) |`
    })
  ].join("\n")
  console.log(md)
  const json = {
    bench: "learning-harness-generated",
    command: `tsx bench/harness/learning-generated.ts --seeds ${seeds.join(",")}${
      passed.length > 0 ? ` -- ${passed.join(" ")}` : ""
    }`,
    seeds,
    summary,
    runs: rows
  }
  const results = Path.join(root, "bench", "results")
  Fs.writeFileSync(Path.join(results, "learning-harness-generated.json"), JSON.stringify(json, null, 2) + "\n")
  Fs.writeFileSync(
    Path.join(results, "learning-harness-generated.md"),
    [
      "# Learning: harness GRPO with bash-agent on generated tasks (TaskFamily instances), several seeds",
      "",
      `Made by \`${json.command}\` (each seed: \`tsx examples/src/harness.ts --agent bash --seed N${
        passed.length > 0 ? ` ${passed.join(" ")}` : ""
      }\`); numbers in learning-harness-generated.json. Greedy evaluation, one episode per task.`,
      "",
      md,
      ""
    ].join("\n")
  )
  console.log(`wrote bench/results/learning-harness-generated.{json,md}`)
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e)
  process.exit(1)
})
