import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import { Catch, Environment } from "../src/index.js"

const Seed = Schema.Int.pipe(Schema.between(0, 2 ** 31 - 2))

const play = (seed: number, actions: (i: number) => 0 | 1 | 2) =>
  Effect.scoped(Effect.gen(function*() {
    const instance = yield* Catch.openEnv.make
    const first = yield* instance.reset({ seed })
    const results = [first]
    for (let i = 0; i < 9; i++) {
      results.push(yield* instance.step({ action_id: actions(i), game_name: "catch", game_params: {} }))
    }
    return { results, state: yield* instance.state }
  }))

describe("Catch (OpenEnv level)", () => {
  it.effect.prop("ends after exactly 9 steps with reward +1 or -1, whatever the actions", [
    Seed,
    Schema.Array(Schema.Literal(0, 1, 2))
  ], ([seed, acts]) =>
    Effect.gen(function*() {
      const { results, state } = yield* play(seed, (i) => acts[i] ?? 1)
      assert.strictEqual(results[0].reward, null)
      assert.strictEqual(results[0].observation.game_phase, "initial")
      for (let i = 1; i < 9; i++) {
        assert.isFalse(results[i].done)
        assert.strictEqual(results[i].reward, 0)
        assert.strictEqual(results[i].observation.game_phase, "playing")
        assert.deepStrictEqual(results[i].observation.legal_actions, [0, 1, 2])
      }
      const last = results[9]
      assert.isTrue(last.done)
      assert.include([1, -1], last.reward)
      assert.strictEqual(last.observation.game_phase, "terminal")
      assert.strictEqual(last.observation.current_player_id, -4)
      assert.deepStrictEqual(last.observation.legal_actions, [])
      assert.strictEqual(state.step_count, 9)
      const info = last.observation.info_state as ReadonlyArray<number>
      assert.strictEqual(info.length, 50)
      const ones = info.filter((v) => v === 1).length
      assert.strictEqual(ones, last.reward === 1 ? 1 : 2)
    }), { fastCheck: { numRuns: 60 } })

  it.effect("info_state is row-major with the ball in row 0 and the paddle at column 2 of row 9", () =>
    Effect.scoped(Effect.gen(function*() {
      const instance = yield* Catch.openEnv.make
      const first = yield* instance.reset({ seed: 11 })
      const info = first.observation.info_state as ReadonlyArray<number>
      const ones = info.flatMap((v, i) => v === 1 ? [i] : [])
      assert.strictEqual(ones.length, 2)
      assert.isTrue(ones[0] < 5)
      assert.strictEqual(ones[1], 45 + 2)
    })))

  it.effect("rejects action ids outside {0,1,2} with a clear error and starts a new episode when stepped after the end", () =>
    Effect.scoped(Effect.gen(function*() {
      const instance = yield* Catch.openEnv.make
      yield* instance.reset({ seed: 1 })
      const error = yield* Effect.flip(instance.step({ action_id: 4, game_name: "catch", game_params: {} }))
      assert.include(error.message, "Invalid action_id 4")
      for (let i = 0; i < 9; i++) yield* instance.step({ action_id: 1, game_name: "catch", game_params: {} })
      const again = yield* instance.step({ action_id: 1, game_name: "catch", game_params: {} })
      assert.strictEqual(again.observation.game_phase, "initial")
      assert.strictEqual(again.reward, null)
      assert.isFalse(again.done)
      assert.strictEqual((yield* instance.state).step_count, 10)
    })))

  it("the action Schema rejects unknown keys and fills defaults", () => {
    const decode = Schema.decodeUnknownEither(Catch.openEnv.action)
    assert.deepStrictEqual(decode({ action_id: 1 }), decode({ action_id: 1, game_name: "catch", game_params: {} }))
    assert.strictEqual(decode({ action_id: 1, bogus: true })._tag, "Left")
    assert.strictEqual(decode({ action_id: 1, metadata: { a: 1 } })._tag, "Right")
  })
})

describe("Catch (tools)", () => {
  it.effect.prop("the perfect solver always catches, in exactly 9 calls", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Catch.environment, { seed }, Catch.solver())
      assert.strictEqual(result.steps.length, 9)
      assert.isTrue(result.state.done)
      assert.isTrue(result.state.caught)
      assert.strictEqual(Catch.reward(result.state), 1)
    }), { fastCheck: { numRuns: 100 } })

  it.effect("formats the observation like TRL and answers 'Episode is done.' after the end", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Catch.environment, { seed: 5 }, (episode) =>
        Effect.gen(function*() {
          for (let i = 0; i < 10; i++) yield* episode.call("stay", {})
        }))
      const first = Option.getOrThrow(result.observation)
      assert.match(first, /^Ball: row 1\/10, column [1-5]\/5\nPaddle: column 3\/5\nThe ball is /)
      const last = result.steps[9].outcome
      assert.strictEqual(last._tag, "Failure")
      assert.strictEqual(last.text, "{'error': 'Episode is done.'}")
      assert.strictEqual(result.counters.calls, 10)
      assert.strictEqual(result.counters.failures, 1)
      // At the end the ball is on the paddle row, which TRL's formatter reads as the paddle.
      assert.notInclude(result.steps[8].outcome.text, "Ball:")
    }))

  it.effect.prop("same seed, same episode", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const a = yield* Environment.run(Catch.environment, { seed }, Catch.solver({ errorRate: 0.3, seed }))
      const b = yield* Environment.run(Catch.environment, { seed }, Catch.solver({ errorRate: 0.3, seed }))
      assert.deepStrictEqual(a, b)
    }), { fastCheck: { numRuns: 30 } })

  it.effect("an imperfect solver sometimes misses", () =>
    Effect.gen(function*() {
      let missed = 0
      for (let seed = 0; seed < 60; seed++) {
        const r = yield* Environment.run(Catch.environment, { seed }, Catch.solver({ errorRate: 0.5, seed }))
        if (!r.state.caught) missed++
      }
      assert.isAbove(missed, 0)
      assert.isBelow(missed, 60)
    }))
})
