// The benchmark's server process: Wordle over OpenEnv on argv[2], a raw ws echo server on argv[3] (the floor), and
// optionally (argv[4]) a raw ws server answering every frame with one fixed Wordle-sized reply (the client alone).
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Server from "../../src/Server.js"
import * as Wordle from "../../src/Wordle.js"
import { canned, echo, rawServer } from "./roundTrips.js"

Effect.gen(function*() {
  yield* rawServer(Number(process.argv[3]), echo)
  if (process.argv[4] !== undefined) yield* rawServer(Number(process.argv[4]), canned)
  yield* Server.serve(Wordle.openEnv, { port: Number(process.argv[2]), maxConcurrentEnvs: 1100 })
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain)
