/**
 * `report_to`: the trackers TRL users read their curves in, written by envtrain itself beside `metrics.jsonl` and
 * `report.html` (which are always written). Keys are logged as transformers' callbacks log them: training metrics
 * as `train/<name>` (`train/reward`, `train/rewards/<fn>/mean`, `train/loss`, …), evaluation metrics as `eval/…`.
 *
 * - `tensorboard`: an event file under `<outputDir>/runs/<Mon DD_HH-MM-SS>_<host>/` (transformers'
 *   `TensorBoardCallback` directory; `TENSORBOARD_LOGGING_DIR` overrides it), `events.out.tfevents.<time>.<host>`:
 *   TFRecord-framed `Event` protobufs with one scalar `Summary` per logging step. `tensorboard --logdir
 *   <outputDir>/runs` shows the curves.
 * - `trackio`: Trackio's local inbox (`$TRACKIO_DIR`, default `$HF_HOME/trackio`, i.e.
 *   `~/.cache/huggingface/trackio`): JSONL fragments `inbox/<writer>/<seq>.jsonl` of `{"v": 1, "kind": "metric",
 *   "project", "run", "run_id", "metrics", "step", "timestamp", "config", "log_id"}` records — the format Trackio's
 *   own clients write when its SQLite database cannot be written directly, imported by its dashboard
 *   (`trackio show`) when it starts and while it runs. Project `TRACKIO_PROJECT`, else the config's `project`
 *   (transformers' default `huggingface`); run name the config's `run_name`, else the run's title.
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Data, Effect } from "effect"
import * as os from "node:os"
import * as TfEvents from "./internal/tfevents.js"

/** The trackers `report_to` may name (besides `"none"`). @since 0.0.0 */
export const supported = ["trackio", "tensorboard"] as const

/** @since 0.0.0 */
export type Name = (typeof supported)[number]

/** Writing to a tracker failed; the message names the file. @since 0.0.0 */
export class TrackerError extends Data.TaggedError("TrackerError")<{
  readonly tracker: string
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `report_to ${this.tracker}: ${this.path}: ${this.problem}`
  }
}

/** One open tracker. @since 0.0.0 */
export interface Tracker {
  readonly name: Name
  /** Where it writes (the event file, the inbox directory). */
  readonly location: string
  /** Logs values at a step; names are logged as given (see {@link trainKeys}). */
  readonly log: (step: number, values: Readonly<Record<string, number | null>>) => Effect.Effect<void, TrackerError>
}

/** What {@link open} needs to know about the run. @since 0.0.0 */
export interface OpenOptions {
  readonly outputDir: string
  /** The run's name in the tracker (Trackio's run; TensorBoard's directory holds the time instead). */
  readonly runName: string
  /** Trackio's project. */
  readonly project: string
  /** The run's configuration, shown by Trackio beside the run. */
  readonly config?: Readonly<Record<string, unknown>>
}

/**
 * transformers' `rewrite_logs`: a training record's metrics as `train/<name>` (`epoch` and `step` are not values;
 * `null`, TRL's `None`, is not logged).
 *
 * @since 0.0.0
 */
export const trainKeys = (record: Readonly<Record<string, number | null>>): Record<string, number | null> => {
  const out: Record<string, number | null> = {}
  for (const [k, v] of Object.entries(record)) {
    if (k === "step") continue
    out[k.startsWith("eval/") ? k : `train/${k}`] = v
  }
  return out
}

const finite = (values: Readonly<Record<string, number | null>>) =>
  Object.entries(values).filter((e): e is [string, number] => typeof e[1] === "number")

/** transformers' `default_logdir`: `runs/<Mon DD_HH-MM-SS>_<host>` (local time, as Python's strftime). */
const defaultLogdir = (now: Date) => {
  const month = now.toLocaleString("en-US", { month: "short" })
  const two = (n: number) => String(n).padStart(2, "0")
  return `${month}${two(now.getDate())}_${two(now.getHours())}-${two(now.getMinutes())}-${
    two(now.getSeconds())
  }_${os.hostname()}`
}

const tensorboard = (options: OpenOptions) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const now = new Date()
    const dir = process.env.TENSORBOARD_LOGGING_DIR ?? path.join(options.outputDir, "runs", defaultLogdir(now))
    const file = path.join(dir, `events.out.tfevents.${Math.floor(now.getTime() / 1000)}.${os.hostname()}`)
    const fail = (e: { readonly message: string }) =>
      new TrackerError({ tracker: "tensorboard", path: file, problem: e.message })
    yield* Effect.mapError(fs.makeDirectory(dir, { recursive: true }), fail)
    yield* Effect.mapError(fs.writeFile(file, TfEvents.fileVersionRecord(now.getTime() / 1000)), fail)
    const tracker: Tracker = {
      name: "tensorboard",
      location: file,
      log: (step, values) =>
        Effect.mapError(
          fs.writeFile(file, TfEvents.scalarsRecord(Date.now() / 1000, step, finite(values)), { flag: "a" }),
          fail
        )
    }
    return tracker
  })

/** Trackio's directory: `TRACKIO_DIR`, else `$HF_HOME/trackio` (huggingface_hub's HF_HOME default). */
const trackioDir = (path: Path.Path) =>
  process.env.TRACKIO_DIR ??
    path.join(
      process.env.HF_HOME ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "huggingface"),
      "trackio"
    )

/** Python's `datetime.now(timezone.utc).isoformat()`, which Trackio's clients write. */
const pythonTimestamp = (d: Date) => d.toISOString().replace(/\.(\d{3})Z$/, ".$1000+00:00")

const hex = (bytes: number) => crypto.randomUUID().replace(/-/g, "").slice(0, bytes)

const trackio = (options: OpenOptions) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const project = process.env.TRACKIO_PROJECT ?? options.project
    const writerDir = path.join(trackioDir(path), "inbox", hex(16))
    const runId = hex(32)
    const fail = (file: string) => (e: { readonly message: string }) =>
      new TrackerError({ tracker: "trackio", path: file, problem: e.message })
    yield* Effect.mapError(fs.makeDirectory(writerDir, { recursive: true }), fail(writerDir))
    let seq = 0
    const tracker: Tracker = {
      name: "trackio",
      location: writerDir,
      log: (step, values) =>
        Effect.gen(function*() {
          const metrics = Object.fromEntries(finite(values))
          const line = JSON.stringify({
            v: 1,
            kind: "metric",
            project,
            run: options.runName,
            run_id: runId,
            metrics,
            step,
            timestamp: pythonTimestamp(new Date()),
            config: seq === 0 && options.config !== undefined ? options.config : null,
            log_id: hex(32)
          }) + "\n"
          // One immutable fragment per log, written whole and renamed into place, as Trackio's FragmentWriter does:
          // its importer deletes what it imported, and must never see half a file.
          const target = path.join(writerDir, `${String(seq++).padStart(8, "0")}.jsonl`)
          const temporary = `${target}.tmp`
          yield* Effect.mapError(fs.writeFileString(temporary, line), fail(temporary))
          yield* Effect.mapError(fs.rename(temporary, target), fail(target))
        })
    }
    return tracker
  })

/**
 * Opens the trackers `reportTo` names (`"none"` opens none; an unknown name was refused by the configuration).
 *
 * @since 0.0.0
 */
export const open = (
  reportTo: ReadonlyArray<string>,
  options: OpenOptions
): Effect.Effect<ReadonlyArray<Tracker>, TrackerError, FileSystem.FileSystem | Path.Path> =>
  Effect.forEach(
    reportTo.filter((n) => n !== "none"),
    (name) =>
      name === "tensorboard"
        ? tensorboard(options)
        : name === "trackio"
        ? trackio(options)
        : Effect.fail(
          new TrackerError({
            tracker: name,
            path: options.outputDir,
            problem: `no such tracker: envtrain writes ${supported.join(", ")} (or "none")`
          })
        )
  )
