// Wire benchmark: Wordle steps/s and step latency (p50/p99) over /ws at 1, 64, 512 and 1000 concurrent sessions on
// loopback, beside a raw ws echo round trip measured in the same run (the floor), and server memory per session.
// Run: npx tsx packages/env/bench/wire/wire.ts   (about 1-2 minutes; results in bench/results/wire-wordle.{json,md})
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import { fileURLToPath } from "node:url"
import * as Client from "../../src/Client.js"
import * as Launcher from "../../src/Launcher.js"
import * as Wordle from "../../src/Wordle.js"
import { echoFrame, rawLoop, words } from "./roundTrips.js"

const levels = [1, 64, 512, 1000]
const secondsAt = (n: number) => (n === 1 ? 3 : n < 1000 ? 4 : 6)
const warmupMs = 1500
const resultsDir = fileURLToPath(new URL("../../../../bench/results/", import.meta.url))

const rssKb = (pid: number): number => {
  const status = Fs.readFileSync(`/proc/${pid}/status`, "utf8")
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN)
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]

const summarize = (samples: Array<number>) => {
  const sorted = [...samples].sort((a, b) => a - b)
  return {
    p50_ms: percentile(sorted, 0.5),
    p99_ms: percentile(sorted, 0.99),
    mean_ms: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)
  }
}

/** Raw ws round trips of a Wordle-reply-sized frame (the floor: no protocol, no environment, no Effect). */
const echoFloor = (port: number, seconds: number) => rawLoop(`ws://127.0.0.1:${port}`, seconds, () => echoFrame, 100)

/** The same steps on an in-process instance (no wire): what the environment itself costs per step. */
const inProcess = (seconds: number) =>
  Effect.scoped(Effect.gen(function*() {
    const instance = yield* Wordle.openEnv.make
    yield* instance.reset({ seed: 0 })
    const samples: Array<number> = []
    const end = Date.now() + seconds * 1000
    let k = 0
    while (Date.now() < end) {
      const t0 = performance.now()
      const r = yield* Effect.orDie(instance.step({ message: words[k++ % words.length] }))
      samples.push(performance.now() - t0)
      if (r.done) yield* Effect.orDie(instance.reset({ seed: k }))
    }
    return samples
  }))

const runLevel = (url: string, sessions: number, seconds: number) =>
  Effect.gen(function*() {
    const clients = yield* Effect.forEach(
      Array.from({ length: sessions }, (_, i) => i),
      (i) =>
        Effect.gen(function*() {
          const env = yield* Client.make({ url, connectTimeout: "30 seconds", messageTimeout: "60 seconds" })
          yield* env.reset({ seed: i })
          return env
        }),
      { concurrency: 64 }
    )
    // Warm-up (not measured): the first thousands of steps run in V8's interpreter and baseline tiers on both sides.
    const warmEnd = Date.now() + warmupMs
    yield* Effect.forEach(clients, (env, i) =>
      Effect.gen(function*() {
        let k = i
        while (Date.now() < warmEnd) {
          const r = yield* Effect.either(env.step({ message: words[k++ % words.length] }))
          if (r._tag === "Left" || r.right.done) yield* Effect.either(env.reset({ seed: k }))
        }
        yield* Effect.either(env.reset({ seed: i }))
      }), { concurrency: "unbounded" })
    const latencies: Array<number> = []
    let errors = 0
    let steps = 0
    const started = performance.now()
    const end = Date.now() + seconds * 1000
    yield* Effect.forEach(clients, (env, i) =>
      Effect.gen(function*() {
        let k = i
        while (Date.now() < end) {
          const t0 = performance.now()
          const r = yield* Effect.either(env.step({ message: words[k++ % words.length] }))
          if (r._tag === "Left") {
            errors++
            continue
          }
          latencies.push(performance.now() - t0)
          steps++
          if (r.right.done) {
            const again = yield* Effect.either(env.reset({ seed: k }))
            if (again._tag === "Left") errors++
          }
        }
      }), { concurrency: "unbounded" })
    const elapsed = (performance.now() - started) / 1000
    return { clients, latencies, errors, steps, elapsed }
  })

/**
 * The 1-session target measured side by side: rounds alternate a raw ws echo burst (the floor) and a burst of Wordle
 * steps from one warmed envtrain client, so drift in the machine's load hits both alike; each round gives a ratio of
 * p50s, and the median round is the headline.
 */
const interleaved = (url: string, echoPort: number, rounds: number, seconds: number) =>
  Effect.scoped(Effect.gen(function*() {
    const env = yield* Client.make({ url, connectTimeout: "30 seconds", messageTimeout: "60 seconds" })
    yield* env.reset({ seed: 7 })
    let k = 0
    // Errors end the run (orDie around the burst, not around each step, so the timed span is the client call).
    const burst = (ms: number, record: boolean) =>
      Effect.orDie(Effect.gen(function*() {
        const out: Array<number> = []
        const end = Date.now() + ms
        while (Date.now() < end) {
          const t0 = performance.now()
          const r = yield* env.step({ message: words[k++ % words.length] })
          if (record) out.push(performance.now() - t0)
          if (r.done) yield* env.reset({ seed: k })
        }
        return out
      }))
    yield* burst(warmupMs, false)
    const out: Array<{ floor_p50_ms: number; step_p50_ms: number; ratio: number }> = []
    for (let r = 0; r < rounds; r++) {
      const floor = summarize(yield* echoFloor(echoPort, seconds)).p50_ms
      const step = summarize(yield* burst(seconds * 1000, true)).p50_ms
      out.push({ floor_p50_ms: floor, step_p50_ms: step, ratio: step / floor })
    }
    return out
  }))

const median = (xs: ReadonlyArray<number>) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted.length % 2 === 1
    ? sorted[sorted.length >> 1]
    : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2
}

const program = Effect.gen(function*() {
  const loadStart = Os.loadavg()
  const echoPort = yield* Launcher.freePort()
  const server = yield* Launcher.tsx(fileURLToPath(new URL("./server.ts", import.meta.url)), [
    "{port}",
    String(echoPort)
  ])
  const baselineKb = rssKb(server.pid)
  const floor = summarize(yield* echoFloor(echoPort, 3))
  console.log(`raw ws echo floor: p50 ${floor.p50_ms.toFixed(3)} ms, p99 ${floor.p99_ms.toFixed(3)} ms`)
  const env = summarize(yield* inProcess(2))
  console.log(`in-process Wordle step: p50 ${env.p50_ms.toFixed(3)} ms, p99 ${env.p99_ms.toFixed(3)} ms`)
  const rounds = yield* interleaved(server.url, echoPort, 9, 1)
  const ratioMedian = median(rounds.map((r) => r.ratio))
  console.log(
    `1 session vs floor, ${rounds.length} interleaved rounds: median ratio ${ratioMedian.toFixed(2)} (${
      rounds.map((r) => r.ratio.toFixed(2)).join(", ")
    })`
  )
  const rows: Array<Record<string, number>> = []
  let memory = { sessions: 0, rss_delta_mb: 0, kb_per_session: 0 }
  let floorAfterOne = floor
  for (const sessions of levels) {
    const result = yield* Effect.scoped(Effect.gen(function*() {
      const r = yield* runLevel(server.url, sessions, secondsAt(sessions))
      const rssNow = rssKb(server.pid)
      if (sessions === Math.max(...levels)) {
        memory = {
          sessions,
          rss_delta_mb: (rssNow - baselineKb) / 1024,
          kb_per_session: (rssNow - baselineKb) / sessions
        }
      }
      return r
    }))
    const s = summarize(result.latencies)
    const row = {
      sessions,
      steps: result.steps,
      errors: result.errors,
      steps_per_s: result.steps / result.elapsed,
      ...s,
      p50_over_floor: s.p50_ms / floor.p50_ms,
      wire_overhead_p50_ms: s.p50_ms - env.p50_ms
    }
    rows.push(row)
    // The floor again right after the 1-session level: on a shared machine it drifts within a run, and the two
    // readings show by how much (the ratio column uses the first, taken at the start).
    if (sessions === 1) floorAfterOne = summarize(yield* echoFloor(echoPort, 2))
    console.log(
      `${sessions} sessions: ${row.steps_per_s.toFixed(0)} steps/s, p50 ${s.p50_ms.toFixed(3)} ms, p99 ${
        s.p99_ms.toFixed(3)
      } ms, errors ${result.errors}`
    )
    yield* Effect.sleep("500 millis")
  }
  const report = {
    benchmark: "wire-wordle",
    date: new Date().toISOString(),
    machine: { cpus: Os.cpus().length, model: Os.cpus()[0]?.model ?? "", node: process.version },
    note: "Client and server share the machine's cores (server in a child process, clients in this one); " +
      "latency is measured per step by the envtrain Client over /ws on 127.0.0.1, after 1.5 s of unmeasured " +
      "warm-up steps at each level.",
    load_average: { start: loadStart, end: Os.loadavg() },
    floor_raw_ws_echo: floor,
    floor_after_1_session_level: floorAfterOne,
    one_session_interleaved: { rounds, median_ratio: ratioMedian },
    in_process_step: env,
    levels: rows,
    server_memory: { baseline_rss_mb: baselineKb / 1024, ...memory }
  }
  Fs.mkdirSync(resultsDir, { recursive: true })
  Fs.writeFileSync(`${resultsDir}wire-wordle.json`, JSON.stringify(report, null, 2) + "\n")
  const md = [
    `# Wire benchmark: Wordle over /ws (${report.date})`,
    "",
    `Machine: ${report.machine.cpus} CPUs (${report.machine.model}), Node ${report.machine.node}. ${report.note}`,
    "",
    `Load average (1/5/15 min) at start ${loadStart.map((x) => x.toFixed(2)).join(" / ")}, at end ${
      report.load_average.end.map((x) => x.toFixed(2)).join(" / ")
    } (other work on the machine inflates every latency here, the floor included).`,
    "",
    `Raw ws echo round trip (floor): p50 ${floor.p50_ms.toFixed(3)} ms, p99 ${floor.p99_ms.toFixed(3)} ms ` +
    `(again after the 1-session level: p50 ${floorAfterOne.p50_ms.toFixed(3)} ms, 1-session p50 / that floor ${
      ((rows[0]?.p50_ms ?? NaN) / floorAfterOne.p50_ms).toFixed(2)
    }). ` +
    `Wordle step in-process (no wire): p50 ${env.p50_ms.toFixed(3)} ms, p99 ${env.p99_ms.toFixed(3)} ms.`,
    "",
    `**1 session against the floor, side by side: median ratio of p50s ${
      ratioMedian.toFixed(2)
    } over ${rounds.length} ` +
    `interleaved rounds (target: within 1.5).** Each round is 1 s of raw ws echo round trips, then 1 s of Wordle steps ` +
    `from one warmed client:`,
    "",
    "| round | floor p50 ms | 1-session step p50 ms | ratio |",
    "| ---: | ---: | ---: | ---: |",
    ...rounds.map((r, i) =>
      `| ${i + 1} | ${r.floor_p50_ms.toFixed(3)} | ${r.step_p50_ms.toFixed(3)} | ${r.ratio.toFixed(2)} |`
    ),
    "",
    "Every level (the 1-session row's ratio uses the single floor reading above):",
    "",
    "| sessions | steps/s | p50 ms | p99 ms | p50 / floor | p50 − in-process step (ms) | errors |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((r) =>
      `| ${r.sessions} | ${r.steps_per_s.toFixed(0)} | ${r.p50_ms.toFixed(3)} | ${r.p99_ms.toFixed(3)} | ${
        r.p50_over_floor.toFixed(2)
      } | ${r.wire_overhead_p50_ms.toFixed(3)} | ${r.errors} |`
    ),
    "",
    `Server memory: baseline RSS ${(baselineKb / 1024).toFixed(1)} MB; with ${memory.sessions} sessions +${
      memory.rss_delta_mb.toFixed(1)
    } MB = ${memory.kb_per_session.toFixed(1)} KB per session.`,
    ""
  ].join("\n")
  Fs.writeFileSync(`${resultsDir}wire-wordle.md`, md)
  console.log(md)
})

program.pipe(Effect.scoped, NodeRuntime.runMain)
