// Learning evidence for the harness example on generated tasks (TaskFamily instances), over several seeds: per seed,
// held-out success (new instances of the training families, and the family never trained on) and training-task
// success before GRPO (the SFT start) and after, then the median, worst and best of each. Each seed is one run of
// `examples/src/harness.ts --agent bash --seed N` in its own process (`--jobs` at a time); extra flags after `--`
// go to the example. Saves bench/results/learning-harness-generated.{json,md}: one entry per `--label` (a setting),
// replaced when run again; the md's hand-written part below its "<!-- notes -->" line is kept.
//
// Usage: tsx bench/harness/learning-generated.ts --label NAME [--seeds 0,1,2,3,4] [--jobs 1]
//          [--runs runs/harness-generated/NAME] [--from-runs] [-- EXAMPLE FLAGS]
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
const label = flag("--label", "defaults")
const runs = Path.resolve(root, flag("--runs", `runs/harness-generated/${label}`))
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

// What the greedy agent's first command got right, read from a run's traces: the family's shape (the same program
// as the task's solver, e.g. `cp`, `wc`) and the instance's names (every backticked word of the instruction in it).
// Success needs both; the split shows which of the two transfers to new instances.
const firstCommands = (run: string, when: "before" | "after", split: "held-out" | "held-out-families" | "train") => {
  const dir = Path.join(run, "traces", when, split)
  const files = Fs.existsSync(dir) ? Fs.readdirSync(dir).filter((f) => f.endsWith(".json")) : []
  let shape = 0
  let names = 0
  for (const file of files) {
    const task = file.replace(/-\d+\.json$/, "")
    const solve = Fs.readFileSync(
      Path.join(run, "tasks", split === "train" ? "train" : "held-out", task, "solution", "solve.sh"),
      "utf8"
    ).split("\n").find((l) => l.trim() !== "" && !l.startsWith("#")) ?? ""
    const trace = JSON.parse(Fs.readFileSync(Path.join(dir, file), "utf8")) as {
      completion: Array<
        { role: string; content: string | null; tool_calls?: Array<{ function: { arguments: string } }> }
      >
    }
    const call = trace.completion.find((m) => m.role === "assistant" && (m.tool_calls?.length ?? 0) > 0)
    let command = ""
    try {
      command = (JSON.parse(call?.tool_calls?.[0].function.arguments ?? "{}") as { command?: string }).command ?? ""
    } catch {
      command = call?.tool_calls?.[0].function.arguments ?? ""
    }
    const instruction = trace.completion.find((m) => m.role === "user")?.content ?? ""
    const wanted = Array.from(instruction.matchAll(/`([^`]+)`/g), (m) => m[1].replace(/\/$/, "").split(" ")).flat()
    if (command !== "" && command.split(" ")[0] === solve.split(" ")[0]) shape++
    if (command !== "" && wanted.every((w) => command.includes(w))) names++
  }
  return { episodes: files.length, shape, names }
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
  const rows = seeds.map((seed) => {
    const run = Path.join(runs, `seed${seed}`)
    const commands = (when: "before" | "after") => ({
      heldOut: firstCommands(run, when, "held-out"),
      heldOutFamilies: firstCommands(run, when, "held-out-families"),
      train: firstCommands(run, when, "train")
    })
    return {
      seed,
      ...(JSON.parse(Fs.readFileSync(Path.join(run, "eval.json"), "utf8")) as EvalJson),
      firstCommands: { before: commands("before"), after: commands("after") }
    }
  })
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
    "First commands (greedy): right shape = the family's program (as the solver's), right names = every backticked",
    "word of the instruction in it; success needs both.",
    "",
    "| seed | held-out instances: shape, names before → after | training instances: shape, names before → after |",
    "| ---: | ---: | ---: |",
    ...rows.map((r) => {
      const f = (x: { episodes: number; shape: number; names: number }) =>
        `${x.shape}/${x.episodes}, ${x.names}/${x.episodes}`
      return `| ${r.seed} | ${f(r.firstCommands.before.heldOut)} → ${f(r.firstCommands.after.heldOut)} | ${
        f(r.firstCommands.before.train)
      } → ${f(r.firstCommands.after.train)} |`
    }),
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
  const entry = {
    label,
    command: `tsx bench/harness/learning-generated.ts --label ${label} --seeds ${seeds.join(",")}${
      passed.length > 0 ? ` -- ${passed.join(" ")}` : ""
    }`,
    example: `tsx examples/src/harness.ts --agent bash --seed N${passed.length > 0 ? ` ${passed.join(" ")}` : ""}`,
    seeds,
    summary,
    table: md,
    runs: rows
  }
  const results = Path.join(root, "bench", "results")
  const jsonFile = Path.join(results, "learning-harness-generated.json")
  const mdFile = Path.join(results, "learning-harness-generated.md")
  const previous = Fs.existsSync(jsonFile)
    ? (JSON.parse(Fs.readFileSync(jsonFile, "utf8")) as { settings: Array<typeof entry> }).settings
    : []
  const settings = [...previous.filter((e) => e.label !== label), entry]
  Fs.writeFileSync(jsonFile, JSON.stringify({ bench: "learning-harness-generated", settings }, null, 2) + "\n")
  const notes = Fs.existsSync(mdFile) ? Fs.readFileSync(mdFile, "utf8").split("<!-- notes -->")[1] ?? "\n" : "\n"
  Fs.writeFileSync(
    mdFile,
    [
      "# Learning: harness GRPO with bash-agent on generated tasks (TaskFamily instances)",
      "",
      "Greedy evaluation, one episode per task; numbers in learning-harness-generated.json (`settings[]`, one per",
      "label, every run's eval.json summary). Tables written by bench/harness/learning-generated.ts.",
      "",
      ...settings.flatMap((e) => [
        `## ${e.label}`,
        "",
        `Reproduce: \`${e.command}\` (each seed: \`${e.example}\`).`,
        "",
        e.table,
        ""
      ]),
      "<!-- notes -->" + notes
    ].join("\n")
  )
  console.log(`wrote bench/results/learning-harness-generated.{json,md}`)
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e)
  process.exit(1)
})
