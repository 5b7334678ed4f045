// The README's main job (`npm start`): the flagship demo. A tiny Qwen3-architecture policy (CPU device, ~0.16 M
// parameters) learns Catch: SFT warm-up on transcripts of a hesitant player, greedy evaluation on held-out seeds,
// GRPO with TRL's reward_from_env, evaluation again. Prints progress and the before/after table; writes
// runs/catch/{report.html, eval.json, metrics.jsonl, checkpoint-N/}. Sized to finish within 15 minutes on a
// 2-core CPU. Flags as examples/src/catch.ts (`npm start -- --help`).
import { Recipe } from "@envtrain/grpo"
import { Doctor, Main } from "@envtrain/harness"
import { Effect } from "effect"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

// First the 3-second machine check (adapter, a kernel against its CPU twin, one episode), then the demo.
Main.run(Effect.zipRight(
  Doctor.run(),
  Cli.main(
    Recipe.catchRecipe,
    Sizes.catchDemo,
    "The flagship demo: train a tiny policy to play Catch (SFT warm-up, then GRPO)."
  )
))
