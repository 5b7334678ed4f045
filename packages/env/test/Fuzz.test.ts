// Thousands of random and mutated frames against one server, then a full episode must still work and every slot
// must come back. Bounded in count (frames, sockets) and time.
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck, Random } from "effect"
import * as Client from "../src/Client.js"
import * as Server from "../src/Server.js"
import { counter } from "./fixtures/Counter.js"
import { eventually, raw } from "./fixtures/Raw.js"

const valid = [
  `{"type":"reset","data":{"seed":1}}`,
  `{"type":"step","data":{"delta":1}}`,
  `{"type":"state"}`,
  `{"type":"mcp","data":{"jsonrpc":"2.0","method":"tools/list","id":1}}`,
  `{"type":"mcp","data":{"jsonrpc":"2.0","method":"tools/call","params":{"name":"add","arguments":{"x":1}},"id":2}}`
]

const mutate = (text: string, r: () => number): string => {
  const i = Math.floor(r() * text.length)
  switch (Math.floor(r() * 5)) {
    case 0:
      return text.slice(0, i) // truncated
    case 1:
      return text.slice(0, i) + String.fromCharCode(Math.floor(r() * 128)) + text.slice(i + 1) // flipped char
    case 2:
      return text.replace(/"(delta|type|x|method|jsonrpc)"/, `"${"zz".slice(0, 1 + Math.floor(r() * 2))}"`)
    case 3:
      return text.replace(/\d+/, String(Math.floor(r() * 1e6) - 5e5)).replace(/"data":\{/, `"data":{"extra":[],`)
    default:
      return text + text
  }
}

describe("fuzz", () => {
  it.scopedLive("random and mutated frames never break the server or leak slots", () =>
    Effect.gen(function*() {
      const live = { count: 0 }
      const s = yield* Server.serve(counter({ live, target: 1_000_000 }), { port: 0, maxConcurrentEnvs: 16 })
      const url = s.url.replace("http://", "ws://") + "/ws"
      const seed = yield* Random.nextIntBetween(0, 2 ** 30)
      const randomFrames = FastCheck.sample(
        FastCheck.oneof(
          FastCheck.json(),
          FastCheck.string({ maxLength: 64 }),
          FastCheck.record({
            type: FastCheck.constantFrom("reset", "step", "state", "mcp", "close", "x"),
            data: FastCheck.anything()
          })
            .map((v) => JSON.stringify(v))
        ),
        { numRuns: 2000, seed }
      ).map((v) => typeof v === "string" ? v : JSON.stringify(v))
      let state = seed
      const rand = () => {
        state = (state * 1103515245 + 12345) % 2147483648
        return state / 2147483648
      }
      const mutated = Array.from({ length: 2000 }, () => mutate(valid[Math.floor(rand() * valid.length)], rand))
      const frames = [...randomFrames, ...mutated]
      const sockets = 8
      const perSocket = Math.ceil(frames.length / sockets)
      yield* Effect.forEach(Array.from({ length: sockets }, (_, i) => i), (k) =>
        Effect.scoped(Effect.gen(function*() {
          let c = yield* raw(url)
          let answered = 0
          for (const frame of frames.slice(k * perSocket, (k + 1) * perSocket)) {
            if (c.ws.readyState !== c.ws.OPEN) c = yield* raw(url) // a `close` frame ended the session
            yield* c.sendText(frame)
            // One reply per frame except `close`; wait for it so frames stay request/response.
            const reply = yield* Effect.either(
              Effect.raceFirst(c.next, Effect.flatMap(c.closed, () => Effect.fail("closed")))
            )
            if (reply._tag === "Right") {
              answered++
              assert.include(["observation", "state", "mcp", "error"], reply.right.type)
            }
          }
          assert.isAbove(answered, perSocket / 2)
        })), { concurrency: sockets })

      yield* eventually(Effect.map(s.activeSessions, (n) => n === 0), "every fuzzed session released")
      const env = yield* Client.make({ url: s.url })
      assert.strictEqual((yield* env.reset({ seed: 5 })).done, false)
      for (let i = 0; i < 3; i++) yield* env.step({ delta: 1 })
      assert.strictEqual((yield* env.state).step_count, 3)
      yield* env.close
      yield* eventually(Effect.map(s.activeSessions, (n) => n === 0), "zero sessions after the episode")
      yield* eventually(Effect.sync(() => live.count === 0), "every instance closed")
    }), { timeout: 60_000 })
})
