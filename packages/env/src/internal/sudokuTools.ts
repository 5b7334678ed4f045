// TRL's `SudokuEnv` wrapper logic (examples/scripts/openenv/sudoku.py) over any Sudoku-v0 session: the transcript
// slicing, shaped rewards and hints are the same whether the game runs in process (`Sudoku.SudokuTools`) or on a
// server (`Sudoku.remoteLayer`); a test plays both with the same seeds and compares every text and the final state.
import { Effect, Option } from "effect"
import { GameOver } from "../Tool.js"
import type { Grid } from "./sudokuGame.js"
import { isSafe } from "./sudokuGame.js"

/** One Sudoku-v0 session, wherever it runs. */
export interface SudokuSession<E> {
  /** Starts an episode with this seed; the cumulative transcript. */
  readonly reset: (seed: number) => Effect.Effect<string, E>
  /** Plays `[row col number]`; the cumulative transcript, the env reward and done. */
  readonly step: (move: string) => Effect.Effect<{ transcript: string; reward: number; done: boolean }, E>
  /** Once the game is over: did it end on an invalid move, and was the puzzle completed. */
  readonly ending: Effect.Effect<{ invalidMove: boolean; completed: boolean }, E>
}

export interface SudokuToolsState {
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

const mean = (xs: ReadonlyArray<number>) => xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length

/** The `place` tool and reward state over a session (one per episode). */
export const makeSudokuTools = <E>(
  session: SudokuSession<E>,
  seedOf: (seed: number | undefined) => Effect.Effect<number>
) => {
  const maxTurns = 100
  let started = false
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
  let won = false
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

  return {
    reset: (
      columns: { readonly seed?: number | undefined; readonly difficulty?: "easy" | "medium" | "hard" | undefined }
    ) =>
      Effect.gen(function*() {
        seed = yield* seedOf(columns.seed)
        difficulty = columns.difficulty ?? "easy"
        const transcript = yield* session.reset(seed)
        started = true
        moveCounts = new Map()
        successful = []
        failed = []
        validScores = []
        emptyScores = []
        correctScores = []
        repetitionScores = []
        turn = 0
        done = false
        won = false
        invalid = 0
        lastFull = transcript
        lastBoard = isBoard(lastFull) ? lastFull : ""
        initialFilled = lastBoard ? countFilled(lastBoard) : 0
        maxFilled = initialFilled
        const board = lastBoard ? boardOnly(lastBoard) : "No board available."
        return Option.some(`Step 0. Progress: 0 cells filled.\n\nBoard:\n${board}${hints()}`)
      }),
    place: ({ col, number, row }: { readonly row: number; readonly col: number; readonly number: number }) =>
      Effect.gen(function*() {
        if (!started || done) return yield* new GameOver({ message: "Game is over. No more moves allowed." })
        turn += 1
        const move = `[${row} ${col} ${number}]`
        const result = yield* session.step(move)
        done = result.done
        const correct = result.reward
        const ending = done ? yield* session.ending : { invalidMove: false, completed: false }
        won = ending.completed
        const full = result.transcript
        const fresh = full.slice(lastFull.length)
        lastFull = full
        const lower = fresh.toLowerCase()
        const envSaysInvalid = ["invalid", "error", "cannot", "already", "violation", "lost"].some((k) =>
          lower.includes(k)
        )
        const warning = lower.includes("please resubmit") || lower.includes("avoid penalties")
        if (envSaysInvalid || (done && ending.invalidMove)) invalid += 1
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
        return done
          ? `Move ${move}: ${status}. Game over.\n${progress}\n\nFinal board:\n${board}`
          : `Move ${move}: ${status}\n${progress}\n\nBoard:\n${board}${hints()}`
      }),
    state: Effect.sync((): SudokuToolsState => {
      const remaining = 81 - initialFilled
      return {
        done,
        won,
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
  }
}
