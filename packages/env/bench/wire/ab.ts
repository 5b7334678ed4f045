// A/B of the 1-session step round trip: this tree's Client and server against another checkout's (argv[2], e.g. an
// older commit extracted with `git archive`), each server in its own child process, rounds alternating (A, B, echo)
// so load drifts hit all three. Run: npx tsx packages/env/bench/wire/ab.ts <other checkout root> [seconds] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { WebSocket } from "ws"
import * as Client from "../../src/Client.js"
import * as Launcher from "../../src/Launcher.js"
import * as Wordle from "../../src/Wordle.js"

const other = Path.resolve(process.argv[2] ?? ".")
const seconds = Number(process.argv[3] ?? 2)
const rounds = Number(process.argv[4] ?? 4)
const words = Wordle.secrets()
const p50 = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
const echoFrame = JSON.stringify({ type: "observation", data: { observation: { prompt: "x".repeat(1200) } } })

const echoLoop = (url: string) =>
  Effect.async<Array<number>>((resume) => {
    const ws = new WebSocket(url, { perMessageDeflate: false })
    const samples: Array<number> = []
    const end = Date.now() + seconds * 1000
    let sent = 0
    ws.on("open", () => {
      sent = performance.now()
      ws.send(echoFrame)
    })
    ws.on("message", () => {
      samples.push(performance.now() - sent)
      if (Date.now() >= end) {
        ws.close()
        return resume(Effect.succeed(samples.slice(Math.min(200, samples.length >> 2))))
      }
      sent = performance.now()
      ws.send(echoFrame)
    })
  })

type Env = { readonly step: (a: { message: string }) => Effect.Effect<{ done: boolean }, unknown> } & {
  readonly reset: (o: Record<string, unknown>) => Effect.Effect<unknown, unknown>
}

const stepLoop = (env: Env) =>
  Effect.gen(function*() {
    const out: Array<number> = []
    const end = Date.now() + seconds * 1000
    let k = 0
    while (Date.now() < end) {
      const t0 = performance.now()
      const r = yield* env.step({ message: words[k++ % words.length] })
      out.push(performance.now() - t0)
      if (r.done) yield* env.reset({ seed: k })
    }
    return out.slice(Math.min(200, out.length >> 2))
  }).pipe(Effect.orDie)

Effect.gen(function*() {
  const otherClient = (yield* Effect.promise(() =>
    import(pathToFileURL(Path.join(other, "packages/env/src/Client.ts")).href)
  )) as typeof Client
  const start = (root: string) =>
    Effect.gen(function*() {
      const echoPort = yield* Launcher.freePort()
      const server = yield* Launcher.tsx(Path.join(root, "packages/env/bench/wire/server.ts"), [
        "{port}",
        String(echoPort)
      ])
      return { server, echoPort }
    })
  const a = yield* start(fileURLToPath(new URL("../../../../", import.meta.url)))
  const b = yield* start(other)
  const envA = yield* Client.connect({ url: a.server.url })
  const envB = yield* otherClient.connect({ url: b.server.url })
  yield* envA.reset({ seed: 0 })
  yield* envB.reset({ seed: 0 })
  console.log(`A = this tree, B = ${other}; load average ${
    Os.loadavg().map((x) => x.toFixed(2)).join(" / ")
  }`)
  const all = { a: [] as Array<number>, b: [] as Array<number>, echo: [] as Array<number> }
  for (let round = 0; round < rounds; round++) {
    const first = round % 2 === 0
    const ra = first ? yield* stepLoop(envA as Env) : []
    const rb = yield* stepLoop(envB as Env)
    const rA = first ? ra : yield* stepLoop(envA as Env)
    const echo = yield* echoLoop(`ws://127.0.0.1:${a.echoPort}`)
    all.a.push(p50(rA))
    all.b.push(p50(rb))
    all.echo.push(p50(echo))
    console.log(
      `round ${round}: A ${p50(rA).toFixed(3)} ms (${(p50(rA) / p50(echo)).toFixed(2)}x) | B ${
        p50(rb).toFixed(3)
      } ms (${(p50(rb) / p50(echo)).toFixed(2)}x) | echo ${p50(echo).toFixed(3)} ms`
    )
  }
  const med = (xs: Array<number>) => p50(xs)
  console.log(
    `median of rounds: A ${med(all.a).toFixed(3)} ms, B ${med(all.b).toFixed(3)} ms, echo ${
      med(all.echo).toFixed(3)
    } ms; ` +
      `load average ${Os.loadavg().map((x) => x.toFixed(2)).join(" / ")}`
  )
}).pipe(Effect.scoped, NodeRuntime.runMain)
