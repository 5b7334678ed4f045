// The README's main job (`npm start`): the flagship demo. A tiny Qwen3-architecture policy (CPU reference, ~0.16 M
// parameters) learns Catch: SFT warm-up on transcripts of an imperfect solver, greedy evaluation on held-out seeds,
// GRPO with TRL's reward_from_env, evaluation again. Prints progress and the before/after table; writes
// runs/catch/{report.html, eval.json, metrics.jsonl, checkpoint-N/}. Sized to finish within 15 minutes on a
// 2-core CPU. Flags as examples/src/catch.ts (`npm start -- --help`).
import { Doctor, Main } from "@envtrain/harness"
import { Effect } from "effect"
import * as Cli from "./Cli.js"
import * as Pipeline from "./Pipeline.js"
import { catchRecipe } from "./Recipe.js"

/** The demo's sizes (measured: see bench/results/learning-catch.md). */
export const demo: Pipeline.Settings = {
  ...Pipeline.defaults,
  // Short SFT sequences (system + user + about three turns) buy many more transcripts per minute than whole episodes;
  // GRPO's learning rate is low because one Adam step with a non-zero advantage moves every weight by about lr.
  sft: { episodes: 400, errorRate: 0.2, epochs: 2, learningRate: 1e-2, batchSize: 8, maxLength: 300 },
  grpo: { steps: 6, learningRate: 2e-4, numGenerations: 8, prompts: 2, maxCompletionLength: 720, temperature: 0.7 },
  evalEpisodes: 16
}

// First the 3-second machine check (adapter, a kernel against its CPU twin, one episode), then the demo.
Main.run(Effect.zipRight(
  Doctor.run(),
  Cli.main(catchRecipe, demo, "The flagship demo: train a tiny policy to play Catch (SFT warm-up, then GRPO).")
))
