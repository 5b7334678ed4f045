// The Wordle example's rewards, on real games (the secret pinned): the seed's set by default, the shaped set by name.
import { assert, describe, it } from "@effect/vitest"
import { Environment, Wordle } from "@envtrain/env"
import { Recipe, type Reward } from "@envtrain/grpo"
import { Effect } from "effect"
import * as Pipeline from "../src/Pipeline.js"

/** Plays the guesses (each wrapped as `[word]`) against the secret "jewel" and returns the final reward state. */
const play = (...guesses: ReadonlyArray<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const episode = yield* Environment.episode(Wordle.environment, { secret: "jewel" })
    for (const g of guesses) yield* episode.call("guess", { guess: `[${g}]` })
    return yield* episode.state
  }))

/** Each reward function's value for one final state, by name. */
const scores = (rewards: ReadonlyArray<Reward.RewardFunction<Wordle.State, any, any, any, any>>, state: Wordle.State) =>
  Effect.map(
    Effect.forEach(rewards, (f) =>
      Effect.map(
        Effect.orDie(f.score({
          prompts: [[]],
          completions: [[]],
          completionIds: [[]],
          environments: [state],
          columns: [{}],
          trainerState: { globalStep: 0, maxSteps: 0, epoch: 0 }
        })),
        (v) => [f.name, v[0] ?? null] as const
      )),
    (pairs) => Object.fromEntries(pairs)
  )

const close = (actual: Record<string, number | null>, expected: Record<string, number>) => {
  assert.deepStrictEqual(Object.keys(actual).sort(), Object.keys(expected).sort())
  for (const [k, v] of Object.entries(expected)) assert.closeTo(actual[k] ?? NaN, v, 1e-12, k)
}

const seed = (win: number, greens: number, invalid: number) => ({
  wordle_win: win,
  wordle_greens: greens,
  wordle_invalid: invalid
})

describe("Wordle rewards: the seed's (default)", () => {
  it("the recipe's default set is the seed's, and it is the `seed` variant", () => {
    assert.deepStrictEqual(Recipe.wordleRecipe.rewardFunctions, Recipe.wordleRewards)
    assert.deepStrictEqual(Object.keys(Recipe.wordleRecipe.rewardVariants ?? {}), ["seed", "shaped"])
    assert.strictEqual(Recipe.wordleRecipe.rewardVariants?.seed, Recipe.wordleRewards)
  })

  it.effect("a win pays 1 + 0.5·(1 − guesses/6), and no greens", () =>
    Effect.gen(function*() {
      const first = yield* play("jewel")
      assert.isTrue(first.won)
      close(yield* scores(Recipe.wordleRewards, first), seed(1 + 0.5 * (5 / 6), 0, 0))
      // Three guesses, the second with 3 greens: greens are not paid on a win.
      const third = yield* play("crane", "level", "jewel")
      assert.strictEqual(third.num_guesses, 3)
      close(yield* scores(Recipe.wordleRewards, third), seed(1.25, 0, 0))
      const sixth = yield* play("crane", "slate", "pious", "mound", "tight", "jewel")
      assert.isTrue(sixth.won)
      close(yield* scores(Recipe.wordleRewards, sixth), seed(1, 0, 0))
    }))

  it.effect("a loss pays 0.1 per green of the best guess", () =>
    Effect.gen(function*() {
      const lost = yield* play("crane", "level", "pious", "mound", "tight", "brick")
      assert.isTrue(lost.done && !lost.won)
      assert.strictEqual(lost.best_greens, 3)
      close(yield* scores(Recipe.wordleRewards, lost), seed(0, 0.3, 0))
      // An episode cut short (not done) is not a win either: its greens are paid the same way.
      const cut = yield* play("bezel")
      assert.isFalse(cut.done)
      close(yield* scores(Recipe.wordleRewards, cut), seed(0, 0.3, 0))
      const none = yield* play("pious", "mound", "tight", "brick", "grasp", "stork")
      assert.isTrue(none.done && !none.won && none.invalid_moves === 0)
      close(yield* scores(Recipe.wordleRewards, none), seed(0, 0, 0))
    }))

  it.effect("each invalid move costs 0.1, win or loss", () =>
    Effect.gen(function*() {
      const won = yield* play("zzzzz", "level", "qqqqq", "jewel")
      assert.strictEqual(won.invalid_moves, 2)
      assert.strictEqual(won.num_guesses, 2)
      close(yield* scores(Recipe.wordleRewards, won), seed(1 + 0.5 * (4 / 6), 0, -0.2))
      // Two invalid moves in a row end the game: a loss with no valid guess.
      const lost = yield* play("zzzzz", "qqqqq")
      assert.isTrue(lost.done && !lost.won)
      close(yield* scores(Recipe.wordleRewards, lost), seed(0, 0, -0.2))
    }))

  it.effect("the shaped variant: 1 + 0.1 per unused attempt, greens/5 win or loss, −0.5 per invalid move", () =>
    Effect.gen(function*() {
      const shaped = Recipe.wordleShapedRewards
      const s = (win: number, greens: number, invalid: number) => ({
        wordle_win_shaped: win,
        wordle_greens_shaped: greens,
        wordle_invalid_shaped: invalid
      })
      close(yield* scores(shaped, yield* play("crane", "level", "jewel")), s(1.3, 1, 0))
      close(yield* scores(shaped, yield* play("crane", "level", "pious", "mound", "tight", "brick")), s(0, 0.6, 0))
      close(yield* scores(shaped, yield* play("zzzzz", "level", "qqqqq", "jewel")), s(1.4, 1, -1))
    }))
})

describe("choosing a reward set", () => {
  it.effect("withRewards: by name; an unknown name or a recipe with one set is refused, naming the choices", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* Recipe.withRewards(Recipe.wordleRecipe, undefined), Recipe.wordleRecipe)
      const shaped = yield* Recipe.withRewards(Recipe.wordleRecipe, "shaped")
      assert.strictEqual(shaped.rewardFunctions, Recipe.wordleShapedRewards)
      const bad = yield* Effect.flip(Recipe.withRewards(Recipe.wordleRecipe, "dense"))
      assert.strictEqual(bad.message, `wordle: no reward set named "dense": choose one of seed, shaped`)
      const one = yield* Effect.flip(Recipe.withRewards(Recipe.sudokuRecipe, "shaped"))
      assert.strictEqual(one.message, "sudoku: this example has one reward set; drop --rewards shaped")
      const catchShaped = yield* Recipe.withRewards(Recipe.catchRecipe, "shaped")
      assert.deepStrictEqual(catchShaped.rewardFunctions.map((f) => f.name), ["catch", "catch_reads_board"])
    }))

  it.effect("a run's players are scored with the chosen set (the solver wins every game)", () =>
    Effect.gen(function*() {
      const seeds = [0, 1, 2, 3]
      const seedSet = yield* Pipeline.playerScore(Recipe.wordleRecipe, seeds, 0)
      const shapedSet = yield* Pipeline.playerScore(
        yield* Recipe.withRewards(Recipe.wordleRecipe, "shaped"),
        seeds,
        0
      )
      assert.strictEqual(seedSet.successRate, 1)
      // A win pays at most 1.417 in the seed's set; the shaped set adds the greens and a larger bonus.
      assert.isAtMost(seedSet.meanReward ?? Infinity, 1 + 0.5 * (5 / 6))
      assert.isAbove(shapedSet.meanReward ?? 0, seedSet.meanReward ?? Infinity)
    }))
})
