// What a Wordle policy has learnt of the solver's decision tree, teacher-forced — the diagnosis behind a win rate of
// 0. The solver opens with the same word and then picks each guess from the feedback so far (a fixed tree over the
// 156 secrets: 161 decisions). For every distinct transcript in a run's SFT data (`sft.jsonl`, one per secret when
// the error rate is 0), the checkpoint scores the solver's own episode: per decision (the second guess, the third,
// ...), the probability of the solver's word in the reasoning line ("Next guess: WORD.") and in the tool call that
// follows it, with everything before it as the solver played. A decision counts as learnt when the word's
// probability is above 0.5 (then greedy decoding writes it). Also: how many distinct words the model gives most of
// its probability to (a model that ignores the feedback writes one word everywhere).
//
// Usage: tsx bench/learning/wordle-decisions.ts RUN_DIR [CHECKPOINT_DIR] [--spans]
//   CHECKPOINT_DIR: default RUN_DIR/sft/checkpoint-N (the last); --spans prints each decision's tokens and their p.
import { NodeContext } from "@effect/platform-node"
import { Checkpoint } from "@envtrain/gpu"
import { SftTrainer, Trainer } from "@envtrain/grpo"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

const spans = process.argv.includes("--spans")
const [runDir, checkpointArg] = process.argv.slice(2).filter((a) => a !== "--spans")
if (runDir === undefined) {
  console.error("usage: tsx bench/learning/wordle-decisions.ts RUN_DIR [CHECKPOINT_DIR] [--spans]")
  process.exit(2)
}

const lastCheckpoint = (dir: string): string => {
  const sft = path.join(dir, "sft")
  const steps = fs.existsSync(sft)
    ? fs.readdirSync(sft).filter((d) => /^checkpoint-\d+$/.test(d)).map((d) => Number(d.slice(11)))
    : []
  if (steps.length === 0) {
    console.error(`${sft} holds no checkpoint-N: give the checkpoint directory as the second argument`)
    process.exit(2)
  }
  return path.join(sft, `checkpoint-${Math.max(...steps)}`)
}

/** One decision of the tree: its depth (1 = the second guess), the word, and the token spans that write it. */
interface Decision {
  readonly depth: number
  readonly word: string
  /** Token positions (in the whole sequence) of the word in the reasoning line and in the call. */
  readonly reasoning: ReadonlyArray<number>
  readonly call: ReadonlyArray<number>
}

/** The word spans of each assistant turn after the opening, found in the token strings. */
const decisionsOf = (tokens: ReadonlyArray<string>, words: ReadonlyArray<string>): Array<Decision> => {
  const out: Array<Decision> = []
  let turn = 0
  for (let i = 0; i < tokens.length; i++) {
    // The reasoning line's "Next guess:" (or "Opening guess:"), then the word up to the full stop.
    if (tokens[i] === "Ġguess" && tokens[i + 1] === ":") {
      const reasoning: Array<number> = []
      let j = i + 2
      // (The word may be bracketed, "[WORD].": the bracket's token counts with it.)
      while (j < tokens.length && !tokens[j].startsWith(".") && !tokens[j].startsWith("]")) reasoning.push(j++)
      // The call's argument: `"[` then the word up to `]`.
      while (j < tokens.length && !tokens[j].endsWith("\"[")) j++
      const call: Array<number> = []
      j++
      while (j < tokens.length && !tokens[j].startsWith("]")) call.push(j++)
      if (turn > 0 && turn < words.length) out.push({ depth: turn, word: words[turn], reasoning, call })
      turn++
      i = j
    }
  }
  return out
}

const program = Effect.gen(function*() {
  const checkpointDir = checkpointArg ?? lastCheckpoint(runDir)
  const weights = yield* Checkpoint.load(checkpointDir)
  const model = yield* Trainer.cpuModel(weights, { threads: 1 })
  const lines = fs.readFileSync(path.join(runDir, "sft.jsonl"), "utf8").split("\n").filter((l) => l.trim() !== "")
  // One transcript per distinct game (the SFT data repeats secrets).
  const games = new Map<string, SftTrainer.Transcript>()
  for (const line of lines) {
    const t = JSON.parse(line) as SftTrainer.Transcript
    const key = t.messages.filter((m) => m.role === "tool").map((m) => m.content).join("|")
    if (!games.has(key)) games.set(key, { messages: t.messages })
  }
  const byDepth = new Map<number, { n: number; reasoning: number; call: number; pr: number; pc: number }>()
  const solverWords = new Map<number, Map<string, number>>()
  const seen = new Set<string>()
  for (const transcript of games.values()) {
    const words = transcript.messages.flatMap((m) =>
      m.role === "assistant" && m.tool_calls !== undefined && m.tool_calls.length > 0
        ? [String((m.tool_calls[0].function.arguments as Record<string, unknown>).guess ?? "").replace(/[[\]]/g, "")]
        : []
    )
    const { ids } = yield* SftTrainer.tokenize(model, transcript)
    const tokens = ids.map((id) => model.tokenizer.idToToken(id) ?? "")
    const decisions = decisionsOf(tokens, words)
    if (decisions.length === 0) continue
    const split = 1
    const scores = yield* model.score(
      { prompts: [ids.slice(0, split)], completions: [ids.slice(split)], length: ids.length - split },
      1
    )
    const shown = (span: ReadonlyArray<number>) =>
      span.map((i) => `${tokens[i]}:${Math.exp(scores.logprobs[i - split]).toFixed(2)}`).join(" ")
    if (spans) {
      for (const d of decisions) {
        console.log(`guess ${d.depth + 1} ${d.word}: ${shown(d.reasoning)} / ${shown(d.call)}`)
      }
    }
    const p = (span: ReadonlyArray<number>) => Math.exp(span.reduce((s, i) => s + scores.logprobs[i - split], 0))
    for (const d of decisions) {
      // The same decision (same history) appears in every game that shares it: count it once.
      const key = `${d.depth}:${words.slice(0, d.depth + 1).join(",")}`
      if (seen.has(key)) continue
      seen.add(key)
      const row = byDepth.get(d.depth) ?? { n: 0, reasoning: 0, call: 0, pr: 0, pc: 0 }
      const pr = p(d.reasoning)
      const pc = p(d.call)
      row.n++
      row.pr += pr
      row.pc += pc
      if (pr > 0.5) row.reasoning++
      if (pc > 0.5) row.call++
      byDepth.set(d.depth, row)
      const counts = solverWords.get(d.depth) ?? new Map<string, number>()
      counts.set(d.word, (counts.get(d.word) ?? 0) + 1)
      solverWords.set(d.depth, counts)
    }
  }
  console.log(`${runDir}: ${checkpointDir}, ${games.size} distinct games`)
  console.log(
    "| decision | count | distinct solver words | reasoning word p > 0.5 | mean p | call word p > 0.5 | mean p |"
  )
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (const [depth, r] of [...byDepth.entries()].sort((a, b) => a[0] - b[0])) {
    console.log(
      `| guess ${depth + 1} | ${r.n} | ${solverWords.get(depth)?.size ?? 0} | ${r.reasoning} | ${
        (r.pr / r.n).toFixed(3)
      } | ${r.call} | ${(r.pc / r.n).toFixed(3)} |`
    )
  }
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).catch((e) => {
  console.error(e)
  process.exit(1)
})
