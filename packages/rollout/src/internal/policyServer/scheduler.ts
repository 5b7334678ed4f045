// The policy server's one queue: generation requests and weight updates in arrival order, served by a single loop.
// Window batching: the loop takes a batch of requests (up to the batch size, waiting `window` after the first), runs it
// on the backend, and only then looks at the next item. Continuous batching (a backend with a `decoder`): the loop
// keeps one running batch; before every decode step it admits queued requests into free slots, and a sequence that
// finishes is answered at once (one that leaves unfinished is handed to the decoder's `end`). Either way, once a weight
// update is next in the queue nothing more is admitted: it runs when the running sequences have finished, after the
// requests queued before it and before those queued after it, so every completion is produced by exactly one policy
// version. With a decoder that shows its progress, a request may be watched: after every decode step its watcher sees
// the tokens so far (streaming, stop strings), synchronously, from inside the loop.
import type { Scope } from "effect"
import { Deferred, Duration, Effect, Exit, FiberId, Option, Queue } from "effect"
import type {
  Backend,
  BackendCompletion,
  BackendError,
  BackendRequest,
  Decoder,
  WeightSource
} from "../../PolicyServer.js"
import type { Metrics } from "./metrics.js"

const YIELD_MS = 2

// A macrotask turn: setImmediate runs after the event loop's I/O phase.
const yieldToIo = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

export interface Generated {
  readonly completion: BackendCompletion
  readonly policyVersion: number
}

/** A running sequence after a decode step that did not finish it: everything it has sampled so far. */
export interface Progress {
  readonly tokenIds: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly policyVersion: number
}

/**
 * Called after every decode step that ran the sequence without finishing it. "stop": the sequence ends here (a stop
 * string showed up) and is answered with the tokens so far, finish reason "stop"; "cancel": it leaves the batch
 * unanswered (its client went away). A watcher must not throw; one that does cancels its sequence.
 */
export type Watch = (progress: Progress) => "stop" | "cancel" | undefined

interface GenerateItem {
  readonly _tag: "Generate"
  readonly request: BackendRequest
  readonly done: Deferred.Deferred<Generated, BackendError>
  readonly watch: Watch | undefined
  cancelled: boolean
}

interface Running {
  readonly item: GenerateItem
  readonly sequence: unknown
}

type Item =
  | GenerateItem
  | {
    readonly _tag: "Update"
    readonly source: WeightSource
    readonly done: Deferred.Deferred<number, BackendError>
  }

export interface Scheduler {
  /** `watches[i]` (optional) watches request i; only called when {@link Scheduler.watchable}. */
  readonly generate: (
    requests: ReadonlyArray<BackendRequest>,
    watches?: ReadonlyArray<Watch | undefined>
  ) => Effect.Effect<ReadonlyArray<Generated>, BackendError>
  /** Continuous batching over a decoder that shows its progress: watchers see every decode step. */
  readonly watchable: boolean
  /** Loads new weights between batches; returns the new policy version. */
  readonly update: (source: WeightSource) => Effect.Effect<number, BackendError>
  readonly version: () => number
  /** Requests queued and not yet running. */
  readonly waiting: () => number
}

export const make = (
  backend: Backend,
  options: { readonly maxBatchSize: number; readonly continuous: boolean; readonly window: Duration.Duration },
  metrics: Metrics
): Effect.Effect<Scheduler, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Item>(), Queue.shutdown)
    let version = 0
    let waiting = 0
    // An update polled while gathering a batch, handled right after that batch.
    let held: Option.Option<Item> = Option.none()

    const runBatch = (batch: ReadonlyArray<GenerateItem>) =>
      Effect.gen(function*() {
        const live = batch.filter((item) => !item.cancelled)
        waiting -= batch.length
        metrics.waiting(waiting)
        if (live.length === 0) return
        metrics.batch(live.length)
        metrics.running(live.length)
        const v = version
        const exit = yield* Effect.exit(backend.generate(live.map((item) => item.request)))
        metrics.running(0)
        if (exit._tag === "Success" && exit.value.length !== live.length) {
          const message = `the backend returned ${exit.value.length} completions for ${live.length} requests`
          yield* Effect.forEach(live, (item) => Deferred.die(item.done, new Error(message)), { discard: true })
          return
        }
        yield* Effect.forEach(
          live,
          (item, i) =>
            Deferred.complete(
              item.done,
              exit._tag === "Success"
                ? Effect.succeed({ completion: exit.value[i], policyVersion: v })
                : Effect.failCause(exit.cause)
            ),
          { discard: true }
        )
      })

    const runUpdate = (item: Extract<Item, { _tag: "Update" }>) =>
      Effect.gen(function*() {
        const exit = yield* Effect.exit(backend.loadWeights(item.source))
        if (exit._tag === "Success") {
          // A store's version is the trainer's count; the server's own count otherwise.
          version = item.source._tag === "Safetensors" && item.source.policyVersion !== undefined
            ? item.source.policyVersion
            : version + 1
          metrics.version(version)
        }
        yield* Deferred.complete(
          item.done,
          exit._tag === "Success" ? Effect.succeed(version) : Effect.failCause(exit.cause)
        )
      })

    const next = Effect.suspend(() => {
      if (Option.isSome(held)) {
        const item = held.value
        held = Option.none()
        return Effect.succeed(item)
      }
      return Queue.take(queue)
    })

    // Adds queued requests to `into` until it holds `room`; an update polled stops it and is held for later.
    const gather = (into: Array<GenerateItem>, room: number) =>
      Effect.gen(function*() {
        while (into.length < room) {
          const more = yield* Queue.poll(queue)
          if (Option.isNone(more)) break
          if (more.value._tag === "Update") {
            held = more
            break
          }
          into.push(more.value)
        }
      })

    // An idle loop's next turn: a weight update next in line runs now (none); otherwise the requests' first batch,
    // gathered up to the batch size after waiting `window` for more to arrive.
    const firstBatch = Effect.gen(function*() {
      const first = yield* next
      if (first._tag === "Update") {
        yield* runUpdate(first)
        return Option.none<Array<GenerateItem>>()
      }
      const batch = [first]
      if (Duration.greaterThan(options.window, Duration.zero) && options.maxBatchSize > 1) {
        yield* Effect.sleep(options.window)
      }
      yield* gather(batch, options.maxBatchSize)
      return Option.some(batch)
    })

    const windowLoop = Effect.gen(function*() {
      const batch = yield* firstBatch
      if (Option.isSome(batch)) yield* runBatch(batch.value)
    })

    // One iteration serves an idle server's next item; for requests it then decodes until the batch is empty, in a
    // plain loop: the per-step work outside the decoder is a few synchronous calls (no fiber hop, no allocation
    // beyond the step's arrays), which matters at low occupancy, where a tiny model's step is well under a
    // millisecond.
    const continuousLoop = (decoder: Decoder) => {
      let running: Array<Running> = []
      const progress = decoder.progress
      // A sequence that leaves the batch unfinished gives back what the backend holds for it (a GPU slot). An `end`
      // that throws must not stop the loop (the sequence is already gone from the batch, nothing to answer), but what
      // it held may be lost: the failure is kept and logged from the loop (`reportEndFailures`).
      const endFailures: Array<string> = []
      const leave = (r: Running) => {
        try {
          decoder.end?.(r.sequence)
        } catch (e) {
          endFailures.push(e instanceof Error ? e.message : String(e))
        }
      }
      const reportEndFailures = Effect.suspend(() => {
        if (endFailures.length === 0) return Effect.void
        const failures = endFailures.splice(0)
        metrics.endFailures(failures.length)
        return Effect.logWarning(
          `policy server: the decoder's end failed for ${failures.length} sequence(s) leaving the batch (what the ` +
            `backend held for them may not be freed): ${failures.join("; ")}`
        )
      })
      const watch = (r: Running, policyVersion: number): "stop" | "cancel" | undefined => {
        if (r.item.watch === undefined || progress === undefined) return undefined
        try {
          const p = progress(r.sequence)
          return r.item.watch({ tokenIds: p.tokenIds, logprobs: p.logprobs, policyVersion })
        } catch {
          return "cancel"
        }
      }
      let lastYield = 0
      const admit = (items: ReadonlyArray<GenerateItem>) =>
        Effect.gen(function*() {
          waiting -= items.length
          metrics.waiting(waiting)
          const live = items.filter((item) => !item.cancelled)
          if (live.length > 0) metrics.batch(live.length)
          for (const item of live) {
            const exit = yield* Effect.exit(decoder.start(item.request))
            if (exit._tag === "Success") running.push({ item, sequence: exit.value })
            else Deferred.unsafeDone(item.done, Exit.failCause(exit.cause))
          }
        })
      const answer = (r: Running, completion: BackendCompletion, policyVersion: number) =>
        Deferred.unsafeDone(r.item.done, Exit.succeed({ completion, policyVersion }))
      // After a decode step of `now`: answers the finished, asks the watchers, keeps the rest running.
      const settle = (now: ReadonlyArray<Running>, results: ReadonlyArray<BackendCompletion | undefined>) => {
        const v = version
        const next: Array<Running> = []
        for (let i = 0; i < now.length; i++) {
          const completion = results[i]
          const r = now[i]
          if (completion !== undefined) {
            answer(r, completion, v)
            continue
          }
          const said = watch(r, v)
          if (said === undefined) next.push(r)
          else if (said === "cancel") {
            leave(r)
            r.item.cancelled = true
            Deferred.unsafeDone(r.item.done, Exit.interrupt(FiberId.none))
          } else {
            // Only a watcher stops a sequence, so `progress` is there.
            const p = progress!(r.sequence)
            leave(r)
            answer(r, { tokenIds: p.tokenIds.slice(), logprobs: p.logprobs.slice(), finishReason: "stop" }, v)
          }
        }
        running = next
      }
      const fail = (now: ReadonlyArray<Running>, exit: Exit.Exit<ReadonlyArray<unknown>, BackendError>) => {
        running = []
        now.forEach(leave)
        const message = exit._tag === "Success"
          ? `the backend returned ${exit.value.length} results for ${now.length} sequences`
          : ""
        for (const r of now) {
          Deferred.unsafeDone(
            r.item.done,
            exit._tag === "Failure" ? Exit.failCause(exit.cause) : Exit.die(new Error(message))
          )
        }
      }
      return Effect.gen(function*() {
        const group = yield* firstBatch
        if (Option.isNone(group)) return
        yield* admit(group.value)
        while (true) {
          // A sequence whose client went away leaves the batch (its cache with it).
          if (running.some((r) => r.item.cancelled)) {
            for (const r of running) if (r.item.cancelled) leave(r)
            running = running.filter((r) => !r.item.cancelled)
          }
          yield* reportEndFailures
          metrics.running(running.length)
          if (running.length === 0) return
          metrics.step(running.length)
          const now = running
          const exit = yield* Effect.exit(decoder.step(now.map((r) => r.sequence)))
          if (exit._tag === "Failure" || exit.value.length !== now.length) fail(now, exit)
          else settle(now, exit.value)
          // Before the loop yields, so the warning precedes the answers of this step.
          yield* reportEndFailures
          metrics.running(running.length)
          // Lets the event loop read new requests (and hang-ups) before the next step; at most every YIELD_MS, as a
          // tiny model's steps are shorter than the turn itself.
          const t = performance.now()
          if (t - lastYield >= YIELD_MS) {
            lastYield = t
            yield* yieldToIo
          }
          // Requests queued meanwhile join between steps (unless a weight update is next).
          if (waiting > 0 && Option.isNone(held) && running.length < options.maxBatchSize) {
            const more: Array<GenerateItem> = []
            yield* gather(more, options.maxBatchSize - running.length)
            if (more.length > 0) yield* admit(more)
          }
        }
      })
    }

    const loop = (options.continuous && backend.decoder !== undefined
      ? continuousLoop(backend.decoder)
      : windowLoop).pipe(Effect.forever)
    yield* Effect.forkScoped(loop)

    const watchable = options.continuous && backend.decoder?.progress !== undefined
    const generate = (requests: ReadonlyArray<BackendRequest>, watches?: ReadonlyArray<Watch | undefined>) =>
      Effect.gen(function*() {
        const items = yield* Effect.forEach(requests, (request, i) =>
          Effect.map(Deferred.make<Generated, BackendError>(), (done): GenerateItem => ({
            _tag: "Generate",
            request,
            done,
            watch: watchable ? watches?.[i] : undefined,
            cancelled: false
          })))
        waiting += items.length
        metrics.waiting(waiting)
        yield* Queue.offerAll(queue, items)
        return yield* Effect.forEach(items, (item) =>
          Deferred.await(item.done)).pipe(
            Effect.onInterrupt(() =>
              Effect.sync(() => items.forEach((item) => item.cancelled = true))
            )
          )
      })

    const update = (source: WeightSource) =>
      Effect.gen(function*() {
        const done = yield* Deferred.make<number, BackendError>()
        yield* Queue.offer(queue, { _tag: "Update", source, done })
        return yield* Deferred.await(done)
      })

    return { generate, watchable, update, version: () => version, waiting: () => waiting }
  })
