// The 1-session round trip split by side, with the server in a child process as in wire.ts: (a) the server alone,
// driven by a raw ws client playing Wordle; (b) the envtrain Client alone, against a raw ws server answering one
// fixed reply; (c) both; beside the raw ws echo floor. Rounds alternate so load drifts hit every mode.
// Run: npx tsx packages/env/bench/wire/split.ts [seconds per mode] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { fileURLToPath } from "node:url"
import * as Client from "../../src/Client.js"
import * as Launcher from "../../src/Launcher.js"
import { echoFrame, loadAverage, p50, rawLoop, stepLoop, wordleFrames } from "./roundTrips.js"

const seconds = Number(process.argv[2] ?? 2)
const rounds = Number(process.argv[3] ?? 3)
/** Only this mode (echo | server | client | both), e.g. under `node --cpu-prof`; default all. */
const only = process.argv[4]
const skip = (mode: string, run: Effect.Effect<Array<number>>) =>
  only === undefined || only === mode ? run : Effect.succeed([NaN])

Effect.gen(function*() {
  const echoPort = yield* Launcher.freePort()
  const cannedPort = yield* Launcher.freePort()
  const server = yield* Launcher.tsx(fileURLToPath(new URL("./server.ts", import.meta.url)), [
    "{port}",
    String(echoPort),
    String(cannedPort)
  ])
  const wsUrl = server.url.replace("http", "ws") + "/ws"
  const full = yield* Client.connect({ url: server.url })
  yield* full.reset({ seed: 0 })
  const clientOnly = yield* Client.connect({ url: `http://127.0.0.1:${cannedPort}` })
  console.log(`load average at start ${loadAverage()}`)
  for (let round = 0; round < rounds; round++) {
    const echo = p50(yield* skip("echo", rawLoop(`ws://127.0.0.1:${echoPort}`, seconds, () => echoFrame, 200)))
    // Six steps per episode, as Wordle: a reset every 7th frame keeps the transcript episode-sized.
    const serverAlone = p50(yield* skip("server", rawLoop(wsUrl, seconds, wordleFrames(7), 200)))
    const clientAlone = p50(yield* skip("client", stepLoop(clientOnly, seconds, false)))
    const both = p50(yield* skip("both", stepLoop(full, seconds, true)))
    const show = (name: string, x: number) => `${name} ${x.toFixed(3)} ms (${(x / echo).toFixed(2)}x)`
    console.log(
      `round ${round}: echo ${echo.toFixed(3)} ms | ${show("server alone", serverAlone)} | ${
        show("client alone", clientAlone)
      } | ${show("client+server", both)}`
    )
  }
  console.log(`load average at end ${loadAverage()}`)
}).pipe(Effect.scoped, NodeRuntime.runMain)
