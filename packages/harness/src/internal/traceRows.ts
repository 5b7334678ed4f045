/**
 * A captured trace's turns as training rows, from the engine's token ids and masks only (never re-tokenised).
 *
 * Turns are read in capture order. A turn whose prompt extends an open row's whole context (prompt + everything
 * after it) by an exact token prefix continues that row: the tokens between (tool results, user messages, template
 * scaffolding the agent's next request added) join it with mask 0 and logprob 0, then the turn's completion with its
 * own loss mask and logprobs. A turn that extends no open row (the agent rewrote or compacted its history, or a side
 * call such as title generation) starts a new row. When several rows fit, the longest context wins, so a retried
 * branch continues from the latest point it shares. Rows with no mask-1 token are left out: they would carry no
 * gradient.
 */
import type { EpisodeSegment } from "@envtrain/rollout/Episode"

/** What the conversion reads of a TrainingTrace turn (OpenEnv's field names). */
export interface TraceTurnTokens {
  readonly node_id: string
  readonly prompt_token_ids: ReadonlyArray<number>
  readonly completion_token_ids: ReadonlyArray<number>
  readonly per_token_logps: ReadonlyArray<number>
  /** Prompt + completion; the prompt part is 0. */
  readonly loss_mask: ReadonlyArray<number>
  readonly response?: Readonly<Record<string, unknown>>
}

interface OpenRow {
  readonly promptIds: ReadonlyArray<number>
  readonly completionIds: Array<number>
  readonly mask: Array<0 | 1>
  readonly logprobs: Array<number>
  truncated: boolean
}

const contextLength = (row: OpenRow) => row.promptIds.length + row.completionIds.length

const tokenAt = (row: OpenRow, i: number) =>
  i < row.promptIds.length ? row.promptIds[i] : row.completionIds[i - row.promptIds.length]

/** Whether the row's whole context is a prefix of `ids`. */
const extends_ = (row: OpenRow, ids: ReadonlyArray<number>): boolean => {
  const n = contextLength(row)
  if (n > ids.length) return false
  for (let i = 0; i < n; i++) if (tokenAt(row, i) !== ids[i]) return false
  return true
}

/** The engine stopped on its token budget (OpenAI `finish_reason: "length"`): the row ends truncated. */
const stoppedOnLength = (turn: TraceTurnTokens): boolean => {
  const choices = turn.response?.["choices"]
  if (!Array.isArray(choices) || choices.length === 0) return false
  const first = choices[0] as Record<string, unknown> | null
  return first !== null && typeof first === "object" && first["finish_reason"] === "length"
}

const completionMask = (turn: TraceTurnTokens): Array<0 | 1> =>
  turn.completion_token_ids.map((_, i) => (turn.loss_mask[turn.prompt_token_ids.length + i] === 1 ? 1 : 0))

/**
 * The trace's training rows (see the module comment). The trace is assumed valid (`TrainingTrace` validation
 * ran first): mask and logprob lengths match the tokens.
 */
export const traceRows = (turns: ReadonlyArray<TraceTurnTokens>): ReadonlyArray<EpisodeSegment> => {
  const rows: Array<OpenRow> = []
  for (const turn of turns) {
    const prompt = turn.prompt_token_ids
    let row: OpenRow | undefined
    for (const candidate of rows) {
      if (extends_(candidate, prompt) && (row === undefined || contextLength(candidate) > contextLength(row))) {
        row = candidate
      }
    }
    if (row === undefined) {
      row = { promptIds: [...prompt], completionIds: [], mask: [], logprobs: [], truncated: false }
      rows.push(row)
    } else {
      for (let i = contextLength(row); i < prompt.length; i++) {
        row.completionIds.push(prompt[i])
        row.mask.push(0)
        row.logprobs.push(0)
      }
    }
    const mask = completionMask(turn)
    turn.completion_token_ids.forEach((id, i) => {
      row.completionIds.push(id)
      row.mask.push(mask[i])
      row.logprobs.push(mask[i] === 1 ? turn.per_token_logps[i] : 0)
    })
    row.truncated = stoppedOnLength(turn)
  }
  return rows
    .filter((row) => row.mask.some((m) => m === 1))
    .map((row) => ({
      promptIds: row.promptIds,
      completionIds: row.completionIds,
      mask: row.mask,
      logprobs: row.logprobs,
      truncated: row.truncated
    }))
}
