// The multi-environment example against two servers, one per environment (`--wordle-url`, `--catch-url`), as the
// seed's script takes them: a server serves one environment.
import { Command } from "@effect/cli"
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Environment, Server, Wordle } from "@envtrain/env"
import type { OpenEnv } from "@envtrain/env"
import { Recipe } from "@envtrain/grpo"
import { Effect } from "effect"
import * as Cli from "../src/Cli.js"
import * as Pipeline from "../src/Pipeline.js"

/** A definition that counts the instances its server makes (one per session). */
const counted = (definition: OpenEnv.OpenEnvDefinition) => {
  const made = { count: 0 }
  return {
    made,
    definition: {
      ...definition,
      make: Effect.tap(definition.make, () => Effect.sync(() => made.count++))
    } satisfies OpenEnv.OpenEnvDefinition
  }
}

/** The multi-env program's flags at a tiny size: one GRPO step, two held-out episodes. */
const tinyFlags = (out: string) => [
  "--out",
  out,
  "--sft-episodes",
  "2",
  "--sft-epochs",
  "1",
  "--steps",
  "1",
  "--num-generations",
  "2",
  "--prompts",
  "1",
  "--max-completion-length",
  "24",
  "--eval-episodes",
  "2"
]

describe("multi-env served by two servers", () => {
  it.scopedLive(
    "the program with --wordle-url and --catch-url trains and evaluates against both servers",
    () =>
      Effect.gen(function*() {
        const wordle = counted(Wordle.openEnv)
        const catchGame = counted(Catch.openEnv)
        const wordleServer = yield* Server.serve(wordle.definition, { port: 0 })
        const catchServer = yield* Server.serve(catchGame.definition, { port: 0 })
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const command = Cli.command(Recipe.multiRecipe, { ...Pipeline.defaults, verbose: false }, "multi-env")
        yield* Command.run(command, { name: "multi-env", version: "0.0.0" })([
          "node",
          "multiEnv.ts",
          "--wordle-url",
          wordleServer.url,
          "--catch-url",
          catchServer.url,
          ...tinyFlags(dir)
        ])
        const saved = JSON.parse(yield* fs.readFileString(path.join(dir, "eval.json"))) as Pipeline.RunResult
        assert.deepStrictEqual(saved.settings.envUrls, { wordle: wordleServer.url, catch: catchServer.url })
        assert.strictEqual(saved.after.episodes, 2)
        // Rows alternate Wordle / Catch: each server played its own environment's episodes (SFT data, evaluations,
        // the GRPO group of the Wordle row, the solver and player scores), and the solver won them all.
        assert.isAtLeast(wordle.made.count, 5)
        assert.isAtLeast(catchGame.made.count, 4)
        assert.strictEqual(saved.solver.successRate, 1)
        const metrics = (yield* fs.readFileString(path.join(dir, "metrics.jsonl"))).trim().split("\n")
        assert.strictEqual(metrics.length, 1)
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scopedLive("served episodes play as the in-process ones (same seeds, same observations and states)", () =>
    Effect.gen(function*() {
      const wordleServer = yield* Server.serve(Wordle.openEnv, { port: 0 })
      const catchServer = yield* Server.serve(Catch.openEnv, { port: 0 })
      const served = yield* Recipe.environmentOf(Recipe.multiRecipe, {
        envUrls: { wordle: wordleServer.url, catch: catchServer.url }
      })
      for (const seed of [4, 5]) {
        const row = { seed, ...Recipe.multiRecipe.columns?.(seed) }
        const player = Recipe.multiRecipe.player({ errorRate: 0.3, seed })
        const local = yield* Environment.run(Recipe.multiRecipe.environment, row, player)
        const remote = yield* Environment.run(served, row, Recipe.multiRecipe.player({ errorRate: 0.3, seed }))
        assert.deepStrictEqual(remote.observation, local.observation)
        assert.deepStrictEqual(remote.steps.map((s) => s.outcome), local.steps.map((s) => s.outcome))
        assert.deepStrictEqual(remote.state, local.state)
      }
    }))

  it.effect("one URL for both, an unknown environment, or both kinds of URL are refused, saying what to give", () =>
    Effect.gen(function*() {
      const one = yield* Effect.flip(Recipe.environmentOf(Recipe.multiRecipe, { envUrl: "http://127.0.0.1:1" }))
      assert.strictEqual(
        one.message,
        "multi-env: a server serves one environment, so this example takes one URL per environment: --wordle-url " +
          "and --catch-url (e.g. servers started with `envtrain serve wordle` and `envtrain serve catch`) instead " +
          "of --env-url"
      )
      const unknown = yield* Effect.flip(
        Recipe.environmentOf(Recipe.multiRecipe, { envUrls: { sudoku: "http://127.0.0.1:1" } })
      )
      assert.strictEqual(
        unknown.message,
        "multi-env: no environment named sudoku: the served environments are given with --wordle-url and --catch-url"
      )
      const both = yield* Effect.flip(
        Recipe.environmentOf(Recipe.multiRecipe, { envUrl: "http://a:1", envUrls: { wordle: "http://b:1" } })
      )
      assert.strictEqual(both.message, "multi-env: give either --env-url or --wordle-url, not both")
      const single = yield* Effect.flip(
        Recipe.environmentOf(Recipe.catchRecipe, { envUrls: { catch: "http://127.0.0.1:1" } })
      )
      assert.include(single.message, "give its server with --env-url")
    }))
})
