// What a Catch policy decides, move by move, from a run's sampled episodes (completions.jsonl: GRPO's rollouts) —
// the diagnosis behind a success rate: per board relation (ball LEFT / RIGHT of the paddle / directly above), which
// call it made (by distance: one column away or more); how often the call was right on the first move (where no earlier move exists to repeat); how often a
// move repeats the previous one when that is wrong (the shortcut of a model that copies its last call instead of
// reading the board); and how often the call contradicts the move its own reasoning line names.
//
// Usage: tsx bench/learning/catch-decisions.ts RUN_DIR [RUN_DIR ...]   (prints one table per run)
import * as fs from "node:fs"
import * as path from "node:path"

type Move = "left" | "right" | "stay"

const RELATION = /The ball is (?:(\d+) column\(s\) to the (LEFT|RIGHT) of the paddle|directly above the paddle)\./g
const CALL = /<tool_call>\s*\{"name": "(move|stay)"(?:, "arguments": \{"direction": "(left|right)"\})?/
const NAMED = /Move: (left|right|stay)\.\s*$/

interface Tally {
  readonly table: Record<string, Record<Move, number>>
  first: { right: number; all: number }
  later: { right: number; all: number; wrongRepeats: number; wrong: number }
  contradictions: number
  calls: number
}

/** The right move for the last board shown, and how many columns away the ball is (0 above it). */
const lastRelation = (text: string): { readonly move: Move; readonly distance: number } | undefined => {
  let last: { readonly move: Move; readonly distance: number } | undefined
  for (const m of text.matchAll(RELATION)) {
    last = m[2] === undefined ? { move: "stay", distance: 0 } : { move: m[2].toLowerCase() as Move, distance: +m[1] }
  }
  return last
}

const tallyRun = (file: string): Tally => {
  const t: Tally = {
    table: {},
    first: { right: 0, all: 0 },
    later: { right: 0, all: 0, wrongRepeats: 0, wrong: 0 },
    contradictions: 0,
    calls: 0
  }
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    if (line.trim() === "") continue
    const row = JSON.parse(line) as { prompt: string; completion: string }
    // Each assistant turn: the text seen before it (prompt and earlier turns) ends with the board it answers.
    const turns = row.completion.split(/<\/tool_call>/)
    let seen = row.prompt
    let previous: Move | undefined
    for (const turn of turns) {
      const call = CALL.exec(turn)
      if (call === null) break
      // The board the move answers: the last relation shown before this assistant turn (not its own reasoning
      // line). A turn after the first starts with the tool's answer (the new board), then the assistant's text.
      const head = turn.slice(0, call.index)
      const think = head.lastIndexOf("</think>")
      const reasoning = think < 0 ? head : head.slice(think)
      const relation = lastRelation(seen + (think < 0 ? "" : head.slice(0, think)))
      seen += turn + "</tool_call>"
      if (relation === undefined) continue
      const board = relation.move
      const move: Move = call[1] === "stay" ? "stay" : (call[2] as Move)
      // By distance too: a hesitant player's data (`--sft-player hesitant`) differs between one column and two.
      const key = board === "stay" ? "directly above" : `ball ${relation.distance} ${board.toUpperCase()}`
      t.table[key] ??= { left: 0, right: 0, stay: 0 }
      t.table[key][move]++
      t.calls++
      const named = NAMED.exec(reasoning.trim())
      if (named !== null && named[1] !== move) t.contradictions++
      const right = move === board
      if (previous === undefined) {
        t.first.all++
        if (right) t.first.right++
      } else {
        t.later.all++
        if (right) t.later.right++
        else {
          t.later.wrong++
          if (move === previous) t.later.wrongRepeats++
        }
      }
      previous = move
    }
  }
  return t
}

const pct = (a: number, b: number) => b === 0 ? "-" : `${(100 * a / b).toFixed(1)} %`

for (const dir of process.argv.slice(2)) {
  const file = fs.existsSync(path.join(dir, "completions.jsonl")) ? path.join(dir, "completions.jsonl") : dir
  const t = tallyRun(file)
  console.log(`\n${file}: ${t.calls} calls`)
  console.log("| board | left | right | stay | right call |\n| --- | ---: | ---: | ---: | ---: |")
  for (const [key, row] of Object.entries(t.table).sort(([a], [b]) => a.localeCompare(b))) {
    const want: Move = key === "directly above" ? "stay" : key.endsWith("LEFT") ? "left" : "right"
    const all = row.left + row.right + row.stay
    console.log(`| ${key} | ${row.left} | ${row.right} | ${row.stay} | ${pct(row[want], all)} |`)
  }
  console.log(`first move right: ${pct(t.first.right, t.first.all)} of ${t.first.all}`)
  console.log(
    `later moves right: ${pct(t.later.right, t.later.all)} of ${t.later.all}; wrong ones that repeat the ` +
      `previous move: ${pct(t.later.wrongRepeats, t.later.wrong)}`
  )
  console.log(`calls contradicting the move their reasoning line names: ${pct(t.contradictions, t.calls)}`)
}
