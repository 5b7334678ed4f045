// A/B of the 1-session step round trip: this tree's Client and server against another checkout's (argv[2], e.g. an
// older commit extracted with `git archive`), each server in its own child process, rounds alternating (A, B, echo)
// so load drifts hit all three. Run: npx tsx packages/env/bench/wire/ab.ts <other checkout root> [seconds] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Client from "../../src/Client.js"
import * as Launcher from "../../src/Launcher.js"
import { echoFrame, loadAverage, p50, rawLoop, stepLoop } from "./roundTrips.js"

const other = Path.resolve(process.argv[2] ?? ".")
const seconds = Number(process.argv[3] ?? 2)
const rounds = Number(process.argv[4] ?? 4)

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
  console.log(`A = this tree, B = ${other}; load average ${loadAverage()}`)
  const all = { a: [] as Array<number>, b: [] as Array<number>, echo: [] as Array<number> }
  for (let round = 0; round < rounds; round++) {
    const first = round % 2 === 0
    const ra = first ? yield* stepLoop(envA, seconds, true) : []
    const rb = yield* stepLoop(envB, seconds, true)
    const rA = first ? ra : yield* stepLoop(envA, seconds, true)
    const echo = yield* rawLoop(`ws://127.0.0.1:${a.echoPort}`, seconds, () =>
      echoFrame, 200)
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
      `load average ${loadAverage()}`
  )
}).pipe(Effect.scoped, NodeRuntime.runMain)
