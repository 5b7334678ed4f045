// Echo (TRL examples/scripts/openenv/echo.py): the reward is the last echo's 0.1 x length. SFT on a player that
// sometimes echoes only the first word, then GRPO pushes toward the whole phrase.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(Cli.main(Recipe.echoRecipe, Sizes.echo, "Train a policy to use the echo tool (SFT warm-up, then GRPO)."))
