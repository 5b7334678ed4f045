/**
 * One multi-turn tool-calling episode with exact token bookkeeping.
 *
 * The loop (TRL's `_tool_call_loop`, per episode): render the prompt with the tools → generate → parse the turn →
 * call its tools on the environment session, one after another → append the tool results as the template's token
 * suffix → generate again, until a turn has no tool call, the completion budget (`maxCompletionLength`, every
 * model and tool token after the prompt) or `maxToolCallingIterations` rounds of tool calls. Sampled tokens are
 * kept verbatim; model tokens get mask 1, suffix tokens (tool results and template scaffolding) mask 0 with
 * logprob 0. Differences from TRL: a malformed tool call is answered with an error message and counted as a tool
 * failure (TRL ends the rollout), and a turn is asked for exactly the tokens left in the budget.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Environment, Echo } from "@envtrain/env"
 * import { Episode } from "@envtrain/rollout"
 *
 * const record = Effect.scoped(Effect.gen(function*() {
 *   const live = yield* Environment.episode(Echo.environment, { seed: 1 })
 *   return yield* Episode.run({
 *     prompt: [{ role: "user", content: "Say hi with the echo tool." }],
 *     session: Episode.fromEnvironment(live),
 *     config: { maxCompletionLength: 256, maxToolCallingIterations: 4, sampling: { temperature: 1 } }
 *   })
 * })) // needs Policy and ChatRenderer
 * ```
 *
 * @since 0.0.0
 */
import * as Environment from "@envtrain/env/Environment"
import type { ChatMessage, ChatTemplateError, ToolCall, ToolDefinition } from "@envtrain/text/ChatTemplate"
import { Context, Effect, Exit, Option, type Types } from "effect"
import type { Renderer, TemplateNotPrefixStable } from "./ChatRenderer.js"
import { ChatRenderer } from "./ChatRenderer.js"
import type { FinishReason, PolicyError, SamplingParams } from "./Policy.js"
import { Policy } from "./Policy.js"
import * as ToolCallParser from "./ToolCallParser.js"

/** Limits and sampling of the loop (TRL's GRPOConfig names in camelCase). */
export interface EpisodeConfig {
  /** Budget of all completion tokens of the episode: every model turn and every tool suffix. */
  readonly maxCompletionLength: number
  /** Rounds of tool execution; `undefined`: unlimited (TRL's None). */
  readonly maxToolCallingIterations?: number | undefined
  /** Context window: the episode stops before prompt + completion would reach it. */
  readonly maxModelLength?: number | undefined
  /** Sampling parameters of every turn; `maxTokens` is set per turn from the budget. */
  readonly sampling: Omit<SamplingParams, "maxTokens">
}

/** The result of one tool call as the model saw it. */
export type ToolOutcome = Environment.ToolOutcome

/**
 * An environment session as the loop needs it. A native `Environment.Episode` (via {@link fromEnvironment}) never
 * fails; a remote session fails with its client errors (session lost, timeout, transport), which end the episode.
 */
export interface Session<State, E = never> {
  readonly environment: string
  /** What `reset` returned; appended to the last prompt message (TRL: no separator). */
  readonly observation: Option.Option<string>
  /** The function-calling definitions shown to the model. */
  readonly toolDefinitions: ReadonlyArray<ToolDefinition>
  readonly call: (name: string, args: Readonly<Record<string, unknown>>) => Effect.Effect<ToolOutcome, E>
  /** The environment's reward state. */
  readonly state: Effect.Effect<State, E>
}

/** Adapts a native environment episode. */
export const fromEnvironment = <State>(episode: Environment.Episode<State>): Session<State> => ({
  environment: episode.environment,
  observation: episode.observation,
  toolDefinitions: episode.tools.map((t) => t.definition as unknown as ToolDefinition),
  call: episode.call,
  state: episode.state
})

/**
 * The session with no tool schemas in the prompt (its tools still answer calls): for a model that learnt the call
 * format from its SFT data rather than from schemas (the tiny demo models), and for the runs that reproduce them.
 */
export const withoutToolDefinitions = <State, E>(session: Session<State, E>): Session<State, E> => ({
  ...session,
  toolDefinitions: []
})

/** One executed (or unparsable) tool call. */
export interface ToolCallRecord {
  /** Index of the model turn that made the call (0-based). */
  readonly turn: number
  /** The tool name; `undefined` when the call was too malformed to name one. */
  readonly name: string | undefined
  readonly arguments: Readonly<Record<string, unknown>> | undefined
  readonly status: "success" | "failure" | "parse_failure"
  /** Why it failed: the environment's reason, or the parser's. */
  readonly reason?: string
  /** Exactly what the model was sent back. */
  readonly text: string
}

/** Calls and failures of one tool name (`"(unnamed)"` for calls whose name could not be read). */
export interface ToolStats {
  readonly calls: number
  readonly failures: number
}

/** Why the loop ended. */
export type StopReason =
  /** The last turn made no tool call. */
  | "no_tool_call"
  /** `maxToolCallingIterations` rounds were done; the last turn's calls were not executed. */
  | "max_tool_calling_iterations"
  /** The budget ran out inside a turn, or the tool results did not fit (they were dropped, as TRL). */
  | "completion_budget"
  /** The context window would have been exceeded. */
  | "context_window"
  /** The episode could not finish (see `unscoreable`). */
  | "unscoreable"

/** Everything recorded about one episode. */
export interface EpisodeRecord<State = unknown> {
  /** Which prompt (dataset row) of the run, and which of its G generations. */
  readonly promptIndex: number
  readonly generation: number
  /** The environment name and the dataset row passed to `reset` (the seed included), for replay. */
  readonly environment: string
  readonly row: Readonly<Record<string, unknown>>
  readonly envSeed: number | undefined
  readonly promptIds: ReadonlyArray<number>
  /** Every token after the prompt: model turns and tool suffixes. */
  readonly completionIds: ReadonlyArray<number>
  /** 1: sampled by the model (in the loss); 0: tool results and template scaffolding. Same length as completionIds. */
  readonly mask: ReadonlyArray<0 | 1>
  /** The sampler's logprob of each model token; 0 at mask-0 positions. Same length as completionIds. */
  readonly logprobs: ReadonlyArray<number>
  /** The conversation: prompt messages (observation appended), then assistant and tool messages. */
  readonly messages: ReadonlyArray<ChatMessage>
  /** How many of `messages` are the prompt. */
  readonly promptMessageCount: number
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  readonly toolStats: Readonly<Record<string, ToolStats>>
  readonly toolCallCount: number
  readonly toolFailureCount: number
  /** Model turns generated. */
  readonly turns: number
  /** TRL's rule: the last completion token is not an end-of-turn token. */
  readonly truncated: boolean
  /** The finish reason of the last generation. */
  readonly finishReason: FinishReason | undefined
  readonly stopReason: StopReason
  readonly wallTimeMs: number
  /** The environment's final reward state (`undefined` when the episode is unscoreable and it could not be read). */
  readonly state: State | undefined
  /** Set when the episode could not finish: it must not be scored (never reward 0). */
  readonly unscoreable?: { readonly reason: string; readonly tag: string }
  /** The oldest weights' version that sampled one of its turns, when the policy reports versions. */
  readonly policyVersion?: number
  /**
   * The episode's training rows when it is more than one token sequence (a black-box agent whose history was
   * rewritten, or whose auxiliary calls stand apart): each segment is one row sharing the episode's reward and
   * advantage. Absent: the one row `promptIds` + `completionIds`.
   */
  readonly segments?: ReadonlyArray<EpisodeSegment>
}

/** One training row of an episode: a prompt and what followed it, with the loss mask and the sampler's logprobs. */
export interface EpisodeSegment {
  readonly promptIds: ReadonlyArray<number>
  readonly completionIds: ReadonlyArray<number>
  /** 1: sampled by the model (in the loss); 0 elsewhere. Same length as completionIds. */
  readonly mask: ReadonlyArray<0 | 1>
  /** The sampler's logprob of each model token; 0 at mask-0 positions. Same length as completionIds. */
  readonly logprobs: ReadonlyArray<number>
  /** The segment's last completion token is not an end-of-turn token. */
  readonly truncated: boolean
}

/** The training rows of an episode: its segments, or its one prompt + completion. */
export const segmentsOf = (record: EpisodeRecord<unknown>): ReadonlyArray<EpisodeSegment> =>
  record.segments ?? [{
    promptIds: record.promptIds,
    completionIds: record.completionIds,
    mask: record.mask,
    logprobs: record.logprobs,
    truncated: record.truncated
  }]

/** Where the episode sits in the run. */
export interface EpisodeIdentity {
  readonly promptIndex: number
  readonly generation: number
  readonly row: Readonly<Record<string, unknown>>
  readonly envSeed: number | undefined
}

/**
 * The record under construction. The loop writes into it as it goes, so an episode that is interrupted or fails
 * half-way still yields what it had (as an unscoreable record).
 *
 * Code of its own (a user episode function) may push into `completionIds`, `mask` and `logprobs` directly; the
 * built-in loop appends whole turns with {@link Progress.appendModel} and {@link Progress.appendTool}, which keep
 * the turns' arrays as they are until {@link Progress.finish} (or {@link Progress.flush}) joins them: growing three
 * arrays token by token was most of what an episode allocated.
 */
export class Progress<State> {
  readonly startedAt = Date.now()
  environment = ""
  promptIds: ReadonlyArray<number> = []
  completionIds: Array<number> = []
  mask: Array<0 | 1> = []
  logprobs: Array<number> = []
  messages: Array<ChatMessage> = Array.of()
  promptMessageCount = 0
  toolCalls: Array<ToolCallRecord> = Array.of()
  toolStats: Record<string, { calls: number; failures: number }> = {}
  turns = 0
  finishReason: FinishReason | undefined = undefined
  stopReason: StopReason = "unscoreable"
  state: State | undefined = undefined
  /** The oldest `policyVersion` of the turns' completions (undefined while none reported one). */
  policyVersion: number | undefined = undefined
  constructor(readonly identity: EpisodeIdentity) {}

  // Appended turns not yet joined into the arrays: token ids, and the model's logprobs (undefined: a tool suffix).
  private pendingIds: Array<ReadonlyArray<number>> = []
  private pendingLogprobs: Array<ReadonlyArray<number> | undefined> = []
  private pendingLength = 0

  /** Tokens after the prompt so far (joined and pending). */
  get completionLength(): number {
    return this.completionIds.length + this.pendingLength
  }

  /** Appends sampled tokens (mask 1) with their logprobs (missing ones read 0). The arrays are kept, not copied. */
  appendModel(ids: ReadonlyArray<number>, logprobs: ReadonlyArray<number>): void {
    this.pendingIds.push(ids)
    this.pendingLogprobs.push(logprobs)
    this.pendingLength += ids.length
  }

  /** Appends template/tool-result tokens (mask 0, logprob 0). The array is kept, not copied. */
  appendTool(ids: ReadonlyArray<number>): void {
    this.pendingIds.push(ids)
    this.pendingLogprobs.push(undefined)
    this.pendingLength += ids.length
  }

  /** The whole context so far (prompt and completion), as a new array. */
  context(): Array<number> {
    return this.promptIds.concat(this.completionIds, ...this.pendingIds)
  }

  // The episode's one context array for `contextView`: its prompt, and how many completion tokens it holds.
  private live: Array<number> | undefined = undefined
  private livePrompt: ReadonlyArray<number> | undefined = undefined
  private liveCompletion = 0

  /**
   * The whole context so far (prompt and completion) as the episode's one live array, extended in place: what the
   * loop passes to the policy each turn. Copying the context for every turn was most of what a tool step allocated;
   * this array is read-only to its readers and only ever appended to, so it stays correct for the duration of a
   * call, and a reader that keeps it past the call must copy it. Assumes completion tokens are only appended.
   */
  contextView(): ReadonlyArray<number> {
    if (this.completionLength === 0) return this.promptIds
    let live = this.live
    if (live === undefined || this.livePrompt !== this.promptIds) {
      // A copy: the prompt's array may be shared (the renderer caches it for a group's episodes).
      live = this.live = this.promptIds.slice()
      this.livePrompt = this.promptIds
      this.liveCompletion = 0
    }
    let j = this.liveCompletion
    const direct = this.completionIds
    for (; j < direct.length; j++) live.push(direct[j])
    let offset = direct.length
    for (let k = 0; k < this.pendingIds.length; k++) {
      const segment = this.pendingIds[k]
      for (let i = j - offset; i < segment.length; i++) live.push(segment[i])
      offset += segment.length
      if (j < offset) j = offset
    }
    this.liveCompletion = j
    return live
  }

  /** Joins the appended turns into `completionIds`, `mask` and `logprobs`. */
  flush(): void {
    if (this.pendingIds.length === 0) return
    // Three arrays sized once and written by index: growing them token by token (or joining with concat and fill)
    // cost several times more, once per episode.
    const start = this.completionIds.length
    if (this.mask.length !== start || this.logprobs.length !== start) {
      throw new Error(
        `Episode.Progress: completionIds, mask and logprobs must stay the same length (they are ${start}, ` +
          `${this.mask.length} and ${this.logprobs.length}); push one mask and one logprob with every token id, or ` +
          `use appendModel/appendTool.`
      )
    }
    let total = start
    for (let k = 0; k < this.pendingIds.length; k++) total += this.pendingIds[k].length
    const ids = new Array<number>(total)
    const mask = new Array<0 | 1>(total)
    const logprobs = new Array<number>(total)
    for (let i = 0; i < start; i++) {
      ids[i] = this.completionIds[i]
      mask[i] = this.mask[i]
      logprobs[i] = this.logprobs[i]
    }
    let at = start
    for (let k = 0; k < this.pendingIds.length; k++) {
      const segment = this.pendingIds[k]
      const lp = this.pendingLogprobs[k]
      const n = segment.length
      if (lp === undefined) {
        for (let i = 0; i < n; i++, at++) {
          ids[at] = segment[i]
          mask[at] = 0
          logprobs[at] = 0
        }
      } else {
        for (let i = 0; i < n; i++, at++) {
          ids[at] = segment[i]
          mask[at] = 1
          logprobs[at] = lp[i] ?? 0
        }
      }
    }
    this.completionIds = ids
    this.mask = mask
    this.logprobs = logprobs
    this.pendingIds = []
    this.pendingLogprobs = []
    this.pendingLength = 0
  }

  /** The record; `unscoreable` marks an episode that could not finish. */
  finish(unscoreable?: { readonly reason: string; readonly tag: string }): EpisodeRecord<State> {
    this.flush()
    // The live context copy is no longer needed (it is larger than the record's token data).
    this.live = undefined
    this.livePrompt = undefined
    return new Finished(this, unscoreable)
  }

  /** End-of-turn and pad ids (set by the loop from the renderer). */
  eos: ReadonlySet<number> = new Set()
}

// What an episode keeps (its record, the tool calls, the messages the loop adds and their arrays) is made by
// constructors and `Array.of`, not by object or array literals. V8 watches how long a literal's objects live and,
// after seeing them outlive young collections (records a consumer collects, in-process episodes at concurrency),
// allocates every later one directly in the old generation; an old object then keeps the young objects it points
// to alive until the next full collection. A rollout that ran after in-process ones was ~18 % slower for it (12.1
// vs 10.2 µs per tool step on bench/rollout's replayed Wordle) and promoted 12 % of its allocations instead of 2 %.
class Finished<State> implements EpisodeRecord<State> {
  declare readonly promptIndex: number
  declare readonly generation: number
  declare readonly environment: string
  declare readonly row: Readonly<Record<string, unknown>>
  declare readonly envSeed: number | undefined
  declare readonly promptIds: ReadonlyArray<number>
  declare readonly completionIds: ReadonlyArray<number>
  declare readonly mask: ReadonlyArray<0 | 1>
  declare readonly logprobs: ReadonlyArray<number>
  declare readonly messages: ReadonlyArray<ChatMessage>
  declare readonly promptMessageCount: number
  declare readonly toolCalls: ReadonlyArray<ToolCallRecord>
  declare readonly toolStats: Readonly<Record<string, ToolStats>>
  declare readonly toolCallCount: number
  declare readonly toolFailureCount: number
  declare readonly turns: number
  declare readonly truncated: boolean
  declare readonly finishReason: FinishReason | undefined
  declare readonly stopReason: StopReason
  declare readonly wallTimeMs: number
  declare readonly state: State | undefined
  declare readonly unscoreable?: { readonly reason: string; readonly tag: string }
  declare readonly policyVersion?: number
  constructor(p: Progress<State>, unscoreable: { readonly reason: string; readonly tag: string } | undefined) {
    const last = p.completionIds[p.completionIds.length - 1]
    let failures = 0
    for (const c of p.toolCalls) if (c.status !== "success") failures++
    this.promptIndex = p.identity.promptIndex
    this.generation = p.identity.generation
    this.environment = p.environment
    this.row = p.identity.row
    this.envSeed = p.identity.envSeed
    this.promptIds = p.promptIds
    this.completionIds = p.completionIds
    this.mask = p.mask
    this.logprobs = p.logprobs
    this.messages = p.messages
    this.promptMessageCount = p.promptMessageCount
    this.toolCalls = p.toolCalls
    this.toolStats = p.toolStats
    this.toolCallCount = p.toolCalls.length
    this.toolFailureCount = failures
    this.turns = p.turns
    this.truncated = last !== undefined && !p.eos.has(last)
    this.finishReason = p.finishReason
    this.stopReason = unscoreable === undefined ? p.stopReason : "unscoreable"
    this.wallTimeMs = Date.now() - p.startedAt
    this.state = p.state
    if (unscoreable !== undefined) this.unscoreable = unscoreable
    if (p.policyVersion !== undefined) this.policyVersion = p.policyVersion
  }
}

class CallRecord implements ToolCallRecord {
  declare readonly turn: number
  declare readonly name: string | undefined
  declare readonly arguments: Readonly<Record<string, unknown>> | undefined
  declare readonly status: "success" | "failure" | "parse_failure"
  declare readonly reason?: string
  declare readonly text: string
  constructor(
    turn: number,
    name: string | undefined,
    args: Readonly<Record<string, unknown>> | undefined,
    status: "success" | "failure" | "parse_failure",
    reason: string | undefined,
    text: string
  ) {
    // Assigned in the order the literals had (a recording's JSON keeps it).
    this.turn = turn
    this.name = name
    this.arguments = args
    this.status = status
    if (reason !== undefined) this.reason = reason
    this.text = text
  }
}

// A message the loop adds (an assistant turn, a tool result), made by a constructor for the reason above.
class LoopMessage implements ChatMessage {
  declare readonly role: "assistant" | "tool"
  declare readonly name?: string
  declare readonly content: string
  declare readonly reasoning_content?: string
  declare readonly tool_calls?: ReadonlyArray<ToolCall>
  constructor(
    role: "assistant" | "tool",
    name: string | undefined,
    content: string,
    reasoning: string | undefined,
    toolCalls: ReadonlyArray<ToolCall> | undefined
  ) {
    this.role = role
    if (name !== undefined) this.name = name
    this.content = content
    if (reasoning !== undefined) this.reasoning_content = reasoning
    if (toolCalls !== undefined) this.tool_calls = toolCalls
  }
}

/** Input of {@link run}. */
export interface RunInput<State, E> {
  /** The prompt messages (the dataset row's `prompt`). */
  readonly prompt: ReadonlyArray<ChatMessage>
  readonly session: Session<State, E>
  readonly config: EpisodeConfig
  /** Defaults to a fresh {@link Progress} with promptIndex 0, generation 0. */
  readonly progress?: Progress<State>
}

const appendObservation = (prompt: ReadonlyArray<ChatMessage>, observation: Option.Option<string>) => {
  if (Option.isNone(observation) || prompt.length === 0) {
    return Option.isNone(observation) || observation.value === ""
      ? [...prompt]
      : [...prompt, { role: "user", content: observation.value } as ChatMessage]
  }
  const last = prompt[prompt.length - 1]
  // Object.assign and a write rather than `{ ...last, content }`: a spread followed by a property is V8's slow path
  // (~0.45 µs; Object.assign ~0.04 µs), and this runs once per episode.
  const withObservation: Types.Mutable<ChatMessage> = Object.assign({}, last)
  withObservation.content = last.content + observation.value
  const messages = prompt.slice(0, -1)
  messages.push(withObservation)
  return messages
}

const UNNAMED = "(unnamed)"

/** Failures of the loop itself (besides the session's): policy and template errors. */
export type RunError = PolicyError | ChatTemplateError | TemplateNotPrefixStable

/**
 * Runs the loop to its end and returns the record. Fails only with the session's errors, policy errors and
 * template errors; tool failures and malformed calls are part of the record.
 */
export const run = <State, E>(
  input: RunInput<State, E>
): Effect.Effect<EpisodeRecord<State>, E | RunError, Policy | ChatRenderer> =>
  Effect.flatMap(
    Effect.context<Policy | ChatRenderer>(),
    (context) => runWith({ renderer: Context.get(context, ChatRenderer), policy: Context.get(context, Policy) }, input)
  )

/** The services the loop uses. */
export interface Services {
  readonly renderer: Renderer
  readonly policy: Policy["Type"]
}

/**
 * {@link run} with its services given rather than read from the context: `Rollout.groups` reads them once per run.
 *
 * @example
 * ```ts
 * const renderer = yield* ChatRenderer.ChatRenderer
 * const policy = yield* Policy.Policy
 * const record = yield* Episode.runWith({ renderer, policy }, { prompt, session, config })
 * ```
 */
export const runWith = <State, E>(
  services: Services,
  input: RunInput<State, E>
): Effect.Effect<EpisodeRecord<State>, E | RunError> => Effect.gen(() => runEpisode(services, input))

// End-of-turn and pad ids per renderer (the same set for every episode).
const endIds = new WeakMap<Renderer, ReadonlySet<number>>()
const endIdsOf = (renderer: Renderer): ReadonlySet<number> => {
  let ids = endIds.get(renderer)
  if (ids === undefined) {
    const pad = renderer.tokenizer.padTokenId
    ids = new Set(pad === null ? renderer.eosTokenIds : [...renderer.eosTokenIds, pad])
    endIds.set(renderer, ids)
  }
  return ids
}

let episodeCount = 0

// The loop is a module-level generator function, started through an arrow. An inline `function*` would be a new
// generator function per episode, and V8 gives each one its own hidden class in the old generation that points back
// at the function and so at everything the episode captured: the scavenger then promoted every episode's data to the
// old generation (a quarter of all it allocated), which cost more than the loop itself. It is one generator: a
// second one delegated to with `yield*` cost an extra resumption for every effect the loop yields.
function* runEpisode<State, E>({ policy, renderer }: Services, input: RunInput<State, E>) {
  // One key for all the episode's turns (GenerateRequest.episode): unique within the process.
  const episode = `e${++episodeCount}`
  const p = input.progress ?? new Progress<State>({ promptIndex: 0, generation: 0, row: {}, envSeed: undefined })
  const { config, session } = input
  p.eos = endIdsOf(renderer)
  p.environment = session.environment
  p.messages = appendObservation(input.prompt, session.observation)
  p.promptMessageCount = p.messages.length
  const promptIds = renderer.promptIds(p.messages, session.toolDefinitions)
  p.promptIds = succeeded(promptIds) ? promptIds.value : yield* promptIds
  const contextLeft = () =>
    config.maxModelLength === undefined
      ? Infinity
      : config.maxModelLength - p.promptIds.length - p.completionLength
  const budgetLeft = () => Math.min(config.maxCompletionLength - p.completionLength, contextLeft())
  const outOfRoom = (): StopReason => contextLeft() <= 0 ? "context_window" : "completion_budget"
  // Object.assign rather than spreads: `{ ...a, b }` is V8's slow path (~0.45 µs, against ~0.04), and the per-turn
  // copy below runs once per tool step.
  const sampling: Types.Mutable<EpisodeConfig["sampling"]> = Object.assign({}, config.sampling)
  sampling.stopTokenIds = config.sampling.stopTokenIds ?? renderer.eosTokenIds
  const parseOptions = { thinking: renderer.enableThinking, stopStrings: renderer.stopStrings }
  // This loop runs once per tool step, so it allocates little: it is the rollout's own cost per step (see
  // bench/rollout), next to an environment step over the wire of well under a millisecond.
  let iteration = 0
  while (true) {
    const maxTokens = budgetLeft()
    if (maxTokens <= 0) {
      // Nothing can be generated: before the first turn, or after a suffix that used the last of the budget
      // (TRL would append an empty turn).
      p.stopReason = outOfRoom()
      if (p.turns > 0) p.finishReason = "length"
      break
    }
    // The episode's live context array, extended in place between turns (see Policy.GenerateRequest).
    const generated = policy.generate({
      promptIds: p.contextView(),
      sampling: turnSampling(sampling, maxTokens),
      episode
    })
    const out = succeeded(generated) ? generated.value : yield* generated
    // A backend must honour maxTokens; cut defensively so the budget stays exact (as TRL slices the new turn).
    const n = Math.min(out.tokenIds.length, maxTokens)
    const ids = n === out.tokenIds.length ? out.tokenIds : out.tokenIds.slice(0, n)
    p.appendModel(ids, out.logprobs)
    p.turns++
    const version = out.policyVersion
    if (version !== undefined && (p.policyVersion === undefined || version < p.policyVersion)) p.policyVersion = version
    p.finishReason = n < out.tokenIds.length ? "length" : out.finishReason
    const parsed = ToolCallParser.parse(renderer.decode(ids), parseOptions)
    // An entirely truncated turn appends no message (TRL).
    if (n > 0) p.messages.push(assistantMessage(parsed))
    if (p.finishReason === "length") {
      // The turn was cut by the budget or the context window (inside its tool calls, if it made any).
      p.stopReason = outOfRoom()
      break
    }
    if (!parsed.requestedTools) {
      p.stopReason = "no_tool_call"
      break
    }
    if (config.maxToolCallingIterations !== undefined && iteration >= config.maxToolCallingIterations) {
      p.stopReason = "max_tool_calling_iterations"
      break
    }
    // Execute every call of the turn in order; parse failures are answered in place. Each call is recorded as
    // soon as it ran (it counts even when its result ends up not fitting, or a later call loses the session).
    const blocks = parsed.failures.length === 0
      ? parsed.calls
      : [...parsed.calls, ...parsed.failures].sort((a, b) => a.index - b.index)
    const toolMessages: Array<ChatMessage> = []
    for (const block of blocks) {
      let record: ToolCallRecord
      if (block._tag === "CallFailure") {
        // Rendered like every other tool error (TRL's `{'error': ...}`).
        record = new CallRecord(
          p.turns - 1,
          block.name,
          undefined,
          "parse_failure",
          block.reason,
          Environment.errorText(block.message)
        )
      } else {
        const called = session.call(block.name, block.arguments)
        const outcome = succeeded(called) ? called.value : yield* called
        record = outcome._tag === "Success"
          ? new CallRecord(p.turns - 1, block.name, block.arguments, "success", undefined, outcome.text)
          : new CallRecord(p.turns - 1, block.name, block.arguments, "failure", outcome.reason, outcome.text)
      }
      p.toolCalls.push(record)
      const key = record.name ?? UNNAMED
      const stats = p.toolStats[key] ?? (p.toolStats[key] = { calls: 0, failures: 0 })
      stats.calls++
      if (record.status !== "success") stats.failures++
      toolMessages.push(new LoopMessage("tool", key, record.text, undefined, undefined))
    }
    const suffixIds = renderer.toolSuffixIds(toolMessages)
    const suffix = succeeded(suffixIds) ? suffixIds.value : yield* suffixIds
    if (p.completionLength + suffix.length > config.maxCompletionLength || suffix.length >= contextLeft()) {
      // The results do not fit: dropped, and the completion ends on the model's tool-call turn (TRL).
      p.stopReason = suffix.length >= contextLeft() ? "context_window" : "completion_budget"
      break
    }
    for (const m of toolMessages) p.messages.push(m)
    p.appendTool(suffix)
    iteration++
  }
  p.state = yield* session.state
  return p.finish()
}

// An effect that is already a success (`Effect.succeed` makes an Exit) is read without a trip through the fiber: the
// renderer answers that way on its hot paths, and a yield costs about as much as the rest of a step's bookkeeping.
const succeeded = <A, E, R>(effect: Effect.Effect<A, E, R>): effect is Exit.Success<A, E> & Effect.Effect<A, E, R> =>
  Exit.isExit(effect) && Exit.isSuccess(effect)

const turnSampling = (sampling: EpisodeConfig["sampling"], maxTokens: number): SamplingParams => {
  const turn: Types.Mutable<Partial<SamplingParams>> = Object.assign({}, sampling)
  turn.maxTokens = maxTokens
  return turn as SamplingParams
}

const assistantMessage = (parsed: ToolCallParser.ParsedTurn): ChatMessage =>
  new LoopMessage(
    "assistant",
    undefined,
    parsed.content,
    parsed.reasoning,
    parsed.calls.length === 0 ? undefined : parsed.calls.map((c) => ({
      type: "function" as const,
      function: { name: c.name, arguments: c.arguments }
    }))
  )
