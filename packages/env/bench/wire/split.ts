// The 1-session round trip split by side, with the server in a child process as in wire.ts: (a) the server alone,
// driven by a raw ws client playing Wordle; (b) the envtrain Client alone, against a raw ws server answering one
// fixed reply; (c) both; beside the raw ws echo floor. Rounds alternate so load drifts hit every mode.
// Run: npx tsx packages/env/bench/wire/split.ts [seconds per mode] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Os from "node:os"
import { fileURLToPath } from "node:url"
import { WebSocket } from "ws"
import * as Client from "../../src/Client.js"
import * as Launcher from "../../src/Launcher.js"
import * as Wordle from "../../src/Wordle.js"

const seconds = Number(process.argv[2] ?? 2)
const rounds = Number(process.argv[3] ?? 3)
/** Only this mode (echo | server | client | both), e.g. under `node --cpu-prof`; default all. */
const only = process.argv[4]
const skip = (mode: string, run: Effect.Effect<Array<number>>) =>
  only === undefined || only === mode ? run : Effect.succeed([NaN])
const words = Wordle.secrets()
const p50 = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
const echoFrame = JSON.stringify({ type: "observation", data: { observation: { prompt: "x".repeat(1200) } } })

/** Raw ws round trips; the first quarter (at most 200) is warm-up. */
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
        return resume(Effect.succeed(samples.slice(Math.min(200, samples.length >> 2))))
      }
      sent = performance.now()
      ws.send(frames(i++))
    })
  })

const clientLoop = (env: Client.OpenEnvClient, resets: boolean) =>
  Effect.gen(function*() {
    const out: Array<number> = []
    const end = Date.now() + seconds * 1000
    let k = 0
    while (Date.now() < end) {
      const t0 = performance.now()
      const r = yield* env.step({ message: words[k++ % words.length] })
      out.push(performance.now() - t0)
      if (resets && r.done) yield* env.reset({ seed: k })
    }
    return out.slice(Math.min(200, out.length >> 2))
  }).pipe(Effect.orDie)

Effect.gen(function*() {
  const echoPort = yield* Launcher.freePort()
  const cannedPort = yield* Launcher.freePort()
  const server = yield* Launcher.tsx(fileURLToPath(new URL("./server.ts", import.meta.url)), [
    "{port}",
    String(echoPort),
    String(cannedPort)
  ])
  const wsUrl = server.url.replace("http", "ws") + "/ws"
  const resetFrame = JSON.stringify({ type: "reset", data: { seed: 1 } })
  const stepFrames = words.map((w) => JSON.stringify({ type: "step", data: { message: w } }))
  const full = yield* Client.connect({ url: server.url })
  yield* full.reset({ seed: 0 })
  const clientOnly = yield* Client.connect({ url: `http://127.0.0.1:${cannedPort}` })
  console.log(`load average at start ${Os.loadavg().map((x) => x.toFixed(2)).join(" / ")}`)
  for (let round = 0; round < rounds; round++) {
    const echo = p50(yield* skip("echo", rawLoop(`ws://127.0.0.1:${echoPort}`, () => echoFrame)))
    // Six steps per episode, as Wordle: a reset every 7th frame keeps the transcript episode-sized.
    const serverAlone = p50(
      yield* skip("server", rawLoop(wsUrl, (i) => i % 7 === 0 ? resetFrame : stepFrames[i % stepFrames.length]))
    )
    const clientAlone = p50(yield* skip("client", clientLoop(clientOnly, false)))
    const both = p50(yield* skip("both", clientLoop(full, true)))
    const show = (name: string, x: number) => `${name} ${x.toFixed(3)} ms (${(x / echo).toFixed(2)}x)`
    console.log(
      `round ${round}: echo ${echo.toFixed(3)} ms | ${show("server alone", serverAlone)} | ${
        show("client alone", clientAlone)
      } | ${show("client+server", both)}`
    )
  }
  console.log(`load average at end ${Os.loadavg().map((x) => x.toFixed(2)).join(" / ")}`)
}).pipe(Effect.scoped, NodeRuntime.runMain)
