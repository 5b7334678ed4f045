/**
 * Sudoku (TextArena Sudoku-v0, as served by OpenEnv's `textarena_env`), seedable.
 *
 * - {@link openEnv}: the OpenEnv-level environment (action `{message}` such as `"[5 3 7]"`, the cumulative
 *   transcript with the exact rules prompt and board rendering, the four invalid reasons, completion-fraction
 *   rewards, two consecutive invalid moves end the game). The `seed` reset kwarg is honoured.
 * - {@link environment}: TRL's `SudokuEnv` tool layer: `place(row, col, number)` with its progress text, hints
 *   (difficulty "easy") and the five shaped reward signals; after the end, "Game is over. No more moves allowed.".
 * - {@link solver}: an exact solver through `place` (optionally making seeded wrong placements).
 *
 * @example
 * ```ts
 * import { Environment, Sudoku } from "@envtrain/env"
 *
 * const result = Environment.run(Sudoku.environment, { seed: 1 }, Sudoku.solver())
 * // result.state.won === true, result.state.progress_reward === 1
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Environment from "./Environment.js"
import * as Prng from "./internal/prng.js"
import type { Grid } from "./internal/sudokuGame.js"
import { countSolutions, solve, SudokuGame } from "./internal/sudokuGame.js"
import { makeSudokuTools, parseBoard, type SudokuToolsState } from "./internal/sudokuTools.js"
import { textArenaClient, transcriptOf } from "./internal/textArenaClient.js"
import type { Action } from "./internal/textArenaOpenEnv.js"
import { textArenaDefinition } from "./internal/textArenaOpenEnv.js"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

export { countSolutions, generate, render, solve } from "./internal/sudokuGame.js"
export type { Grid } from "./internal/sudokuGame.js"
export { parseBoard } from "./internal/sudokuTools.js"
export { Action, Observation, OpenEnvState } from "./internal/textArenaOpenEnv.js"

/** The OpenEnv definition of `textarena_env` serving Sudoku-v0. Reset kwargs: `seed`, `episode_id`. */
export const openEnv: OpenEnvDefinition<Action> = textArenaDefinition(
  "Sudoku-v0",
  (_options, seed) => new SudokuGame(Prng.make(seed)),
  false
)

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's SudokuEnv)
// ---------------------------------------------------------------------------------------------------------------

/** `place(row, col, number)`: TRL's docstring. */
export const Place = Tool.make("place", {
  description: "Place a number on the Sudoku board.",
  parameters: {
    row: Schema.Int.annotations({ description: "Row number (1-9)." }),
    col: Schema.Int.annotations({ description: "Column number (1-9)." }),
    number: Schema.Int.annotations({ description: "Number to place (1-9)." })
  },
  success: Schema.String,
  returns: "The result of the move and updated board state."
})

/** The reward state: TRL's five reward properties plus counts. */
export type State = SudokuToolsState

/** Columns: `seed` picks the puzzle; `difficulty` picks TRL's hints (default "easy"). */
export const Columns = Schema.Struct({
  seed: Schema.optional(Schema.Int),
  difficulty: Schema.optional(Schema.Literal("easy", "medium", "hard"))
})

/** The Sudoku tool service (TRL's wrapper logic over the Sudoku-v0 transcript). */
export class SudokuTools extends Context.Tag("@envtrain/env/Sudoku/SudokuTools")<SudokuTools, {
  readonly reset: (columns: typeof Columns.Type) => Effect.Effect<Option.Option<string>>
  readonly place: (
    params: { readonly row: number; readonly col: number; readonly number: number }
  ) => Effect.Effect<string, Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {
  // The wrapper logic is shared with the remote tool service (`Sudoku.remoteLayer`); here its session is an
  // in-process Sudoku-v0 game.
  static readonly layer = Layer.sync(SudokuTools, () => {
    let game: SudokuGame | undefined
    const tools = makeSudokuTools<never>({
      reset: (seed) =>
        Effect.sync(() => {
          game = new SudokuGame(Prng.make(seed))
          return game.state.transcript()
        }),
      step: (move) =>
        Effect.sync(() => {
          const g = game!
          const done = g.step(move)
          return { transcript: g.state.transcript(), reward: g.state.rewards ?? 0, done }
        }),
      ending: Effect.sync(() => ({
        invalidMove: game?.state.gameInfo.invalid_move ?? false,
        completed: game?.completed ?? false
      }))
    }, Environment.seedOf)
    return SudokuTools.of(tools)
  })
}

/** The definition over a layer of its tools: in-process (`environment`) or on a server (`remote`). */
const environmentWith = (layer: Layer.Layer<SudokuTools>) =>
  Environment.make({
    name: "sudoku",
    description: "TextArena Sudoku-v0: fill the 21 empty cells of a 60-clue puzzle with `place(row, col, number)`.",
    tag: SudokuTools,
    layer,
    columns: Columns,
    tools: [Place],
    handlers: (service) => ({ place: service.place }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv
  })

/** Sudoku as an environment (TRL's `SudokuEnv`): tool `place`. */
export const environment = environmentWith(SudokuTools.layer)

/**
 * An exact solver through `place`: reads the board from the first observation, solves it, and fills every empty
 * cell. With `errorRate` > 0 a placement is, with that probability, a wrong number (seeded), possibly repeatedly
 * (two wrong in a row lose the game, as in Sudoku-v0).
 */
export const solver = (options: { readonly errorRate?: number; readonly seed?: number } = {}) => {
  const prng = Prng.make(options.seed ?? 0)
  const errorRate = options.errorRate ?? 0
  return (episode: Environment.Episode<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      const text = Option.getOrElse(episode.observation, () => "")
      const puzzle = parseBoard(text)
      const solution = puzzle.map((r) => [...r])
      if (!solve(solution)) return
      for (let r = 0; r < 9; r++) {
        for (let c = 0; c < 9; c++) {
          if (puzzle[r][c] !== 0) continue
          // Each mistake may be followed by another: two in a row end the game, as they would for a model.
          while (errorRate > 0 && prng.next() < errorRate) {
            const wrong = 1 + ((solution[r][c] - 1 + 1 + prng.int(8)) % 9)
            const outcome = yield* episode.call("place", { row: r + 1, col: c + 1, number: wrong })
            if (outcome._tag === "Failure" || outcome.text.includes("Game over.")) return
          }
          const outcome = yield* episode.call("place", { row: r + 1, col: c + 1, number: solution[r][c] })
          if (outcome._tag === "Failure" || outcome.text.includes("Game over.")) return
        }
      }
    })
}

/** The move a reader of the latest observation's hints makes: the first guaranteed move, else the first option. */
const hintedMove = (text: string): readonly [number, number, number] | undefined => {
  const guaranteed = /GUARANTEED MOVES: \[(\d) (\d) (\d)\]/.exec(text)
  if (guaranteed !== null) return [Number(guaranteed[1]), Number(guaranteed[2]), Number(guaranteed[3])]
  const option = /Other options: \((\d),(\d)\)->(\d)/.exec(text)
  return option === null ? undefined : [Number(option[1]), Number(option[2]), Number(option[3])]
}

/**
 * A player that reads its hints (difficulty "easy"): each move is the first of the latest observation's
 * GUARANTEED MOVES (else its first "Other options" cell and candidate), so every call copies three digits from the
 * text just seen, which a small model can learn, where {@link solver}'s row-by-row order needs the solution. Stops
 * when no hint is shown. With `errorRate` > 0 a move's number is, with that probability, a wrong one (seeded).
 */
export const hintPlayer = (options: { readonly errorRate?: number; readonly seed?: number } = {}) => {
  const prng = Prng.make(options.seed ?? 0)
  const errorRate = options.errorRate ?? 0
  return (episode: Environment.Episode<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      let text = Option.getOrElse(episode.observation, () => "")
      for (let move = hintedMove(text); move !== undefined; move = hintedMove(text)) {
        const [row, col, right] = move
        const number = errorRate > 0 && prng.next() < errorRate ? 1 + ((right + prng.int(8)) % 9) : right
        const outcome = yield* episode.call("place", { row, col, number })
        if (outcome._tag === "Failure" || outcome.text.includes("Game over.")) return
        text = outcome.text
      }
    })
}

/** Whether a puzzle has exactly one solution (for tests and data checks). */
export const isUnique = (puzzle: Grid): boolean => countSolutions(puzzle.map((r) => [...r])) === 1

// ---------------------------------------------------------------------------------------------------------------
// Remote: the same tools on a served textarena_env (Sudoku-v0) (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** `SudokuTools` backed by a remote `textarena_env` (Sudoku-v0) session: TRL's `SudokuEnv` logic over it. */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    SudokuTools,
    Effect.gen(function*() {
      const client = yield* textArenaClient(url, options)
      const tools = makeSudokuTools({
        reset: (seed) => Effect.map(Effect.orDie(client.reset({ seed })), (r) => transcriptOf(r.observation)),
        step: (move) =>
          Effect.map(Effect.orDie(client.step({ message: move })), (r) => ({
            transcript: transcriptOf(r.observation),
            reward: typeof r.reward === "number" ? r.reward : 0,
            done: r.done
          })),
        // How the game ended is only in the state (`raw_state.game_info` and `raw_state.game_state`).
        ending: Effect.map(Effect.orDie(client.state), (state) => {
          const raw = isRecord(state.raw_state) ? state.raw_state : {}
          const info = isRecord(raw.game_info) && isRecord(raw.game_info["0"]) ? raw.game_info["0"] : {}
          const game = isRecord(raw.game_state) ? raw.game_state : {}
          return { invalidMove: info.invalid_move === true, completed: game.completed === true }
        })
      }, Environment.seedOf)
      return SudokuTools.of(tools)
    })
  )

/** Sudoku as an environment whose tools run on a remote server (same tools, columns and state as `environment`). */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
