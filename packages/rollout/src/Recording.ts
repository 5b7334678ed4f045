/**
 * Recording and replay of episodes. Every episode can be written as one JSONL line (messages, token ids, masks,
 * logprobs, tool calls, the environment row and seed, the final state) and replayed against the environment:
 * the same `reset` row, then every recorded tool call in order, comparing each result with what the model saw.
 * With a deterministic environment the replay reproduces every observation, which makes a recorded run auditable
 * (and a regression test for an environment).
 *
 * @example
 * ```ts
 * import { Effect, Stream } from "effect"
 * import { Recording, type Rollout } from "@envtrain/rollout"
 *
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const file = yield* Recording.writer("runs/episodes.jsonl")
 *   yield* Stream.runForEach(groups, (g: Rollout.Group<unknown>) => Effect.forEach(g.episodes, file.write))
 * }))
 * const report = Recording.replay(record, (row) => Effect.map(Environment.episode(Wordle.environment, row), Episode.fromEnvironment))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import type { Scope } from "effect"
import { Data, Effect, Option, Schema, Stream } from "effect"
import type { EpisodeRecord, Session } from "./Episode.js"

/** The JSONL format version written in every line (`"v": 1`). */
export const VERSION = 1

const Json = Schema.Unknown
const Message = Schema.Struct({
  role: Schema.Literal("system", "user", "assistant", "tool"),
  content: Schema.String,
  reasoning_content: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  tool_call_id: Schema.optional(Schema.String),
  tool_calls: Schema.optional(Schema.Array(Schema.Struct({
    type: Schema.optional(Schema.Literal("function")),
    id: Schema.optional(Schema.String),
    function: Schema.Struct({
      name: Schema.String,
      arguments: Schema.Union(Schema.Record({ key: Schema.String, value: Json }), Schema.String)
    })
  })))
})

// JSON has no `undefined`: such fields are written as null and read back as undefined.
const Nullish = <A, I>(s: Schema.Schema<A, I>) =>
  Schema.transform(Schema.NullOr(s), Schema.UndefinedOr(Schema.typeSchema(s)), {
    strict: true,
    decode: (x) => x ?? undefined,
    encode: (x) => x ?? null
  })

const ToolCallRecord = Schema.Struct({
  turn: Schema.Int,
  name: Nullish(Schema.String),
  arguments: Nullish(Schema.Record({ key: Schema.String, value: Json })),
  status: Schema.Literal("success", "failure", "parse_failure"),
  reason: Schema.optional(Schema.String),
  text: Schema.String
})

/** The Schema of one JSONL line. */
export const RecordLine = Schema.Struct({
  v: Schema.Literal(VERSION),
  promptIndex: Schema.Int,
  generation: Schema.Int,
  environment: Schema.String,
  row: Schema.Record({ key: Schema.String, value: Json }),
  envSeed: Nullish(Schema.Number),
  promptIds: Schema.Array(Schema.Int),
  completionIds: Schema.Array(Schema.Int),
  mask: Schema.Array(Schema.Literal(0, 1)),
  logprobs: Schema.Array(Schema.Number),
  messages: Schema.Array(Message),
  promptMessageCount: Schema.Int,
  toolCalls: Schema.Array(ToolCallRecord),
  toolStats: Schema.Record({ key: Schema.String, value: Schema.Struct({ calls: Schema.Int, failures: Schema.Int }) }),
  toolCallCount: Schema.Int,
  toolFailureCount: Schema.Int,
  turns: Schema.Int,
  truncated: Schema.Boolean,
  finishReason: Nullish(Schema.Literal("stop", "length")),
  stopReason: Schema.Literal(
    "no_tool_call",
    "max_tool_calling_iterations",
    "completion_budget",
    "context_window",
    "unscoreable"
  ),
  wallTimeMs: Schema.Number,
  state: Json,
  unscoreable: Schema.optional(Schema.Struct({ reason: Schema.String, tag: Schema.String }))
})

/** A line could not be read back. */
export class RecordingError extends Data.TaggedError("RecordingError")<{
  readonly line: number
  readonly problem: string
}> {
  override get message() {
    return `Episode recording, line ${this.line}: ${this.problem}`
  }
}

const encodeLine = Schema.encodeSync(Schema.parseJson(RecordLine))
const decodeLine = Schema.decodeUnknownEither(Schema.parseJson(RecordLine))

/** One JSONL line (no trailing newline) for a record. */
export const encode = <State>(record: EpisodeRecord<State>): string =>
  encodeLine({ v: VERSION, ...record, state: record.state ?? null } as unknown as typeof RecordLine.Type)

/** Reads one line back. `state` is the JSON the environment state was written as. */
export const decode = (line: string, lineNumber = 1): Effect.Effect<EpisodeRecord<unknown>, RecordingError> => {
  const result = decodeLine(line)
  if (result._tag === "Left") {
    return Effect.fail(new RecordingError({ line: lineNumber, problem: result.left.message.split("\n")[0] }))
  }
  const { v: _, ...record } = result.right
  return Effect.succeed(record as unknown as EpisodeRecord<unknown>)
}

/** Appends records to a JSONL file (created if missing) until the scope closes. */
export const writer = (
  path: string
): Effect.Effect<
  { readonly write: <State>(record: EpisodeRecord<State>) => Effect.Effect<void, PlatformError> },
  PlatformError,
  FileSystem.FileSystem | Scope.Scope
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = yield* fs.open(path, { flag: "a" })
    const encoder = new TextEncoder()
    // One write per line, serialised, so concurrent episodes never interleave partial lines.
    const lock = yield* Effect.makeSemaphore(1)
    return {
      write: (record) => lock.withPermits(1)(file.writeAll(encoder.encode(encode(record) + "\n")))
    }
  })

/** Reads a JSONL file of records. */
export const read = (
  path: string
): Stream.Stream<EpisodeRecord<unknown>, RecordingError | PlatformError, FileSystem.FileSystem> =>
  Stream.unwrap(Effect.map(FileSystem.FileSystem, (fs) =>
    fs.stream(path).pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.zipWithIndex,
      Stream.filter(([line]) => line.trim().length > 0),
      Stream.mapEffect(([line, i]) => decode(line, i + 1))
    )))

/** One tool result that came out differently on replay. */
export interface Mismatch {
  /** Index in `record.toolCalls` (or -1 for the first observation, -2 for the final state). */
  readonly index: number
  readonly expected: string
  readonly actual: string
}

/** The result of {@link replay}. */
export interface ReplayReport {
  /** Tool calls executed again (parse failures are not sent to the environment). */
  readonly replayed: number
  readonly mismatches: ReadonlyArray<Mismatch>
  /** True when the first observation, every tool result and the final state came out the same. */
  readonly identical: boolean
}

/**
 * Replays a record against a fresh session opened with the recorded row (its `seed` included): checks the first
 * observation, re-executes every recorded tool call in order and compares each result text, then compares the
 * final state (as JSON) when the record has one.
 */
export const replay = <State, E, EOpen, R>(
  record: EpisodeRecord<unknown>,
  open: (row: Readonly<Record<string, unknown>>) => Effect.Effect<Session<State, E>, EOpen, Scope.Scope | R>
): Effect.Effect<ReplayReport, E | EOpen, Exclude<R, Scope.Scope>> =>
  Effect.scoped(Effect.gen(function*() {
    const session = yield* open(record.row)
    const mismatches: Array<Mismatch> = []
    const lastPrompt = record.messages[record.promptMessageCount - 1]
    const observation = Option.getOrElse(session.observation, () => "")
    if (observation !== "" && (lastPrompt === undefined || !lastPrompt.content.endsWith(observation))) {
      mismatches.push({ index: -1, expected: lastPrompt?.content ?? "", actual: observation })
    }
    let replayed = 0
    for (const [index, call] of record.toolCalls.entries()) {
      if (call.status === "parse_failure" || call.name === undefined) continue
      const outcome = yield* session.call(call.name, call.arguments ?? {})
      replayed++
      if (outcome.text !== call.text) mismatches.push({ index, expected: call.text, actual: outcome.text })
    }
    if (record.state !== undefined && record.state !== null) {
      const expected = JSON.stringify(record.state)
      const actual = JSON.stringify(yield* session.state)
      if (expected !== actual) mismatches.push({ index: -2, expected, actual })
    }
    return { replayed, mismatches, identical: mismatches.length === 0 }
  })) as Effect.Effect<ReplayReport, E | EOpen, Exclude<R, Scope.Scope>>
