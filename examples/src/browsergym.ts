// BrowserGym (TRL examples/scripts/openenv/browsergym_llm.py): MiniWoB++-style web tasks in a real Chromium, the
// policy clicking element ids from the accessibility tree. Scripted-solver transcripts -> SFT warm-up -> GRPO on the
// simplest tasks with TRL's binary reward -> held-out success before and after. `--env-url` plays a served
// browsergym_env instead (`envtrain serve browsergym`). `tsx examples/src/browsergym.ts --help` lists the flags.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(
  Cli.main(Recipe.browsergymRecipe, Sizes.browsergym, "Train a policy to do web tasks in a browser (SFT, then GRPO).")
)
