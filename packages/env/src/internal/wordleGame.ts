/**
 * TextArena's Wordle-v0 (`textarena/envs/Wordle/env.py`, word_length 5, num_guesses 6, hardcore False) on top of
 * the single-player state, plus OpenEnv's Wordle reward signals (`envs/textarena_env/rewards.py`).
 */
import { formatAction, pyLen, SinglePlayerState } from "./textArena.js"
import { validGuesses } from "./wordLists.js"

export const WORD_LENGTH = 5
export const NUM_GUESSES = 6

/** One letter's feedback: G (right place), Y (in the word elsewhere), X (not in the word). */
export type Mark = "G" | "Y" | "X"

/** TextArena's two-pass feedback: greens first, then yellows consuming the leftmost unused secret letter. */
export const feedback = (secret: string, guess: string): Array<Mark> => {
  const secretList: Array<string | null> = [...secret]
  const guessList = [...guess]
  const out: Array<Mark | null> = guessList.map(() => null)
  for (let i = 0; i < WORD_LENGTH; i++) {
    if (guessList[i] === secretList[i]) {
      out[i] = "G"
      secretList[i] = null
    }
  }
  for (let i = 0; i < WORD_LENGTH; i++) {
    if (out[i] === null) {
      const index = secretList.indexOf(guessList[i])
      if (index >= 0) {
        out[i] = "Y"
        secretList[index] = null
      } else {
        out[i] = "X"
      }
    }
  }
  return out as Array<Mark>
}

/** Python's `" ".join(s)`: the code points of `s` separated by spaces (`[...s].join(" ")` without the array). */
export const spaced = (s: string): string => {
  let out = ""
  for (let i = 0; i < s.length; i++) {
    if (i > 0) out += " "
    if ((s.charCodeAt(i) & 0xfc00) === 0xd800 && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      out += s.slice(i, i + 2)
      i++
    } else out += s[i]
  }
  return out
}

/** Python's `round()` (half to even), used in reason texts. */
export const pyRound = (x: number): number => {
  const r = Math.round(x)
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r
}

/** TextArena Wordle-v0's opening prompt (the first observation). */
export const PROMPT =
  "You are Playing Wordle.\nA secret 5-letter word has been chosen. You have 6 attempts to guess it.\n" +
  "For each guess, wrap your word in square brackets (e.g., '[apple]').\nFeedback for each letter will be given as follows:\n" +
  "  - G (green): correct letter in the correct position\n" +
  "  - Y (yellow): letter exists in the word but in the wrong position\n" +
  "  - X (wrong): letter is not in the word\n" +
  "Enter your guess to begin.\n"

// Python's `\w` is Unicode-aware.
const GUESS = /\[([\p{L}\p{N}_]+)\]/u

export class WordleGame {
  readonly state = new SinglePlayerState(null)
  readonly history: Array<[string, Array<Mark>]> = []

  constructor(readonly secret: string) {
    this.state.addObservation(PROMPT, "PROMPT")
  }

  private completion(): number {
    const last = this.history[this.history.length - 1]
    if (last === undefined) return 0
    const greens = last[1].filter((m) => m === "G").length
    const yellows = last[1].filter((m) => m === "Y").length * 0.5
    return (greens + yellows) / WORD_LENGTH
  }

  private view(): string {
    const [word, marks] = this.history[this.history.length - 1]
    return `${spaced(word.toUpperCase())}\n${marks.join(" ")}`
  }

  /** One environment step on the raw message (the ActionFormattingWrapper is applied here). Returns done. */
  step(message: string): boolean {
    const action = formatAction(message)
    const st = this.state
    st.addObservation(action, "PLAYER_ACTION")
    const match = GUESS.exec(action)
    if (match === null) {
      st.setInvalidMove(
        "You tried submitting a word in the wrong format. Please make sure to use squared brackets.",
        this.completion()
      )
      return st.step()
    }
    const word = match[1].toLowerCase()
    if (pyLen(word) !== WORD_LENGTH) {
      st.setInvalidMove(`Your word must be exactly ${WORD_LENGTH} letters.`, this.completion())
      return st.step()
    }
    if (this.history.some(([w]) => w === word)) {
      st.setInvalidMove(`You have already guessed '${word}' before. Please try a different word.`, this.completion())
      return st.step()
    }
    if (!validGuesses().has(word)) {
      st.setInvalidMove(`'${word}' is not an English word.`, this.completion())
      return st.step()
    }
    const marks = feedback(this.secret, word)
    this.history.push([word, marks])
    if (marks.every((m) => m === "G")) {
      st.setOutcome(1, "Congratulations! You guessed the word correctly!")
    } else {
      st.addObservation(
        `You submitted [${word}].\nFeedback:\n${this.view()}\nYou have ${NUM_GUESSES - st.turn - 1} guesses left.`,
        "GAME_MESSAGE"
      )
    }
    if (this.history.length >= NUM_GUESSES && !st.done) {
      const pct = this.completion()
      st.setOutcome(
        pct,
        `The turn limit has been reached. You didn't guess the word, but your best guess matched ${
          pyRound(pct * 100)
        }% of the letters in the correct positions.\nThe secret word was: **${this.secret}**.`
      )
    }
    return st.step()
  }

  gameState(): Record<string, unknown> {
    return {
      secret_word: this.secret,
      guess_history: this.history.map(([w, f]) => [w, [...f]]),
      word_length: WORD_LENGTH,
      num_guesses: NUM_GUESSES,
      // Rendered on demand (only `state` shows them): the board after the last valid guess.
      ...(this.history.length > 0 ? { rendered_board: this.renderedBoard(), player_view: this.view() } : {})
    }
  }

  private renderedBoard(): string {
    return this.history.map(([w, f]) =>
      `| Letter  | ${spaced(w.toUpperCase())} |\n|---------|${"--".repeat(WORD_LENGTH)}--\n| Status  | ${
        f.join(" ")
      } |\n`
    ).join("\n")
  }
}

/** OpenEnv's `_WordleRewardProvider` (one per episode). */
export class WordleRewardSignals {
  private readonly seen = new Map<string, number>()
  compute(actionMessage: string, content: string, reward: number): Record<string, number> {
    const guess = extractGuess(actionMessage)
    const fb = extractFeedback(content)
    const normalized = guess !== "[dunno]" ? guess : ""
    const previous = normalized ? (this.seen.get(normalized) ?? 0) : 0
    let greens = 0
    let yellows = 0
    if (fb) {
      const [g, y] = feedbackCounts(fb)
      greens = g / 5
      yellows = y / 5
    }
    if (normalized) this.seen.set(normalized, previous + 1)
    return {
      "wordle.greens": greens,
      "wordle.yellows": yellows,
      "wordle.repetitions": 1 - previous,
      "wordle.correct": reward
    }
  }
}

const extractGuess = (text: string) => {
  const m = /\[[A-Za-z]{5}\]/.exec(text)
  if (m) return m[0].toLowerCase()
  const cleaned = text.toLowerCase().replace(/[^a-z]/g, "")
  return cleaned.length >= 5 ? `[${cleaned.slice(0, 5)}]` : "[dunno]"
}

/** The text after the first "Feedback:" (both ends trimmed), as OpenEnv's `_extract_feedback`. */
const extractFeedback = (content: string) => {
  const at = content.indexOf("Feedback:")
  return at < 0 ? "" : content.slice(at + "Feedback:".length).trim()
}

const isMarks = (line: string) => {
  let any = false
  // By code unit: half of a surrogate pair is no mark either.
  for (let i = 0; i < line.length; i++) {
    const c = line[i]
    if (c === " ") continue
    if (c !== "G" && c !== "Y" && c !== "X") return false
    any = true
  }
  return any
}

/**
 * Greens and yellows of the last line made only of G/Y/X (spaces aside), when the feedback has at least two non-empty
 * lines. Scans from the end (the marks are the second-to-last line), not the whole growing transcript.
 */
const feedbackCounts = (fb: string): [number, number] => {
  let end = fb.length
  let nonEmptyAfter = 0
  while (end >= 0) {
    const start = fb.lastIndexOf("\n", end - 1) + 1
    const line = fb.slice(start, end).trim()
    if (line.length > 0) {
      if (isMarks(line)) {
        // At least two non-empty lines in all: one after this one, or any non-blank text before it.
        if (nonEmptyAfter === 0 && !/\S/.test(fb.slice(0, start))) return [0, 0]
        let greens = 0
        let yellows = 0
        for (let i = 0; i < line.length; i++) {
          if (line[i] === "G") greens++
          else if (line[i] === "Y") yellows++
        }
        return [greens, yellows]
      }
      nonEmptyAfter++
    }
    if (start === 0) break
    end = start - 1
  }
  return [0, 0]
}
