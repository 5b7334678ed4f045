/**
 * Prompt datasets: rows of chat messages plus extra columns (`env`, `seed`, `answer`, …) that reach `reset` and the
 * reward functions, and TRL's sampler (`RepeatSampler`, TRL reference §4.2): every epoch the row indices are
 * shuffled with a generator seeded by (seed, epoch), cut into generation batches of U prompts (a trailing partial
 * batch is dropped), and each prompt is rolled out G times. A {@link Position} (epoch, batch) is all it takes to
 * resume: the same position always gives the same prompts.
 *
 * @example
 * ```ts
 * import { Dataset } from "@envtrain/grpo"
 * const data = Dataset.fromSeeds({ prompt: [{ role: "user", content: "Play Catch." }], seeds: range(0, 256),
 *   columns: { env: "catch" } })
 * const { rows, next } = yield* Dataset.batchAt(data, Dataset.start, { promptsPerBatch: 4, seed: 42, shuffle: true })
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import type { PromptRow } from "@envtrain/rollout/Rollout"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Data, Effect, Schema } from "effect"

/**
 * A list of prompt rows.
 *
 * @since 0.0.0
 */
export interface Dataset {
  readonly name: string
  readonly rows: ReadonlyArray<PromptRow>
}

/**
 * Where the sampler stands: the next generation batch to draw is batch `batch` of epoch `epoch`.
 *
 * @since 0.0.0
 */
export interface Position {
  readonly epoch: number
  readonly batch: number
}

/** @since 0.0.0 */
export const start: Position = { epoch: 0, batch: 0 }

/**
 * The dataset is unusable (unreadable file, a row without messages, too few rows for one batch).
 *
 * @since 0.0.0
 */
export class DatasetError extends Data.TaggedError("DatasetError")<{
  readonly source: string
  readonly problem: string
}> {
  override get message() {
    return `Dataset ${this.source}: ${this.problem}`
  }
}

/** @since 0.0.0 */
export const fromRows = (rows: ReadonlyArray<PromptRow>, name = "rows"): Dataset => ({ name, rows })

/**
 * One row per seed, all with the same prompt (environments that build their own observation in `reset`, as TRL's
 * OpenEnv examples do), with `seed` set and any extra columns.
 *
 * @since 0.0.0
 */
export const fromSeeds = (options: {
  readonly prompt: ReadonlyArray<ChatMessage>
  readonly seeds: ReadonlyArray<number>
  readonly columns?: Readonly<Record<string, unknown>>
  readonly name?: string
}): Dataset =>
  fromRows(
    options.seeds.map((seed) => ({ prompt: options.prompt, ...options.columns, seed })),
    options.name ?? "seeds"
  )

/** Integers from `from` (inclusive) to `to` (exclusive). */
export const range = (from: number, to: number): Array<number> =>
  Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i)

const Message = Schema.Struct({
  role: Schema.Literal("system", "user", "assistant", "tool"),
  content: Schema.String
})

const decodeRow = (value: unknown, line: number, source: string): Effect.Effect<PromptRow, DatasetError> => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return Effect.fail(new DatasetError({ source, problem: `line ${line} is not a JSON object` }))
  }
  const record = value as Record<string, unknown>
  if (record.prompt !== undefined && record.messages !== undefined) {
    // One would be dropped without a word: which the row means is the writer's to say.
    return Effect.fail(
      new DatasetError({ source, problem: `line ${line} has both "prompt" and "messages": keep one of them` })
    )
  }
  const raw = record.prompt ?? record.messages
  if (raw === undefined) {
    // TRL: with an environment a row may omit the prompt; it defaults to an empty user message.
    return Effect.succeed({ ...record, prompt: [{ role: "user", content: "" }] })
  }
  const prompt = typeof raw === "string" ? [{ role: "user" as const, content: raw }] : raw
  return Schema.decodeUnknown(Schema.Array(Message))(prompt).pipe(
    Effect.mapError((e) =>
      new DatasetError({
        source,
        problem: `line ${line}: "prompt" must be a string or a list of {role, content} messages (${
          e.message.split("\n")[0]
        })`
      })
    ),
    Effect.map((messages) => {
      const columns = { ...record }
      delete columns.messages
      return { ...columns, prompt: messages as ReadonlyArray<ChatMessage> } satisfies PromptRow
    })
  )
}

/**
 * Reads a JSONL file of rows: `prompt` (a string or a list of messages; `messages` is accepted too) plus any
 * columns.
 *
 * @since 0.0.0
 */
export const fromJsonl = Effect.fn("Dataset.fromJsonl")(function*(path: string) {
  const fs = yield* FileSystem.FileSystem
  const text = yield* fs.readFileString(path).pipe(
    Effect.mapError((e) => new DatasetError({ source: path, problem: `cannot read (${e.message}); check the path` }))
  )
  const rows: Array<PromptRow> = []
  const lines = text.split("\n")
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() === "") continue
    const value = yield* Effect.try({
      try: () => JSON.parse(lines[i]) as unknown,
      catch: (e) => new DatasetError({ source: path, problem: `line ${i + 1} is not JSON (${(e as Error).message})` })
    })
    rows.push(yield* decodeRow(value, i + 1, path))
  }
  return fromRows(rows, path)
})

/**
 * A small, fast, seedable PRNG (splitmix32) whose whole state is one 32-bit integer, so it can be checkpointed.
 *
 * @since 0.0.0
 */
export const splitmix32 = (seed: number) => {
  let state = seed >>> 0
  return {
    next: (): number => {
      state = (state + 0x9e3779b9) >>> 0
      let z = state
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
      return ((z ^ (z >>> 16)) >>> 0) / 4294967296
    },
    state: () => state
  }
}

/** Mixes integers into one 31-bit seed (for per-step and per-episode seeds). */
export const mixSeed = (...parts: ReadonlyArray<number>): number => {
  let h = 0x811c9dc5
  for (const p of parts) {
    h = Math.imul(h ^ (p >>> 0), 0x01000193) >>> 0
    h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0
  }
  return (h ^ (h >>> 12)) & 0x7fffffff
}

/**
 * The order of the rows in `epoch`: a Fisher–Yates shuffle seeded by (seed, epoch), or the file order.
 *
 * @since 0.0.0
 */
export const epochOrder = (size: number, epoch: number, seed: number, shuffle: boolean): Array<number> => {
  const order = range(0, size)
  if (!shuffle) return order
  const rng = splitmix32(mixSeed(seed, epoch))
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1))
    const t = order[i]
    order[i] = order[j]
    order[j] = t
  }
  return order
}

/**
 * Generation batches per epoch: `floor(size / promptsPerBatch)` (TRL drops the trailing partial batch).
 *
 * @since 0.0.0
 */
export const batchesPerEpoch = (dataset: Dataset, promptsPerBatch: number): number =>
  Math.floor(dataset.rows.length / promptsPerBatch)

/**
 * The prompts of the generation batch at `position`, and the position after it (wrapping into the next epoch).
 * Fails if the dataset holds fewer rows than one batch.
 *
 * @since 0.0.0
 */
export const batchAt = (
  dataset: Dataset,
  position: Position,
  options: { readonly promptsPerBatch: number; readonly seed: number; readonly shuffle: boolean }
): Effect.Effect<
  { readonly rows: ReadonlyArray<PromptRow>; readonly indices: ReadonlyArray<number>; readonly next: Position },
  DatasetError
> =>
  Effect.suspend(() => {
    const U = options.promptsPerBatch
    const perEpoch = batchesPerEpoch(dataset, U)
    if (perEpoch === 0) {
      return Effect.fail(
        new DatasetError({
          source: dataset.name,
          problem: `${dataset.rows.length} rows cannot fill one generation batch of ${U} prompts; add rows or ` +
            `lower the generation batch (perDeviceTrainBatchSize × stepsPerGeneration / numGenerations)`
        })
      )
    }
    let { batch, epoch } = position
    if (batch >= perEpoch) {
      epoch += Math.floor(batch / perEpoch)
      batch %= perEpoch
    }
    const order = epochOrder(dataset.rows.length, epoch, options.seed, options.shuffle)
    const indices = order.slice(batch * U, (batch + 1) * U)
    const next = batch + 1 >= perEpoch ? { epoch: epoch + 1, batch: 0 } : { epoch, batch: batch + 1 }
    return Effect.succeed({ rows: indices.map((i) => dataset.rows[i]), indices, next })
  })

/**
 * The fractional epoch of a position (TRL logs `epoch` as a float).
 *
 * @since 0.0.0
 */
export const epochOf = (dataset: Dataset, position: Position, promptsPerBatch: number): number => {
  const perEpoch = Math.max(1, batchesPerEpoch(dataset, promptsPerBatch))
  return position.epoch + position.batch / perEpoch
}
