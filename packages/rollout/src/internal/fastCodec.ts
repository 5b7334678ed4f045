// Faster encode/decode for the rollout hot path, exact by construction and checked against the tokenizer.
//
// Encode: a tokenizer splits text at added tokens (<|im_end|>, <tool_call>, …) first and encodes each stretch in
// between on its own. Chat-template text is mostly the same stretches over and over ("user\n", the tools block,
// "\n</tool_response>"), so stretches are memoised and only new ones (tool outputs) are encoded.
// Decode: for a byte-level BPE tokenizer every id stands for fixed bytes; the bytes are concatenated and decoded
// as UTF-8 once.
// Both are verified against the tokenizer on their first uses and switch themselves off on any difference.
import type { Tokenizer } from "@envtrain/text/Tokenizer"

const CHECKS = 32
const MAX_MEMO = 50_000

const byteLevelTable = (): Map<string, number> => {
  const bs: Array<number> = []
  for (let b = 33; b <= 126; b++) bs.push(b)
  for (let b = 161; b <= 172; b++) bs.push(b)
  for (let b = 174; b <= 255; b++) bs.push(b)
  const cs = [...bs]
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n)
      n++
    }
  }
  const table = new Map<string, number>()
  bs.forEach((b, i) => table.set(String.fromCodePoint(cs[i]), b))
  return table
}

// Whitespace as a regular expression's `\s` and `String.prototype.trim` see it (one UTF-16 unit).
export const isSpace = (c: number): boolean =>
  c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 ||
  c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff

/**
 * Where a stretch may be cut into separately encoded lines, from `from` on: after a run of `\r`/`\n` that is
 * followed by a non-space character (the positions `/[\r\n]+(?=[^\s])/g` finds), or -1. No GPT-2/Qwen-style
 * pre-token spans such a point and BPE merges never cross pre-tokens, so the ids are the same (and checked, see
 * `encode`). A scan rather than that regular expression: its matches allocated on every tool step.
 */
export const nextLineCut = (s: string, from: number): number => {
  const n = s.length
  let i = from
  while (i < n) {
    const c = s.charCodeAt(i)
    if (c === 10 || c === 13) {
      let j = i + 1
      while (j < n && (s.charCodeAt(j) === 10 || s.charCodeAt(j) === 13)) j++
      if (j < n && !isSpace(s.charCodeAt(j))) return j
      i = j
    } else i++
  }
  return -1
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

export interface FastCodec {
  readonly encode: (text: string) => Array<number>
  /**
   * An encoder for texts made of fixed `pieces` around variable contents (`pieces[0] + contents[0] + pieces[1] +
   * …`): the ids of the pieces' fixed parts are computed once, and only each content with the text that joins it
   * to the neighbouring added tokens is encoded. Gives exactly `encode(text)` (verified on its first uses).
   */
  readonly framed: (pieces: ReadonlyArray<string>) => Framed
  readonly decode: (ids: ReadonlyArray<number>) => string
  /** Whether the fast paths are (still) on. */
  readonly status: () => { readonly encode: boolean; readonly decode: boolean }
}

export interface Framed {
  readonly encode: (contents: ReadonlyArray<string>) => Array<number>
  /** Whether the fixed-piece path is (still) on; off, every call encodes the joined text. */
  readonly active: () => boolean
}

export const make = (tokenizer: Tokenizer): FastCodec => {
  const json = tokenizer.json as {
    readonly added_tokens?: ReadonlyArray<
      { content: string; lstrip?: boolean; rstrip?: boolean; single_word?: boolean; normalized?: boolean }
    >
    readonly decoder?: { readonly type?: string } | null
  }
  const added = json.added_tokens ?? []
  // Stretch-wise encoding is what the tokenizer does only when added tokens do not eat neighbouring whitespace.
  const splittable = added.length > 0 && added.every((t) => !t.lstrip && !t.rstrip && !t.single_word)
  const addedIds = new Map<string, number>()
  for (const t of added) {
    const id = tokenizer.tokenToId(t.content)
    if (id !== undefined) addedIds.set(t.content, id)
  }
  const pattern = new RegExp(
    [...addedIds.keys()].sort((a, b) => b.length - a.length).map(escape).join("|"),
    "g"
  )
  const memo = new Map<string, Array<number>>()
  let encodeChecks = splittable ? CHECKS : -1

  const memoEncode = (s: string): Array<number> => {
    let ids = memo.get(s)
    if (ids === undefined) {
      ids = tokenizer.encode(s)
      if (memo.size >= MAX_MEMO) memo.clear()
      memo.set(s, ids)
    }
    return ids
  }
  // The encoders below write into one scratch array that never shrinks (`put`), and each call returns an exact-size
  // copy: growing a fresh array by `push` reallocated it several times per call, most of what suffix encoding
  // allocated. Every encoding call starts with `written = 0`; none is re-entered.
  const scratch: Array<number> = Array.from({ length: 1024 }, () => 0)
  let written = 0
  const put = (id: number): void => {
    if (written < scratch.length) scratch[written] = id
    else scratch.push(id)
    written++
  }
  const append = (ids: ReadonlyArray<number>): void => {
    for (let i = 0; i < ids.length; i++) put(ids[i])
  }
  // A new stretch (e.g. a tool output) is cut into lines (see `nextLineCut`), which repeat far more often than whole
  // outputs; a stretch without a cut is memoised whole.
  const stretchInto = (s: string): void => {
    let last = 0
    for (let cut = nextLineCut(s, 0); cut >= 0; cut = nextLineCut(s, cut)) {
      append(memoEncode(s.slice(last, cut)))
      last = cut
    }
    append(memoEncode(last === 0 ? s : s.slice(last)))
  }
  const splitEncodeInto = (text: string): void => {
    let last = 0
    pattern.lastIndex = 0
    for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
      if (m.index > last) stretchInto(text.slice(last, m.index))
      put(addedIds.get(m[0])!)
      last = m.index + m[0].length
    }
    if (last < text.length) stretchInto(text.slice(last))
  }
  const splitEncode = (text: string): Array<number> => {
    written = 0
    splitEncodeInto(text)
    return scratch.slice(0, written)
  }
  const encode = (text: string): Array<number> => {
    if (encodeChecks < 0) return tokenizer.encode(text)
    const fast = splitEncode(text)
    if (encodeChecks > 0) {
      encodeChecks--
      const slow = tokenizer.encode(text)
      if (slow.length !== fast.length || slow.some((id, i) => id !== fast[i])) {
        encodeChecks = -1
        return slow
      }
    }
    return fast
  }

  // Decode through per-id bytes (byte-level decoders only).
  const byteLevel = json.decoder?.type === "ByteLevel"
  const table = byteLevel ? byteLevelTable() : undefined
  const bytesOf = new Map<number, Uint8Array | null>()
  const utf8 = new TextEncoder()
  // ignoreBOM: a U+FEFF token at the start of a turn is text like any other (both paths keep it).
  const utf8Decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true })
  const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })
  const addedById = new Map<number, string>()
  for (const [content, id] of addedIds) addedById.set(id, content)
  const idBytes = (id: number): Uint8Array | null => {
    let bytes = bytesOf.get(id)
    if (bytes !== undefined) return bytes
    const content = addedById.get(id)
    if (content !== undefined) bytes = utf8.encode(content)
    else {
      const token = tokenizer.idToToken(id)
      if (token === undefined) bytes = null
      else {
        const out: Array<number> = []
        for (const ch of token) {
          const b = table!.get(ch)
          if (b === undefined) {
            out.length = 0
            bytes = null
            break
          }
          out.push(b)
        }
        if (bytes !== null) bytes = Uint8Array.from(out)
      }
    }
    bytesOf.set(id, bytes)
    return bytes
  }
  // The text of an id whose bytes are whole UTF-8 characters on their own (null: they are not, e.g. half an
  // emoji). Ids like that concatenate to the same text as their bytes decoded together, so most turns decode as a
  // string join without touching bytes.
  // Indexed by id (a dense array: a Map lookup per id was most of a turn's decoding); ids past the vocabulary (a
  // model's padded embedding rows) are not cached.
  const textOf: Array<string | null | undefined> = new Array(tokenizer.vocabSize).fill(undefined)
  const idText = (id: number): string | null => {
    let text = textOf[id]
    if (text !== undefined) return text
    const bytes = idBytes(id)
    text = null
    if (bytes !== null) {
      try {
        text = strictUtf8.decode(bytes)
      } catch {
        // Part of a multi-byte character: such ids take the byte path.
      }
    }
    if (id >= 0 && id < textOf.length) textOf[id] = text
    return text
  }
  let decodeChecks = byteLevel ? CHECKS : -1
  // One growing buffer: allocating typed arrays per id and per call cost more than the copying.
  let buffer = new Uint8Array(4096)
  const fastDecode = (ids: ReadonlyArray<number>): string | undefined => {
    let joined = ""
    for (let i = 0; i < ids.length; i++) {
      const text = idText(ids[i])
      if (text === null) return decodeBytes(ids)
      joined += text
    }
    return joined
  }
  const decodeBytes = (ids: ReadonlyArray<number>): string | undefined => {
    let size = 0
    for (let i = 0; i < ids.length; i++) {
      const b = idBytes(ids[i])
      if (b === null) return undefined
      if (size + b.length > buffer.length) {
        const bigger = new Uint8Array(Math.max(buffer.length * 2, size + b.length))
        bigger.set(buffer.subarray(0, size))
        buffer = bigger
      }
      buffer.set(b, size)
      size += b.length
    }
    return utf8Decoder.decode(buffer.subarray(0, size))
  }
  const decode = (ids: ReadonlyArray<number>): string => {
    if (decodeChecks < 0) return tokenizer.decode(ids)
    const fast = fastDecode(ids)
    if (fast === undefined) return tokenizer.decode(ids)
    if (decodeChecks > 0) {
      decodeChecks--
      const slow = tokenizer.decode(ids)
      if (slow !== fast) {
        decodeChecks = -1
        return slow
      }
    }
    return fast
  }
  // Framed texts. A piece with an added token is cut into: the text before its first added token (`head`), the
  // fixed ids from that token to the end of its last one (`ids`), and the text after (`tail`). The text between two
  // fixed parts, tail + content + head, is encoded on its own: the tokenizer splits at added tokens first, so this
  // is exact unless an added token would straddle a boundary, which is checked per call against the few
  // content endings (and beginnings) that could complete one.
  const framed = (pieces: ReadonlyArray<string>) => {
    const join = (contents: ReadonlyArray<string>) => {
      let text = pieces[0]
      for (let i = 0; i < contents.length; i++) text += contents[i] + pieces[i + 1]
      return text
    }
    interface Cut {
      readonly head: string
      readonly ids: ReadonlyArray<number>
      readonly tail: string
      // Middle endings that would join the fixed part's first added token into a longer or different one.
      readonly before: ReadonlyArray<string>
      // Middle beginnings that would extend the fixed part's end into an added token.
      readonly after: ReadonlyArray<string>
    }
    const tokens = [...addedIds.keys()]
    const cutPiece = (piece: string): Cut | null => {
      let first = -1
      let end = -1
      pattern.lastIndex = 0
      for (let m = pattern.exec(piece); m !== null; m = pattern.exec(piece)) {
        if (first < 0) first = m.index
        end = m.index + m[0].length
      }
      if (first < 0) return null
      const fixed = piece.slice(first, end)
      const before: Array<string> = []
      const after: Array<string> = []
      for (const t of tokens) {
        for (let k = 1; k < t.length; k++) {
          if (fixed.startsWith(t.slice(k))) before.push(t.slice(0, k))
          if (fixed.endsWith(t.slice(0, k))) after.push(t.slice(k))
        }
      }
      return { head: piece.slice(0, first), ids: encode(fixed), tail: piece.slice(end), before, after }
    }
    const cuts = encodeChecks < 0 ? [] : pieces.map(cutPiece)
    const usable = cuts.length > 0 && cuts.every((c) => c !== null) ? (cuts as ReadonlyArray<Cut>) : undefined
    let checks = CHECKS
    const encodeFramed = (contents: ReadonlyArray<string>): Array<number> => {
      if (usable === undefined || checks < 0 || encodeChecks < 0 || contents.length !== pieces.length - 1) {
        return encode(join(contents))
      }
      written = 0
      const first = usable[0]
      if (first.head.length > 0) stretchInto(first.head)
      append(first.ids)
      for (let i = 0; i < contents.length; i++) {
        const left = usable[i]
        const right = usable[i + 1]
        const middle = left.tail + contents[i] + right.head
        for (const a of left.after) if (middle.startsWith(a)) return encode(join(contents))
        for (const b of right.before) if (middle.endsWith(b)) return encode(join(contents))
        if (middle.length > 0) splitEncodeInto(middle)
        append(right.ids)
      }
      const last = usable[usable.length - 1]
      if (last.tail.length > 0) stretchInto(last.tail)
      const out = scratch.slice(0, written)
      if (checks > 0) {
        checks--
        const slow = tokenizer.encode(join(contents))
        if (slow.length !== out.length || slow.some((id, i) => id !== out[i])) {
          checks = -1
          return slow
        }
      }
      return out
    }
    return { encode: encodeFramed, active: () => usable !== undefined && checks >= 0 && encodeChecks >= 0 }
  }

  return { encode, decode, framed, status: () => ({ encode: encodeChecks >= 0, decode: decodeChecks >= 0 }) }
}
