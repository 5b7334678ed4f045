/**
 * The measured run sizes of each example for the tiny preset on a 2-core CPU: what each program uses by default,
 * what the README's main job (`npm start`, {@link catchDemo}) runs, and what `bench/learning` measures. Every
 * number here can be overridden from the command line (`tsx examples/src/catch.ts --help`).
 *
 * @example
 * ```ts
 * import { Pipeline, Recipe, Sizes } from "@envtrain/examples"
 * Main.run(Pipeline.run(Recipe.catchRecipe, Sizes.catchDemo))
 * ```
 */
import * as Pipeline from "./Pipeline.js"

/**
 * Catch, the flagship demo. SFT sequences are whole episodes: a model that only saw the first turns in SFT fails
 * the call format at later positions. GRPO's learning rate is low because one Adam step with a non-zero advantage
 * moves every weight by about lr.
 */
export const catchDemo: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 400, errorRate: 0.2, epochs: 2, learningRate: 1e-2, batchSize: 8, maxLength: 300 },
  grpo: { steps: 12, learningRate: 2e-4, numGenerations: 8, prompts: 2, maxCompletionLength: 720, temperature: 0.7 },
  evalEpisodes: 32
}

/** Echo: one call per episode; the player's mistake echoes only the first word. */
export const echo: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 400, errorRate: 0.4, epochs: 3, learningRate: 1e-2, batchSize: 4, maxLength: 256 },
  grpo: { steps: 10, learningRate: 5e-4, numGenerations: 8, prompts: 2, maxCompletionLength: 96, temperature: 1 },
  evalEpisodes: 32
}

/** Wordle: up to six guesses (~500 tokens an episode). */
export const wordle: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 160, errorRate: 0.3, epochs: 1, learningRate: 1e-2, batchSize: 8, maxLength: 640 },
  grpo: { steps: 8, learningRate: 2e-4, numGenerations: 8, prompts: 1, maxCompletionLength: 512, temperature: 1 },
  evalEpisodes: 32
}

/** Sudoku: each observation is the whole grid, so an episode is thousands of tokens; the budget cuts it short. */
export const sudoku: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 48, errorRate: 0.1, epochs: 1, learningRate: 1e-2, batchSize: 4, maxLength: 1024 },
  // TRL: lr 5e-6 for a 1.7B model, temperature 0.8, top_k 10; a tiny model needs a far larger step.
  grpo: { steps: 6, learningRate: 2e-4, numGenerations: 4, prompts: 1, maxCompletionLength: 1024, temperature: 0.8 },
  evalEpisodes: 16
}

/** Wordle and Catch rows alternate through one router. */
export const multiEnv: Pipeline.Settings = {
  ...Pipeline.defaults,
  sft: { episodes: 240, errorRate: 0.2, epochs: 1, learningRate: 1e-2, batchSize: 8, maxLength: 720 },
  grpo: { steps: 8, learningRate: 2e-4, numGenerations: 8, prompts: 2, maxCompletionLength: 720, temperature: 0.7 },
  evalEpisodes: 32
}
