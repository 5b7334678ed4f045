// Multi-environment (TRL examples/scripts/openenv/multi_env.py): Wordle and Catch rows through one router, each
// reward function scoring its own environment and null elsewhere.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(
  Cli.main(
    Recipe.multiRecipe,
    Sizes.multiEnv,
    "Train one policy on Wordle and Catch together (SFT warm-up, then GRPO)."
  )
)
