/**
 * The text envtrain trains its own small tokenizer on: the prose in `data/corpus.txt` (game rules, tool-use
 * instructions, English glue) plus generated game transcripts (Wordle feedback, Sudoku boards, Catch observations,
 * echo messages) and tool calls/results in the chat format, so the frequent strings of every environment become
 * single tokens. Deterministic for a given seed.
 */
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { mulberry32 } from "../Random.js"

const dataFile = (name: string) => fileURLToPath(new URL(`../../data/${name}`, import.meta.url))

const wordleFeedback = (secret: string, guess: string): string => {
  const out = Array<string>(5).fill("X")
  const left: Array<string> = []
  for (let i = 0; i < 5; i++) {
    if (guess[i] === secret[i]) out[i] = "G"
    else left.push(secret[i])
  }
  for (let i = 0; i < 5; i++) {
    if (out[i] === "G") continue
    const j = left.indexOf(guess[i])
    if (j >= 0) {
      out[i] = "Y"
      left.splice(j, 1)
    }
  }
  return out.join(" ")
}

const sudokuBoard = (rand: () => number): string => {
  const header = "   C1 C2 C3   C4 C5 C6   C7 C8 C9  "
  const lines = [header]
  for (let r = 0; r < 9; r++) {
    let row = `R${r + 1} `
    for (let c = 0; c < 9; c++) {
      row += ` ${rand() < 0.3 ? "." : 1 + Math.floor(rand() * 9)} `
      if (c === 2 || c === 5) row += "| "
    }
    lines.push(row.trimEnd())
    if (r === 2 || r === 5) lines.push("   " + "- ".repeat(16))
  }
  return lines.join("\n")
}

const toolCall = (name: string, args: Record<string, unknown>) =>
  `<tool_call>\n{"name": "${name}", "arguments": ${
    JSON.stringify(args).replace(/":/g, "\": ").replace(/,"/g, ", \"")
  }}\n</tool_call>`

const turn = (role: string, content: string) => `<|im_start|>${role}\n${content}<|im_end|>\n`

const toolResponse = (content: string) => `<|im_start|>user\n<tool_response>\n${content}\n</tool_response><|im_end|>\n`

/**
 * Build a training corpus of roughly `targetChars` characters.
 */
export const buildCorpus = (targetChars = 300_000, seed = 1): string => {
  const rand = mulberry32(seed)
  const pick = <T>(xs: ReadonlyArray<T>): T => xs[Math.floor(rand() * xs.length)]
  const prose = readFileSync(dataFile("corpus.txt"), "utf8")
  const words = readFileSync(dataFile("words.txt"), "utf8").split(/\s+/).filter((w) => w.length === 5)
  const guesses = readFileSync(dataFile("guesses.txt"), "utf8").split(/\s+/).filter((w) => w.length === 5)
  const parts: Array<string> = [prose]
  let size = prose.length
  const push = (s: string) => {
    parts.push(s)
    size += s.length
  }
  const sentences = prose.split(/(?<=[.!?])\s+/).filter((s) => s.length > 20)
  while (size < targetChars) {
    const kind = Math.floor(rand() * 5)
    if (kind === 0) {
      const secret = pick(words)
      let text = ""
      for (let k = 1; k <= 6; k++) {
        const guess = rand() < 0.5 ? pick(words) : pick(guesses)
        text += `<|im_start|>assistant\n<think>\n\n</think>\n\n${
          toolCall("guess", { guess: `[${guess}]` })
        }<|im_end|>\n`
        text += toolResponse(
          `\n[GAME] You submitted [${guess}].\nFeedback:\n${guess.toUpperCase().split("").join(" ")}\n` +
            `${wordleFeedback(secret, guess)}\nYou have ${6 - k} guesses left.`
        )
        if (guess === secret) break
      }
      push(text)
    } else if (kind === 1) {
      const [r, c, n] = [1 + Math.floor(rand() * 9), 1 + Math.floor(rand() * 9), 1 + Math.floor(rand() * 9)]
      push(
        `<|im_start|>assistant\n${toolCall("place", { row: r, col: c, number: n })}<|im_end|>\n` +
          toolResponse(
            `Move [${r} ${c} ${n}]: ${rand() < 0.7 ? "valid" : "invalid"}\nStep ${Math.floor(rand() * 60)}. ` +
              `Progress: ${Math.floor(rand() * 81)} cells filled.\n\nBoard:\n${sudokuBoard(rand)}`
          )
      )
    } else if (kind === 2) {
      const ball = Math.floor(rand() * 5)
      const paddle = Math.floor(rand() * 5)
      const d = ball - paddle
      const where = d === 0
        ? "The ball is directly above the paddle."
        : `The ball is ${Math.abs(d)} column${Math.abs(d) > 1 ? "s" : ""} to the ${
          d < 0 ? "LEFT" : "RIGHT"
        } of the paddle.`
      const call = d === 0 ? toolCall("stay", {}) : toolCall("move", { direction: d < 0 ? "left" : "right" })
      push(
        toolResponse(
          `Ball: row ${1 + Math.floor(rand() * 9)}/10, column ${ball + 1}/5\nPaddle: column ${paddle + 1}/5\n${where}`
        ) +
          `<|im_start|>assistant\n<think>\n\n</think>\n\n${call}<|im_end|>\n`
      )
    } else if (kind === 3) {
      const phrase = Array.from({ length: 2 + Math.floor(rand() * 5) }, () => pick(words)).join(" ")
      push(
        turn("user", `Try to echo '${phrase}' in the environment.`) +
          `<|im_start|>assistant\n${toolCall("echo", { message: phrase })}<|im_end|>\n` + toolResponse(phrase)
      )
    } else {
      push(pick(sentences) + " " + pick(sentences) + "\n")
    }
  }
  return parts.join("\n")
}
