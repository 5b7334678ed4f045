// The benchmark's server process: Wordle over OpenEnv on argv[2], a raw ws echo server on argv[3] (the floor), and
// optionally (argv[4]) a raw ws server answering every frame with one fixed Wordle-sized reply (the client alone).
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { WebSocketServer } from "ws"
import * as Server from "../../src/Server.js"
import * as Wordle from "../../src/Wordle.js"

const echo = Effect.acquireRelease(
  Effect.sync(() => {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: Number(process.argv[3]), perMessageDeflate: false })
    wss.on("connection", (ws) => ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary })))
    return wss
  }),
  (wss) => Effect.sync(() => wss.close())
)

const cannedReply = JSON.stringify({
  type: "observation",
  data: { observation: { prompt: "x".repeat(1200) }, reward: 0.0, done: false }
})

const canned = Effect.acquireRelease(
  Effect.sync(() => {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: Number(process.argv[4]), perMessageDeflate: false })
    wss.on("connection", (ws) => ws.on("message", () => ws.send(cannedReply)))
    return wss
  }),
  (wss) => Effect.sync(() => wss.close())
)

Effect.gen(function*() {
  yield* echo
  if (process.argv[4] !== undefined) yield* canned
  yield* Server.serve(Wordle.openEnv, { port: Number(process.argv[2]), maxConcurrentEnvs: 1100 })
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain)
