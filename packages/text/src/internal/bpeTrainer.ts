/**
 * A byte-level BPE trainer in the GPT-2 / Qwen style: split text with the pre-tokenizer regex, map every UTF-8
 * byte to a printable character, then repeatedly merge the most frequent adjacent pair. The result is written as
 * a Hugging Face `tokenizer.json` that `@huggingface/tokenizers` (and the Rust `tokenizers`) load.
 */

/**
 * Qwen2/Qwen3's pre-tokenizer pattern (Oniguruma syntax, as stored in tokenizer.json): contractions, letter runs
 * with one optional leading non-letter, single digits, punctuation runs, newlines and other whitespace.
 */
export const PRETOKENIZE_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/** The same pattern for JavaScript (no inline case-insensitive group). Used only to count words for training. */
const PRETOKENIZE_JS =
  /'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu

/**
 * GPT-2's byte → character map: printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards, so every
 * byte string becomes a string of visible characters (a space is "Ġ", a newline "Ċ"). Index = id of the byte token.
 */
export const byteAlphabet: ReadonlyArray<{ readonly byte: number; readonly char: string }> = (() => {
  const printable: Array<number> = []
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b)
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b)
  for (let b = 0xae; b <= 0xff; b++) printable.push(b)
  const out = printable.map((b) => ({ byte: b, char: String.fromCharCode(b) }))
  let extra = 0
  for (let b = 0; b < 256; b++) {
    if (!printable.includes(b)) out.push({ byte: b, char: String.fromCharCode(256 + extra++) })
  }
  return out
})()

const byteToChar: ReadonlyArray<string> = (() => {
  const m = new Array<string>(256)
  for (const { byte, char } of byteAlphabet) m[byte] = char
  return m
})()

const utf8 = new TextEncoder()

/** A word's bytes as byte-level characters. */
export const toByteLevel = (text: string): string => {
  let s = ""
  for (const b of utf8.encode(text)) s += byteToChar[b]
  return s
}

/** Split text into pre-tokens the way the tokenizer will. */
export const pretokenize = (text: string): Array<string> => text.match(PRETOKENIZE_JS) ?? []

const splitOnAddedTokens = (text: string, added: ReadonlyArray<string>): Array<string> => {
  if (added.length === 0) return [text]
  const escaped = [...added].sort((a, b) => b.length - a.length).map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
  return text.split(new RegExp(escaped.join("|"), "u"))
}

export interface AddedTokenSpec {
  readonly content: string
  /** Special tokens are dropped by `decode(ids, { skip_special_tokens: true })`. */
  readonly special: boolean
}

export interface TrainOptions {
  /** Total vocabulary size including the 256 byte tokens and the added tokens. */
  readonly vocabSize: number
  readonly addedTokens: ReadonlyArray<AddedTokenSpec>
  /** Pairs seen fewer times than this are never merged (default 2). */
  readonly minFrequency?: number
}

export interface TrainResult {
  /** The tokenizer.json object. */
  readonly tokenizerJson: Record<string, unknown>
  /** Number of merges learned (may be fewer than asked when the corpus runs out of repeated pairs). */
  readonly merges: number
}

/**
 * Train byte-level BPE on `corpus`. Deterministic: ties between equally frequent pairs go to the pair whose
 * merged string sorts first, then to the lower token ids.
 */
export const train = (corpus: string, options: TrainOptions): TrainResult => {
  const minFrequency = options.minFrequency ?? 2
  const target = options.vocabSize - options.addedTokens.length
  if (target < 256) throw new Error(`vocabSize ${options.vocabSize} leaves no room for the 256 byte tokens`)

  // Unique words with counts, as arrays of token ids.
  // Added tokens are matched before BPE runs, so their text must not spend merges: train on the text between them.
  const counts = new Map<string, number>()
  for (const piece of splitOnAddedTokens(corpus, options.addedTokens.map((t) => t.content))) {
    for (const w of pretokenize(piece)) counts.set(w, (counts.get(w) ?? 0) + 1)
  }
  const tokens: Array<string> = byteAlphabet.map((b) => b.char)
  const idOfChar = new Map(tokens.map((t, i) => [t, i]))
  const words: Array<Array<number>> = []
  const freq: Array<number> = []
  for (const [w, c] of counts) {
    words.push(Array.from(toByteLevel(w), (ch) => idOfChar.get(ch)!))
    freq.push(c)
  }

  // Pair statistics, kept up to date incrementally: count and the words each pair occurs in.
  const key = (a: number, b: number) => a * 65536 + b
  const pairCount = new Map<number, number>()
  const pairWords = new Map<number, Set<number>>()
  const addWord = (wi: number, sign: 1 | -1) => {
    const w = words[wi]
    for (let i = 0; i + 1 < w.length; i++) {
      const k = key(w[i], w[i + 1])
      pairCount.set(k, (pairCount.get(k) ?? 0) + sign * freq[wi])
      if (sign === 1) {
        let s = pairWords.get(k)
        if (!s) pairWords.set(k, s = new Set())
        s.add(wi)
      }
    }
  }
  for (let wi = 0; wi < words.length; wi++) addWord(wi, 1)

  const merges: Array<string> = []
  while (tokens.length < target) {
    let best = -1
    let bestCount = 0
    let bestString = ""
    for (const [k, c] of pairCount) {
      if (c < minFrequency || c < bestCount) continue
      const s = tokens[Math.floor(k / 65536)] + tokens[k % 65536]
      if (c > bestCount || s < bestString || (s === bestString && k < best)) {
        best = k
        bestCount = c
        bestString = s
      }
    }
    if (best < 0) break
    const a = Math.floor(best / 65536)
    const b = best % 65536
    const id = tokens.length
    tokens.push(tokens[a] + tokens[b])
    merges.push(`${tokens[a]} ${tokens[b]}`)
    for (const wi of pairWords.get(best) ?? []) {
      const w = words[wi]
      addWord(wi, -1)
      const merged: Array<number> = []
      for (let i = 0; i < w.length; i++) {
        if (i + 1 < w.length && w[i] === a && w[i + 1] === b) {
          merged.push(id)
          i++
        } else merged.push(w[i])
      }
      words[wi] = merged
      addWord(wi, 1)
    }
    pairWords.delete(best)
    pairCount.delete(best)
  }

  const vocab: Record<string, number> = {}
  tokens.forEach((t, i) => (vocab[t] = i))
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }
  const tokenizerJson = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: options.addedTokens.map((t, i) => ({
      id: tokens.length + i,
      content: t.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: t.special
    })),
    // No NFC normalizer (Qwen has one): without it every string round-trips exactly through encode/decode.
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: PRETOKENIZE_PATTERN }, behavior: "Isolated", invert: false },
        byteLevel
      ]
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges
    }
  }
  return { tokenizerJson, merges: merges.length }
}
