/**
 * The parts of TextArena (0.7.x, `textarena/core.py`, `state.py`, `LLMObservationWrapper`,
 * `ActionFormattingWrapper`) and of OpenEnv's `textarena_env` server that Wordle-v0 and Sudoku-v0 rely on:
 * the single-player state machine (two consecutive invalid moves end the game), the cumulative
 * "\n[NAME] message" transcript, and the OpenEnv observation/state shapes built from it.
 */

export const GAME_ID = -1

export type ObservationType = "PROMPT" | "PLAYER_ACTION" | "GAME_MESSAGE" | "GAME_BOARD" | "GAME_ADMIN"

/** `ActionFormattingWrapper`: wraps the action in brackets when it has neither `[` nor `]`. */
export const formatAction = (action: string): string =>
  !action.includes("[") && !action.includes("]") ? `[${action}]` : action

/** TextArena's `SinglePlayerState` (error_allowance 1) plus the observation wrapper's full history. */
export class SinglePlayerState {
  turn = 0
  done = false
  rewards: number | null = null
  errorCount = 0
  madeInvalidMove = false
  readonly roleMapping: ReadonlyArray<readonly [number, string]> = [[0, "Player"], [GAME_ID, "GAME"]]
  /** `[Player]`, `[GAME]`: the role tags stripped from player actions (built once, not per action). */
  private readonly roleTags: ReadonlyArray<string> = this.roleMapping.map(([, tag]) => `[${tag}]`)
  readonly logs: Array<[number, string]> = []
  gameInfo: { role: string; invalid_move: boolean; turn_count: number; reason?: string } = {
    role: "Player 0",
    invalid_move: false,
    turn_count: 0
  }
  private readonly pending: Array<readonly [number, string]> = []
  private rendered = ""
  private readonly errorAllowance = 1

  constructor(readonly maxTurns: number | null) {}

  addObservation(message: string, type: ObservationType, fromId: number = GAME_ID): void {
    let text = message
    // core.State.add_observation strips role tags from player actions.
    if (type === "PLAYER_ACTION") {
      for (const marker of this.roleTags) {
        // Nearly always absent: skip the split and join.
        if (text.includes(marker)) text = text.split(marker).join("")
      }
    }
    this.logs.push([fromId, text])
    this.pending.push([fromId, text])
  }

  setOutcome(reward: number, reason: string): void {
    this.rewards = reward
    this.gameInfo.reason = reason
    this.done = true
  }

  setInvalidMove(reason: string, reward: number): void {
    if (this.errorAllowance > this.errorCount) {
      this.errorCount += 1
      this.madeInvalidMove = true
      this.addObservation(
        `You attempted an invalid move. Reason: ${reason} Please resubmit a valid move and remember to follow the game rules to avoid penalties.`,
        "GAME_ADMIN"
      )
    } else {
      this.rewards = reward
      this.gameInfo.reason = `Invalid Move: ${reason}`
      this.gameInfo.invalid_move = true
      this.done = true
    }
  }

  checkTurnLimit(): boolean {
    return this.maxTurns !== null && this.turn >= this.maxTurns && !this.done
  }

  /** `SinglePlayerState.step`. */
  step(): boolean {
    if (!this.madeInvalidMove) {
      this.errorCount = 0
      this.turn += 1
      this.gameInfo.turn_count += 1
    }
    if (this.done) return true
    this.madeInvalidMove = false
    return false
  }

  /** `LLMObservationWrapper.get_observation`: drains new messages and renders the whole history. */
  transcript(): string {
    // The history only grows: render the new messages onto what was rendered before.
    for (const [sender, message] of this.pending) {
      const name = sender === GAME_ID
        ? "GAME"
        : (this.roleMapping.find(([id]) => id === sender)?.[1] ?? `Player ${sender}`)
      this.rendered += `\n[${name}] ${message}`
    }
    this.pending.length = 0
    return this.rendered
  }

  rawState(gameState: unknown, rewardSignals?: Readonly<Record<string, number>>): Record<string, unknown> {
    return {
      turn: this.turn,
      game_state: gameState,
      logs: this.logs.map(([from, message]) => [from, message]),
      rewards: this.rewards === null ? null : { "0": this.rewards },
      done: this.done,
      role_mapping: Object.fromEntries(this.roleMapping.map(([id, name]) => [String(id), name])),
      game_info: { "0": { ...this.gameInfo } },
      step_info: {},
      ...(rewardSignals !== undefined ? { reward_signals: { ...rewardSignals } } : {})
    }
  }
}

/** OpenEnv's `TextArenaObservation` as built by `_build_observation` from the one-string observation. */
export const observation = (content: string, turn: number, envId: string, info: Record<string, unknown>) => ({
  // The string is iterated char by char and coalesced: always exactly one message (none if empty).
  prompt: turn === 0 && content.length > 0 ? pyStrip(content) : envId,
  messages: content.length > 0 ? [{ sender_id: -1, content, category: "MESSAGE" }] : [],
  current_player_id: 0,
  legal_players: [0],
  info
})

/** Python's `str.strip()`: JS `trim` plus the separators Python also counts as whitespace (U+001C..U+001F, U+0085). */
const pyExtraSpace = new Set([0x1c, 0x1d, 0x1e, 0x1f, 0x85])
export const pyStrip = (s: string) => {
  const isSpace = (ch: string) => ch.trim() === "" || pyExtraSpace.has(ch.charCodeAt(0))
  let start = 0
  let end = s.length
  while (start < end && isSpace(s[start])) start++
  while (end > start && isSpace(s[end - 1])) end--
  return s.slice(start, end)
}

/** Python's `len(str)`: code points (a surrogate pair is one, as `[...s].length` counts, without the array). */
export const pyLen = (s: string) => {
  let n = s.length
  for (let i = 0; i < s.length - 1; i++) {
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n--
      i++
    }
  }
  return n
}
