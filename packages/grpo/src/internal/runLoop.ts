/**
 * The run loop GRPO and SFT share: everything around an optimizer step. {@link open} creates the output directory,
 * resumes from a checkpoint and cuts the logs back to it; {@link run} calls the trainer's step for each remaining
 * step and keeps the cadence (a metrics line every loggingSteps, an evaluation every evalSteps, the report, a
 * checkpoint every saveSteps), the progress line and the run-end messages, and on interruption (SIGINT/SIGTERM
 * through `Main.run`, or fiber interruption) writes a checkpoint of the last completed step before the Effect ends.
 */
import { FileSystem, Path } from "@effect/platform"
import { Cause, Effect, Exit, Option } from "effect"
import * as Metrics from "../Metrics.js"
import * as Progress from "../Progress.js"
import * as Report from "../Report.js"
import * as Trackers from "../Trackers.js"
import * as TrainerState from "../TrainerState.js"
import type { TrainableModel } from "./model.js"

/** What the caller of a trainer says about the run itself (the same options for GRPO and SFT). */
export interface RunSettings {
  /** `true`: continue from the newest checkpoint in outputDir (if any); a path: that checkpoint. */
  readonly resume?: boolean | string
  /** Default a bar on stdout labelled with the kind; `false` prints nothing. */
  readonly progress?: Progress.Progress | false
  /** Default the output directory's name (with " (SFT)" for SFT). */
  readonly title?: string
  /** Stop after this many steps of this call (the schedule still spans totalSteps). */
  readonly stopAfter?: number
}

export interface OpenOptions {
  readonly kind: TrainerState.State["kind"]
  readonly outputDir: string
  readonly model: TrainableModel
  readonly totalSteps: number
  /** A fresh run's state before its first step (besides kind, globalStep 0 and totalSteps). */
  readonly initial: Omit<TrainerState.State, "kind" | "globalStep" | "totalSteps">
  /** The JSONL logs the run appends to in outputDir: removed on a fresh start, cut back to the checkpoint on resume. */
  readonly logs: ReadonlyArray<string>
  /** The trackers to log to as well (`report_to`), with the run's name there, Trackio's project and the config. */
  readonly trackers?: {
    readonly reportTo: ReadonlyArray<string>
    readonly runName: string | null
    readonly project: string
    readonly config: Readonly<Record<string, unknown>>
  }
}

/** An opened run: its output directory and committed state, between the trainer and {@link run}. */
export interface Loop {
  readonly kind: TrainerState.State["kind"]
  readonly outputDir: string
  readonly title: string
  readonly totalSteps: number
  /** Steps completed before this run (the resumed checkpoint's; 0 on a fresh start). */
  readonly startStep: number
  /** The step this call stops after (totalSteps, or fewer with `stopAfter`). */
  readonly stopAt: number
  readonly progress: Progress.Progress
  /** A file in the output directory. */
  readonly file: (name: string) => string
  /** The committed state: what a checkpoint holds (the resumed one's until the first step commits). */
  readonly state: () => TrainerState.State
  /**
   * Records the end of an optimizer step (the model has stepped): from here on a checkpoint, the interruption's
   * included, holds this state. Called by the trainer's step with `model.step` in one uninterruptible region, so no
   * interruption can fall between the update and its record (an awaited update, the GPU's or the worker model's,
   * would otherwise complete without it).
   */
  readonly commit: (patch: Partial<TrainerState.State>) => void
  /** Writes a checkpoint of the committed state. */
  readonly save: Effect.Effect<string, TrainerState.CheckpointStateError, FileSystem.FileSystem | Path.Path>
  /** Whether the committed state is already in a checkpoint (resumed from or saved). */
  readonly saved: () => boolean
  /** The newest checkpoint this run resumed from or wrote. */
  readonly checkpoint: () => string | undefined
  /** Logs values at a step to the run's trackers (`report_to`), their names as given. */
  readonly track: (
    step: number,
    values: Readonly<Record<string, number | null>>
  ) => Effect.Effect<void, Trackers.TrackerError>
}

/**
 * Creates the output directory (failing with what the file system said), resumes from a checkpoint when asked
 * (weights, AdamW moments and the trainer state) and removes the log lines after it, which the interrupted run
 * wrote and this one is about to write again.
 */
export const open = (settings: RunSettings, options: OpenOptions) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const { model, outputDir, totalSteps } = options
    yield* fs.makeDirectory(outputDir, { recursive: true }).pipe(
      Effect.mapError((e) =>
        new TrainerState.CheckpointStateError({ path: outputDir, problem: `cannot create (${e.message})` })
      )
    )
    const progress = settings.progress === false
      ? Progress.make({ total: totalSteps, silent: true })
      : settings.progress ?? Progress.make({ total: totalSteps, label: options.kind })
    let committed: TrainerState.State = { kind: options.kind, globalStep: 0, totalSteps, ...options.initial }
    const resumeFrom = settings.resume === undefined || settings.resume === false
      ? Option.none<string>()
      : settings.resume === true
      ? yield* TrainerState.latest(outputDir)
      : Option.some(settings.resume)
    if (Option.isSome(resumeFrom)) {
      committed = (yield* TrainerState.load(resumeFrom.value, model)).state
      yield* progress.log(`resumed from ${resumeFrom.value} at step ${committed.globalStep}`)
    }
    const startStep = committed.globalStep
    const file = (name: string) => path.join(outputDir, name)
    for (const name of options.logs) {
      if (startStep === 0) yield* fs.remove(file(name)).pipe(Effect.ignore)
      else yield* Metrics.truncateAfter(file(name), startStep)
    }
    let lastSaved = Option.isSome(resumeFrom) ? startStep : -1
    let lastCheckpoint = Option.getOrUndefined(resumeFrom)
    const base = path.basename(outputDir)
    const title = settings.title ?? (options.kind === "sft" ? `${base} (SFT)` : base)
    const trackers = options.trackers === undefined ? [] : yield* Trackers.open(options.trackers.reportTo, {
      outputDir,
      runName: options.trackers.runName ?? title,
      project: options.trackers.project,
      config: options.trackers.config
    })
    for (const t of trackers) yield* progress.log(`report_to ${t.name}: ${t.location}`)
    return {
      kind: options.kind,
      outputDir,
      title,
      totalSteps,
      startStep,
      stopAt: settings.stopAfter === undefined ? totalSteps : Math.min(totalSteps, startStep + settings.stopAfter),
      progress,
      file,
      state: () => committed,
      commit: (patch) => {
        committed = { ...committed, ...patch }
      },
      save: Effect.suspend(() =>
        TrainerState.save(outputDir, model, committed).pipe(
          Effect.tap((dir) =>
            Effect.sync(() => {
              lastSaved = committed.globalStep
              lastCheckpoint = dir
            })
          )
        )
      ),
      saved: () => committed.globalStep === lastSaved,
      checkpoint: () => lastCheckpoint,
      track: (step, values) => Effect.forEach(trackers, (t) => t.log(step, values), { discard: true })
    } satisfies Loop
  })

/** What one optimizer step hands back to the loop. */
export interface Step<A> {
  /** The step's metrics (TRL's names), averaged per logging step into metrics.jsonl. */
  readonly values: Readonly<Record<string, number>>
  readonly loss: number
  /** The epoch (fractional) the metrics line records, were it logged after this step. */
  readonly epoch: number
  /** The progress line's fields besides step, loss and throughput. */
  readonly progress?: Pick<Progress.Update, "reward" | "flat">
  /** What the run returns for this step and hands to `onStep`. */
  readonly result: A
}

/** The trainer's step and hooks; each may fail and require what it needs (`E*`, `R*`), and so may the run. */
export interface RunOptions<A, E, R, EE, ER, LE, LR> {
  readonly loop: Loop
  /** The optimizer step after `step` completed steps; it commits (`loop.commit`) right after the model steps. */
  readonly step: (step: number) => Effect.Effect<Step<A>, E, R>
  readonly loggingSteps: number
  readonly saveSteps: number
  /** Evaluate (on a fresh start, every evalSteps and at the end); the report is written on this cadence too. */
  readonly evaluation?: {
    readonly evalSteps: number
    readonly evaluate: (step: number) => Effect.Effect<void, EE, ER>
  }
  /** Written after each metrics line (GRPO's sample completions). */
  readonly logged?: (step: number) => Effect.Effect<void, LE, LR>
  /** The report's run summary. */
  readonly summary?: Readonly<Record<string, unknown>>
  /** Appended to the run-end line (GRPO's count of flat steps). */
  readonly endNote?: () => string
  readonly onStep?: ((result: A) => Effect.Effect<void>) | undefined
}

/**
 * Runs the remaining steps of an opened run with the cadence, the report and the progress line; returns each step's
 * result, the last checkpoint and the report. Interrupted, it keeps the last completed step in a checkpoint.
 */
export const run = <A, E, R, EE = never, ER = never, LE = never, LR = never>(
  options: RunOptions<A, E, R, EE, ER, LE, LR>
) => {
  const { evaluation, loop } = options
  const { outputDir, progress, startStep, stopAt, totalSteps } = loop
  const reportOptions = (status: string) => ({
    title: loop.title,
    status,
    ...(options.summary === undefined ? {} : { config: options.summary })
  })
  const steps = Effect.gen(function*() {
    if (startStep === 0 && evaluation !== undefined) yield* evaluation.evaluate(0)
    yield* Report.write(outputDir, reportOptions("training"))
    const acc = Metrics.accumulator()
    const results: Array<A> = []
    const started = Date.now()
    for (let step = startStep; step < stopAt; step++) {
      const stepped = yield* options.step(step)
      const globalStep = step + 1
      acc.add(stepped.values)
      results.push(stepped.result)
      yield* progress.update({
        step: globalStep,
        ...stepped.progress,
        loss: stepped.loss,
        tokensPerSecond: stepped.values["tokens_per_second"],
        elapsedSeconds: (Date.now() - started) / 1000,
        startStep
      })
      const last = globalStep === stopAt
      const logging = globalStep % options.loggingSteps === 0 || last
      if (logging) {
        const record = acc.flush({ step: globalStep, epoch: stepped.epoch })
        yield* Metrics.append(loop.file(Metrics.files.metrics), [record])
        yield* loop.track(globalStep, Trackers.trainKeys(record))
        if (options.logged !== undefined) yield* options.logged(globalStep)
      }
      const evaluating = evaluation !== undefined && globalStep % evaluation.evalSteps === 0
      if (evaluation !== undefined && (evaluating || globalStep === totalSteps)) yield* evaluation.evaluate(globalStep)
      if (logging || evaluating) yield* Report.write(outputDir, reportOptions(last ? "finished" : "training"))
      if (globalStep % options.saveSteps === 0 || last) yield* loop.save
      if (options.onStep !== undefined) yield* options.onStep(stepped.result)
    }
    const globalStep = loop.state().globalStep
    const note = options.endNote === undefined ? "" : options.endNote()
    yield* progress.done(`${loop.kind}: ${globalStep}/${totalSteps} steps, output in ${outputDir}${note}`)
    const report = yield* Report.write(
      outputDir,
      reportOptions(globalStep === totalSteps ? "finished" : `stopped at step ${globalStep}`)
    )
    return { globalStep, totalSteps, results, checkpoint: loop.checkpoint(), report }
  })
  return steps.pipe(
    Effect.onExit((exit) =>
      Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause) && !loop.saved()
        ? keepLastStep(loop, reportOptions)
        : Effect.void
    )
  )
}

/** Interrupted (SIGINT/SIGTERM) after a step no checkpoint holds: save it, and say where in the report and below. */
const keepLastStep = (
  loop: Loop,
  reportOptions: (status: string) => { readonly title: string; readonly status: string }
) =>
  Effect.gen(function*() {
    const dir = yield* loop.save
    yield* Report.write(loop.outputDir, reportOptions(`interrupted at step ${loop.state().globalStep}`))
    yield* loop.progress.done(`interrupted: checkpoint written to ${dir}`)
  }).pipe(
    Effect.catchAllCause((cause) => Effect.logError("could not write the interruption checkpoint", cause))
  )
