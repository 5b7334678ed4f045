/**
 * What one example is made of (TRL reference §7): the environment (in-process, or remote with `--env-url`), the
 * prompt, the reward functions, the scripted player that writes the SFT data (with the reasoning line it says
 * before each move), and what counts as a success in evaluation.
 *
 * @example
 * ```ts
 * import { Recipe } from "@envtrain/examples"
 * const env = Recipe.catchRecipe.environment // in-process Catch
 * const remote = Recipe.catchRecipe.remote?.("http://localhost:8000") // the same tools, served
 * ```
 */
import { Catch, Echo, Environment, MultiEnv, Remote, Sudoku, Wordle } from "@envtrain/env"
import type { ChatMessage } from "@envtrain/gpu/ChatTemplate"
import { Reward } from "@envtrain/grpo"
import { Effect, Option } from "effect"

/** A scripted player made from an error rate and a seed (the solvers' signature). */
export type Player = (options: { readonly errorRate: number; readonly seed: number }) => (
  episode: Environment.Episode<any>
) => Effect.Effect<void>

/** One example. */
export interface Recipe<State> {
  readonly name: string
  readonly environment: Environment.Environment<State, any>
  /** The same environment backed by a server (an envtrain server or any OpenEnv server), if supported. */
  readonly remote?: (url: string) => Environment.Environment<State, any>
  /** The prompt messages of a row; the reset observation is appended to the last one. */
  readonly prompt: (row: Readonly<Record<string, unknown>>) => ReadonlyArray<ChatMessage>
  /** Extra dataset columns for a seed. */
  readonly columns?: (seed: number) => Readonly<Record<string, unknown>>
  readonly rewardFunctions: ReadonlyArray<Reward.RewardFunction<State, any, any, any, any>>
  readonly success: (state: State) => boolean
  /** Extra evaluation numbers from the final states (e.g. guesses per win), averaged over episodes. */
  readonly details?: (states: ReadonlyArray<State>) => Readonly<Record<string, number | null>>
  readonly player: Player
  /** The reasoning line before a call, from the text the player last saw. */
  readonly reasoning: (seen: string, tool: string, args: Readonly<Record<string, unknown>>) => string
  /** The closing assistant line (no tool call) once the game is over. */
  readonly closing: (state: State) => string
}

const mean = (xs: ReadonlyArray<number>) => xs.length === 0 ? null : xs.reduce((a, b) => a + b, 0) / xs.length

// -------------------------------------------------------------------------------------------------------------
// Catch (§7.3)
// -------------------------------------------------------------------------------------------------------------

// Short on purpose: every prompt token is paid for on every turn of every episode by a tiny CPU model.
const CATCH_SYSTEM = "Play Catch: a ball falls down a 10x5 grid; move the paddle under it. Tools: move(direction) " +
  "with left or right, and stay(). One tool call per turn."

/** The reasoning line: where the ball is relative to the paddle, from the last observation. */
const catchRelation = (text: string): string => {
  const side = /The ball is (\d+) column\(s\) to the (LEFT|RIGHT)/.exec(text)
  if (side !== null) return `Ball: ${side[2]} ${side[1]}.`
  return text.includes("directly above") ? "Ball: above." : "Ball: gone."
}

/** TRL's `reward_from_env`: `max(r, 0)` when the episode is done, else 0. */
export const catchReward = Reward.perEpisode<Catch.State>("catch", (e) => Catch.reward(e.environment))

export const catchRecipe: Recipe<Catch.State> = {
  name: "catch",
  environment: Catch.environment,
  remote: (url) => Remote.catchGame(url),
  prompt: () => [
    { role: "system", content: CATCH_SYSTEM },
    { role: "user", content: "Catch the ball.\n" }
  ],
  rewardFunctions: [catchReward],
  success: (s) => s.caught,
  details: (states) => ({ steps_per_episode: mean(states.map((s) => s.steps)) }),
  player: Catch.solver,
  reasoning: (seen) => catchRelation(seen),
  closing: () => "The ball has landed."
}

// -------------------------------------------------------------------------------------------------------------
// Wordle (§7.2) — the seed's recipe: win with an early-win bonus, partial credit from greens, invalid penalty
// -------------------------------------------------------------------------------------------------------------

const WORDLE_USER = "You are an expert Wordle solver. Follow these rules: 1. the secret is a 5-letter English " +
  "word; 2. you have 6 attempts; 3. feedback per letter: G green, Y yellow, X absent; 4. guesses must be valid " +
  "words; 5. never reuse a guess; 6. use the tool `guess` to make a guess.\n"

/** 1 for a win plus a bonus for each unused attempt (0.1 each); 0 otherwise. */
export const wordleWin = Reward.perEpisode<Wordle.State>(
  "wordle_win",
  (e) => e.environment.won ? 1 + 0.1 * Math.max(0, 6 - e.environment.num_guesses) : 0
)
/** Partial credit: the most greens in any valid guess, as a fraction of 5. */
export const wordleGreens = Reward.perEpisode<Wordle.State>("wordle_greens", (e) => e.environment.best_greens / 5)
/** -0.5 per invalid move. */
export const wordleInvalid = Reward.perEpisode<Wordle.State>(
  "wordle_invalid",
  (e) => -0.5 * e.environment.invalid_moves
)

const repeats = (guesses: ReadonlyArray<string>) => guesses.length - new Set(guesses).size

export const wordleRecipe: Recipe<Wordle.State> = {
  name: "wordle",
  environment: Wordle.environment,
  remote: (url) => Remote.wordle(url),
  prompt: () => [{ role: "user", content: WORDLE_USER }],
  rewardFunctions: [wordleWin, wordleGreens, wordleInvalid],
  success: (s) => s.won,
  details: (states) => {
    const wins = states.filter((s) => s.won)
    return {
      wins: wins.length,
      guesses_per_win: mean(wins.map((s) => s.num_guesses)),
      invalid_per_game: mean(states.map((s) => s.invalid_moves)),
      repeated_per_game: mean(states.map((s) => repeats(s.guesses))),
      best_greens: mean(states.map((s) => s.best_greens))
    }
  },
  player: Wordle.solver,
  reasoning: (seen, _tool, args) => {
    const marks = /Feedback:\n([^\n]*)\n([GYX](?: [GYX]){4})/.exec(seen)
    const word = String(args.guess ?? "").replace(/[[\]]/g, "")
    if (marks === null) return `Opening guess: ${word}.`
    const letters = marks[1].trim().split(/\s+/)
    const known = marks[2].split(" ").map((m, i) => (m === "G" ? (letters[i] ?? "_").toLowerCase() : "_")).join("")
    return `Greens so far: ${known}. Next guess: ${word}.`
  },
  closing: (s) => s.won ? "Solved." : "Out of guesses."
}

// -------------------------------------------------------------------------------------------------------------
// Sudoku (§7.4) — five shaped rewards, summed
// -------------------------------------------------------------------------------------------------------------

const SUDOKU_SYSTEM = "You are playing Sudoku. Fill the empty cells (.) of the 9x9 grid so that every row, column " +
  "and 3x3 box holds the digits 1-9 once. Use ONLY the `place` tool: place(row, col, number) with rows and columns " +
  "1-9. Prefer the guaranteed moves, never repeat a move. No explanation beyond one short line."

export const sudokuRewards = [
  Reward.perEpisode<Sudoku.State>("reward_empty_cell", (e) => e.environment.empty_cell_reward),
  Reward.perEpisode<Sudoku.State>("reward_valid_moves", (e) => e.environment.valid_move_reward),
  Reward.perEpisode<Sudoku.State>("reward_repetition", (e) => e.environment.repetition_reward),
  Reward.perEpisode<Sudoku.State>("reward_progress", (e) => e.environment.progress_reward),
  Reward.perEpisode<Sudoku.State>("reward_correct", (e) => e.environment.correct_reward)
]

export const sudokuRecipe: Recipe<Sudoku.State> = {
  name: "sudoku",
  environment: Sudoku.environment,
  remote: (url) => Remote.sudoku(url),
  prompt: () => [
    { role: "system", content: SUDOKU_SYSTEM },
    { role: "user", content: "Play Sudoku like an expert.\n" }
  ],
  columns: () => ({ difficulty: "easy" }),
  rewardFunctions: sudokuRewards,
  success: (s) => s.won,
  details: (states) => ({
    fill_rate: mean(states.map((s) => s.progress_reward)),
    cells_filled: mean(states.map((s) => s.filled)),
    invalid_per_game: mean(states.map((s) => s.invalid_moves))
  }),
  player: Sudoku.solver,
  reasoning: (_seen, _tool, args) => `R${String(args.row)}C${String(args.col)} is ${String(args.number)}.`,
  closing: (s) => s.won ? "Solved." : "Stopped."
}

// -------------------------------------------------------------------------------------------------------------
// Echo (§7.1)
// -------------------------------------------------------------------------------------------------------------

const ECHO_PROMPTS = [
  "Try to echo 'Hello World!' in the environment.",
  "Make the environment echo 'Goodbye World!'",
  "Echo 'The quick brown fox' back to me.",
  "Use the echo tool to say 'Training agents in TypeScript'.",
  "Have the environment echo 'GRPO on interactive environments'."
]

/** TRL's `reward_func`: the reward of the last echo (0.1 x characters), 0 without one. */
export const echoReward = Reward.perEpisode<Echo.State>("echo", (e) => e.environment.reward)

/** Echoes the quoted phrase of the prompt; a mistake echoes only its first word. */
const echoPlayer: Player = ({ errorRate, seed }) => (episode) =>
  Effect.gen(function*() {
    const prompt = ECHO_PROMPTS[seed % ECHO_PROMPTS.length]
    const phrase = /'([^']+)'/.exec(prompt)?.[1] ?? "hello"
    // A deterministic per-seed coin (the player is fresh per episode).
    const err = ((seed * 2654435761) % 2 ** 32) / 2 ** 32 < errorRate
    yield* episode.call("echo", { message: err ? phrase.split(" ")[0] : phrase })
  })

export const echoRecipe: Recipe<Echo.State> = {
  name: "echo",
  environment: Echo.environment,
  remote: (url) => Remote.echo(url),
  prompt: (row) => [{ role: "user", content: ECHO_PROMPTS[Number(row.seed ?? 0) % ECHO_PROMPTS.length] }],
  rewardFunctions: [echoReward],
  // A success echoes the whole requested phrase (the reward is its length).
  success: (s) => s.echoes > 0 && s.reward >= 1.2,
  details: (states) => ({ mean_echo_reward: mean(states.map((s) => s.reward)) }),
  player: echoPlayer,
  reasoning: (_seen, _tool, args) => `Echoing: ${String(args.message)}`,
  closing: () => "Done."
}

// -------------------------------------------------------------------------------------------------------------
// Multi-environment (§7.5): Wordle + Catch through one router, per-environment rewards with null elsewhere
// -------------------------------------------------------------------------------------------------------------

const multi = (envs: { readonly wordle: typeof Wordle.environment; readonly catch: typeof Catch.environment }) =>
  MultiEnv.make({ default: "wordle", environments: envs })

type MultiState = MultiEnv.State<{ wordle: typeof Wordle.environment; catch: typeof Catch.environment }>

const isCatchRow = (seed: number) => seed % 2 === 1

export const multiRecipe: Recipe<MultiState> = {
  name: "multi-env",
  environment: multi({ wordle: Wordle.environment, catch: Catch.environment }),
  remote: (url) =>
    multi({
      wordle: Remote.wordle(url) as unknown as typeof Wordle.environment,
      catch: Remote.catchGame(url) as unknown as typeof Catch.environment
    }),
  columns: (seed) => ({ env: isCatchRow(seed) ? "catch" : "wordle" }),
  prompt: (row) => row.env === "catch" ? catchRecipe.prompt(row) : wordleRecipe.prompt(row),
  rewardFunctions: [
    Reward.perEpisode<MultiState>(
      "wordle_reward",
      (e) => e.environment.active === "wordle" ? e.environment.state.reward : null
    ),
    Reward.perEpisode<MultiState>(
      "catch_reward",
      (e) => e.environment.active === "catch" ? Catch.reward(e.environment.state) : null
    )
  ],
  success: (s) => s.active === "catch" ? s.state.caught : s.state.won,
  // The row's game shows in its first observation (Catch reports the ball).
  player: ({ errorRate, seed }) => (episode) =>
    (Option.getOrElse(episode.observation, () => "").includes("Ball:")
      ? Catch.solver({ errorRate, seed })
      : Wordle.solver({ errorRate, seed }))(episode),
  reasoning: (seen, tool, args) =>
    tool === "guess" ? wordleRecipe.reasoning(seen, tool, args) : catchRecipe.reasoning(seen, tool, args),
  closing: (s) => s.active === "catch" ? "The ball has landed." : s.state.won ? "Solved." : "Out of guesses."
}

/** The reset observation of a row, for display. */
export const observationOf = <State>(recipe: Recipe<State>, row: Readonly<Record<string, unknown>>) =>
  Effect.scoped(
    Effect.map(Environment.episode(recipe.environment, row), (e) => Option.getOrElse(e.observation, () => ""))
  )
