/**
 * A Hugging Face tokenizer (`tokenizer.json` + `tokenizer_config.json`) through `@huggingface/tokenizers`, plus
 * {@link train}, our own byte-level BPE trainer (GPT-2/Qwen style) that writes a `tokenizer.json` the same
 * library loads.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Tokenizer } from "@envtrain/text"
 *
 * const program = Effect.gen(function*() {
 *   const tok = yield* Tokenizer.Tokenizer.load("Qwen3-0.6B")
 *   const ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n")
 *   console.log(ids, tok.decode(ids), tok.eosTokenIds)
 * })
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { Data, Effect } from "effect"
import { type AddedTokenSpec, train as trainBpe } from "./internal/bpeTrainer.js"
import { buildCorpus } from "./internal/corpus.js"

/** tokenizer.json / tokenizer_config.json could not be read or is not a usable tokenizer. */
export class TokenizerError extends Data.TaggedError("TokenizerError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Cannot load the tokenizer from ${this.path}: ${this.problem}`
  }
}

/** The added tokens of a Qwen3-style tokenizer; the first three are special (dropped by skipSpecialTokens). */
export const QWEN3_ADDED_TOKENS: ReadonlyArray<AddedTokenSpec> = [
  { content: "<|endoftext|>", special: true },
  { content: "<|im_start|>", special: true },
  { content: "<|im_end|>", special: true },
  { content: "<tool_call>", special: false },
  { content: "</tool_call>", special: false },
  { content: "<tool_response>", special: false },
  { content: "</tool_response>", special: false },
  { content: "<think>", special: false },
  { content: "</think>", special: false }
]

const tokenName = (v: unknown): string | null =>
  typeof v === "string" ? v : typeof v === "object" && v !== null && "content" in v ? String(v.content) : null

/** A loaded tokenizer. Encoding and decoding are synchronous (they run per turn in the rollout loop). */
export class Tokenizer {
  private readonly hf: HfTokenizer
  /** Largest id + 1, added tokens included. The model's vocab_size must be at least this. */
  readonly vocabSize: number
  /** Id of `eos_token` from tokenizer_config.json (Qwen3: `<|im_end|>`), if set. */
  readonly eosTokenId: number | null
  /** Id of `pad_token` (Qwen3: `<|endoftext|>`), if set. */
  readonly padTokenId: number | null
  /** Id of `bos_token`, if set (null for Qwen3). */
  readonly bosTokenId: number | null

  private constructor(
    /** The tokenizer.json object as loaded; saved back unchanged. */
    readonly json: Readonly<Record<string, unknown>>,
    /** The tokenizer_config.json object as loaded. */
    readonly config: Readonly<Record<string, unknown>>,
    label: string
  ) {
    this.hf = new HfTokenizer(json, config)
    const vocab = this.hf.get_vocab(true)
    let max = -1
    for (const id of vocab.values()) max = Math.max(max, id)
    this.vocabSize = max + 1
    const idOf = (key: string) => {
      const name = tokenName(config[key])
      if (name === null) return null
      const id = this.hf.token_to_id(name)
      if (id === undefined) throw new Error(`${key} "${name}" of ${label} is not in the vocabulary`)
      return id
    }
    this.eosTokenId = idOf("eos_token")
    this.padTokenId = idOf("pad_token")
    this.bosTokenId = idOf("bos_token")
  }

  /**
   * Build from parsed tokenizer.json and tokenizer_config.json objects. `label` names the source in errors.
   */
  static fromJson(
    tokenizerJson: unknown,
    tokenizerConfig: unknown = {},
    label = "tokenizer.json"
  ): Effect.Effect<Tokenizer, TokenizerError> {
    return Effect.try({
      try: () => {
        if (typeof tokenizerJson !== "object" || tokenizerJson === null || !("model" in tokenizerJson)) {
          throw new Error(`it has no "model" section; is it a Hugging Face tokenizer.json?`)
        }
        return new Tokenizer(
          tokenizerJson as Record<string, unknown>,
          (tokenizerConfig ?? {}) as Record<string, unknown>,
          label
        )
      },
      catch: (e) => new TokenizerError({ path: label, problem: (e as Error).message })
    })
  }

  /** Load `tokenizer.json` and (if present) `tokenizer_config.json` from a model directory. */
  static load(dir: string): Effect.Effect<Tokenizer, TokenizerError, FileSystem.FileSystem | Path.Path> {
    return Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const readJson = (name: string, optional: boolean) =>
        Effect.gen(function*() {
          const file = path.join(dir, name)
          if (optional && !(yield* fs.exists(file).pipe(Effect.orElseSucceed(() => false)))) return {}
          const text = yield* fs.readFileString(file).pipe(
            Effect.mapError((e) => new TokenizerError({ path: file, problem: e.message }))
          )
          return yield* Effect.try({
            try: () => JSON.parse(text) as unknown,
            catch: (e) => new TokenizerError({ path: file, problem: `not valid JSON (${(e as Error).message})` })
          })
        })
      const json = yield* readJson("tokenizer.json", false)
      const config = yield* readJson("tokenizer_config.json", true)
      return yield* Tokenizer.fromJson(json, config, path.join(dir, "tokenizer.json"))
    })
  }

  /** Token ids of `text`. Added tokens written in the text (e.g. `<|im_start|>`) become their single ids. */
  encode(text: string): Array<number> {
    return this.hf.encode(text, { add_special_tokens: false }).ids
  }

  /** Token strings of `text` (byte-level form, e.g. "Ġworld"). */
  tokenize(text: string): Array<string> {
    return this.hf.tokenize(text, { add_special_tokens: false })
  }

  /** Text of `ids`. Incomplete UTF-8 at the ends decodes to U+FFFD. */
  decode(ids: ReadonlyArray<number>, options: { readonly skipSpecialTokens?: boolean } = {}): string {
    // The library rejects an empty list; nothing decodes to nothing.
    if (ids.length === 0) return ""
    return this.hf.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false
    })
  }

  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token)
  }

  idToToken(id: number): string | undefined {
    return this.hf.id_to_token(id)
  }

  /** Added tokens (special or not) by id, e.g. `<|im_end|>`, `<tool_call>`. */
  addedTokens(): ReadonlyMap<number, { readonly content: string; readonly special: boolean }> {
    const out = new Map<number, { content: string; special: boolean }>()
    for (const [id, t] of this.hf.get_added_tokens_decoder()) out.set(id, { content: t.content, special: t.special })
    return out
  }

  /** Every id that ends an assistant turn: eos_token, plus `<|im_end|>` and `<|endoftext|>` when present. */
  get eosTokenIds(): ReadonlyArray<number> {
    const ids = new Set<number>()
    if (this.eosTokenId !== null) ids.add(this.eosTokenId)
    for (const t of ["<|im_end|>", "<|endoftext|>"]) {
      const id = this.tokenToId(t)
      if (id !== undefined) ids.add(id)
    }
    return [...ids]
  }
}

/** Options for {@link train}. */
export interface TrainOptions {
  /** Total vocabulary size including the 256 byte tokens and added tokens. */
  readonly vocabSize: number
  /** Training text; default: the corpus built from `data/` (game rules, transcripts, tool calls). */
  readonly corpus?: string
  /** Added tokens; default {@link QWEN3_ADDED_TOKENS}. */
  readonly addedTokens?: ReadonlyArray<AddedTokenSpec>
  /** Seed for the generated corpus; default 1. */
  readonly seed?: number
}

/**
 * Train a byte-level BPE tokenizer and return its tokenizer.json object. With fewer repeated pairs in the corpus
 * than needed, the vocabulary comes out smaller than asked (see `vocabSize` of the loaded tokenizer).
 *
 * @example
 * ```ts
 * const json = Tokenizer.train({ vocabSize: 1024 })
 * const tok = yield* Tokenizer.Tokenizer.fromJson(json, { eos_token: "<|im_end|>" })
 * ```
 */
export const train = (options: TrainOptions): Record<string, unknown> =>
  trainBpe(options.corpus ?? buildCorpus(300_000, options.seed ?? 1), {
    vocabSize: options.vocabSize,
    addedTokens: options.addedTokens ?? QWEN3_ADDED_TOKENS
  }).tokenizerJson

/**
 * tokenizer_config.json for a Qwen3-style tokenizer made by {@link train}, with the chat template. The class is the
 * generic `PreTrainedTokenizerFast`, which transformers builds from tokenizer.json as it is: `Qwen2Tokenizer` would
 * make transformers (5.x) put its own NFC normalizer in front, which {@link train}'s tokenizer.json leaves out (so
 * that every string round-trips), and AutoTokenizer's ids would then differ from envtrain's on text that NFC changes.
 */
export const qwen3TokenizerConfig = (tokenizerJson: Record<string, unknown>, chatTemplate: string) => {
  const added = (tokenizerJson.added_tokens ?? []) as ReadonlyArray<
    { id: number; content: string; special: boolean }
  >
  const decoder: Record<string, unknown> = {}
  for (const t of added) {
    decoder[String(t.id)] = {
      content: t.content,
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: t.special
    }
  }
  return {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: decoder,
    additional_special_tokens: added.filter((t) => t.special).map((t) => t.content),
    bos_token: null,
    chat_template: chatTemplate,
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    errors: "replace",
    model_max_length: 131072,
    pad_token: "<|endoftext|>",
    split_special_tokens: false,
    tokenizer_class: "PreTrainedTokenizerFast",
    unk_token: null
  }
}
