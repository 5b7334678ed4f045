// The benchmark's server process: Wordle over OpenEnv on argv[2], and a raw ws echo server on argv[3] (the floor).
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

Effect.gen(function*() {
  yield* echo
  yield* Server.serve(Wordle.openEnv, { port: Number(process.argv[2]), maxConcurrentEnvs: 1100 })
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain)
