/**
 * OpenSpiel's `catch` (open_spiel/games/catch/catch.cc) as driven by `rl_environment`: 10 rows x 5 columns,
 * actions 0 = LEFT, 1 = STAY, 2 = RIGHT, the ball column drawn uniformly, the paddle starting at column 5/2 = 2,
 * terminal after exactly 9 agent steps with reward +1 (caught) or -1 (missed).
 */
import type { Prng } from "./prng.js"

export const ROWS = 10
export const COLUMNS = 5
/** OpenSpiel's kTerminalPlayerId. */
export const TERMINAL_PLAYER_ID = -4

export interface CatchBoard {
  readonly ballRow: number
  readonly ballCol: number
  readonly paddleCol: number
}

export class CatchGame {
  ballRow = 0
  ballCol = 0
  paddleCol = Math.floor(COLUMNS / 2)
  constructor(private readonly prng: Prng) {
    this.newEpisode()
  }
  /** rl_environment.reset: the chance node picks the ball column, then the agent is to move. */
  newEpisode(): void {
    this.ballRow = 0
    this.ballCol = this.prng.int(COLUMNS)
    this.paddleCol = Math.floor(COLUMNS / 2)
  }
  get terminal(): boolean {
    return this.ballRow >= ROWS - 1
  }
  /** Applies an action in {0,1,2}; the caller checks legality (OpenSpiel does not). */
  apply(action: number): void {
    this.ballRow += 1
    this.paddleCol = Math.min(Math.max(this.paddleCol + action - 1, 0), COLUMNS - 1)
  }
  /** +1 / -1 at the end, 0 before. */
  get reward(): number {
    if (!this.terminal) return 0
    return this.ballCol === this.paddleCol ? 1 : -1
  }
  /** The observation tensor: 50 floats, row-major, 1.0 at the ball and at the paddle. */
  infoState(): Array<number> {
    const values = new Array<number>(ROWS * COLUMNS).fill(0)
    values[this.ballRow * COLUMNS + this.ballCol] = 1
    values[(ROWS - 1) * COLUMNS + this.paddleCol] = 1
    return values
  }
}

/**
 * TRL's `CatchEnv._format_obs` (examples/scripts/openenv/catch.py), quirks included: any 1.0 on the last row is
 * read as the paddle, so at the end the ball is not reported.
 */
export const formatObservation = (infoState: ReadonlyArray<number>): string => {
  let ballRow: number | undefined
  let ballCol: number | undefined
  let paddleCol: number | undefined
  infoState.forEach((value, index) => {
    if (value === 1) {
      const r = Math.floor(index / COLUMNS)
      const c = index % COLUMNS
      if (r < ROWS - 1) {
        ballRow = r + 1
        ballCol = c + 1
      } else {
        paddleCol = c + 1
      }
    }
  })
  const parts: Array<string> = []
  if (ballRow !== undefined && ballCol !== undefined) {
    parts.push(`Ball: row ${ballRow}/${ROWS}, column ${ballCol}/${COLUMNS}`)
  }
  if (paddleCol !== undefined) parts.push(`Paddle: column ${paddleCol}/${COLUMNS}`)
  if (ballCol !== undefined && paddleCol !== undefined) {
    const diff = ballCol - paddleCol
    if (diff < 0) parts.push(`The ball is ${-diff} column(s) to the LEFT of the paddle.`)
    else if (diff > 0) parts.push(`The ball is ${diff} column(s) to the RIGHT of the paddle.`)
    else parts.push("The ball is directly above the paddle.")
  }
  return parts.join("\n")
}
