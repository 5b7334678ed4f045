// Micro-benchmark of the 1-session step path with server and client in one process (for `node --cpu-prof`), beside
// a raw ws echo of a reply-sized frame in the same process (the floor), alternating rounds so load drifts hit both.
// Run: npx tsx packages/env/bench/wire/micro.ts [seconds per round] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Client from "../../src/Client.js"
import * as Server from "../../src/Server.js"
import * as Wordle from "../../src/Wordle.js"
import { canned, echo, p50, portOf, rawLoop, rawServer, replyFrame, timed, wordleFrames, words } from "./roundTrips.js"

const seconds = Number(process.argv[2] ?? 2)
const rounds = Number(process.argv[3] ?? 3)
/** Only this mode (echo | full | server | client), for profiling one side; default all. */
const only = process.argv[4]
const skip = (mode: string, run: Effect.Effect<{ samples: Array<number>; cpu: number }>) =>
  only === undefined || only === mode ? run : Effect.succeed({ samples: [NaN], cpu: NaN })

/** CPU microseconds (user + system, this process: both ends) per round trip of `run`. */
const cpuPer = <A extends { length: number }, E, R>(run: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = process.cpuUsage()
    const samples = yield* run
    const used = process.cpuUsage(before)
    return { samples, cpu: (used.user + used.system) / samples.length }
  })

Effect.gen(function*() {
  const server = yield* Server.serve(Wordle.openEnv, { port: 0, maxConcurrentEnvs: 8 })
  const echoServer = yield* rawServer(0, echo)
  const fixed = yield* rawServer(0, canned)
  const env = yield* Client.make({ url: server.url })
  const clientOnly = yield* Client.make({ url: `http://127.0.0.1:${portOf(fixed)}` })
  yield* env.reset({ seed: 0 })
  let k = 0
  for (let round = 0; round < rounds; round++) {
    const base = yield* skip(
      "echo",
      cpuPer(rawLoop(`ws://127.0.0.1:${portOf(echoServer)}`, seconds, () => replyFrame))
    )
    // The server alone: a raw client plays Wordle (a reset every 6th frame keeps the transcript episode-sized).
    const serverOnly = yield* skip(
      "server",
      cpuPer(rawLoop(server.url.replace("http", "ws") + "/ws", seconds, wordleFrames(6)))
    )
    // The client alone: the envtrain Client against a raw server answering a fixed reply.
    const clientOnlyRun = yield* skip(
      "client",
      cpuPer(timed(seconds, clientOnly.step({ message: "crane" })).pipe(Effect.orDie))
    )
    const full = yield* skip(
      "full",
      cpuPer(
        Effect.gen(function*() {
          const out: Array<number> = []
          const end = Date.now() + seconds * 1000
          while (Date.now() < end) {
            const t0 = performance.now()
            const r = yield* env.step({ message: words[k++ % words.length] })
            out.push(performance.now() - t0)
            if (r.done) yield* env.reset({ seed: k })
          }
          return out
        }).pipe(Effect.orDie)
      )
    )
    const show = (name: string, r: { samples: Array<number>; cpu: number }) =>
      `${name} p50 ${p50(r.samples).toFixed(3)} ms (${(p50(r.samples) / p50(base.samples)).toFixed(2)}x), CPU ${
        r.cpu.toFixed(0)
      } us`
    console.log(
      `round ${round}: ${show("echo", base)} | ${show("client+server", full)} | ${
        show("server + raw client", serverOnly)
      } | ${show("client + raw server", clientOnlyRun)}`
    )
  }
}).pipe(Effect.scoped, NodeRuntime.runMain)
