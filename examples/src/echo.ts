// Echo (TRL examples/scripts/openenv/echo.py): the reward is the last echo's 0.1 x length. SFT on a player that
// sometimes echoes only the first word, then GRPO pushes toward the whole phrase.
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Pipeline from "./Pipeline.js"
import { echoRecipe } from "./Recipe.js"

Main.run(Cli.main(echoRecipe, {
  ...Pipeline.defaults,
  sft: { ...Pipeline.defaults.sft, errorRate: 0.4 },
  grpo: { ...Pipeline.defaults.grpo, maxCompletionLength: 96 }
}, "Train a policy to use the echo tool (SFT warm-up, then GRPO)."))
