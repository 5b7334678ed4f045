// Micro-benchmark of the 1-session step path with server and client in one process (for `node --cpu-prof`), beside
// a raw ws echo of a reply-sized frame in the same process (the floor), alternating rounds so load drifts hit both.
// Run: npx tsx packages/env/bench/wire/micro.ts [seconds per round] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { WebSocket, WebSocketServer } from "ws"
import * as Client from "../../src/Client.js"
import * as Server from "../../src/Server.js"
import * as Wordle from "../../src/Wordle.js"

const seconds = Number(process.argv[2] ?? 2)
const rounds = Number(process.argv[3] ?? 3)
/** Only this mode (echo | full | server | client), for profiling one side; default all. */
const only = process.argv[4]
const skip = (mode: string, run: Effect.Effect<{ samples: Array<number>; cpu: number }>) =>
  only === undefined || only === mode ? run : Effect.succeed({ samples: [NaN], cpu: NaN })
const words = Wordle.secrets()

const p50 = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

/** CPU microseconds (user + system, this process: both ends) per round trip of `run`. */
const cpuPer = <A extends { length: number }, E, R>(run: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = process.cpuUsage()
    const samples = yield* run
    const used = process.cpuUsage(before)
    return { samples, cpu: (used.user + used.system) / samples.length }
  })

const replyFrame = JSON.stringify({
  type: "observation",
  data: { observation: { prompt: "x".repeat(1200) }, reward: 0, done: false }
})

/** Raw ws round trips: `frames(i)` is what to send (the floor sends the reply-sized frame to an echo server). */
const rawLoop = (url: string, frames: (i: number) => string) =>
  Effect.async<Array<number>>((resume) => {
    const ws = new WebSocket(url, { perMessageDeflate: false })
    const samples: Array<number> = []
    const end = Date.now() + seconds * 1000
    let sent = 0
    let i = 0
    ws.on("open", () => {
      sent = performance.now()
      ws.send(frames(i++))
    })
    ws.on("message", () => {
      samples.push(performance.now() - sent)
      if (Date.now() >= end) {
        ws.close()
        return resume(Effect.succeed(samples))
      }
      sent = performance.now()
      ws.send(frames(i++))
    })
  })

Effect.gen(function*() {
  const server = yield* Server.serve(Wordle.openEnv, { port: 0, maxConcurrentEnvs: 8 })
  const echo = yield* Effect.acquireRelease(
    Effect.async<WebSocketServer>((resume) => {
      const wss: WebSocketServer = new WebSocketServer(
        { host: "127.0.0.1", port: 0, perMessageDeflate: false },
        () => resume(Effect.succeed(wss))
      )
      wss.on("connection", (ws) => ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary })))
    }),
    (wss) => Effect.sync(() => wss.close())
  )
  const fixed = yield* Effect.acquireRelease(
    Effect.async<WebSocketServer>((resume) => {
      const wss: WebSocketServer = new WebSocketServer(
        { host: "127.0.0.1", port: 0, perMessageDeflate: false },
        () => resume(Effect.succeed(wss))
      )
      wss.on("connection", (ws) => ws.on("message", () => ws.send(replyFrame)))
    }),
    (wss) => Effect.sync(() => wss.close())
  )
  const env = yield* Client.make({ url: server.url })
  const clientOnly = yield* Client.make({ url: `http://127.0.0.1:${(fixed.address() as { port: number }).port}` })
  const resetFrame = JSON.stringify({ type: "reset", data: { seed: 1 } })
  const stepFrames = words.map((w) => JSON.stringify({ type: "step", data: { message: w } }))
  yield* env.reset({ seed: 0 })
  let k = 0
  for (let round = 0; round < rounds; round++) {
    const base = yield* skip(
      "echo",
      cpuPer(
        rawLoop(`ws://127.0.0.1:${(echo.address() as { port: number }).port}`, () => replyFrame)
      )
    )
    // The server alone: a raw client plays Wordle (a reset every 6th frame keeps the transcript episode-sized).
    const serverOnly = yield* skip(
      "server",
      cpuPer(rawLoop(
        server.url.replace("http", "ws") + "/ws",
        (i) => i % 6 === 0 ? resetFrame : stepFrames[i % stepFrames.length]
      ))
    )
    // The client alone: the envtrain Client against a raw server answering a fixed reply.
    const clientOnlyRun = yield* skip(
      "client",
      cpuPer(
        Effect.gen(function*() {
          const out: Array<number> = []
          const clientEnd = Date.now() + seconds * 1000
          while (Date.now() < clientEnd) {
            const t0 = performance.now()
            yield* clientOnly.step({ message: "crane" })
            out.push(performance.now() - t0)
          }
          return out
        }).pipe(Effect.orDie)
      )
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
