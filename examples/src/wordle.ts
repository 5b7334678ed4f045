// Wordle (TRL examples/scripts/openenv/wordle.py, the seed's recipe): solver transcripts with a reasoning line
// before each guess -> SFT warm-up -> GRPO with win (+ early-win bonus), green partial credit and an invalid-move
// penalty -> greedy evaluation on held-out secrets (wins, guesses per win, invalid and repeated guesses).
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(Cli.main(Recipe.wordleRecipe, Sizes.wordle, "Train a policy to play Wordle (SFT warm-up, then GRPO)."))
