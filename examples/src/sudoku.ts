// Sudoku (TRL examples/scripts/openenv/sudoku.py): solver transcripts -> SFT warm-up -> GRPO with the five shaped
// rewards (empty cell, valid move, repetition, progress, correct) -> held-out evaluation (fill rate).
// In-process only: there is no remote Sudoku client yet, so --env-url is refused.
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Pipeline from "./Pipeline.js"
import { sudokuRecipe } from "./Recipe.js"

Main.run(Cli.main(sudokuRecipe, {
  ...Pipeline.defaults,
  sft: { ...Pipeline.defaults.sft, episodes: 16, errorRate: 0.1 },
  // TRL: lr 5e-6 for a 1.7B model, temperature 0.8, top_k 10; a tiny model needs a far larger step.
  grpo: { ...Pipeline.defaults.grpo, numGenerations: 4, maxCompletionLength: 1024, temperature: 0.8 }
}, "Train a policy to play Sudoku (SFT warm-up, then GRPO)."))
