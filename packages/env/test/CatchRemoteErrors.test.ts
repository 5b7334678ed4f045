import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { WebSocketServer } from "ws"
import * as Catch from "../src/Catch.js"
import * as Environment from "../src/Environment.js"
import * as Wire from "../src/Wire.js"

// A served Catch whose server refuses a step (an OpenEnv server raising in its environment answers with an
// EXECUTION_ERROR frame): the model reads the server's message as the tool's error, as TRL shows it, and the episode
// goes on; nothing dies.
describe("Catch.remote", () => {
  it.scopedLive("a step the server refuses is the tool's error text, not a defect", () =>
    Effect.gen(function*() {
      const wss = yield* Effect.acquireRelease(
        Effect.async<WebSocketServer>((resume) => {
          const w: WebSocketServer = new WebSocketServer(
            { host: "127.0.0.1", port: 0 },
            () => resume(Effect.succeed(w))
          )
          w.on("connection", (ws) =>
            ws.on("message", (raw) => {
              const frame = JSON.parse(String(raw)) as { readonly type: string }
              const state = Array.from({ length: 50 }, (_, i) => (i === 2 || i === 47 ? 1 : 0))
              ws.send(JSON.stringify(
                frame.type === "step"
                  ? Wire.errorFrame("EXECUTION_ERROR", "Action 0 is not legal in this state")
                  : { type: "observation", data: { observation: { info_state: state }, reward: null, done: false } }
              ))
            }))
        }),
        (w) => Effect.sync(() => w.close())
      )
      const port = (wss.address() as { port: number }).port
      const episode = yield* Environment.episode(Catch.remote(`http://127.0.0.1:${port}`), { seed: 3 })
      assert.isTrue(Option.isSome(episode.observation))
      const outcome = yield* episode.call("move", { direction: "left" })
      assert.strictEqual(outcome._tag, "Failure")
      assert.include(outcome.text, "Action 0 is not legal in this state")
      assert.notInclude(outcome.text, "127.0.0.1")
    }))
})
