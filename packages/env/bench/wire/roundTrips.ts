// What the wire benchmarks share: the frames, the raw ws servers and round-trip loops (the floor and the server
// alone), the envtrain Client's step loop, and the p50 they all report.
import { Effect } from "effect"
import * as Os from "node:os"
import { type RawData, WebSocket, WebSocketServer } from "ws"
import type * as Client from "../../src/Client.js"
import * as Wordle from "../../src/Wordle.js"

export const words = Wordle.secrets()

export const p50 = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

/** The 1, 5 and 15 minute load averages, as the reports print them. */
export const loadAverage = () => Os.loadavg().map((x) => x.toFixed(2)).join(" / ")

/** About the size of a mid-episode Wordle observation (the transcript grows to ~1-2 KB): what the echo floor sends. */
export const echoFrame = JSON.stringify({ type: "observation", data: { observation: { prompt: "x".repeat(1200) } } })

/** A whole Wordle-sized step reply (reward and done too): what a canned server answers to every frame. */
export const replyFrame = JSON.stringify({
  type: "observation",
  data: { observation: { prompt: "x".repeat(1200) }, reward: 0, done: false }
})

const resetFrame = JSON.stringify({ type: "reset", data: { seed: 1 } })
const stepFrames = words.map((w) => JSON.stringify({ type: "step", data: { message: w } }))

/** A raw client playing Wordle: a reset every `resetEvery`-th frame keeps the transcript episode-sized. */
export const wordleFrames = (resetEvery: number) => (i: number) =>
  i % resetEvery === 0 ? resetFrame : stepFrames[i % stepFrames.length]

/** A raw ws server on 127.0.0.1 (port 0: any free one), open for the scope; `answer` replies to every frame. */
export const rawServer = (port: number, answer: (ws: WebSocket, data: RawData, isBinary: boolean) => void) =>
  Effect.acquireRelease(
    Effect.async<WebSocketServer>((resume) => {
      const wss: WebSocketServer = new WebSocketServer(
        { host: "127.0.0.1", port, perMessageDeflate: false },
        () => resume(Effect.succeed(wss))
      )
      wss.on("connection", (ws) => ws.on("message", (data, isBinary) => answer(ws, data, isBinary)))
    }),
    (wss) => Effect.sync(() => wss.close())
  )

/** Sends every frame back (the floor). */
export const echo = (ws: WebSocket, data: RawData, isBinary: boolean) => ws.send(data, { binary: isBinary })

/** Answers every frame with {@link replyFrame} (the client alone, with no environment behind it). */
export const canned = (ws: WebSocket) => ws.send(replyFrame)

export const portOf = (wss: WebSocketServer) => (wss.address() as { port: number }).port

/**
 * Raw ws round trips for `seconds`: `frames(i)` is the i-th frame to send. The first quarter of the samples, at
 * most `warmup`, is dropped.
 */
export const rawLoop = (url: string, seconds: number, frames: (i: number) => string, warmup = 0) =>
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
        return resume(Effect.succeed(samples.slice(Math.min(warmup, samples.length >> 2))))
      }
      sent = performance.now()
      ws.send(frames(i++))
    })
  })

/** Times `one` again and again for `seconds`. */
export const timed = <A, E, R>(seconds: number, one: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const out: Array<number> = []
    const end = Date.now() + seconds * 1000
    while (Date.now() < end) {
      const t0 = performance.now()
      yield* one
      out.push(performance.now() - t0)
    }
    return out
  })

/** All a step loop needs of a client (another checkout's Client too). */
export type Stepper = Pick<Client.OpenEnvClient, "step" | "reset">

/**
 * Wordle steps through `env` for `seconds` (a reset after each finished episode when `resets`); the first quarter
 * of the samples, at most 200, is warm-up.
 */
export const stepLoop = (env: Stepper, seconds: number, resets: boolean) =>
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
