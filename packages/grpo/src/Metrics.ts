/**
 * Training metrics as JSON Lines, with TRL's names (TRL reference §2.3, §3.11): one object per logging step holding
 * the NaN-aware mean of every per-step value since the previous log (TRL's `log`), plus sample completions per
 * logging step (TRL's `log_completions`, §2.4) in a second file.
 *
 * Files under the output directory:
 * - `metrics.jsonl`: `{"step": 10, "epoch": 0.4, "reward": 0.61, "rewards/catch/mean": ..., "loss": ..., ...}`;
 *   a statistic with no values is written as `null` (TRL logs `None`).
 * - `completions.jsonl`: `{"step": 10, "prompt": "...", "completion": "...", "rewards": {"catch": 1}, "advantage": 0.7}`.
 * - `eval.jsonl`: one object per evaluation (see `Evaluation`).
 *
 * @example
 * ```ts
 * import { Metrics } from "@envtrain/grpo"
 * const acc = Metrics.accumulator()
 * acc.add({ reward: 0.5, loss: 0.1 })
 * acc.add({ reward: 0.7, loss: NaN })
 * const record = acc.flush({ step: 2, epoch: 0 }) // { step: 2, epoch: 0, reward: 0.6, loss: 0.1 }
 * yield* Metrics.append("out/metrics.jsonl", [record])
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem } from "@effect/platform"
import { Data, Effect } from "effect"

/** File names inside the output directory. */
export const files = {
  metrics: "metrics.jsonl",
  completions: "completions.jsonl",
  evaluations: "eval.jsonl",
  report: "report.html"
} as const

/**
 * One logged record: `step` and `epoch`, then metric values (NaN-free; `null` where nothing was measured).
 *
 * @since 0.0.0
 */
export interface MetricsRecord {
  readonly step: number
  readonly epoch: number
  readonly [name: string]: number | null
}

/**
 * One sample completion of a logging step (TRL's completions table row).
 *
 * @since 0.0.0
 */
export interface CompletionSample {
  readonly step: number
  readonly prompt: string
  readonly completion: string
  /** One column per reward function; `null` where it returned null (TRL: NaN). */
  readonly rewards: Readonly<Record<string, number | null>>
  readonly advantage: number
  /** The dataset row's environment name, when the run routes between environments. */
  readonly environment?: string
  /** Extra columns (e.g. `tool_calls`, `tool_failures`, `unscoreable`). */
  readonly extra?: Readonly<Record<string, string | number | boolean | null>>
}

/**
 * Averages per-step metrics until the next logging step, NaN-aware (TRL appends per-step values to lists and logs
 * their `nanmean`).
 *
 * @since 0.0.0
 */
export interface Accumulator {
  /** Adds one step's values (NaN and missing keys are ignored for that key). */
  readonly add: (values: Readonly<Record<string, number>>) => void
  /** Steps added since the last flush. */
  readonly size: () => number
  /** The averaged record (keys in first-seen order; all-NaN keys → null), and a reset. */
  readonly flush: (at: { readonly step: number; readonly epoch: number }) => MetricsRecord
}

/** @since 0.0.0 */
export const accumulator = (): Accumulator => {
  let sums = new Map<string, { sum: number; count: number }>()
  let steps = 0
  return {
    add: (values) => {
      steps++
      for (const [key, value] of Object.entries(values)) {
        const entry = sums.get(key) ?? { sum: 0, count: 0 }
        if (!Number.isNaN(value)) {
          entry.sum += value
          entry.count++
        }
        sums.set(key, entry)
      }
    },
    size: () => steps,
    flush: (at) => {
      const out: Record<string, number | null> = { step: at.step, epoch: at.epoch }
      for (const [key, { count, sum }] of sums) out[key] = count === 0 ? null : finite(sum / count)
      sums = new Map()
      steps = 0
      return out as MetricsRecord
    }
  }
}

const finite = (x: number): number | null => (Number.isFinite(x) ? x : null)

/** JSON text of one line: NaN and ±Infinity become null (JSON has neither). */
export const toJsonLine = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? null : v))

/**
 * A metrics file could not be written or read back.
 *
 * @since 0.0.0
 */
export class MetricsFileError extends Data.TaggedError("MetricsFileError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `Metrics file ${this.path}: ${this.problem}`
  }
}

/**
 * Appends records to a JSONL file (created if needed).
 *
 * @since 0.0.0
 */
export const append = (
  path: string,
  records: ReadonlyArray<unknown>
): Effect.Effect<void, MetricsFileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    if (records.length === 0) return
    const fs = yield* FileSystem.FileSystem
    const text = records.map(toJsonLine).join("\n") + "\n"
    yield* fs.writeFileString(path, text, { flag: "a" }).pipe(
      Effect.mapError((e) =>
        new MetricsFileError({ path, problem: `cannot append (${e.message}); check the directory` })
      )
    )
  })

/**
 * Parses JSONL text: one JSON value per non-empty line; a line that is not JSON fails with its line number.
 *
 * @since 0.0.0
 */
export const parseJsonl = <A = unknown>(text: string, path = "(text)"): Effect.Effect<Array<A>, MetricsFileError> =>
  Effect.suspend(() => {
    const out: Array<A> = []
    const lines = text.split("\n")
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim()
      if (line === "") continue
      try {
        out.push(JSON.parse(line) as A)
      } catch (e) {
        return Effect.fail(
          new MetricsFileError({ path, problem: `line ${i + 1} is not JSON (${(e as Error).message})` })
        )
      }
    }
    return Effect.succeed(out)
  })

/**
 * Reads a JSONL file; a missing file reads as empty.
 *
 * @since 0.0.0
 */
export const read = <A = unknown>(path: string): Effect.Effect<Array<A>, MetricsFileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const exists = yield* fs.exists(path).pipe(Effect.orElseSucceed(() => false))
    if (!exists) return []
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((e) => new MetricsFileError({ path, problem: `cannot read (${e.message})` }))
    )
    return yield* parseJsonl<A>(text, path)
  })

/**
 * Drops records logged after `step` (used on resume, so a run that was interrupted after logging but before its next
 * checkpoint does not log the same steps twice).
 *
 * @since 0.0.0
 */
export const truncateAfter = (
  path: string,
  step: number
): Effect.Effect<void, MetricsFileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const records = yield* read<{ readonly step?: number }>(path)
    if (records.length === 0) return
    const kept = records.filter((r) => typeof r.step !== "number" || r.step <= step)
    if (kept.length === records.length) return
    yield* fs.writeFileString(path, kept.map(toJsonLine).join("\n") + (kept.length > 0 ? "\n" : "")).pipe(
      Effect.mapError((e) => new MetricsFileError({ path, problem: `cannot rewrite (${e.message})` }))
    )
  })

/**
 * Prints sample completions as a plain-text table (TRL prints them with `rich`); `limit` rows at most.
 *
 * @since 0.0.0
 */
export const formatCompletions = (samples: ReadonlyArray<CompletionSample>, limit?: number | null): string => {
  const shown = limit === null || limit === undefined ? samples : samples.slice(0, limit)
  const clip = (s: string, n: number) => {
    const flat = s.replace(/\s+/g, " ").trim()
    return flat.length > n ? flat.slice(0, n - 1) + "…" : flat
  }
  // A prompt's end (the last user turn) says more than its start (system prompt, tool list).
  const tail = (s: string, n: number) => {
    const flat = s.replace(/\s+/g, " ").trim()
    return flat.length > n ? "…" + flat.slice(flat.length - n + 1) : flat
  }
  const lines = shown.map((s) => {
    const rewards = Object.entries(s.rewards).map(([k, v]) => `${k}=${v === null ? "-" : v.toFixed(3)}`).join(" ")
    return `step ${s.step} | ${tail(s.prompt, 40)} | ${clip(s.completion, 80)} | ${rewards} | adv ${
      s.advantage.toFixed(3)
    }`
  })
  return lines.join("\n")
}
