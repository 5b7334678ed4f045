import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Schema } from "effect"
import * as Definition from "../src/Definition.js"
import * as Environment from "../src/Environment.js"
import * as MultiEnv from "../src/MultiEnv.js"

// An environment that reads one declared column, `level`; the dataset also has `answer` and `note`.
const levels = Definition.make({
  name: "levels",
  description: "Says its level.",
  columns: Schema.Struct({ seed: Schema.optional(Schema.Int), level: Schema.Int }),
  start: ({ level }) => ({ level }),
  observation: (state) => `level ${state.level}`,
  tools: { noop: { description: "Nothing.", parameters: {}, run: () => "ok" } },
  reward: () => 0
})

const logged = (warnings: Array<string>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ logLevel, message }) => {
      if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) warnings.push(String(message))
    })
  )

const observe = (env: Environment.Environment<any, any>, row: Environment.Row) =>
  Effect.map(Environment.run(env, row, () => Effect.void), (r) => r.observation)

describe("dataset columns an environment does not declare", () => {
  it.effect("are said once per environment (not dropped without a word); reset gets the declared ones", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      yield* Effect.gen(function*() {
        for (const seed of [0, 1, 2]) {
          const observation = yield* observe(levels.environment, { seed, level: 2, answer: "x", note: "y" })
          assert.strictEqual(observation._tag === "Some" && observation.value, "level 2")
        }
        // A new undeclared column is said too, once; declared rows say nothing.
        yield* observe(levels.environment, { seed: 3, level: 1, extra: 1 })
        yield* observe(levels.environment, { seed: 4, level: 1 })
        // Routed: the route column is the router's; the sub-environment's own undeclared ones are said.
        const routed = MultiEnv.make({ name: "multi", column: "env", environments: { levels: levels.environment } })
        yield* observe(routed, { env: "levels", level: 3, hint: "h" })
      }).pipe(Effect.provide(logged(warnings)))
      assert.deepStrictEqual(warnings, [
        "environment 'levels': the dataset's columns answer, note are not in its columns Schema, so reset does not " +
        "receive them (reward functions do): declare them in columns to use them in start/reset; strictColumns: true " +
        "refuses such rows",
        "environment 'levels': the dataset's column extra is not in its columns Schema, so reset does not receive " +
        "them (reward functions do): declare them in columns to use them in start/reset; strictColumns: true " +
        "refuses such rows",
        "environment 'levels': the dataset's column hint is not in its columns Schema, so reset does not receive " +
        "them (reward functions do): declare them in columns to use them in start/reset; strictColumns: true " +
        "refuses such rows"
      ])
    }))

  it.effect("are refused under StrictColumns, naming them and the fix", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.flip(observe(levels.environment, { seed: 0, level: 2, answer: "x" }))
      assert.strictEqual(refused._tag, "InvalidColumns")
      assert.strictEqual(
        refused.message,
        "the dataset's column answer is not in environment 'levels''s columns Schema (strictColumns is set): " +
          "declare them in the environment's columns, or remove them from the dataset"
      )
      // Declared columns (and the rollout's seed) pass.
      const observation = yield* observe(levels.environment, { seed: 0, level: 2 })
      assert.strictEqual(observation._tag === "Some" && observation.value, "level 2")
    }).pipe(Effect.provideService(Environment.StrictColumns, true)))
})
