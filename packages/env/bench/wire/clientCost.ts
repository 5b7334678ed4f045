// Where the client's per-message cost goes: against one raw ws server answering a fixed reply-sized frame, round
// trips of a raw ws client, of a bare Effect.async per request, and of the envtrain Client (alternating rounds).
// Run: npx tsx packages/env/bench/wire/clientCost.ts [seconds per round] [rounds]
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { WebSocket } from "ws"
import * as Client from "../../src/Client.js"
import { canned, p50, portOf, rawServer, timed } from "./roundTrips.js"

const seconds = Number(process.argv[2] ?? 1)
const rounds = Number(process.argv[3] ?? 3)

Effect.gen(function*() {
  const wss = yield* rawServer(0, canned)
  const url = `ws://127.0.0.1:${portOf(wss)}`
  const raw = new WebSocket(url, { perMessageDeflate: false })
  yield* Effect.async<void>((resume) => {
    raw.once("open", () => resume(Effect.void))
  })
  let waiting: ((text: string) => void) | undefined
  raw.on("message", (data) => {
    const w = waiting
    waiting = undefined
    w?.(data.toString())
  })
  const rawRound = Effect.async<Array<number>>((resume) => {
    const out: Array<number> = []
    const end = Date.now() + seconds * 1000
    let t0 = performance.now()
    waiting = function next(text) {
      JSON.parse(text)
      out.push(performance.now() - t0)
      if (Date.now() >= end) return resume(Effect.succeed(out))
      t0 = performance.now()
      waiting = next
      raw.send(JSON.stringify({ type: "step", data: { message: "crane" } }))
    }
    raw.send(JSON.stringify({ type: "step", data: { message: "crane" } }))
  })
  const bareAsync = Effect.async<unknown>((resume) => {
    waiting = (text) => resume(Effect.succeed(JSON.parse(text)))
    raw.send(JSON.stringify({ type: "step", data: { message: "crane" } }))
  })
  const client = yield* Client.make({ url: url.replace("ws://", "http://").replace(/\/?$/, "") })
  // The fixed server answers anything, so the client's reset gets an observation frame too.
  yield* Effect.orDie(client.reset())
  for (let r = 0; r < rounds; r++) {
    const a = yield* rawRound
    const b = yield* timed(seconds, bareAsync)
    const c = yield* timed(seconds, Effect.orDie(client.step({ message: "crane" })))
    console.log(
      `round ${r}: raw ${p50(a).toFixed(4)} ms | bare Effect.async ${p50(b).toFixed(4)} ms | Client.step ${
        p50(c).toFixed(4)
      } ms`
    )
  }
  raw.close()
}).pipe(Effect.scoped, NodeRuntime.runMain)
