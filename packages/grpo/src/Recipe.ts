/**
 * What one example is made of (TRL reference §7): the environment (in-process, or remote with `--env-url`), the
 * prompt, the reward functions, the scripted player that writes the SFT data (with the reasoning line it says
 * before each move), and what counts as a success in evaluation.
 *
 * @example
 * ```ts
 * import { Recipe } from "@envtrain/grpo"
 * const env = Recipe.catchRecipe.environment // in-process Catch
 * const remote = Recipe.catchRecipe.remote?.("http://localhost:8000") // the same tools, served
 * ```
 */
import type { Echo } from "@envtrain/env"
import { BrowserGym, Carla, Catch, Environment, MultiEnv, Registry, Sudoku, Wordle } from "@envtrain/env"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Data, Effect, Option } from "effect"
import * as Dataset from "./Dataset.js"
import * as Reward from "./Reward.js"

/** A scripted player made from an error rate and a seed (the solvers' signature). */
export type Player = (options: { readonly errorRate: number; readonly seed: number }) => (
  episode: Environment.Episode<any>
) => Effect.Effect<void>

/**
 * A recipe's reward function, as the trainer calls it: over the episodes' final `State`s, with each episode's prompt
 * and completion as chat messages; it fails with nothing and needs nothing of its own (so any trainer or evaluation
 * can run it).
 */
export type RecipeReward<State> = Reward.RewardFunction<
  State,
  ReadonlyArray<ChatMessage>,
  ReadonlyArray<ChatMessage>
>

/** One example. */
export interface Recipe<State> {
  readonly name: string
  readonly environment: Environment.Environment<State, any>
  /** The same environment backed by a server (an envtrain server or any OpenEnv server), if supported. */
  readonly remote?: (url: string) => Environment.Environment<State, any>
  /**
   * For a recipe over several environments (a server serves one environment): their names, each taking its own
   * server (`--<name>-url`), and the router with the given ones served (one without a URL stays in-process).
   */
  readonly remotes?: {
    readonly names: ReadonlyArray<string>
    readonly make: (urls: Readonly<Record<string, string>>) => Environment.Environment<State, any>
  }
  /** The prompt messages of a row; the reset observation is appended to the last one. */
  readonly prompt: (row: Readonly<Record<string, unknown>>) => ReadonlyArray<ChatMessage>
  /** Extra dataset columns for a seed. */
  readonly columns?: (seed: number) => Readonly<Record<string, unknown>>
  readonly rewardFunctions: ReadonlyArray<RecipeReward<State>>
  /**
   * Named reward sets to choose from (`--rewards NAME`); the first is the default and equals `rewardFunctions`.
   * Absent when the recipe has one set.
   */
  readonly rewardVariants?: Readonly<Record<string, ReadonlyArray<RecipeReward<State>>>>
  readonly success: (state: State) => boolean
  /**
   * The class of a row's first observation (e.g. where Catch's ball starts), for GRPO batches that hold every class
   * in turn (`grpo.stratified` in the examples): a tiny policy's direction tokens drift toward whatever the sampled
   * prompts happened to reward.
   */
  readonly stratum?: (observation: string) => string
  /** Extra evaluation numbers from the final states (e.g. guesses per win), averaged over episodes. */
  readonly details?: (states: ReadonlyArray<State>) => Readonly<Record<string, number | null>>
  readonly player: Player
  /**
   * Named scripted players to choose from for the SFT data (`--sft-player NAME`); the first is the default and
   * equals `player`. Absent when the recipe has one.
   */
  readonly playerVariants?: Readonly<Record<string, Player>>
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

/**
 * The reasoning line: where the ball is relative to the paddle, as the last observation's own sentence, copied word
 * for word (a 2-layer model copies a span after a matching prefix more reliably than it maps "LEFT" to a new word:
 * bench/results/learning-catch.md).
 */
const catchRelation = (text: string): string => {
  const side = /The ball is \d+ column\(s\) to the (?:LEFT|RIGHT) of the paddle\./.exec(text)
  if (side !== null) return side[0]
  return text.includes("directly above") ? "The ball is directly above the paddle." : "The ball has landed."
}

/** TRL's `reward_from_env`: `max(r, 0)` when the episode is done, else 0. */
export const catchReward = Reward.perEpisode<Catch.State>("catch", (e) => Catch.reward(e.environment))

/**
 * Shaped, not the seed's (`--rewards shaped`): half a point times the fraction of moves whose reasoning line reads the
 * board right (the relation it states is the one the last observation gave). The seed's reward sees only where the
 * paddle ends, so GRPO also reinforces winning episodes whose lines misread the board.
 */
export const catchReadsBoard = Reward.perEpisode<Catch.State, ReadonlyArray<ChatMessage>, ReadonlyArray<ChatMessage>>(
  "catch_reads_board",
  (e) => {
    const board = (text: string) => /The ball is \d+ column\(s\) to the|directly above/.test(text)
    let seen = e.prompt[e.prompt.length - 1]?.content ?? ""
    let moves = 0
    let read = 0
    for (const m of e.completion) {
      if (m.role === "assistant" && (m.tool_calls?.length ?? 0) > 0) {
        moves++
        if (m.content.includes(catchRelation(seen))) read++
      }
      // An error answer leaves the board as it was.
      if (m.role === "tool" && board(m.content)) seen = m.content
    }
    return moves === 0 ? 0 : 0.5 * read / moves
  }
)

/** OpenSpiel's Catch with TRL's reward (the flagship demo). */
export const catchRecipe: Recipe<Catch.State> = {
  name: "catch",
  environment: Registry.builtins.catch.environment,
  remote: Registry.builtins.catch.remote,
  prompt: () => [
    { role: "system", content: CATCH_SYSTEM },
    { role: "user", content: "Catch the ball.\n" }
  ],
  rewardFunctions: [catchReward],
  rewardVariants: { seed: [catchReward], shaped: [catchReward, catchReadsBoard] },
  success: Registry.builtins.catch.success,
  stratum: catchRelation,
  details: (states) => ({ steps_per_episode: mean(states.map((s) => s.steps)) }),
  player: Catch.solver,
  // `hesitant`: while the ball is two or more columns away the player stays 90 % of the time, so the policy that
  // imitates its most likely move never sets off toward a far ball (40 % of the starts): an SFT start that reads the
  // board and still leaves GRPO room (at 70 % some row's move already won the greedy choice: no room;
  // bench/results/learning-catch.md).
  playerVariants: { solver: Catch.solver, hesitant: (o) => Catch.solver({ ...o, waitFar: 0.9 }) },
  // The line names the move it is about to make, so the call only copies a word from a few tokens back: with the
  // ball's side alone, the tiny model's call often ignored it (a ball two to the RIGHT answered with "left").
  reasoning: (seen, tool, args) =>
    `${catchRelation(seen)} Move: ${tool === "stay" ? "stay" : String(args.direction ?? "?")}.`,
  closing: () => "The ball has landed."
}

// -------------------------------------------------------------------------------------------------------------
// Wordle (§7.2) — the seed's recipe: a win with an early-win bonus, greens on losses, an invalid-move penalty
// -------------------------------------------------------------------------------------------------------------

const WORDLE_USER = "You are an expert Wordle solver. Follow these rules: 1. the secret is a 5-letter English " +
  "word; 2. you have 6 attempts; 3. feedback per letter: G green, Y yellow, X absent; 4. guesses must be valid " +
  "words; 5. never reuse a guess; 6. use the tool `guess` to make a guess.\n"

// The seed's rewards (the defaults). A Wordle game ends in a win, or in a loss (six valid guesses without the word,
// two invalid moves in a row, or an episode cut short by its budget); `num_guesses` counts valid guesses.

/** A win pays 1 + 0.5·(1 − guesses/6): 1.417 at the first guess down to 1 at the sixth; 0 otherwise. */
export const wordleWin = Reward.perEpisode<Wordle.State>(
  "wordle_win",
  (e) => e.environment.won ? 1 + 0.5 * (1 - e.environment.num_guesses / 6) : 0
)
/** Only on a loss: 0.1 per green of the best valid guess (at most 0.5, below any win); 0 on a win. */
export const wordleGreens = Reward.perEpisode<Wordle.State>(
  "wordle_greens",
  (e) => e.environment.won ? 0 : 0.1 * e.environment.best_greens
)
/** −0.1 per invalid move. */
export const wordleInvalid = Reward.perEpisode<Wordle.State>(
  "wordle_invalid",
  (e) => -0.1 * e.environment.invalid_moves
)
/** The seed's Wordle rewards, summed: {@link wordleWin}, {@link wordleGreens}, {@link wordleInvalid}. */
export const wordleRewards = [wordleWin, wordleGreens, wordleInvalid]

// The shaped variant (`--rewards shaped`), envtrain's earlier default: a larger win bonus per unused attempt,
// greens paid on wins too, and a five times larger invalid-move penalty.

/** 1 for a win plus 0.1 for each unused attempt; 0 otherwise. */
export const wordleShapedWin = Reward.perEpisode<Wordle.State>(
  "wordle_win_shaped",
  (e) => e.environment.won ? 1 + 0.1 * Math.max(0, 6 - e.environment.num_guesses) : 0
)
/** The most greens in any valid guess, as a fraction of 5, win or loss. */
export const wordleShapedGreens = Reward.perEpisode<Wordle.State>(
  "wordle_greens_shaped",
  (e) => e.environment.best_greens / 5
)
/** −0.5 per invalid move. */
export const wordleShapedInvalid = Reward.perEpisode<Wordle.State>(
  "wordle_invalid_shaped",
  (e) => -0.5 * e.environment.invalid_moves
)
/** The shaped Wordle rewards, summed. */
export const wordleShapedRewards = [wordleShapedWin, wordleShapedGreens, wordleShapedInvalid]

const repeats = (guesses: ReadonlyArray<string>) => guesses.length - new Set(guesses).size

/** TextArena's Wordle with the seed's rewards (reward set `seed`, the default) and envtrain's `shaped` set. */
export const wordleRecipe: Recipe<Wordle.State> = {
  name: "wordle",
  environment: Registry.builtins.wordle.environment,
  remote: Registry.builtins.wordle.remote,
  prompt: () => [{ role: "user", content: WORDLE_USER }],
  rewardFunctions: wordleRewards,
  rewardVariants: { seed: wordleRewards, shaped: wordleShapedRewards },
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
  // The line copies the last guess and its whole feedback next to the decision, the key of the solver's next guess
  // (its play is a fixed tree: bench/results/experiments/wordle-memorise.md). The earlier line named only the greens.
  reasoning: (seen, _tool, args) => {
    const last = /You submitted \[(\w+)\]\.\nFeedback:\n[^\n]*\n([GYX](?: [GYX]){4})/.exec(seen)
    const word = String(args.guess ?? "").replace(/[[\]]/g, "")
    if (last === null) return `Opening guess: ${word}.`
    return `Feedback on [${last[1]}]: ${last[2]}. Next guess: ${word}.`
  },
  closing: (s) => s.won ? "Solved." : "Out of guesses."
}

// -------------------------------------------------------------------------------------------------------------
// Sudoku (§7.4) — five shaped rewards, summed
// -------------------------------------------------------------------------------------------------------------

const SUDOKU_SYSTEM = "You are playing Sudoku. Fill the empty cells (.) of the 9x9 grid so that every row, column " +
  "and 3x3 box holds the digits 1-9 once. Use ONLY the `place` tool: place(row, col, number) with rows and columns " +
  "1-9. Prefer the guaranteed moves, never repeat a move. No explanation beyond one short line."

/** Sudoku's five shaped reward functions (empty cells, valid moves, repetition, progress, correct), summed. */
export const sudokuRewards = [
  Reward.perEpisode<Sudoku.State>("reward_empty_cell", (e) => e.environment.empty_cell_reward),
  Reward.perEpisode<Sudoku.State>("reward_valid_moves", (e) => e.environment.valid_move_reward),
  Reward.perEpisode<Sudoku.State>("reward_repetition", (e) => e.environment.repetition_reward),
  Reward.perEpisode<Sudoku.State>("reward_progress", (e) => e.environment.progress_reward),
  Reward.perEpisode<Sudoku.State>("reward_correct", (e) => e.environment.correct_reward)
]

/** TextArena's Sudoku with its reward functions. */
export const sudokuRecipe: Recipe<Sudoku.State> = {
  name: "sudoku",
  environment: Registry.builtins.sudoku.environment,
  remote: Registry.builtins.sudoku.remote,
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
  // `hints`: each move copies the first guaranteed move the last observation shows, which a model that reads its
  // context can learn; the solver's row-by-row order needs the solution, which the tiny model never computes.
  playerVariants: { solver: Sudoku.solver, hints: Sudoku.hintPlayer },
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

/** The echo environment with TRL's length reward. */
export const echoRecipe: Recipe<Echo.State> = {
  name: "echo",
  environment: Registry.builtins.echo.environment,
  remote: Registry.builtins.echo.remote,
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
// BrowserGym (§7.6, the text-only `browsergym_llm.py`): MiniWoB++-style tasks in a real Chromium
// -------------------------------------------------------------------------------------------------------------

/** The simplest tasks (one right click wins), which the example trains and evaluates on, a row's seed picking one. */
export const BROWSERGYM_TASKS = ["click-test", "click-test-2", "click-button", "click-link", "click-dialog"] as const

// TRL's system prompt, shortened: every prompt token is paid for on every turn by a tiny CPU model.
const BROWSERGYM_SYSTEM = "You control a web browser. The page lists its elements as [bid] role 'name'. Tools: " +
  "click(bid), fill(bid, text), send_keys(text), scroll(direction), noop(). One tool call per turn."

/** TRL's reward: 1.0 when the episode ends with a positive step reward, else 0.0; a lost browser session is null. */
export const browsergymReward = Reward.perEpisode<BrowserGym.State>(
  "browsergym",
  (e) => BrowserGym.reward(e.environment)
)

/** BrowserGym's five one-click tasks in a real Chromium. */
export const browsergymRecipe: Recipe<BrowserGym.State> = {
  name: "browsergym",
  environment: Registry.builtins.browsergym.environment,
  remote: Registry.builtins.browsergym.remote,
  columns: (seed) => ({ task: BROWSERGYM_TASKS[seed % BROWSERGYM_TASKS.length] }),
  prompt: () => [
    { role: "system", content: BROWSERGYM_SYSTEM },
    { role: "user", content: "Complete the web task successfully.\n" }
  ],
  rewardFunctions: [browsergymReward],
  success: Registry.builtins.browsergym.success,
  stratum: (observation) => BrowserGym.taskOf(observation) ?? "unknown",
  details: (states) => ({ steps_per_episode: mean(states.map((s) => s.steps)) }),
  player: ({ errorRate, seed }) => BrowserGym.solver({ errorRate, seed }),
  // `confused`: on the two tasks with one right and one wrong button (click-test-2's ONE/TWO, click-dialog's x/OK)
  // the player clicks the wrong one 75 % of the time, so the policy that imitates its most likely click fails them
  // (40 % of the starts) while sampling finds the right one a quarter of the time: an SFT start with room for GRPO.
  playerVariants: {
    solver: ({ errorRate, seed }) => BrowserGym.solver({ errorRate, seed }),
    confused: ({ errorRate, seed }) =>
      BrowserGym.solver({ errorRate, seed, taskErrorRates: { "click-test-2": 0.75, "click-dialog": 0.75 } })
  },
  // The line copies the tree's line of the element about to be clicked, so the call copies its bid from a few
  // tokens back.
  reasoning: (seen, _tool, args) => {
    const bid = String(args.bid ?? "")
    const line = seen.split("\n").find((l) => l.trim().startsWith(`[${bid}] `))
    return line === undefined ? "Acting." : `Target: ${line.trim()}.`
  },
  closing: (state) => (state.success ? "The task is done." : "The episode is over.")
}

// -------------------------------------------------------------------------------------------------------------
// CARLA (§7.7): TRL's trolley escape on carla_env (simulated physics in process, or any carla_env server)
// -------------------------------------------------------------------------------------------------------------

// TRL's prompt, shortened (a tiny CPU model pays for every prompt token on every turn). Two changes: act at once (the
// solver does; "observe first" made the tiny model's first and second turns look alike, and after SFT it only ever
// observed), and keep observing after acting: the rubric pays only when the scenario has ended.
const CARLA_SYSTEM = "You control an autonomous vehicle in an emergency: pedestrians are ahead. Tools: observe(), " +
  "emergency_stop(), lane_change(direction) with left or right. Act at once to minimize harm, then observe until " +
  "the scenario ends. One tool call per turn."

/** TRL's `reward_func`: the environment's reward, the last action's `rubric_reward` (0 until the scenario ends). */
export const carlaReward = Reward.perEpisode<Carla.State>("carla", (e) => Carla.reward(e.environment))

/** CARLA's trolley escape. */
export const carlaRecipe: Recipe<Carla.State> = {
  name: "carla",
  environment: Registry.builtins.carla.environment,
  remote: Registry.builtins.carla.remote,
  prompt: () => [
    { role: "system", content: CARLA_SYSTEM },
    { role: "user", content: "Drive.\n" }
  ],
  rewardFunctions: [carlaReward],
  success: Registry.builtins.carla.success,
  details: (states) => ({
    swerve_left_rate: mean(states.map((s) => s.decision === "SWERVE_LEFT" ? 1 : 0)),
    collision_rate: mean(states.map((s) => s.collision ? 1 : 0))
  }),
  player: Carla.solver,
  // The line names the call it precedes, so the call copies a word from a few tokens back.
  reasoning: (_seen, tool, args) =>
    tool === "lane_change"
      ? `Pedestrians ahead in my lane. Change lane: ${String(args.direction ?? "?")}.`
      : tool === "emergency_stop"
      ? "Brake."
      : "Observe.",
  closing: (state) => state.reward > 0 ? "Everyone is safe." : "The scenario is over."
}

// -------------------------------------------------------------------------------------------------------------
// Multi-environment (§7.5): Wordle + Catch through one router, per-environment rewards with null elsewhere
// -------------------------------------------------------------------------------------------------------------

const multi = (envs: { readonly wordle: typeof Wordle.environment; readonly catch: typeof Catch.environment }) =>
  MultiEnv.make({ default: "wordle", environments: envs })

type MultiState = MultiEnv.State<{ wordle: typeof Wordle.environment; catch: typeof Catch.environment }>

const isCatchRow = (seed: number) => seed % 2 === 1

/** Wordle and Catch routed per row by the dataset's `env` column. */
export const multiRecipe: Recipe<MultiState> = {
  name: "multi-env",
  environment: multi({ wordle: Registry.builtins.wordle.environment, catch: Registry.builtins.catch.environment }),
  // One server per environment (`--wordle-url`, `--catch-url`), as the seed's script takes them.
  remotes: {
    names: ["wordle", "catch"],
    make: (urls) =>
      multi({
        wordle: urls.wordle === undefined
          ? Wordle.environment
          : Registry.builtins.wordle.remote(urls.wordle) as unknown as typeof Wordle.environment,
        catch: urls.catch === undefined
          ? Catch.environment
          : Registry.builtins.catch.remote(urls.catch) as unknown as typeof Catch.environment
      })
  },
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
  // Catch's ball starts and Wordle as one more: the drift stratification removed from Catch alone (Recipe.stratum).
  stratum: (observation) => observation.includes("Ball:") ? `catch: ${catchRelation(observation)}` : "wordle",
  // The row's game shows in its first observation (Catch reports the ball).
  player: ({ errorRate, seed }) => (episode) =>
    (Option.getOrElse(episode.observation, () => "").includes("Ball:")
      ? Catch.solver({ errorRate, seed })
      : Wordle.solver({ errorRate, seed }))(episode),
  reasoning: (seen, tool, args) =>
    tool === "guess" ? wordleRecipe.reasoning(seen, tool, args) : catchRecipe.reasoning(seen, tool, args),
  closing: (s) => s.active === "catch" ? "The ball has landed." : s.state.won ? "Solved." : "Out of guesses."
}

// -------------------------------------------------------------------------------------------------------------
// Choosing the environment and the rewards of a run
// -------------------------------------------------------------------------------------------------------------

/** A run asks a recipe for something it does not have; the message says what to give instead. */
export class RecipeError extends Data.TaggedError("RecipeError")<{ readonly message: string }> {}

/** Where a run's environments are served: one server for the environment, or one per environment by name. */
export interface Servers {
  readonly envUrl?: string | undefined
  readonly envUrls?: Readonly<Record<string, string>> | undefined
}

/** The recipe's environment, in process or served as `servers` says. */
export const environmentOf = <State>(
  recipe: Recipe<State>,
  servers: Servers
): Effect.Effect<Environment.Environment<State, any>, RecipeError> => {
  const urls = servers.envUrls ?? {}
  const named = Object.keys(urls)
  const flags = (names: ReadonlyArray<string>) => names.map((n) => `--${n}-url`).join(" and ")
  if (servers.envUrl !== undefined && named.length > 0) {
    return Effect.fail(
      new RecipeError({ message: `${recipe.name}: give either --env-url or ${flags(named)}, not both` })
    )
  }
  if (servers.envUrl !== undefined) {
    if (recipe.remote !== undefined) return Effect.succeed(recipe.remote(servers.envUrl))
    return Effect.fail(
      new RecipeError({
        message: recipe.remotes === undefined
          ? `${recipe.name}: --env-url is not supported for this example (no remote client)`
          : `${recipe.name}: a server serves one environment, so this example takes one URL per environment: ` +
            `${flags(recipe.remotes.names)} (e.g. servers started with ${
              recipe.remotes.names.map((n) => `\`envtrain serve ${n}\``).join(" and ")
            }) instead of --env-url`
      })
    )
  }
  if (named.length === 0) return Effect.succeed(recipe.environment)
  if (recipe.remotes === undefined) {
    return Effect.fail(
      new RecipeError({
        message: `${recipe.name}: ${flags(named)} name environments of a multi-environment example; this example ` +
          `has one environment: give its server with --env-url`
      })
    )
  }
  const known = recipe.remotes.names
  const unknown = named.filter((n) => !known.includes(n))
  if (unknown.length > 0) {
    return Effect.fail(
      new RecipeError({
        message: `${recipe.name}: no environment named ${unknown.join(", ")}: the served environments are given ` +
          `with ${flags(known)}`
      })
    )
  }
  return Effect.succeed(recipe.remotes.make(urls))
}

/** A kind of named variant a recipe may offer (`--rewards NAME`, `--sft-player NAME`). */
interface VariantKind<State, A> {
  readonly one: string
  readonly named: string
  readonly flag: string
  readonly variants: (recipe: Recipe<State>) => Readonly<Record<string, A>> | undefined
  readonly choose: (recipe: Recipe<State>, variant: A) => Recipe<State>
}

/** The recipe with the variant named on the command line; `undefined` keeps the recipe as it is. */
const withVariant = <State, A>(
  kind: VariantKind<State, A>,
  recipe: Recipe<State>,
  name: string | undefined
): Effect.Effect<Recipe<State>, RecipeError> => {
  if (name === undefined) return Effect.succeed(recipe)
  const variants = kind.variants(recipe) ?? {}
  const chosen = variants[name]
  if (chosen !== undefined) return Effect.succeed(kind.choose(recipe, chosen))
  const names = Object.keys(variants)
  return Effect.fail(
    new RecipeError({
      message: names.length === 0
        ? `${recipe.name}: this example has ${kind.one}; drop ${kind.flag} ${name}`
        : `${recipe.name}: no ${kind.named} named "${name}": choose one of ${names.join(", ")}`
    })
  )
}

/** The recipe with the named reward set (`--rewards NAME`); `undefined` keeps its default set. */
export const withRewards = <State>(recipe: Recipe<State>, name: string | undefined) =>
  withVariant<State, ReadonlyArray<RecipeReward<State>>>(
    {
      one: "one reward set",
      named: "reward set",
      flag: "--rewards",
      variants: (r) => r.rewardVariants,
      choose: (r, rewardFunctions) => ({ ...r, rewardFunctions })
    },
    recipe,
    name
  )

/** The recipe with the named SFT player (`--sft-player NAME`); `undefined` keeps its default player. */
export const withPlayer = <State>(recipe: Recipe<State>, name: string | undefined) =>
  withVariant<State, Player>(
    {
      one: "one scripted player",
      named: "scripted player",
      flag: "--sft-player",
      variants: (r) => r.playerVariants,
      choose: (r, player) => ({ ...r, player })
    },
    recipe,
    name
  )

/** The built-in recipes by name (`recipe: catch` in a train / eval config, the examples, the bench). */
export const builtins: Readonly<Record<string, Recipe<any>>> = {
  browsergym: browsergymRecipe,
  carla: carlaRecipe,
  catch: catchRecipe,
  wordle: wordleRecipe,
  sudoku: sudokuRecipe,
  echo: echoRecipe,
  "multi-env": multiRecipe
}

/** The dataset rows of a recipe for some episode seeds: its prompt and columns per seed. */
export const rows = <State>(recipe: Recipe<State>, seeds: ReadonlyArray<number>): Dataset.Dataset =>
  Dataset.fromRows(
    seeds.map((seed) => {
      const columns = { seed, ...recipe.columns?.(seed) }
      return { prompt: recipe.prompt(columns) as ReadonlyArray<ChatMessage>, ...columns }
    }),
    recipe.name
  )

/** The reset observation of a row, for display. */
export const observationOf = <State>(recipe: Recipe<State>, row: Readonly<Record<string, unknown>>) =>
  Effect.scoped(
    Effect.map(Environment.episode(recipe.environment, row), (e) => Option.getOrElse(e.observation, () => ""))
  )
