/**
 * `TrainingTrace`: the validated token capture of one agent rollout, exactly as OpenEnv defines it
 * (`openenv.core.harness.training`, a strict pydantic model with unknown fields forbidden), and the rules OpenEnv's
 * `validate_training_turn` applies to every turn. A trainer builds its rows from these tokens and masks and never
 * re-tokenises; a capture that breaks a rule is refused with the rule's name and the turn.
 *
 * ```json
 * {"schema_version": 1,
 *  "turns": [{"node_id": "0", "prompt_token_ids": [1, 2, 3], "completion_token_ids": [10, 11],
 *             "per_token_logps": [-0.5, -0.25], "loss_mask": [0, 0, 0, 1, 1],
 *             "request": {"messages": []}, "response": {"choices": []}, "metadata": {}}]}
 * ```
 *
 * Rules (OpenEnv's finding codes): `schema` (a missing, mistyped or unknown field; `schema_version` other than 1;
 * an empty `node_id`), `invalid_token_id` (ids are non-negative integers), `invalid_logprob` (finite numbers),
 * `positive_logprob` (≤ 0), `no_prompt_ids` (the prompt is never empty), `logprob_misalign` (one logprob per
 * completion token), `length_mismatch` (the mask covers prompt plus completion), `invalid_loss_mask` (mask values
 * are the integers 0 or 1), `trainable_prompt` (prompt positions of the mask are 0), `duplicate_node_id`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { TrainingTrace } from "@envtrain/harness"
 *
 * const checked = TrainingTrace.decode({
 *   schema_version: 1,
 *   turns: [{
 *     node_id: "0",
 *     prompt_token_ids: [1, 2],
 *     completion_token_ids: [3],
 *     per_token_logps: [-0.1],
 *     loss_mask: [0, 0, 1]
 *   }]
 * })
 * Effect.runPromise(Effect.map(checked, TrainingTrace.summary)).then(console.log)
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import type { EpisodeSegment } from "@envtrain/rollout/Episode"
import { Data, Effect, Either, ParseResult, Schema } from "effect"
import { traceRows } from "./internal/traceRows.js"

/** A JSON object (`dict[str, Any]`). */
const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * One engine call. Ids, logprobs and mask are plain numbers here; the rules (not the shape) check that they are
 * integers, finite, in range, so a bad value is named by its rule.
 *
 * @since 0.0.0
 */
export const TrainingTurn = Schema.Struct({
  node_id: Schema.String,
  prompt_token_ids: Schema.Array(Schema.Number),
  completion_token_ids: Schema.Array(Schema.Number),
  per_token_logps: Schema.Array(Schema.Number),
  /** Covers prompt plus completion; 1 = trained. */
  loss_mask: Schema.Array(Schema.Number),
  request: Schema.optionalWith(JsonObject, { default: () => ({}) }),
  response: Schema.optionalWith(JsonObject, { default: () => ({}) }),
  metadata: Schema.optionalWith(JsonObject, { default: () => ({}) })
})

/** @since 0.0.0 */
export type TrainingTurn = typeof TrainingTurn.Type

/**
 * The trace: `schema_version` 1 and the selected turns. Decoding refuses unknown fields, as OpenEnv's
 * `extra="forbid"` does.
 *
 * @since 0.0.0
 */
export const TrainingTrace = Schema.Struct({
  schema_version: Schema.optionalWith(Schema.Literal(1), { default: () => 1 as const }),
  turns: Schema.Array(TrainingTurn)
})

/** @since 0.0.0 */
export type TrainingTrace = typeof TrainingTrace.Type

/** The rule names (OpenEnv's finding codes, plus `schema` and `duplicate_node_id`). @since 0.0.0 */
export type Rule =
  | "schema"
  | "invalid_token_id"
  | "invalid_logprob"
  | "positive_logprob"
  | "no_prompt_ids"
  | "logprob_misalign"
  | "length_mismatch"
  | "invalid_loss_mask"
  | "trainable_prompt"
  | "duplicate_node_id"

/**
 * A trace broke a rule. `turn` is the turn's index in `turns` (absent when the trace as a whole is malformed).
 *
 * @since 0.0.0
 */
export class TraceInvalid extends Data.TaggedError("TraceInvalid")<{
  readonly rule: Rule
  readonly turn?: number
  readonly nodeId?: string
  readonly detail: string
}> {
  override get message() {
    const where = this.turn === undefined
      ? "the trace"
      : `turn ${this.turn}${this.nodeId === undefined ? "" : ` (node_id ${JSON.stringify(this.nodeId)})`}`
    return `${where} breaks rule ${this.rule}: ${this.detail}`
  }
}

/** A trace file could not be read or is not JSON. @since 0.0.0 */
export class TraceFileError extends Data.TaggedError("TraceFileError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `${this.path}: ${this.problem}`
  }
}

const fixes: Record<Exclude<Rule, "schema">, string> = {
  invalid_token_id: "token ids are non-negative integers as the engine returned them",
  invalid_logprob: "logprobs are the engine's finite log-probabilities",
  positive_logprob: "log-probabilities are never positive: these are not logprobs (probabilities? raw logits?)",
  no_prompt_ids:
    "the engine returned no prompt_token_ids: serve vLLM with --return-tokens-as-token-ids and ask return_token_ids",
  logprob_misalign: "give one logprob per completion token (ask the engine for logprobs; never zero-fill)",
  length_mismatch: "loss_mask covers prompt plus completion, one entry per token",
  invalid_loss_mask: "loss_mask holds only the integers 0 or 1",
  trainable_prompt: "prompt tokens must remain context: the prompt part of loss_mask is all 0",
  duplicate_node_id: "every turn has its own node_id"
}

const fail = (rule: Exclude<Rule, "schema">, turn: number, nodeId: string, what: string) =>
  Either.left(new TraceInvalid({ rule, turn, nodeId, detail: `${what}; ${fixes[rule]}` }))

const firstBad = <A>(xs: ReadonlyArray<A>, bad: (x: A) => boolean) => {
  const i = xs.findIndex(bad)
  return i < 0 ? undefined : { index: i, value: xs[i] }
}

/**
 * The rules of one turn, in OpenEnv's order (token ids, logprob values, prompt, alignment, then the mask's length,
 * values and prompt part); the first broken one.
 *
 * @since 0.0.0
 */
export const checkTurn = (turn: TrainingTurn, index: number): Either.Either<TrainingTurn, TraceInvalid> => {
  const {
    completion_token_ids: completion,
    loss_mask: mask,
    node_id,
    per_token_logps: logps,
    prompt_token_ids: prompt
  } = turn
  for (const [name, ids] of [["prompt_token_ids", prompt], ["completion_token_ids", completion]] as const) {
    const bad = firstBad(ids, (id) => !Number.isSafeInteger(id) || id < 0)
    if (bad) return fail("invalid_token_id", index, node_id, `${name}[${bad.index}] is ${bad.value}`)
  }
  const nonFinite = firstBad(logps, (lp) => !Number.isFinite(lp))
  if (nonFinite) {
    return fail("invalid_logprob", index, node_id, `per_token_logps[${nonFinite.index}] is ${nonFinite.value}`)
  }
  const positive = firstBad(logps, (lp) => lp > 0)
  if (positive) {
    return fail("positive_logprob", index, node_id, `per_token_logps[${positive.index}] is ${positive.value}`)
  }
  if (prompt.length === 0) return fail("no_prompt_ids", index, node_id, "prompt_token_ids is empty")
  if (logps.length !== completion.length) {
    return fail(
      "logprob_misalign",
      index,
      node_id,
      `${logps.length} logprobs for ${completion.length} completion tokens`
    )
  }
  if (mask.length !== prompt.length + completion.length) {
    return fail(
      "length_mismatch",
      index,
      node_id,
      `loss_mask has ${mask.length} entries for ${prompt.length} prompt + ${completion.length} completion tokens`
    )
  }
  const badMask = firstBad(mask, (m) => m !== 0 && m !== 1)
  if (badMask) return fail("invalid_loss_mask", index, node_id, `loss_mask[${badMask.index}] is ${badMask.value}`)
  const trainedPrompt = firstBad(mask.slice(0, prompt.length), (m) => m !== 0)
  if (trainedPrompt) {
    return fail(
      "trainable_prompt",
      index,
      node_id,
      `loss_mask[${trainedPrompt.index}] is 1 inside the ${prompt.length}-token prompt`
    )
  }
  return Either.right(turn)
}

/**
 * Every rule over a decoded trace: each turn's, then unique node ids.
 *
 * @since 0.0.0
 */
export const validate = (trace: TrainingTrace): Effect.Effect<TrainingTrace, TraceInvalid> =>
  Effect.suspend(() => {
    const seen = new Map<string, number>()
    for (let i = 0; i < trace.turns.length; i++) {
      const turn = trace.turns[i]
      const checked = checkTurn(turn, i)
      if (Either.isLeft(checked)) return Effect.fail(checked.left)
      const first = seen.get(turn.node_id)
      if (first !== undefined) {
        return Effect.fail(
          new TraceInvalid({
            rule: "duplicate_node_id",
            turn: i,
            nodeId: turn.node_id,
            detail: `turn ${first} has the same node_id; ${fixes.duplicate_node_id}`
          })
        )
      }
      seen.set(turn.node_id, i)
    }
    return Effect.succeed(trace)
  })

const decodeShape = Schema.decodeUnknownEither(TrainingTrace, { onExcessProperty: "error" })

// The shape's first problem, with the turn it is in (paths read ["turns", i, field, ...]).
const shapeError = (error: ParseResult.ParseError, input: unknown): TraceInvalid => {
  const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  const path = issue?.path ?? []
  const turn = path[0] === "turns" && typeof path[1] === "number" ? path[1] : undefined
  const nodeId = turn === undefined
    ? undefined
    : (input as { turns: Array<{ node_id?: unknown }> }).turns[turn]?.node_id
  const at = path.length === 0 ? "" : `at ${path.map(String).join(".")}: `
  return new TraceInvalid({
    rule: "schema",
    ...(turn === undefined ? {} : { turn }),
    ...(typeof nodeId === "string" ? { nodeId } : {}),
    detail: `${at}${issue?.message ?? error.message} (a TrainingTrace is {schema_version: 1, turns: [{node_id, ` +
      `prompt_token_ids, completion_token_ids, per_token_logps, loss_mask, request?, response?, metadata?}]}, ` +
      `nothing else)`
  })
}

/**
 * Decodes a trace from JSON-shaped input (strictly: unknown fields refused, as OpenEnv does), then checks every
 * rule.
 *
 * @since 0.0.0
 */
export const decode = (input: unknown): Effect.Effect<TrainingTrace, TraceInvalid> =>
  Effect.suspend(() => {
    const shaped = decodeShape(input)
    if (Either.isLeft(shaped)) return Effect.fail(shapeError(shaped.left, input))
    const emptyId = shaped.right.turns.findIndex((t) => t.node_id.length === 0)
    if (emptyId >= 0) {
      return Effect.fail(
        new TraceInvalid({
          rule: "schema",
          turn: emptyId,
          detail: "node_id is empty; give every turn a non-empty node_id"
        })
      )
    }
    return validate(shaped.right)
  })

/**
 * Reads and checks a trace file (JSON).
 *
 * @since 0.0.0
 */
export const readFile = (
  path: string
): Effect.Effect<TrainingTrace, TraceInvalid | TraceFileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((e) => new TraceFileError({ path, problem: `cannot read it (${e.message}); check the path` }))
    )
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) =>
        new TraceFileError({ path, problem: `is not JSON (${(e as Error).message}); a trace file is one JSON object` })
    })
    return yield* decode(json)
  })

/** Totals of a trace. @since 0.0.0 */
export interface Totals {
  readonly turns: number
  readonly promptTokens: number
  readonly completionTokens: number
  /** Completion tokens with mask 1. */
  readonly trainableTokens: number
}

/** @since 0.0.0 */
export const totals = (trace: TrainingTrace): Totals => {
  let promptTokens = 0
  let completionTokens = 0
  let trainableTokens = 0
  for (const t of trace.turns) {
    promptTokens += t.prompt_token_ids.length
    completionTokens += t.completion_token_ids.length
    for (const m of t.loss_mask) trainableTokens += m
  }
  return { turns: trace.turns.length, promptTokens, completionTokens, trainableTokens }
}

/** One line: schema version, turns, token counts. @since 0.0.0 */
export const summary = (trace: TrainingTrace): string => {
  const t = totals(trace)
  return `valid TrainingTrace (schema_version ${trace.schema_version}): ${t.turns} turns, ${t.promptTokens} prompt ` +
    `tokens, ${t.completionTokens} completion tokens, ${t.trainableTokens} trainable`
}

/**
 * The training rows of a (validated) trace, from its token ids, masks and logprobs only: a turn whose prompt extends
 * an open row's whole context by an exact token prefix continues that row (the tokens between join it with mask 0),
 * any other turn starts a row (a rewritten history, a side call); rows without a mask-1 token are left out. What
 * the harness trainer trains on; per trained token the same context and logprob as TRL's harness worker
 * (`interop/python/test_trl_harness_rows.py`).
 *
 * @since 0.0.0
 */
export const rows = (trace: TrainingTrace): ReadonlyArray<EpisodeSegment> => traceRows(trace.turns)
