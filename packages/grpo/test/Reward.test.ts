import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as Advantage from "../src/Advantage.js"
import * as Reward from "../src/Reward.js"

interface Game {
  readonly kind: "wordle" | "catch"
  readonly won: boolean
}

const trainerState = { globalStep: 3, maxSteps: 10, epoch: 0 }

const episode = (game: Game, text: string, unscoreable?: string): Reward.Episode<Game, string, string> => ({
  prompt: `p-${game.kind}`,
  completion: text,
  completionIds: Array.from(text, (c) => c.charCodeAt(0)),
  environment: game,
  columns: { env: game.kind },
  ...(unscoreable === undefined ? {} : { unscoreable: { reason: unscoreable } })
})

const episodes = [
  episode({ kind: "wordle", won: true }, "abc"),
  episode({ kind: "wordle", won: false }, "abcdef"),
  episode({ kind: "catch", won: true }, "ab", undefined),
  episode({ kind: "catch", won: false }, "x", "session lost")
]

describe("Reward.score", () => {
  it.effect("combines plain, per-episode, Effect and environment-owned functions with weights", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      const wordle = Reward.perEpisode<Game, string, string>(
        "wordle_reward",
        (e) => e.columns.env === "wordle" ? (e.environment.won ? 1 : 0) : null
      )
      const length = Reward.make<Game, string, string>("length", (args) => {
        seen.push(args.completions.length)
        assert.deepStrictEqual(args.trainerState, trainerState)
        return args.completionIds.map((ids) => -ids.length)
      })
      const effectful = Reward.perEpisode<Game, string, string>(
        "effectful",
        (e) => Effect.succeed(e.completion.length > 2 ? 0.5 : null)
      )
      const owned = Reward.fromEnvironment<Game, Game & { kind: "catch" }>(
        "CatchEnv",
        (g): g is Game & { kind: "catch" } => g.kind === "catch",
        (g) => (g.won ? 10 : -10)
      )
      const table = yield* Reward.score([owned, wordle, length, effectful], episodes, {
        weights: [2, 0.1, 1],
        trainerState
      })
      // unscoreable episodes are not shown to reward functions
      assert.deepStrictEqual(seen, [3])
      assert.deepStrictEqual(table.names, ["wordle_reward", "length", "effectful", "CatchEnv"])
      assert.deepStrictEqual(table.weights, [2, 0.1, 1, 1])
      const row = (i: number) => Array.from(table.values.subarray(i * 4, i * 4 + 4))
      assert.deepStrictEqual(row(0), [1, -3, 0.5, NaN])
      assert.deepStrictEqual(row(2), [NaN, -2, NaN, 10])
      assert.isTrue(row(3).every(Number.isNaN))
      assert.deepStrictEqual(table.unscoreable, [undefined, undefined, undefined, "session lost"])
      const close = (a: number, b: number) => assert.isBelow(Math.abs(a - b), 1e-12)
      close(table.rewards[0], 2 - 0.3 + 0.5)
      close(table.rewards[1], 0 - 0.6 + 0.5)
      close(table.rewards[2], -0.2 + 10)
      assert.isTrue(Number.isNaN(table.rewards[3]))

      const m = Reward.metrics(table)
      close(m["rewards/wordle_reward/mean"], 0.5)
      close(m["rewards/wordle_reward/std"], Math.SQRT1_2)
      close(m["rewards/length/mean"], -11 / 3)
      assert.isTrue(Number.isNaN(m["rewards/CatchEnv/std"])) // one value: Bessel std undefined
      close(m["reward"], (2.2 - 0.1 + 9.8) / 3)
      assert.isTrue(Number.isFinite(m["reward_std"]))

      // the table feeds the advantages directly; the lost episode stays out of its group
      const adv = Advantage.compute(table, { numGenerations: 2 })
      assert.deepStrictEqual(Array.from(adv.rowMask), [1, 1, 1, 0])
      assert.strictEqual(adv.advantages[2], 0) // alone in its group
    }))

  it.effect("an episode every function declined is unscoreable, with a reason", () =>
    Effect.gen(function*() {
      const none = Reward.make<Game, string, string>("never", (args) => args.prompts.map(() => null))
      const table = yield* Reward.score([none], episodes.slice(0, 2), { trainerState })
      assert.deepStrictEqual(table.unscoreable, [Reward.allNullReason, Reward.allNullReason])
      assert.isTrue(Number.isNaN(Reward.metrics(table)["reward"]))
    }))

  it.effect("refuses wrong lengths, infinite values and mismatched weights with a message", () =>
    Effect.gen(function*() {
      const short = Reward.make<Game, string, string>("short", () => [1])
      const e1 = yield* Effect.flip(Reward.score([short], episodes, { trainerState }))
      assert.match(e1.message, /"short" returned 1 values for 3 episodes/)
      const inf = Reward.make<Game, string, string>("inf", (args) => args.prompts.map(() => Infinity))
      const e2 = yield* Effect.flip(Reward.score([inf], episodes, { trainerState }))
      assert.match(e2.message, /return a finite number, or null/)
      const e3 = yield* Effect.flip(Reward.score([short], episodes, { trainerState, weights: [1, 2] }))
      assert.match(e3.message, /2 weights for 1 user reward functions/)
      const failing = Reward.perEpisode<Game, string, string, string>("remote", () => Effect.fail("boom"))
      const exit = yield* Effect.exit(Reward.score([failing], episodes, { trainerState }))
      assert.deepStrictEqual(exit, Exit.fail("boom"))
    }))
})
