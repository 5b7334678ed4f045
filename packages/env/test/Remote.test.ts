import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option, Schema, Scope } from "effect"
import * as Catch from "../src/Catch.js"
import * as Echo from "../src/Echo.js"
import * as Environment from "../src/Environment.js"
import * as Remote from "../src/Remote.js"
import * as Server from "../src/Server.js"
import * as Sudoku from "../src/Sudoku.js"
import * as Tool from "../src/Tool.js"
import * as Wordle from "../src/Wordle.js"
import { counter, CounterAction, CounterObservation } from "./fixtures/Counter.js"

describe("Remote environments", () => {
  it.scopedLive(
    "remote Wordle plays exactly like the in-process one (same seed, same texts and state)",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Wordle.openEnv, { port: 0 })
        for (const seed of [1, 2, 3]) {
          const local = yield* Environment.run(Wordle.environment, { seed }, Wordle.solver())
          const remote = yield* Environment.run(Wordle.remote(s.url), { seed }, Wordle.solver())
          assert.deepStrictEqual(remote.observation, local.observation)
          assert.deepStrictEqual(remote.steps, local.steps)
          assert.deepStrictEqual(remote.state, local.state)
        }
        const bad = yield* Environment.run(Wordle.environment, { seed: 4 }, (ep) =>
          Effect.gen(function*() {
            yield* ep.call("guess", { guess: "[crane]" })
            yield* ep.call("guess", { guess: "[xyzzy]" })
            yield* ep.call("guess", { guess: "nope nope" })
            yield* ep.call("guess", { guess: "[crane]" })
          }))
        const badRemote = yield* Environment.run(Wordle.remote(s.url), { seed: 4 }, (ep) =>
          Effect.gen(function*() {
            yield* ep.call("guess", { guess: "[crane]" })
            yield* ep.call("guess", { guess: "[xyzzy]" })
            yield* ep.call("guess", { guess: "nope nope" })
            yield* ep.call("guess", { guess: "[crane]" })
          }))
        assert.deepStrictEqual(badRemote.steps, bad.steps)
        assert.deepStrictEqual(badRemote.state, bad.state)
        assert.strictEqual(yield* s.activeSessions, 0)
      }),
    { timeout: 60_000 }
  )

  it.scopedLive(
    "remote Sudoku plays exactly like the in-process one (wins, invalid endings, game over)",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Sudoku.openEnv, { port: 0 })
        // A clean solve, and seeded mistakes (some episodes end on two invalid moves in a row).
        for (const [seed, errorRate] of [[1, 0], [2, 0.3], [3, 0.5]] as const) {
          const local = yield* Environment.run(Sudoku.environment, { seed }, Sudoku.solver({ errorRate, seed }))
          const remote = yield* Environment.run(Sudoku.remote(s.url), { seed }, Sudoku.solver({ errorRate, seed }))
          assert.deepStrictEqual(remote.observation, local.observation)
          assert.deepStrictEqual(remote.steps, local.steps)
          assert.deepStrictEqual(remote.state, local.state)
          if (errorRate === 0) assert.isTrue(remote.state.won)
        }
        // Repeats, a pre-filled cell, a bad number twice (game over), then a call after the end.
        const play = (ep: Environment.Episode<unknown>) =>
          Effect.gen(function*() {
            const grid = Sudoku.parseBoard(Option.getOrElse(ep.observation, () => ""))
            const filled = grid.flatMap((row, r) => row.flatMap((v, c) => v !== 0 ? [[r + 1, c + 1, v]] : []))[0]
            yield* ep.call("place", { row: filled[0], col: filled[1], number: filled[2] })
            yield* ep.call("place", { row: 1, col: 1, number: 10 })
            yield* ep.call("place", { row: 9, col: 9, number: 0 })
            yield* ep.call("place", { row: 9, col: 9, number: 0 })
          })
        const local = yield* Environment.run(Sudoku.environment, { seed: 4, difficulty: "medium" }, play)
        const remote = yield* Environment.run(Sudoku.remote(s.url), { seed: 4, difficulty: "medium" }, play)
        assert.deepStrictEqual(remote.steps, local.steps)
        assert.deepStrictEqual(remote.state, local.state)
        assert.isTrue(remote.state.done)
        // The second invalid move ends the game without text: only the server's state says why.
        assert.strictEqual(remote.state.invalid_moves, 2)
        assert.isFalse(remote.state.won)
        assert.strictEqual(remote.steps.at(-1)?.outcome._tag, "Failure")
        assert.strictEqual(yield* s.activeSessions, 0)
      }),
    { timeout: 60_000 }
  )

  it.scopedLive("remote Catch and Echo match their in-process twins", () =>
    Effect.gen(function*() {
      const catchServer = yield* Server.serve(Catch.openEnv, { port: 0 })
      for (const seed of [5, 6]) {
        const local = yield* Environment.run(Catch.environment, { seed }, Catch.solver({ errorRate: 0.3, seed }))
        const remote = yield* Environment.run(
          Catch.remote(catchServer.url),
          { seed },
          Catch.solver({ errorRate: 0.3, seed })
        )
        assert.deepStrictEqual(remote.steps, local.steps)
        assert.deepStrictEqual(remote.state, local.state)
      }
      const echoServer = yield* Server.serve(Echo.openEnv, { port: 0 })
      const play = (ep: Environment.Episode<unknown>) =>
        Effect.gen(function*() {
          yield* ep.call("echo", { message: "hello" })
          yield* ep.call("echo", { message: "" })
        })
      const local = yield* Environment.run(Echo.environment, {}, play)
      const remote = yield* Environment.run(Echo.remote(echoServer.url), {}, play)
      assert.deepStrictEqual(remote.steps, local.steps)
      assert.deepStrictEqual(remote.state, local.state)
    }), { timeout: 60_000 })

  it.scopedLive(
    "a generic typed remote environment from Schemas; a lost server is not a tool text",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(counter({ target: 3 }), { port: 0 })
        const Add = Tool.make("add", {
          description: "Adds delta",
          parameters: { delta: Schema.Int },
          success: Schema.String
        })
        const envOptions = {
          name: "counter",
          action: CounterAction,
          observation: CounterObservation,
          columns: Schema.Struct({ seed: Schema.optional(Schema.Int) }),
          tools: [Add],
          resetOptions: (c: { readonly seed?: number | undefined }) => (c.seed !== undefined ? { seed: c.seed } : {}),
          actionFor: (_tool: string, params: { delta: number }) => ({ delta: params.delta }),
          render: (o: typeof CounterObservation.Type) => `total=${o.total}`
        }
        const env = Remote.environment({ ...envOptions, url: s.url })
        const result = yield* Environment.run(env, { seed: 2 }, (ep) =>
          Effect.gen(function*() {
            assert.strictEqual((yield* ep.call("add", { delta: 2 })).text, "total=2")
            assert.strictEqual((yield* ep.call("add", { delta: 2 })).text, "total=4")
            const over = yield* ep.call("add", { delta: 1 })
            assert.strictEqual(over._tag, "Failure")
          }))
        assert.deepStrictEqual(result.state, {
          done: true,
          reward: 1,
          steps: 2,
          observation: { total: 4, secret: 2 }
        })
        assert.strictEqual(result.observation._tag, "Some")

        // The session's server goes away mid-episode: the tool call dies with the typed SessionLostError (a defect,
        // so it can never be mistaken for a tool text and scored).
        const serverScope = yield* Scope.make()
        const doomed = yield* Server.serve(counter({ target: 100 }), { port: 0 }).pipe(Scope.extend(serverScope))
        const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
          const instance = yield* Remote.environment({ ...envOptions, url: doomed.url }).instance
          yield* instance.reset({})
          yield* instance.invoke("add", { delta: 1 })
          yield* Scope.close(serverScope, Exit.void)
          return yield* instance.invoke("add", { delta: 1 })
        })))
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit)) {
          const defect = Cause.squash(exit.cause) as { _tag?: string }
          assert.strictEqual(defect._tag, "SessionLostError")
        }
      }),
    { timeout: 60_000 }
  )
})
