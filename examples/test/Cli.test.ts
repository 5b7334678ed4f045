import { Command } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Recipe } from "@envtrain/grpo"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Cli from "../src/Cli.js"
import * as Pipeline from "../src/Pipeline.js"

// Each bad flag is refused before anything runs (no model, no data): the message names the flag and the fix.
const refusal = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const command = Cli.command(Recipe.catchRecipe, { ...Pipeline.defaults, verbose: false }, "catch")
    const error = yield* Effect.flip(
      Command.run(command, { name: "catch", version: "0.0.0" })(["node", "catch.ts", ...args])
    )
    assert.strictEqual((error as { _tag: string })._tag, "FlagError", String(error))
    return (error as Cli.FlagError).message
  }).pipe(Effect.provide(NodeContext.layer))

describe("example flags", () => {
  it.effect("every bad value names its flag and the fix", () =>
    Effect.gen(function*() {
      assert.strictEqual(
        yield* refusal(["--sft-episodes", "0"]),
        "--sft-episodes: 0: the SFT warm-up needs at least 1 solver episode (4 fill a batch); to skip the warm-up, " +
          "start from a checkpoint with --sft-from DIR"
      )
      assert.match(yield* refusal(["--error-rate", "1.5"]), /^--error-rate: 1.5 is not a rate between 0 and 1/)
      assert.match(yield* refusal(["--num-generations", "1"]), /^--num-generations: 1: a GRPO group needs at least 2/)
      assert.match(yield* refusal(["--steps", "0"]), /^--steps: 0: give at least 1 GRPO step/)
      assert.match(yield* refusal(["--num-iterations", "0"]), /^--num-iterations: 0: give a whole number of updates/)
      assert.match(yield* refusal(["--lr", "-1"]), /^--lr: -1: give a learning rate > 0/)
      assert.match(yield* refusal(["--eval-episodes", "0"]), /^--eval-episodes: 0/)
      assert.match(yield* refusal(["--episodes-in-flight", "0"]), /^--episodes-in-flight: 0: give a whole number/)
      assert.match(yield* refusal(["--seed", "-3"]), /^--seed: -3 is not a whole number/)
      assert.match(yield* refusal(["--env-concurrency", "2"]), /^--env-concurrency: 2: .*with --env-url/)
      assert.match(
        yield* refusal(["--env-url", "http://127.0.0.1:1", "--env-concurrency", "0"]),
        /^--env-concurrency: 0: give at least 1 session/
      )
      assert.strictEqual(
        yield* refusal(["--sft-from", "/tmp", "--sft-lr", "0.1", "--error-rate", "0.1"]),
        "--sft-from: skips the SFT warm-up, so --error-rate, --sft-lr would change nothing: drop them or drop --sft-from"
      )
      assert.strictEqual(
        yield* refusal(["--sft-from", "/tmp", "--sft-player", "hesitant"]),
        "--sft-from: skips the SFT warm-up, so --sft-player would change nothing: drop it or drop --sft-from"
      )
    }))

  it.effect("--sft-player picks a named scripted player; a recipe without one names the fix", () =>
    Effect.gen(function*() {
      const hesitant = yield* Recipe.withPlayer(Recipe.catchRecipe, "hesitant")
      assert.strictEqual(hesitant.player, Recipe.catchRecipe.playerVariants?.hesitant)
      assert.strictEqual(yield* Recipe.withPlayer(Recipe.catchRecipe, undefined), Recipe.catchRecipe)
      const wordle = yield* Effect.flip(Recipe.withPlayer(Recipe.wordleRecipe, "hesitant"))
      assert.strictEqual(wordle.message, "wordle: this example has one scripted player; drop --sft-player hesitant")
      const unknown = yield* Effect.flip(Recipe.withPlayer(Recipe.catchRecipe, "lazy"))
      assert.strictEqual(unknown.message, "catch: no scripted player named \"lazy\": choose one of solver, hesitant")
      const confused = yield* Recipe.withPlayer(Recipe.browsergymRecipe, "confused")
      assert.strictEqual(confused.player, Recipe.browsergymRecipe.playerVariants?.confused)
    }))
})

describe("README", () => {
  it("teaches the environment of examples/src/environments/echo.ts verbatim (a block that compiles and is trained)", () => {
    const root = path.resolve(__dirname, "../..")
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
    const file = fs.readFileSync(path.join(root, "examples/src/environments/echo.ts"), "utf8")
    assert.include(readme, "```ts\n" + file + "```\n")
    assert.isAtMost(file.trimEnd().split("\n").length, 30)
  })
})
