// Incremental detokenisation, as vLLM's: the last settled window of tokens is decoded with and without the new ones
// and the difference appended; a read whose text ends inside a UTF-8 character (U+FFFD at the end) adds nothing until
// a later read completes the character. Each read decodes a few tokens, so reading a sequence token by token is
// linear in its length (decoding every prefix was quadratic).
import type { Tokenizer } from "@envtrain/text/Tokenizer"

const REPLACEMENT = "\uFFFD"

export class Detokenizer {
  /** The text of the tokens read so far, whole characters only. */
  text = ""
  private prefixOffset = 0
  private readOffset = 0
  /** Tokens read so far (whether or not their text has settled). */
  tokens = 0

  constructor(private readonly tokenizer: Tokenizer, private readonly skipSpecialTokens: boolean) {}

  /** Reads `ids[tokens..upTo)` (`ids`: the sequence so far) as one step; returns the text it added (maybe ""). */
  read(ids: ReadonlyArray<number>, upTo: number = ids.length): string {
    if (upTo <= this.tokens) return ""
    this.tokens = upTo
    const skip = { skipSpecialTokens: this.skipSpecialTokens }
    const settled = this.tokenizer.decode(ids.slice(this.prefixOffset, this.readOffset), skip)
    const all = this.tokenizer.decode(ids.slice(this.prefixOffset, upTo), skip)
    if (all.length > settled.length && !all.endsWith(REPLACEMENT) && all.startsWith(settled)) {
      const added = all.slice(settled.length)
      this.text += added
      this.prefixOffset = this.readOffset
      this.readOffset = upTo
      return added
    }
    return ""
  }

  /**
   * Reads `ids[tokens..upTo)` one token at a time; `each(k, before)` gets every token k's index and where its text
   * starts (the text of the whole characters before it).
   */
  readEach(ids: ReadonlyArray<number>, upTo: number, each: (k: number, before: number) => void): void {
    for (let k = this.tokens; k < upTo; k++) {
      each(k, this.text.length)
      this.read(ids, k + 1)
    }
  }
}
