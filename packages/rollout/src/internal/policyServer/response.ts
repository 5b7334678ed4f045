// Turning backend completions into OpenAI/vLLM response bodies and SSE chunks. Streams that are not token by token
// (`stream.ts`) are cut from the finished completion (one chunk per token, then the tool calls), so their deltas
// concatenate to exactly the non-streamed answer.
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import type { BackendCompletion, TokenLogprob } from "../../PolicyServer.js"
import * as ToolCallParser from "../../ToolCallParser.js"
import { Detokenizer } from "./detokenizer.js"
import type { SamplingSpec } from "./request.js"

/** One choice after stop strings and detokenisation. */
export interface Choice {
  readonly tokenIds: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly topLogprobs: ReadonlyArray<ReadonlyArray<TokenLogprob>> | undefined
  readonly text: string
  readonly finishReason: "stop" | "length"
  /** vLLM's `stop_reason`: the stop string or stop token id that ended it; null for EOS or length. */
  readonly stopReason: string | number | null
  /** The text each token adds; what the stream chunks carry. Empty unless streaming or asking for logprobs. */
  readonly pieces: ReadonlyArray<string>
}

const decodeText = (tokenizer: Tokenizer, ids: ReadonlyArray<number>, skip: boolean) =>
  tokenizer.decode(ids, { skipSpecialTokens: skip })

/**
 * Applies `stop` strings (the completion ends with the token that completes one; the text ends before it unless
 * include_stop_str_in_output) and decodes.
 */
export const finish = (tokenizer: Tokenizer, completion: BackendCompletion, spec: SamplingSpec): Choice => {
  let ids = completion.tokenIds
  let finishReason = completion.finishReason
  let stopReason: string | number | null = null
  const last = ids.length > 0 ? ids[ids.length - 1] : undefined
  if (finishReason === "stop" && last !== undefined && spec.stopTokenIds.includes(last)) stopReason = last
  let text = decodeText(tokenizer, ids, spec.skipSpecialTokens)
  if (spec.stop.length > 0 && spec.stop.some((s) => text.includes(s))) {
    // The first token whose prefix text holds a stop string (read incrementally; the whole text at the last token).
    const detokenizer = new Detokenizer(tokenizer, spec.skipSpecialTokens)
    for (let k = 1; k <= ids.length; k++) {
      detokenizer.read(ids, k)
      const prefix = k === ids.length ? text : detokenizer.text
      let at = -1
      let which = ""
      for (const s of spec.stop) {
        const i = prefix.indexOf(s)
        if (i >= 0 && (at < 0 || i < at)) {
          at = i
          which = s
        }
      }
      if (at >= 0) {
        ids = ids.slice(0, k)
        text = prefix.slice(0, spec.includeStopStrInOutput ? at + which.length : at)
        finishReason = "stop"
        stopReason = which
        break
      }
    }
  }
  return {
    tokenIds: ids,
    logprobs: completion.logprobs.slice(0, ids.length),
    topLogprobs: completion.topLogprobs?.slice(0, ids.length),
    text,
    finishReason,
    stopReason,
    // Only streams and completion logprobs (text offsets) read them: one decode per token.
    pieces: spec.stream || spec.logprobs ? piecesOf(tokenizer, ids, text, spec.skipSpecialTokens) : []
  }
}

// The text each token adds (one incremental read per token), trimmed to `text` after a stop-string cut; the last
// token takes whatever is still pending (a character its text ends inside).
const piecesOf = (tokenizer: Tokenizer, ids: ReadonlyArray<number>, text: string, skip: boolean) => {
  const detokenizer = new Detokenizer(tokenizer, skip)
  const pieces: Array<string> = []
  for (let k = 1; k <= ids.length; k++) pieces.push(detokenizer.read(ids, k))
  let used = 0
  for (let i = 0; i < pieces.length; i++) {
    const room = Math.max(0, text.length - used)
    if (pieces[i].length > room) pieces[i] = pieces[i].slice(0, room)
    used += pieces[i].length
  }
  if (used < text.length && pieces.length > 0) pieces[pieces.length - 1] += text.slice(used)
  return pieces
}

const tokenLabel = (tokenizer: Tokenizer, id: number, asIds: boolean) =>
  asIds ? `token_id:${id}` : tokenizer.decode([id])

const bytesOf = (s: string) => Array.from(Buffer.from(s, "utf8"))

const chatLogprob = (tokenizer: Tokenizer, spec: SamplingSpec, id: number, logprob: number) => {
  const token = tokenLabel(tokenizer, id, spec.returnTokensAsTokenIds)
  return { token, logprob, bytes: bytesOf(spec.returnTokensAsTokenIds ? tokenizer.decode([id]) : token) }
}

/** The chat `logprobs.content` entries of tokens `from..to`. */
export const chatLogprobs = (tokenizer: Tokenizer, spec: SamplingSpec, choice: Choice, from = 0, to?: number) => {
  const end = to ?? choice.tokenIds.length
  const content = []
  for (let i = from; i < end; i++) {
    content.push({
      ...chatLogprob(tokenizer, spec, choice.tokenIds[i], choice.logprobs[i]),
      top_logprobs: (choice.topLogprobs?.[i] ?? []).slice(0, spec.topLogprobs).map((t) =>
        chatLogprob(tokenizer, spec, t.id, t.logprob)
      )
    })
  }
  return { content }
}

/** The completions `logprobs` object of tokens `from..to` (`textOffset`: where token `from`'s text starts). */
export const completionLogprobs = (
  tokenizer: Tokenizer,
  spec: SamplingSpec,
  choice: Choice,
  from = 0,
  to?: number,
  textOffset = 0
) => {
  const end = to ?? choice.tokenIds.length
  const tokens: Array<string> = []
  const tokenLogprobs: Array<number> = []
  const top: Array<Record<string, number> | null> = []
  const offsets: Array<number> = []
  let offset = textOffset
  for (let i = from; i < end; i++) {
    const id = choice.tokenIds[i]
    tokens.push(tokenLabel(tokenizer, id, spec.returnTokensAsTokenIds))
    tokenLogprobs.push(choice.logprobs[i])
    offsets.push(offset)
    offset += choice.pieces[i]?.length ?? 0
    if (spec.topLogprobs > 0) {
      // vLLM's dict holds the sampled token next to the k alternatives.
      const entry: Record<string, number> = {}
      for (const t of (choice.topLogprobs?.[i] ?? []).slice(0, spec.topLogprobs)) {
        entry[tokenLabel(tokenizer, t.id, spec.returnTokensAsTokenIds)] = t.logprob
      }
      entry[tokenLabel(tokenizer, id, spec.returnTokensAsTokenIds)] = choice.logprobs[i]
      top.push(entry)
    } else top.push(null)
  }
  return { text_offset: offsets, token_logprobs: tokenLogprobs, tokens, top_logprobs: top }
}

/** The assistant message of a chat choice: tool calls parsed when asked, malformed ones left in the content. */
export const chatMessage = (choice: Choice, parseTools: boolean, thinking: boolean, idOf: () => string) => {
  if (!parseTools || !choice.text.includes("<tool_call>")) {
    return { message: { role: "assistant" as const, content: choice.text }, toolCalls: false }
  }
  const parsed = ToolCallParser.parse(choice.text, { thinking })
  // Nothing usable: the whole text stays content, as it came.
  if (parsed.calls.length === 0) {
    return { message: { role: "assistant" as const, content: choice.text }, toolCalls: false }
  }
  const leftovers = parsed.failures.map((f) =>
    f.reason === "unterminated" ? `<tool_call>${f.raw}` : `<tool_call>${f.raw}</tool_call>`
  )
  const content = [parsed.content, ...leftovers].filter((s) => s.length > 0).join("\n")
  const toolCalls = parsed.calls.map((c) => ({
    id: idOf(),
    type: "function" as const,
    function: { name: c.name, arguments: JSON.stringify(c.arguments) }
  }))
  return {
    message: {
      role: "assistant" as const,
      content: toolCalls.length > 0 && content.length === 0 ? null : content,
      ...(parsed.reasoning === undefined ? {} : { reasoning_content: parsed.reasoning }),
      ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {})
    },
    toolCalls: toolCalls.length > 0
  }
}
