// OpenEnv's Wordle reward signals read the feedback marks from the growing transcript; the incremental scan must
// count exactly what the straightforward reading of `rewards.py` counts.
import { assert, describe, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { WordleRewardSignals } from "../src/internal/wordleGame.js"

// `_extract_feedback` + the G/Y count as written in rewards.py: split everything after the first "Feedback:".
const reference = (content: string): [number, number] => {
  const stripped = content.trim()
  const at = stripped.indexOf("Feedback:")
  const fb = at < 0 ? "" : stripped.slice(at + "Feedback:".length).trim()
  if (!fb) return [0, 0]
  const lines = fb.split("\n").map((l) => l.trim()).filter((l) => l.length > 0)
  if (lines.length < 2) return [0, 0]
  for (let i = lines.length - 1; i >= 0; i--) {
    const normalized = lines[i].replaceAll(" ", "")
    if (normalized.length > 0 && [...normalized].every((c) => c === "G" || c === "Y" || c === "X")) {
      return [[...normalized].filter((c) => c === "G").length, [...normalized].filter((c) => c === "Y").length]
    }
  }
  return [0, 0]
}

const line = FastCheck.constantFrom(
  "Feedback:",
  "Feedback: X X",
  "C R A N E",
  "X X Y G G",
  "G G G G G",
  " Y  X ",
  "",
  "   ",
  "\t",
  "X\tY",
  "You have 3 guesses left.",
  "[GAME] You submitted [crane].",
  "GYXQ"
)

describe("Wordle reward signals", () => {
  it.prop("greens and yellows match rewards.py on arbitrary transcripts", [FastCheck.array(line, { maxLength: 12 })], ([
    lines
  ]) => {
    const content = lines.join("\n")
    const signals = new WordleRewardSignals().compute("[crane]", content, 0)
    const [greens, yellows] = reference(content)
    assert.strictEqual(signals["wordle.greens"], greens / 5)
    assert.strictEqual(signals["wordle.yellows"], yellows / 5)
  }, { fastCheck: { numRuns: 2000 } })
})
