// Sudoku (TRL examples/scripts/openenv/sudoku.py): solver transcripts -> SFT warm-up -> GRPO with the five shaped
// rewards (empty cell, valid move, repetition, progress, correct) -> held-out evaluation (fill rate).
// In-process only: there is no remote Sudoku client yet, so --env-url is refused.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(Cli.main(Recipe.sudokuRecipe, Sizes.sudoku, "Train a policy to play Sudoku (SFT warm-up, then GRPO)."))
