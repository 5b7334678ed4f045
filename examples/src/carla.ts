// CARLA (TRL examples/scripts/openenv/carla.py): the trolley escape (`trolley_micro_escape_exists`) with TRL's tools
// observe / emergency_stop / lane_change and its reward (the last rubric_reward). Solver transcripts -> SFT warm-up
// -> GRPO -> held-out evaluation, on the in-process simulated world, or with `--env-url URL` on a carla_env server:
// `envtrain serve carla --scenario trolley_micro_escape_exists`, or OpenEnv's own carla_env (mock or a real
// simulator). `tsx examples/src/carla.ts --help` lists the flags.
import { Recipe } from "@envtrain/grpo"
import { Main } from "@envtrain/harness"
import * as Cli from "./Cli.js"
import * as Sizes from "./Sizes.js"

Main.run(
  Cli.main(Recipe.carlaRecipe, Sizes.carla, "Train a policy to avoid pedestrians in CARLA (SFT warm-up, then GRPO).")
)
