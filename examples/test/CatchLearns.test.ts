// The main job's recipe learns: a shortened `npm start` (the demo's SFT, half its GRPO steps, half its held-out
// episodes) raises held-out success over the SFT start on two seeds. The SFT is kept whole: with fewer steps the
// tiny model has not yet learnt to read the board (bench/results/learning-catch.md), and GRPO cannot build that.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Recipe } from "@envtrain/grpo"
import { Effect } from "effect"
import * as Pipeline from "../src/Pipeline.js"
import * as Sizes from "../src/Sizes.js"

const shortened = (seed: number, out: string): Pipeline.Settings => ({
  ...Sizes.catchDemo,
  seed,
  out,
  verbose: false,
  grpo: { ...Sizes.catchDemo.grpo, steps: 12 },
  evalEpisodes: 32
})

describe("Catch's main-job recipe", () => {
  for (const seed of [0, 1]) {
    it.scoped(
      `raises held-out success over the SFT start (seed ${seed})`,
      () =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const out = yield* fs.makeTempDirectoryScoped()
          const result = yield* Pipeline.run(Recipe.catchRecipe, shortened(seed, out))
          const before = result.before.successRate ?? 0
          const after = result.after.successRate ?? 0
          // The SFT start leaves room (the hesitant player never sets off toward a far ball), and GRPO gains at
          // least 10 points of it.
          assert.isAtMost(before, 0.75, `SFT start ${before}: no room left for GRPO`)
          assert.isAtLeast(after - before, 0.1, `held-out success ${before} -> ${after}`)
          assert.isBelow(result.flatSteps.flat.length, result.flatSteps.steps, "every GRPO step was flat")
        }).pipe(Effect.provide(NodeContext.layer)),
      1_200_000
    )
  }
})
