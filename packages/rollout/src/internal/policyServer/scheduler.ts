// The policy server's one queue: generation requests and weight updates in arrival order. A single loop takes a
// batch of requests (up to the batch size, waiting `window` after the first), runs it on the backend, and only then
// looks at the next item; a weight update therefore runs between batches, after the requests queued before it and
// before those queued after it, and every completion is produced by exactly one policy version.
import type { Scope } from "effect"
import { Deferred, Duration, Effect, Option, Queue } from "effect"
import type { Backend, BackendCompletion, BackendError, BackendRequest, WeightSource } from "../../PolicyServer.js"
import type { Metrics } from "./metrics.js"

export interface Generated {
  readonly completion: BackendCompletion
  readonly policyVersion: number
}

type Item =
  | {
    readonly _tag: "Generate"
    readonly request: BackendRequest
    readonly done: Deferred.Deferred<Generated, BackendError>
    cancelled: boolean
  }
  | {
    readonly _tag: "Update"
    readonly source: WeightSource
    readonly done: Deferred.Deferred<number, BackendError>
  }

export interface Scheduler {
  readonly generate: (requests: ReadonlyArray<BackendRequest>) => Effect.Effect<ReadonlyArray<Generated>, BackendError>
  /** Loads new weights between batches; returns the new policy version. */
  readonly update: (source: WeightSource) => Effect.Effect<number, BackendError>
  readonly version: () => number
  /** Requests queued and not yet running. */
  readonly waiting: () => number
}

export const make = (
  backend: Backend,
  options: { readonly maxBatchSize: number; readonly window: Duration.Duration },
  metrics: Metrics
): Effect.Effect<Scheduler, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Item>(), Queue.shutdown)
    let version = 0
    let waiting = 0
    // An update polled while gathering a batch, handled right after that batch.
    let held: Option.Option<Item> = Option.none()

    const runBatch = (batch: ReadonlyArray<Extract<Item, { _tag: "Generate" }>>) =>
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
          version += 1
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

    const loop = Effect.gen(function*() {
      const first = yield* next
      if (first._tag === "Update") return yield* runUpdate(first)
      const batch = [first]
      if (Duration.greaterThan(options.window, Duration.zero) && options.maxBatchSize > 1) {
        yield* Effect.sleep(options.window)
      }
      while (batch.length < options.maxBatchSize) {
        const more = yield* Queue.poll(queue)
        if (Option.isNone(more)) break
        if (more.value._tag === "Update") {
          held = more
          break
        }
        batch.push(more.value)
      }
      yield* runBatch(batch)
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(loop)

    const generate = (requests: ReadonlyArray<BackendRequest>) =>
      Effect.gen(function*() {
        const items = yield* Effect.forEach(requests, (request) =>
          Effect.map(Deferred.make<Generated, BackendError>(), (done) => ({
            _tag: "Generate" as const,
            request,
            done,
            cancelled: false
          })))
        waiting += items.length
        metrics.waiting(waiting)
        yield* Queue.offerAll(queue, items)
        return yield* Effect.forEach(items, (item) => Deferred.await(item.done)).pipe(
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

    return { generate, update, version: () => version, waiting: () => waiting }
  })
