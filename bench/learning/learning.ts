// Learning evidence per example: evaluation before GRPO (the SFT start) and after, on held-out seeds, with the
// solver's score as the ceiling. Saves bench/results/learning-<example>.{json,md}.
// Usage: tsx bench/learning/learning.ts [catch|wordle|sudoku|echo|multi-env ...] (default: catch)
import { FileSystem } from "@effect/platform"
import { Main } from "@envtrain/harness"
import { Effect } from "effect"
import * as os from "node:os"
import * as Pipeline from "../../examples/src/Pipeline.js"
import * as Recipe from "../../examples/src/Recipe.js"

const recipes: Record<string, Recipe.Recipe<any>> = {
  catch: Recipe.catchRecipe,
  wordle: Recipe.wordleRecipe,
  sudoku: Recipe.sudokuRecipe,
  echo: Recipe.echoRecipe,
  "multi-env": Recipe.multiRecipe
}

/** Same sizes as the flagship demo (examples/src/main.ts) for every example. */
const settings: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 32, errorRate: 0.2, epochs: 3, learningRate: 1e-2, batchSize: 4, maxLength: 1024 },
  grpo: { steps: 6, learningRate: 3e-3, numGenerations: 8, prompts: 1, maxCompletionLength: 800, temperature: 1 },
  evalEpisodes: 16
}

const names = process.argv.slice(2).filter((a) => a in recipes)

Main.run(Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  yield* fs.makeDirectory("bench/results", { recursive: true })
  for (const name of names.length === 0 ? ["catch"] : names) {
    const result = yield* Pipeline.run(recipes[name], { ...settings, out: `runs/bench-${name}` })
    const machine = `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}), load average ${
      os.loadavg().map((x) => x.toFixed(1)).join(" ")
    } at the end`
    const md = [
      `# Learning: ${name} (tiny preset, CPU reference model)`,
      "",
      `Machine: ${machine}. Time: SFT ${result.seconds.sft.toFixed(0)} s, GRPO ${
        result.seconds.grpo.toFixed(0)
      } s, total ${result.seconds.total.toFixed(0)} s.`,
      "",
      Pipeline.formatTable(result),
      "",
      "Settings: `" + JSON.stringify({ sft: result.settings.sft, grpo: result.settings.grpo }) + "`",
      ""
    ].join("\n")
    yield* fs.writeFileString(`bench/results/learning-${name}.json`, JSON.stringify(result, null, 2) + "\n")
    yield* fs.writeFileString(`bench/results/learning-${name}.md`, md)
    yield* Effect.log(`saved bench/results/learning-${name}.{json,md}`)
  }
}))
