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
import { countSolutions, isSafe, solve, SudokuGame } from "./internal/sudokuGame.js"
import type { Action } from "./internal/textArenaOpenEnv.js"
import { textArenaDefinition } from "./internal/textArenaOpenEnv.js"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import * as Tool from "./Tool.js"

export { countSolutions, generate, render, solve } from "./internal/sudokuGame.js"
export type { Grid } from "./internal/sudokuGame.js"
export { Action, Observation, OpenEnvState } from "./internal/textArenaOpenEnv.js"

/** The OpenEnv definition of `textarena_env` serving Sudoku-v0. Reset kwargs: `seed`, `episode_id`. */
export const openEnv: OpenEnvDefinition<Action> = textArenaDefinition(
  "Sudoku-v0",
  (_options, seed) => new SudokuGame(Prng.make(seed)),
  false
)

// ---------------------------------------------------------------------------------------------------------------
// TRL's board-text helpers (examples/scripts/openenv/sudoku.py)
// ---------------------------------------------------------------------------------------------------------------

const isBoard = (text: string) => text.includes("R1") && text.includes("R9") && text.includes("|")
const isRowLine = (s: string) => s.length > 1 && s[0] === "R" && s[1] >= "0" && s[1] <= "9"

/** `parse_board`: the R1..R9 lines of a text into a grid (0 = empty). */
export const parseBoard = (text: string): Grid => {
  const grid: Grid = Array.from({ length: 9 }, () => new Array<number>(9).fill(0))
  if (!isBoard(text)) return grid
  for (const line of text.split("\n")) {
    const s = line.trim()
    if (s && isRowLine(s)) {
      const row = Number(s[1]) - 1
      let col = 0
      for (const ch of s.slice(2)) {
        if (ch === ".") grid[row][col++] = 0
        else if (ch >= "0" && ch <= "9") grid[row][col++] = Number(ch)
      }
    }
  }
  return grid
}

const countFilled = (text: string) => isBoard(text) ? parseBoard(text).flat().filter((v) => v !== 0).length : 0

const emptyCells = (text: string): Array<string> => {
  const out: Array<string> = []
  if (!isBoard(text)) return out
  for (const line of text.split("\n")) {
    const s = line.trim()
    if (s && isRowLine(s)) {
      const row = Number(s[1])
      let col = 0
      for (const ch of s.slice(2)) {
        if (ch === ".") out.push(`${row},${++col}`)
        else if (ch >= "0" && ch <= "9") col++
      }
    }
  }
  return out
}

const boardOnly = (text: string): string => {
  if (!text) return ""
  const out: Array<string> = []
  let inBoard = false
  for (const line of text.split("\n")) {
    const s = line.trim()
    if (s.startsWith("C1") || (s && isRowLine(s))) inBoard = true
    if (inBoard && (s.startsWith("-") || s.startsWith("R") || s.startsWith("C1"))) out.push(line)
    else if (inBoard && s && !s.startsWith("-") && !isRowLine(s)) break
  }
  return out.join("\n")
}

const candidates = (grid: Grid, row: number, col: number) => {
  const out: Array<number> = []
  for (let n = 1; n <= 9; n++) if (isSafe(grid, row, col, n)) out.push(n)
  return out
}

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
export interface State {
  readonly done: boolean
  /** The puzzle was completed (env reward 1). */
  readonly won: boolean
  readonly correct_reward: number
  readonly valid_move_reward: number
  readonly empty_cell_reward: number
  readonly repetition_reward: number
  readonly progress_reward: number
  /** Cells filled by valid, new moves. */
  readonly filled: number
  readonly invalid_moves: number
  readonly moves: number
  readonly seed: number
}

/** Columns: `seed` picks the puzzle; `difficulty` picks TRL's hints (default "easy"). */
export const Columns = Schema.Struct({
  seed: Schema.optional(Schema.Int),
  difficulty: Schema.optional(Schema.Literal("easy", "medium", "hard"))
})

const mean = (xs: ReadonlyArray<number>) => xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length

/** The Sudoku tool service (TRL's wrapper logic over the Sudoku-v0 transcript). */
export class SudokuTools extends Context.Tag("@envtrain/env/Sudoku/SudokuTools")<SudokuTools, {
  readonly reset: (columns: typeof Columns.Type) => Effect.Effect<Option.Option<string>>
  readonly place: (
    params: { readonly row: number; readonly col: number; readonly number: number }
  ) => Effect.Effect<string, Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {
  static readonly layer = Layer.sync(SudokuTools, () => {
    const maxTurns = 100
    let game: SudokuGame | undefined
    let difficulty: "easy" | "medium" | "hard" = "easy"
    let seed = 0
    let moveCounts = new Map<string, number>()
    let successful: Array<string> = []
    let failed: Array<string> = []
    let validScores: Array<number> = []
    let emptyScores: Array<number> = []
    let correctScores: Array<number> = []
    let repetitionScores: Array<number> = []
    let lastBoard = ""
    let lastFull = ""
    let initialFilled = 0
    let maxFilled = 0
    let turn = 0
    let done = false
    let invalid = 0

    const hints = (): string => {
      const parts: Array<string> = []
      const tried = [...successful, ...failed]
      if (tried.length > 0) parts.push(`\nMOVES ALREADY TRIED (do not repeat): ${tried.join(", ")}`)
      if (!lastBoard) return parts.join("\n")
      const grid = parseBoard(lastBoard)
      const cells: Array<readonly [number, number, Array<number>]> = []
      for (let r = 0; r < 9; r++) {
        for (let c = 0; c < 9; c++) if (grid[r][c] === 0) cells.push([r + 1, c + 1, candidates(grid, r, c)])
      }
      if (difficulty === "easy" && cells.length > 0) {
        // Python's sort is stable, as is Array.prototype.sort.
        const sorted = [...cells].sort((a, b) => a[2].length - b[2].length)
        const guaranteed: Array<string> = []
        const other: Array<string> = []
        for (const [r, c, cand] of sorted.slice(0, 10)) {
          if (cand.length === 1) guaranteed.push(`[${r} ${c} ${cand[0]}]`)
          else if (cand.length <= 3) other.push(`(${r},${c})->${cand.join(",")}`)
        }
        if (guaranteed.length > 0) parts.push(`\nGUARANTEED MOVES: ${guaranteed.slice(0, 5).join(", ")}`)
        if (other.length > 0) parts.push(`Other options: ${other.slice(0, 5).join(" | ")}`)
      } else if (difficulty === "medium" && cells.length > 0) {
        const hintsText = cells.slice(0, 10).map(([r, c, cand]) => `(${r},${c})->${cand.join(",")}`)
        parts.push(`\nEmpty cells: ${hintsText.join(" | ")}`)
      }
      return parts.join("\n")
    }

    return SudokuTools.of({
      reset: (columns) =>
        Effect.gen(function*() {
          seed = yield* Environment.seedOf(columns.seed)
          difficulty = columns.difficulty ?? "easy"
          game = new SudokuGame(Prng.make(seed))
          moveCounts = new Map()
          successful = []
          failed = []
          validScores = []
          emptyScores = []
          correctScores = []
          repetitionScores = []
          turn = 0
          done = false
          invalid = 0
          lastFull = game.state.transcript()
          lastBoard = isBoard(lastFull) ? lastFull : ""
          initialFilled = lastBoard ? countFilled(lastBoard) : 0
          maxFilled = initialFilled
          const board = lastBoard ? boardOnly(lastBoard) : "No board available."
          return Option.some(`Step 0. Progress: 0 cells filled.\n\nBoard:\n${board}${hints()}`)
        }),
      place: ({ col, number, row }) =>
        Effect.suspend(() => {
          if (game === undefined || done) {
            return Effect.fail(new Tool.GameOver({ message: "Game is over. No more moves allowed." }))
          }
          turn += 1
          const move = `[${row} ${col} ${number}]`
          done = game.step(move)
          const correct = game.state.rewards ?? 0
          const full = game.state.transcript()
          const fresh = full.slice(lastFull.length)
          lastFull = full
          const lower = fresh.toLowerCase()
          const envSaysInvalid = ["invalid", "error", "cannot", "already", "violation", "lost"].some((k) =>
            lower.includes(k)
          )
          const warning = lower.includes("please resubmit") || lower.includes("avoid penalties")
          if (envSaysInvalid || (done && game.state.gameInfo.invalid_move)) invalid += 1
          const targetsEmpty = lastBoard ? emptyCells(lastBoard).includes(`${row},${col}`) : true
          const isValid = !envSaysInvalid && targetsEmpty
          const repetitions = moveCounts.get(move) ?? 0
          moveCounts.set(move, repetitions + 1)
          let valid = 0
          if (isValid && repetitions === 0) {
            valid = 1
            successful.push(move)
          } else if (warning) {
            valid = -0.5
            failed.push(move)
          }
          if (isValid && isBoard(fresh)) {
            lastBoard = fresh
            maxFilled = Math.max(maxFilled, countFilled(lastBoard))
          }
          validScores.push(valid)
          emptyScores.push(targetsEmpty ? 1 : -1)
          correctScores.push(correct)
          repetitionScores.push(repetitions > 0 ? -Math.min(2 ** (repetitions - 1), 10) : 0)
          if (turn >= maxTurns) done = true
          const board = lastBoard ? boardOnly(lastBoard) : "No board available."
          const status = isValid ? "valid" : "invalid"
          const progress = `Step ${turn}. Progress: ${successful.length} cells filled.`
          return Effect.succeed(
            done
              ? `Move ${move}: ${status}. Game over.\n${progress}\n\nFinal board:\n${board}`
              : `Move ${move}: ${status}\n${progress}\n\nBoard:\n${board}${hints()}`
          )
        }),
      state: Effect.sync(() => {
        const remaining = 81 - initialFilled
        return {
          done,
          won: game?.completed ?? false,
          correct_reward: correctScores.length > 0 ? correctScores[correctScores.length - 1] : 0,
          valid_move_reward: mean(validScores),
          empty_cell_reward: mean(emptyScores),
          repetition_reward: mean(repetitionScores),
          progress_reward: remaining > 0 ? (maxFilled - initialFilled) / remaining : 1,
          filled: successful.length,
          invalid_moves: invalid,
          moves: turn,
          seed
        }
      })
    })
  })
}

/** Sudoku as an environment (TRL's `SudokuEnv`): tool `place`. */
export const environment = Environment.make({
  name: "sudoku",
  description: "TextArena Sudoku-v0: fill the 21 empty cells of a 60-clue puzzle with `place(row, col, number)`.",
  tag: SudokuTools,
  layer: SudokuTools.layer,
  columns: Columns,
  tools: [Place],
  handlers: (service) => ({ place: service.place }),
  reset: (service, columns) => service.reset(columns),
  state: (service) => service.state,
  openEnv
})

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

/** Whether a puzzle has exactly one solution (for tests and data checks). */
export const isUnique = (puzzle: Grid): boolean => countSolutions(puzzle.map((r) => [...r])) === 1
