/**
 * TextArena's Sudoku-v0 (`textarena/envs/Sudoku/env.py` at the pinned revision, clues 60, max_turns 100) on the
 * single-player state, with our seeded PRNG in place of Python's global `random`.
 */
import type { Prng } from "./prng.js"
import { formatAction, SinglePlayerState } from "./textArena.js"

/** A 9×9 Sudoku grid, rows of digits (0 = empty). */
export type Grid = Array<Array<number>>

export const CLUES = 60
export const MAX_TURNS = 100

const findEmpty = (grid: Grid): readonly [number, number] | undefined => {
  for (let i = 0; i < 9; i++) for (let j = 0; j < 9; j++) if (grid[i][j] === 0) return [i, j]
  return undefined
}

/** Whether `num` can go at (row, col) without repeating in its row, column or box. */
export const isSafe = (grid: Grid, row: number, col: number, num: number): boolean => {
  if (grid[row].includes(num)) return false
  for (let i = 0; i < 9; i++) if (grid[i][col] === num) return false
  const r0 = 3 * Math.floor(row / 3)
  const c0 = 3 * Math.floor(col / 3)
  for (let i = r0; i < r0 + 3; i++) for (let j = c0; j < c0 + 3; j++) if (grid[i][j] === num) return false
  return true
}

const fillGrid = (grid: Grid, prng: Prng): boolean => {
  const empty = findEmpty(grid)
  if (empty === undefined) return true
  const [row, col] = empty
  for (const num of prng.shuffle([1, 2, 3, 4, 5, 6, 7, 8, 9])) {
    if (isSafe(grid, row, col, num)) {
      grid[row][col] = num
      if (fillGrid(grid, prng)) return true
      grid[row][col] = 0
    }
  }
  return false
}

/** Counts solutions up to `limit` (TextArena's `_count_solutions`). */
export const countSolutions = (grid: Grid, limit = 2): number => {
  let found = 0
  const go = (): void => {
    if (found >= limit) return
    const empty = findEmpty(grid)
    if (empty === undefined) {
      found++
      return
    }
    const [row, col] = empty
    for (let num = 1; num <= 9; num++) {
      if (isSafe(grid, row, col, num)) {
        grid[row][col] = num
        go()
        grid[row][col] = 0
      }
    }
  }
  go()
  return found
}

/** Solves in place by backtracking; returns false when there is no solution. */
export const solve = (grid: Grid): boolean => {
  const empty = findEmpty(grid)
  if (empty === undefined) return true
  const [row, col] = empty
  for (let num = 1; num <= 9; num++) {
    if (isSafe(grid, row, col, num)) {
      grid[row][col] = num
      if (solve(grid)) return true
      grid[row][col] = 0
    }
  }
  return false
}

const copy = (grid: Grid): Grid => grid.map((r) => [...r])

/** TextArena's generation: a random full grid, then removals in random order that keep the solution unique. */
export const generate = (prng: Prng, clues = CLUES): { readonly solution: Grid; readonly puzzle: Grid } => {
  const solution: Grid = Array.from({ length: 9 }, () => new Array<number>(9).fill(0))
  fillGrid(solution, prng)
  const puzzle = copy(solution)
  const cells: Array<readonly [number, number]> = []
  for (let i = 0; i < 9; i++) for (let j = 0; j < 9; j++) cells.push([i, j])
  prng.shuffle(cells)
  // As in TextArena, a removal that breaks uniqueness is reverted and not retried.
  while (cells.length > clues) {
    const [row, col] = cells.pop()!
    const removed = puzzle[row][col]
    puzzle[row][col] = 0
    if (countSolutions(copy(puzzle)) !== 1) puzzle[row][col] = removed
  }
  return { solution, puzzle }
}

/** `_get_grid_string_with_indices`. */
export const render = (grid: Grid): string => {
  const header = "   " + Array.from({ length: 9 }, (_, j) => `C${j + 1}` + ((j + 1) % 3 === 0 ? "  " : "")).join(" ")
  const lines = [header]
  grid.forEach((row, i) => {
    let rowStr = `R${i + 1} `
    row.forEach((num, j) => {
      rowStr += ` ${num !== 0 ? String(num) : "."} `
      if ((j + 1) % 3 === 0 && j < 8) rowStr += "| "
    })
    lines.push(rowStr.trim())
    if ((i + 1) % 3 === 0 && i < 8) lines.push("   " + "- ".repeat(16))
  })
  return lines.join("\n")
}

export const prompt = (playerId: number) =>
  `You are Player ${playerId}. You are playing Sudoku.\n` +
  "Here is the current state of the Sudoku grid. Each row is numbered from 1 to 9, and each column is also numbered from 1 to 9.\n" +
  "Empty cells are represented by '.', and pre-filled cells contain digits from 1 to 9.\n\n" +
  "Current Sudoku Grid:\n" +
  "Your objective is to fill the empty cells in the 9x9 grid with digits from 1 to 9 such that:\n" +
  "1. Each row contains all digits from 1 to 9 without repetition.\n" +
  "2. Each column contains all digits from 1 to 9 without repetition.\n" +
  "3. Each of the nine 3x3 subgrids contains all digits from 1 to 9 without repetition.\n\n" +
  "Rules and Instructions:\n" +
  "1. **Do not overwrite** the initial numbers provided in the grid.\n" +
  "2. **Only fill** empty cells represented by '.'.\n" +
  "3. You may respond in any manner you prefer, but ensure that your response includes the format of '[row column number]'.\n" +
  "4. **Ensure** that your move does not violate Sudoku rules. Invalid moves will result in penalties.\n" +
  "Examples:\n" +
  "- **Valid Move**:\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[5 3 7]`\n" +
  "  - Explanation: Placing 7 at row 5, column 3 does not violate any Sudoku rules.\n\n" +
  "- **Invalid Move** (Overwriting a pre-filled cell):\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[1 1 9]`\n" +
  "  - Explanation: Cell (1,1) is already filled with 5. You cannot overwrite it.\n\n" +
  "- **Invalid Move** (Violating Sudoku rules):\n" +
  "  - Grid Snippet Before Move:\n" +
  "  \n" +
  "  - Move: `[1 3 5]`\n" +
  "  - Explanation: Placing 5 in row 1, column 3 violates the rule since 5 already exists in row 1.\n\n" +
  "The history of your moves and thoughts will be appended as you play more rounds. Use the history of your move to improve your decision making by avoiding the moves you have tried. Good luck!\n\n"

const MOVE = /\[(\d+)\s(\d+)\s(\d+)\]/

export class SudokuGame {
  readonly state = new SinglePlayerState(MAX_TURNS)
  readonly solution: Grid
  readonly puzzle: Grid
  readonly board: Grid
  completed = false

  constructor(prng: Prng) {
    const { puzzle, solution } = generate(prng)
    this.solution = solution
    this.puzzle = puzzle
    this.board = copy(puzzle)
    this.state.addObservation(prompt(0), "PROMPT")
    this.state.addObservation(`Game Board:\n${render(this.board)}`, "GAME_BOARD")
  }

  /** Fraction of the originally empty cells now correct. */
  completion(): number {
    let correct = 0
    let total = 0
    for (let i = 0; i < 9; i++) {
      for (let j = 0; j < 9; j++) {
        if (this.puzzle[i][j] !== 0) continue
        total++
        if (this.board[i][j] === this.solution[i][j]) correct++
      }
    }
    return total > 0 ? correct / total : 0
  }

  private complete(): boolean {
    for (let i = 0; i < 9; i++) {
      for (let j = 0; j < 9; j++) {
        if (this.board[i][j] === 0 || this.board[i][j] !== this.solution[i][j]) return false
      }
    }
    return true
  }

  /** One environment step on the raw message (ActionFormattingWrapper applied). Returns done. */
  step(message: string): boolean {
    const action = formatAction(message)
    const st = this.state
    const playerId = 0
    st.addObservation(action, "PLAYER_ACTION", playerId)
    const match = MOVE.exec(action)
    if (match === null) {
      st.setInvalidMove(
        `Invalid move format. Player ${playerId} did not respond with valid 'row column number'.`,
        this.completion()
      )
    } else {
      const [row, col, num] = [Number(match[1]), Number(match[2]), Number(match[3])]
      if (row < 1 || row > 9 || col < 1 || col > 9 || num < 1 || num > 9) {
        st.setInvalidMove(
          `Invalid move. Player ${playerId} attempted to place ${num} at (${row}, ${col}), which is out of bounds.`,
          this.completion()
        )
      } else {
        const r = row - 1
        const c = col - 1
        if (this.board[r][c] !== 0) {
          st.setInvalidMove(
            `Invalid move. Player ${playerId} attempted to overwrite a pre-filled cell (${row}, ${col}).`,
            this.completion()
          )
        } else if (this.solution[r][c] === num) {
          this.board[r][c] = num
          st.addObservation(`Board state: \n${render(this.board)}`, "GAME_BOARD")
        } else {
          st.setInvalidMove(
            `Invalid move. Player ${playerId} attempted to place ${num} at (${row}, ${col}), which violates Sudoku rules.`,
            this.completion()
          )
        }
        if (this.complete()) {
          this.completed = true
          st.setOutcome(1, `Congratulations! Player ${playerId} completed the Sudoku puzzle.`)
        }
      }
    }
    if (st.checkTurnLimit() && !st.done) {
      const pct = this.completion()
      st.setOutcome(
        pct,
        `The turn limit has been reached. You correctly filled ${pyRoundPct(pct)}% of the empty cells.`
      )
    }
    return st.step()
  }

  gameState(): Record<string, unknown> {
    return { board: copy(this.board), rendered_board: render(this.board), completed: this.completed }
  }
}

const pyRoundPct = (pct: number) => {
  const x = pct * 100
  const r = Math.round(x)
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r
}
