// A choice's text as its tokens are sampled (token-by-token streaming and stop strings on a continuous batch), read by
// an incremental `Detokenizer`. What may be sent is held back so that everything sent stays a prefix of the finished
// answer: a tail that could be the start of a stop string, and (tools parsed) whatever may yet turn out to be a tool
// call or reasoning.
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import { isSpace } from "../fastCodec.js"
import { Detokenizer } from "./detokenizer.js"

const TOOL_MARKERS = ["<tool_call>", "<think>", "</think>"]

/** How to hold text back. */
export interface Holds {
  readonly stop: ReadonlyArray<string>
  readonly skipSpecialTokens: boolean
  /**
   * Chat with tools parsed: content ends at the first tool call or think tag, and trailing spaces wait (the parsed
   * content is trimmed). `thinking`: text before a later `</think>` is reasoning, so nothing is sent until the end.
   */
  readonly tools?: { readonly thinking: boolean }
}

// The longest tail of `text` (from `from` on) that is a proper start of one of `words`.
const partialTail = (text: string, words: ReadonlyArray<string>, from: number) => {
  let best = 0
  for (const w of words) {
    for (let k = Math.min(w.length - 1, text.length - from); k > best; k--) {
      if (text.endsWith(w.slice(0, k))) {
        best = k
        break
      }
    }
  }
  return best
}

export class ChoiceText {
  /** Characters of `text` already sent. */
  sent = 0
  /** Tokens already sent (their ids and logprobs). */
  sentTokens = 0
  /** Where the tokens of the last `read` start in `text` (completions' `text_offset`). */
  offset = 0
  /** Where each token of the last `read` starts in `text` (a step of several tokens: each its own `text_offset`). */
  offsets: Array<number> = []
  private readonly detokenizer: Detokenizer
  private stopped = false

  constructor(tokenizer: Tokenizer, private readonly holds: Holds) {
    this.detokenizer = new Detokenizer(tokenizer, holds.skipSpecialTokens)
  }

  /** The text of the tokens read so far, whole characters only. */
  get text(): string {
    return this.detokenizer.text
  }

  /**
   * Reads the tokens sampled so far (`ids`: all of them). Returns "stop" when a stop string is now complete (the
   * sequence ends here), else the text that may be sent now (possibly "").
   */
  read(ids: ReadonlyArray<number>): string | "stop" {
    if (this.stopped) return "stop"
    const before = this.text.length
    this.offset = before
    // Token by token, so a step of several tokens knows where each starts (one short decode window per token).
    const offsets: Array<number> = []
    this.detokenizer.readEach(ids, ids.length, (_, start) => offsets.push(start))
    this.offsets = offsets
    for (const s of this.holds.stop) {
      if (s.length > 0 && this.text.indexOf(s, Math.max(0, before - s.length + 1)) >= 0) {
        this.stopped = true
        return "stop"
      }
    }
    const end = this.sendable()
    if (end <= this.sent) return ""
    const out = this.text.slice(this.sent, end)
    this.sent = end
    return out
  }

  /** The rest of `final` (the finished answer) once `text` so far has been sent: what the last chunk carries. */
  rest(final: string): string {
    const sent = this.text.slice(0, this.sent)
    // Unreachable while the holds are right; a stream must never repeat text, so send nothing rather than wrong.
    return final.startsWith(sent) ? final.slice(sent.length) : ""
  }

  private sendable(): number {
    const text = this.text
    let end = text.length - partialTail(text, this.holds.stop, this.sent)
    const tools = this.holds.tools
    if (tools !== undefined) {
      if (tools.thinking || (text.length > 0 && isSpace(text.charCodeAt(0)))) return 0
      for (const m of TOOL_MARKERS) {
        const at = text.indexOf(m)
        if (at >= 0) end = Math.min(end, at)
      }
      end = Math.min(end, text.length - partialTail(text, TOOL_MARKERS, this.sent))
      while (end > 0 && isSpace(text.charCodeAt(end - 1))) end--
    }
    return end
  }
}
