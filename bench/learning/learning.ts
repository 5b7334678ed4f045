// Learning evidence per example: evaluation before GRPO (the SFT start) and after, on held-out seeds, with the
// solver's score as the ceiling. Saves bench/results/learning-<example>.{json,md}.
// Usage: tsx bench/learning/learning.ts [catch|wordle|wordle-shaped|sudoku|echo|multi-env ...] [--smoke]
// (default: catch). `wordle` trains with the seed's rewards (the example's default), `wordle-shaped` with the shaped
// set (`--rewards shaped`). `--smoke` runs each at a few steps' size to check the bench works: it prints the
// table and saves nothing under bench/results.
import { FileSystem } from "@effect/platform"
import { Main } from "@envtrain/harness"
import { Effect } from "effect"
import * as os from "node:os"
import * as Pipeline from "../../examples/src/Pipeline.js"
import * as Recipe from "../../examples/src/Recipe.js"
import * as Sizes from "../../examples/src/Sizes.js"

const examples: Record<string, { readonly recipe: Recipe.Recipe<any>; readonly settings: Pipeline.Settings }> = {
  catch: { recipe: Recipe.catchRecipe, settings: Sizes.catchDemo },
  wordle: { recipe: Recipe.wordleRecipe, settings: { ...Sizes.wordle, rewards: "seed" } },
  "wordle-shaped": { recipe: Recipe.wordleRecipe, settings: { ...Sizes.wordle, rewards: "shaped" } },
  sudoku: { recipe: Recipe.sudokuRecipe, settings: Sizes.sudoku },
  echo: { recipe: Recipe.echoRecipe, settings: Sizes.echo },
  "multi-env": { recipe: Recipe.multiRecipe, settings: Sizes.multiEnv }
}

const pct = (x: number | null) => x === null ? "-" : `${(x * 100).toFixed(1)} %`
const points = (x: number) => `${(x * 100).toFixed(1)} points`

/** The targets for the tiny preset, checked against the run (met, or missed by how much). */
const targets = (name: string, r: Pipeline.RunResult): Array<string> => {
  const before = r.before.successRate ?? 0
  const after = r.after.successRate ?? 0
  const verdict = (ok: boolean, what: string, by: string) => `${ok ? "MET" : "MISSED"}: ${what} (${by})`
  switch (name) {
    case "catch":
      return [
        verdict(after >= 0.95, "success after GRPO >= 95 %", `${pct(after)}`),
        verdict(after - before >= 0.25, "at least 25 points above the SFT start", `${points(after - before)}`)
      ]
    case "wordle":
    case "wordle-shaped": {
      const inv = [r.before.details.invalid_per_game, r.after.details.invalid_per_game]
      const rep = [r.before.details.repeated_per_game, r.after.details.repeated_per_game]
      return [
        verdict(after - before >= 0.1, "win rate at least 10 points above the SFT start", points(after - before)),
        verdict((inv[1] ?? 0) < (inv[0] ?? 0), "fewer invalid guesses", `${inv[0]} -> ${inv[1]} per game`),
        verdict((rep[1] ?? 0) < (rep[0] ?? 0), "fewer repeated guesses", `${rep[0]} -> ${rep[1]} per game`)
      ]
    }
    case "sudoku": {
      const fill = [r.before.details.fill_rate ?? 0, r.after.details.fill_rate ?? 0]
      return [verdict(fill[1] > fill[0], "fill rate above the SFT start", `${fill[0]} -> ${fill[1]}`)]
    }
    default:
      return [`no target in the issue; success ${pct(before)} -> ${pct(after)}`]
  }
}

const args = process.argv.slice(2)
const smoke = args.includes("--smoke")
const unknown = args.filter((a) => a !== "--smoke" && !(a in examples))
if (unknown.length > 0) {
  console.error(`unknown argument(s) ${unknown.join(" ")}: give examples among ${Object.keys(examples).join(", ")}`)
  process.exit(2)
}
const names = args.filter((a) => a in examples)

/** A few steps at tiny sizes: the bench's path, not its numbers. */
const smokeSizes = (settings: Pipeline.Settings): Pipeline.Settings => ({
  ...settings,
  verbose: false,
  sft: { ...settings.sft, episodes: 4, epochs: 1, batchSize: 2, maxLength: 200 },
  grpo: { ...settings.grpo, steps: 2, numGenerations: 2, prompts: 1, maxCompletionLength: 48 },
  evalEpisodes: 2
})

Main.run(Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  yield* fs.makeDirectory("bench/results", { recursive: true })
  for (const name of names.length === 0 ? ["catch"] : names) {
    const { recipe, settings } = examples[name]
    const run = smoke ? smokeSizes(settings) : settings
    const result = yield* Pipeline.run(recipe, { ...run, out: `runs/bench-${smoke ? "smoke-" : ""}${name}` })
    const machine = `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}), load average ${
      os.loadavg().map((x) => x.toFixed(1)).join(" ")
    } at the end`
    const md = [
      `# Learning: ${name} (tiny preset, CPU reference model)`,
      "",
      ...(result.settings.rewards === undefined
        ? []
        : [
          `Rewards: ${result.settings.rewards} (${
            recipe.rewardVariants?.[result.settings.rewards]?.map((f) => f.name).join(" + ")
          }).`,
          ""
        ]),
      `Machine: ${machine}. Time: SFT ${result.seconds.sft.toFixed(0)} s, GRPO ${
        result.seconds.grpo.toFixed(0)
      } s, total ${result.seconds.total.toFixed(0)} s.`,
      "",
      Pipeline.formatTable(result),
      "",
      ...targets(name, result).map((t) => `- ${t}`),
      "",
      "Settings: `" + JSON.stringify({ sft: result.settings.sft, grpo: result.settings.grpo }) + "`",
      ""
    ].join("\n")
    if (smoke) {
      yield* Effect.log(`smoke run (nothing saved):\n${md}`)
      continue
    }
    yield* fs.writeFileString(`bench/results/learning-${name}.json`, JSON.stringify(result, null, 2) + "\n")
    yield* fs.writeFileString(`bench/results/learning-${name}.md`, md)
    yield* Effect.log(`saved bench/results/learning-${name}.{json,md}`)
  }
}))
