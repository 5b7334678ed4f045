/**
 * Rollouts: a Stream of GRPO groups. Each dataset row becomes one group of `groupSize` (G) episodes, built by the
 * producer (by prompt, never by time), each with a fresh environment session in its own Scope.
 *
 * Supervision:
 * - `concurrency` bounds the episodes in flight across the whole run: that many workers take episodes in row order,
 *   so groups overlap and the bound stays full at group boundaries. Groups are emitted as they complete.
 * - An episode that loses its session (`SessionLostError`), times out (`episodeTimeout`) or hits a transport failure
 *   (`PolicyTransportError`, connection errors) ends alone, as an *unscoreable* record carrying the reason and
 *   whatever it had produced; its group's other episodes complete. It is never scored as 0.
 * - Any other failure (a template that is not prefix-stable, a policy that answers 4xx, a defect) fails the stream:
 *   it would repeat for every episode.
 * - A run-level abort (`abort` Deferred) interrupts every in-flight episode; closing their scopes releases every
 *   environment session.
 *
 * @example
 * ```ts
 * import { Stream } from "effect"
 * import { Environment, Wordle } from "@envtrain/env"
 * import { Episode, Rollout } from "@envtrain/rollout"
 *
 * const groups = Rollout.groups(Stream.fromIterable(rows), {
 *   groupSize: 8,
 *   concurrency: 64,
 *   episodeTimeout: "2 minutes",
 *   config: { maxCompletionLength: 1024, maxToolCallingIterations: 6, sampling: { temperature: 1 } },
 *   open: (row) => Effect.map(Environment.episode(Wordle.environment, row), Episode.fromEnvironment)
 * }) // Stream<Rollout.Group<Wordle.State>, ..., Policy | ChatRenderer>
 * ```
 *
 * @since 0.0.0
 */
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Cause, Chunk, Context, Data, Deferred, Duration, Effect, Exit, FiberRef, Option, Scope, Stream } from "effect"
import { ChatRenderer } from "./ChatRenderer.js"
import type { EpisodeConfig, EpisodeRecord, Session } from "./Episode.js"
import * as Episode from "./Episode.js"
import * as Handoff from "./internal/handoff.js"
import { Policy } from "./Policy.js"

/** A dataset row: the prompt messages plus any columns (`seed`, `env`, …) that `reset` receives. */
export interface PromptRow {
  readonly prompt: ReadonlyArray<ChatMessage>
  readonly [column: string]: unknown
}

/** The G episodes of one prompt. */
export interface Group<State> {
  readonly promptIndex: number
  readonly row: PromptRow
  readonly episodes: ReadonlyArray<EpisodeRecord<State>>
}

/** An episode ran past `episodeTimeout`. */
export class EpisodeTimeout extends Data.TaggedError("EpisodeTimeout")<{
  readonly promptIndex: number
  readonly generation: number
  readonly timeout: Duration.Duration
}> {
  override get message() {
    return `Episode ${this.generation} of prompt ${this.promptIndex} did not finish within ${
      Duration.format(this.timeout)
    }; raise episodeTimeout if episodes are legitimately this long.`
  }
}

/** The run was aborted: every in-flight episode was interrupted and its session released. */
export class RolloutAborted extends Data.TaggedError("RolloutAborted")<{ readonly reason: string }> {
  override get message() {
    return `Rollout aborted: ${this.reason}`
  }
}

/** What a user episode function receives (TRL's `rollout_func`, per episode). */
export interface EpisodeInput<State> {
  readonly prompt: ReadonlyArray<ChatMessage>
  /** The columns `reset` should receive (the row without `prompt`, with the episode's `seed`). */
  readonly row: Readonly<Record<string, unknown>>
  readonly promptIndex: number
  readonly generation: number
  readonly envSeed: number
  /**
   * The record under construction: write into it as the episode goes, so a timeout or a lost session still yields
   * what was done (as an unscoreable record).
   */
  readonly progress: Episode.Progress<State>
}

/** Options of {@link groups}. */
export interface RolloutOptions<State, E, R, EOpen = E> {
  /** G: episodes per prompt (TRL's num_generations). */
  readonly groupSize: number
  /** Most episodes in flight at once, across groups. */
  readonly concurrency: number
  /** Most groups in flight at once; default `ceil(concurrency / groupSize) + 1`. */
  readonly groupConcurrency?: number
  /** Time limit of one episode (from when it gets its concurrency slot). Default: none. */
  readonly episodeTimeout?: Duration.DurationInput
  readonly config: EpisodeConfig
  /** Opens a fresh environment session for one episode in the given Scope; `row` is passed to `reset`. */
  readonly open: (row: Readonly<Record<string, unknown>>) => Effect.Effect<Session<State, E>, EOpen, Scope.Scope | R>
  /**
   * Base of the environment seeds. A row with a `seed` column gives all G episodes that seed (identical group
   * states); otherwise episode g of prompt i gets `seedOf(baseSeed, i, g)`. Default 0.
   */
  readonly baseSeed?: number
  /**
   * The prompt index of the stream's first row (default 0): a run's groups rolled out apart (one per cluster runner
   * message) keep the indices, and so the seeds, they have in the whole batch.
   */
  readonly firstPromptIndex?: number
  /** Which failures end an episode as unscoreable (default {@link isEpisodeFailure}); others fail the run. */
  readonly isUnscoreable?: (error: unknown) => boolean
  /** Completing this Deferred (with a failure) aborts the run. */
  readonly abort?: Deferred.Deferred<never, RolloutAborted>
  /**
   * Escape hatch (TRL's `rollout_func`): runs each episode instead of the built-in loop and returns the same
   * record. It still gets the concurrency slot, the timeout, unscoreable handling and abort.
   */
  readonly episode?: (input: EpisodeInput<State>) => Effect.Effect<EpisodeRecord<State>, E, Scope.Scope | R>
  /**
   * A `Rollout.episode` span per episode (attributes `promptIndex`, `generation`). Default: on when the run has a
   * tracer of its own (an OpenTelemetry layer, say), off with Effect's built-in one, where the spans would go nowhere
   * and cost ~13 µs per episode.
   */
  readonly traceEpisodes?: boolean
}

const UNSCOREABLE_TAGS: ReadonlySet<string> = new Set([
  "SessionLostError",
  "RequestTimeoutError",
  "ConnectionClosedError",
  "ConnectError",
  "PolicyTransportError",
  "EpisodeTimeout"
])

/**
 * The default split between episode-level failures (unscoreable: session lost, request timeout, connection closed
 * or refused, policy transport failure, episode timeout) and run-level ones (everything else).
 */
export const isEpisodeFailure = (error: unknown): boolean =>
  typeof error === "object" && error !== null && "_tag" in error && UNSCOREABLE_TAGS.has(String(error._tag))

/** A well-mixed 31-bit seed for episode `generation` of prompt `promptIndex` (splitmix32). */
export const seedOf = (baseSeed: number, promptIndex: number, generation: number): number => {
  let x = (baseSeed ^ Math.imul(promptIndex + 1, 0x9e3779b1) ^ Math.imul(generation + 1, 0x85ebca6b)) >>> 0
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad) >>> 0
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97) >>> 0
  return (x ^ (x >>> 15)) & 0x7fffffff
}

const describeError = (error: unknown): { readonly reason: string; readonly tag: string } => {
  const tag = typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : "Error"
  const reason = error instanceof Error || (typeof error === "object" && error !== null && "message" in error)
    ? String((error as { message: unknown }).message)
    : String(error)
  return { reason: reason.length > 0 ? reason : tag, tag }
}

// The tracer every fiber has unless a tracer layer is provided: its spans are kept by no one.
const builtInTracer = Effect.runSync(Effect.tracer)

/** Makes an abort signal for {@link RolloutOptions.abort}. */
export const makeAbort: Effect.Effect<Deferred.Deferred<never, RolloutAborted>> = Deferred.make<
  never,
  RolloutAborted
>()

/** Aborts a run. */
export const abort = (signal: Deferred.Deferred<never, RolloutAborted>, reason: string): Effect.Effect<boolean> =>
  Deferred.fail(signal, new RolloutAborted({ reason }))

/**
 * The rollout stream: one {@link Group} per row of `rows`, in completion order (`promptIndex` says which row).
 */
export const groups = <State, E, R, EOpen = E, EIn = never, RIn = never>(
  rows: Stream.Stream<PromptRow, EIn, RIn>,
  options: RolloutOptions<State, E, R, EOpen>
): Stream.Stream<
  Group<State>,
  E | EOpen | EIn | RolloutAborted | EpisodeTimeout | Episode.RunError,
  Policy | ChatRenderer | Exclude<R, Scope.Scope> | RIn
> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const workers = Math.max(1, options.concurrency)
    const groupSize = Math.max(1, options.groupSize)
    const isUnscoreable = options.isUnscoreable ?? isEpisodeFailure
    const timeout = options.episodeTimeout === undefined ? undefined : Duration.decode(options.episodeTimeout)
    const traced = options.traceEpisodes ?? (yield* Effect.tracer) !== builtInTracer
    const groupSlots = yield* Effect.makeSemaphore(
      Math.max(1, options.groupConcurrency ?? Math.ceil(workers / groupSize) + 1)
    )

    const services: Episode.Services = { renderer: yield* ChatRenderer, policy: yield* Policy }

    // One episode of an open group: its record under construction, and what it runs (open the session, run the
    // loop, with the timeout and the span when asked for) inside its worker's scope handling, below.
    const startEpisode = (group: OpenGroup, generation: number) => {
      const { columns, promptIndex } = group
      const envSeed = typeof columns.seed === "number"
        ? columns.seed
        : seedOf(options.baseSeed ?? 0, promptIndex, generation)
      // Object.assign and a write: `{ ...columns, seed }` is V8's slow path for a spread (~0.45 µs, against ~0.04).
      const row: Record<string, unknown> = Object.assign({}, columns)
      row.seed = envSeed
      const progress = new Episode.Progress<State>({ promptIndex, generation, row, envSeed })
      const body = options.episode !== undefined
        ? options.episode({ prompt: group.prompt, row, promptIndex, generation, envSeed, progress })
        : Effect.flatMap(
          options.open(row),
          (session) => Episode.runWith(services, { prompt: group.prompt, session, config: options.config, progress })
        )
      const limited = timeout === undefined ? body : Effect.timeoutFail(body, {
        duration: timeout,
        onTimeout: () => new EpisodeTimeout({ promptIndex, generation, timeout })
      })
      // No stack trace: capturing one per episode cost more than the rest of the scheduling.
      const spanned = traced
        ? Effect.withSpan(limited, "Rollout.episode", {
          attributes: { promptIndex, generation },
          captureStackTrace: false
        })
        : limited
      return { progress, body: spanned as Effect.Effect<EpisodeRecord<State>, Failure, never> }
    }
    // Whether an episode that ended with `exit` (its scope closed with `closed`) becomes an unscoreable record: a
    // typed failure, or a defect carrying a client error (a remote-backed environment's tool whose session was lost
    // dies with it, see `Environment.Episode.call`), may end only this episode; so may a session whose release died
    // after the episode itself succeeded. Undefined: the failure ends the run.
    const unscoreableOf = (
      exit: Exit.Exit<EpisodeRecord<State>, Failure>,
      closed: Exit.Exit<void>
    ): { readonly cause: Cause.Cause<Failure>; readonly reason: ReturnType<typeof describeError> | undefined } => {
      const cause = Exit.isFailure(exit) ? exit.cause : (closed as Exit.Failure<void, never>).cause
      const failure = Cause.failureOption(cause)
      const culprit = Option.isSome(failure)
        ? failure.value
        : Cause.isDie(cause) && !Cause.isInterrupted(cause)
        ? Cause.squash(cause)
        : undefined
      return { cause, reason: culprit !== undefined && isUnscoreable(culprit) ? describeError(culprit) : undefined }
    }

    // A fixed pool of `concurrency` workers takes episodes in row order (all G of a row, then the next row), so
    // there is no fiber, semaphore wait or stream stage per episode: the per-episode scheduling cost stays a few
    // microseconds at any concurrency (a semaphore over forked episodes woke every waiter on each release).
    interface OpenGroup {
      readonly row: PromptRow
      // The row split once for its G episodes: the prompt, and the columns `reset` receives.
      readonly prompt: ReadonlyArray<ChatMessage>
      readonly columns: Readonly<Record<string, unknown>>
      readonly promptIndex: number
      readonly episodes: Array<EpisodeRecord<State>>
      next: number
      done: number
    }
    const pull = yield* Stream.toPull(Stream.zipWithIndex(rows))
    const pullLock = yield* Effect.makeSemaphore(1)
    let current: OpenGroup | undefined
    let buffered: Array<readonly [PromptRow, number]> = []
    let exhausted = false
    const take = (group: OpenGroup) => ({ group, generation: group.next++ })
    // Only opening a group waits (on the rows and on the group bound); the workers hand out the rest of an open
    // group synchronously.
    // One effect (and one generator function) for the run: a generator function made per call costs V8 a hidden
    // class in the old generation each time.
    const openGroup: Effect.Effect<
      Option.Option<{ readonly group: OpenGroup; readonly generation: number }>,
      EIn,
      RIn
    > = pullLock.withPermits(1)(Effect.gen(function*() {
      if (current !== undefined && current.next < groupSize) return Option.some(take(current))
      while (buffered.length === 0 && !exhausted) {
        const chunk = yield* Effect.catchAll(pull, (e) =>
          Option.isNone(e) ?
            Effect.sync(() => {
              exhausted = true
              return Chunk.empty<readonly [PromptRow, number]>()
            }) :
            Effect.fail(e.value))
        buffered = Chunk.toArray(chunk)
      }
      const head = buffered.shift()
      if (head === undefined) return Option.none()
      yield* groupSlots.take(1)
      const { prompt, ...columns } = head[0]
      current = {
        row: head[0],
        prompt,
        columns,
        promptIndex: head[1] + (options.firstPromptIndex ?? 0),
        episodes: new Array(groupSize),
        next: 0,
        done: 0
      }
      return Option.some(take(current))
    }))
    type Failure = E | EOpen | EIn | EpisodeTimeout | Episode.RunError
    const out = Handoff.make<Group<State>, Failure>(workers + 1)
    // Uninterruptible between episodes, so that an episode's scope is always closed; waiting for rows, the group
    // bound, the stream's consumer and the episode itself are interruptible (`restore`).
    //
    // Each episode gets a scope of its own, put in the context with one FiberRef set (`Scope.extend` costs an
    // `acquireUseRelease` more) and closed with `Exit.void` after a success: a closed scope keeps the exit it was
    // closed with, and once V8 had moved scopes to the old generation, every record in a success exit was kept through
    // young collections and copied to the old generation (a tenth of all an episode allocated, ~3 µs per tool step).
    // Finalizers still see a failure or an interruption as it was. The worker's own context comes back only before it
    // waits for anything else (the next group, the consumer): a FiberRef set of the context costs ~1 µs (it copies the
    // fiber's refs and compares the contexts); one per episode instead of two, with the episode inlined here rather than
    // in a generator of its own, was ~0.8 µs less per tool step (docs/architecture.md, hot paths).
    const worker = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const outer = yield* FiberRef.get(FiberRef.currentContext)
        const restoreContext = FiberRef.set(FiberRef.currentContext, outer)
        // Whether the context holds an episode's (closed) scope instead of `outer`.
        let inEpisodeContext = false
        while (true) {
          let group = current
          let generation: number
          if (group !== undefined && group.next < groupSize) generation = group.next++
          else {
            if (inEpisodeContext) {
              yield* restoreContext
              inEpisodeContext = false
            }
            const slot = yield* restore(openGroup)
            if (Option.isNone(slot)) return
            group = slot.value.group
            generation = slot.value.generation
          }
          const { body, progress } = startEpisode(group, generation)
          const scope = yield* Scope.make()
          yield* FiberRef.set(FiberRef.currentContext, Context.add(outer, Scope.Scope, scope))
          inEpisodeContext = true
          const exit = yield* Effect.exit(restore(body))
          const closed = yield* Effect.exit(Scope.close(scope, Exit.isSuccess(exit) ? Exit.void : exit))
          if (Exit.isSuccess(exit) && Exit.isSuccess(closed)) group.episodes[generation] = exit.value
          else {
            const { cause, reason } = unscoreableOf(exit, closed)
            if (reason === undefined) {
              yield* restoreContext
              return yield* Effect.failCause(cause)
            }
            group.episodes[generation] = progress.finish(reason)
          }
          if (++group.done === groupSize) {
            yield* restoreContext
            inEpisodeContext = false
            yield* groupSlots.release(1)
            yield* restore(out.offer({ promptIndex: group.promptIndex, row: group.row, episodes: group.episodes }))
          }
        }
      })
    )
    yield* Effect.forEach(Array.from({ length: workers }, () => worker), (w) => w, {
      concurrency: "unbounded",
      discard: true
    }).pipe(
      Effect.exit,
      Effect.flatMap((exit) => Effect.sync(() => out.end(exit))),
      Effect.forkScoped
    )
    const stream = Stream.repeatEffectOption(out.take)
    return options.abort === undefined ? stream : Stream.interruptWhenDeferred(stream, options.abort)
  }))
