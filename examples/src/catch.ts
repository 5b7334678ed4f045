// Catch (TRL examples/scripts/openenv/catch.py): solver transcripts -> SFT warm-up -> GRPO with TRL's
// reward_from_env -> held-out evaluation. `tsx examples/src/catch.ts --help` lists the flags.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(Cli.main(Recipe.catchRecipe, Sizes.catchDemo, "Train a policy to play Catch (SFT warm-up, then GRPO)."))
