/**
 * The terminal progress display of a training run: a bar with step/total, reward, flat steps so far, loss, tokens
 * per second and ETA, redrawn in place on a TTY; one plain line per update when stdout is not a terminal (logs, CI, pipes).
 *
 * @example
 * ```ts
 * import { Progress } from "@envtrain/grpo"
 * const progress = Progress.make({ total: 100, label: "grpo" })
 * yield* progress.update({ step: 1, reward: 0.25, loss: 0.01, tokensPerSecond: 120, elapsedSeconds: 3 })
 * yield* progress.done("finished")
 * ```
 *
 * @since 0.0.0
 */
import { Effect } from "effect"

/**
 * One update.
 *
 * @since 0.0.0
 */
export interface Update {
  readonly step: number
  readonly reward?: number | null | undefined
  /**
   * Flat steps so far (`Advantage.flatSteps`: every advantage was 0, so nothing
   * was learnt) out of the steps so far; shown as `flat 3/12`.
   */
  readonly flat?: { readonly flat: number; readonly steps: number } | undefined
  readonly loss?: number | null | undefined
  readonly tokensPerSecond?: number | null | undefined
  /** Seconds since the run (or resumed run) started. */
  readonly elapsedSeconds: number
  /** Steps done before `elapsedSeconds` started counting (a resumed run), so the ETA uses only this run's pace. */
  readonly startStep?: number
}

/** Formats seconds as `1h02m`, `3m05s` or `42s`. */
export const formatDuration = (seconds: number): string => {
  if (!Number.isFinite(seconds) || seconds < 0) return "?"
  const s = Math.round(seconds)
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`
  if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`
  return `${s}s`
}

const num = (x: number | null | undefined, digits: number) =>
  x === null || x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(digits)

/**
 * The text of one update: a bar of `width` cells when `bar`, then the numbers.
 *
 * @since 0.0.0
 */
export const format = (
  update: Update,
  options: { readonly total: number; readonly label?: string; readonly bar?: boolean; readonly width?: number }
): string => {
  const total = Math.max(1, options.total)
  const done = Math.min(update.step, total)
  const stepsThisRun = update.step - (update.startStep ?? 0)
  const eta = stepsThisRun > 0 ? (update.elapsedSeconds / stepsThisRun) * (total - done) : NaN
  const width = options.width ?? 24
  const filled = Math.round((done / total) * width)
  const bar = options.bar === true ? `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ` : ""
  const label = options.label === undefined ? "" : `${options.label} `
  const flat = update.flat === undefined ? "" : ` | flat ${update.flat.flat}/${update.flat.steps}`
  return `${label}${bar}step ${done}/${total} | reward ${num(update.reward, 3)}${flat} | loss ${
    num(update.loss, 4)
  } | ` +
    `${num(update.tokensPerSecond, 1)} tok/s | elapsed ${formatDuration(update.elapsedSeconds)} | ETA ${
      formatDuration(eta)
    }`
}

/**
 * A progress display.
 *
 * @since 0.0.0
 */
export interface Progress {
  readonly update: (update: Update) => Effect.Effect<void>
  /** Prints a message above the bar (e.g. sample completions, evaluation tables). */
  readonly log: (text: string) => Effect.Effect<void>
  /** Ends the bar with a final line. */
  readonly done: (message: string) => Effect.Effect<void>
}

/**
 * A progress display on `stream` (default stdout). `tty` defaults to the stream's `isTTY`; `silent` prints nothing.
 *
 * @since 0.0.0
 */
export const make = (options: {
  readonly total: number
  readonly label?: string
  readonly tty?: boolean
  readonly silent?: boolean
  readonly stream?: { readonly write: (text: string) => unknown; readonly isTTY?: boolean }
}): Progress => {
  const stream = options.stream ?? process.stdout
  const tty = options.tty ?? stream.isTTY === true
  let drawn = false
  const write = (text: string) => Effect.sync(() => void (options.silent === true ? undefined : stream.write(text)))
  const clear = () => (tty && drawn ? "\r\x1b[2K" : "")
  return {
    update: (update) => {
      const line = format(update, {
        total: options.total,
        bar: tty,
        ...(options.label === undefined ? {} : { label: options.label })
      })
      return Effect.zipRight(
        write(tty ? `${clear()}${line}` : `${line}\n`),
        Effect.sync(() => void (drawn = tty))
      )
    },
    log: (text) => Effect.zipRight(write(`${clear()}${text}\n`), Effect.sync(() => void (drawn = false))),
    done: (message) =>
      Effect.zipRight(write(`${tty && drawn ? "\n" : ""}${message}\n`), Effect.sync(() => void (drawn = false)))
  }
}
