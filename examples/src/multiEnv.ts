// Multi-environment (TRL examples/scripts/openenv/multi_env.py): Wordle and Catch rows through one router, each
// reward function scoring its own environment and null elsewhere.
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Pipeline from "./Pipeline.js"
import { multiRecipe } from "./Recipe.js"

Main.run(Cli.main(multiRecipe, {
  ...Pipeline.defaults,
  grpo: { ...Pipeline.defaults.grpo, maxCompletionLength: 800 }
}, "Train one policy on Wordle and Catch together (SFT warm-up, then GRPO)."))
