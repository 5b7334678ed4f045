import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Catch, Echo, Sudoku, Wordle } from "../src/index.js"
import type { OpenEnvDefinition } from "../src/OpenEnv.js"

const Seed = Schema.Int.pipe(Schema.between(0, 2 ** 31 - 2))

const replay = <A>(definition: OpenEnvDefinition<A>, seed: number, actions: ReadonlyArray<A>) =>
  Effect.scoped(Effect.gen(function*() {
    const instance = yield* definition.make
    const results = [yield* instance.reset({ seed, episode_id: "fixed" })]
    for (const action of actions) results.push(yield* instance.step(action))
    return { results, state: yield* instance.state }
  }))

describe("same seed, same episode (OpenEnv level)", () => {
  it.effect.prop("Wordle, Sudoku and Catch", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const wordle = ["crane", "[slate]", "bogus", "[pious]"].map((message) => ({ message }))
      assert.deepStrictEqual(yield* replay(Wordle.openEnv, seed, wordle), yield* replay(Wordle.openEnv, seed, wordle))
      const sudoku = ["[1 1 1]", "[5 5 5]", "[9 9 9]"].map((message) => ({ message }))
      assert.deepStrictEqual(yield* replay(Sudoku.openEnv, seed, sudoku), yield* replay(Sudoku.openEnv, seed, sudoku))
      const moves = [0, 2, 2, 1, 0, 1, 2, 0, 1, 1, 2].map((action_id) => ({
        action_id,
        game_name: "catch",
        game_params: {}
      }))
      const a = yield* replay(Catch.openEnv, seed, moves)
      const b = yield* replay(Catch.openEnv, seed, moves)
      // OpenSpiel ignores a given episode_id (a fresh uuid each reset); everything else must match.
      assert.deepStrictEqual(a.results, b.results)
      assert.deepStrictEqual({ ...a.state, episode_id: null }, { ...b.state, episode_id: null })
    }), { fastCheck: { numRuns: 15 } })

  it.effect("different seeds give different Wordle secrets and Sudoku boards", () =>
    Effect.gen(function*() {
      const secrets = new Set<string>()
      const boards = new Set<string>()
      for (let seed = 0; seed < 20; seed++) {
        const w = yield* replay(Wordle.openEnv, seed, [])
        secrets.add((w.state.raw_state as { game_state: { secret_word: string } }).game_state.secret_word)
        const s = yield* replay(Sudoku.openEnv, seed, [])
        boards.add(JSON.stringify((s.state.raw_state as { game_state: unknown }).game_state))
      }
      assert.isAbove(secrets.size, 15)
      assert.isAbove(boards.size, 15)
    }))

  it("every built-in environment links its OpenEnv twin", () => {
    assert.strictEqual(Catch.environment.openEnv, Catch.openEnv)
    assert.strictEqual(Echo.environment.openEnv, Echo.openEnv)
    assert.strictEqual(Wordle.environment.openEnv, Wordle.openEnv)
    assert.strictEqual(Sudoku.environment.openEnv, Sudoku.openEnv)
  })
})
