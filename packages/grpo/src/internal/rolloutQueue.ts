/**
 * Async GRPO (TRL's `AsyncGRPOTrainer`, reference §5): a producer fiber rolls out and prepares generation batches
 * ahead of the optimizer and queues them; the trainer's step takes them. Each batch is tagged with the policy
 * version (optimizer steps applied) that generated it: a completion's own `policyVersion` (a policy server's) or the
 * trainer's step count when the request was issued. Taking a batch, the trainer measures its staleness (its version
 * now minus the batch's oldest sample's): over `maxStaleness` it is dropped and counted, never trained on; a stale
 * batch trains with the sampler's (behavior) logprobs as its old logprobs, so the clipped ratio against them is the
 * importance-sampling correction (as TRL's async loss; the separate sampler correction drops out).
 *
 * The producer may hold `Config.asyncBatchesInFlight` batches started and not yet trained on; a batch's slot is
 * released when the optimizer step that trained its last micro-batch (or its drop) is done. With maxStaleness 0 the
 * default allows one step's batches, so each is generated after the previous update, at the version it trains at:
 * the run equals synchronous GRPO exactly (same seeds: batch `g` is seeded by the step and micro-batch at which the
 * synchronous trainer would have generated it).
 *
 * In-process, generation and training share the model: its calls take a lock, so they interleave call by call
 * (an update never runs inside a generate call); a model whose generation is remote (`remoteGeneration`, policy
 * servers) generates without it. A checkpoint holds the data position after the last batch taken
 * and that batch's untrained micro-batches; queued and in-flight batches are discarded and regenerated on resume.
 */
import type { Completion, GenerateRequest } from "@envtrain/rollout/Policy"
import { type Cause, Effect, Queue } from "effect"
import * as Config from "../Config.js"
import type { Position } from "../Dataset.js"
import type { GenerationResult, MicroBatch, TrainRow } from "./generation.js"
import type { TrainableModel } from "./model.js"

/** What the trainer is told as batches move through the queue (tests, custom logging). */
export type QueueEvent =
  | {
    readonly _tag: "Produced"
    readonly batch: number
    readonly policyVersion: number
    readonly episodes: number
  }
  | {
    readonly _tag: "Dropped" | "Taken"
    readonly batch: number
    readonly policyVersion: number
    /** The trainer's version when the batch was taken. */
    readonly version: number
    readonly staleness: number
    readonly episodes: number
  }

/** Where the queue stands in a checkpoint: the next batch index (its seeds) and the drops so far. */
export interface QueueState {
  readonly nextBatch: number
  readonly droppedBatches: number
  readonly droppedSamples: number
}

/** The step and micro-batch at which the synchronous trainer generates batch `g` (seeds, shuffle, trainer state). */
export interface Slot {
  readonly step: number
  readonly microBatch: number
}

export interface StartOptions<E, R> {
  readonly config: Config.ResolvedGRPOConfig
  readonly model: TrainableModel
  /** Optimizer steps already applied (the resumed checkpoint's). */
  readonly version: number
  /** The data position after the last batch taken. */
  readonly position: Position
  readonly state: QueueState | undefined
  /** Micro-batches of the last batch taken still untrained (resume): that batch keeps its slot. */
  readonly pending: number
  /** The run's last step: no batch is started that the remaining steps cannot take. */
  readonly stopAt: number
  /** One generation batch at `position` with the (locked, version-tagged) model. */
  readonly produce: (
    slot: Slot,
    position: Position,
    model: TrainableModel
  ) => Effect.Effect<{ readonly result: GenerationResult; readonly next: Position }, E, R>
  readonly onEvent?: ((event: QueueEvent) => Effect.Effect<void>) | undefined
}

/** A prepared batch waiting in the queue. */
interface Produced {
  readonly _tag: "Produced"
  readonly batch: number
  readonly result: GenerationResult
  readonly next: Position
  /** The oldest version that generated any of its tokens. */
  readonly policyVersion: number
  /** Each episode's oldest version. */
  readonly versions: ReadonlyArray<number>
  /** The oldest and newest versions its old logprobs were scored at (±Infinity: not scored). */
  readonly scored: { readonly min: number; readonly max: number }
  readonly episodes: number
}

type Item<E> = Produced | { readonly _tag: "Failed"; readonly cause: Cause.Cause<E> }

/** Wall time during which generation and training were both in progress. */
const activity = () => {
  const busy = { generation: 0, training: 0 }
  let last = performance.now()
  let both = 0
  const mark = () => {
    const now = performance.now()
    if (busy.generation > 0 && busy.training > 0) both += now - last
    last = now
  }
  return {
    around: (kind: keyof typeof busy) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.suspend(() => {
        mark()
        busy[kind]++
        return effect.pipe(Effect.ensuring(Effect.sync(() => {
          mark()
          busy[kind]--
        })))
      }),
    both: () => {
      mark()
      return both
    }
  }
}

/**
 * Starts the producer in the current Scope (closing it stops the producer; its batches are discarded) and returns
 * the trainer's side of the queue.
 */
export const start = <E, R>(options: StartOptions<E, R>) =>
  Effect.gen(function*() {
    const { config, model } = options
    const perBatch = Config.asyncMicroBatchesPerBatch(config)
    const GA = config.gradientAccumulationSteps
    const slotOf = (g: number): Slot => ({ step: Math.floor(g * perBatch / GA), microBatch: (g * perBatch) % GA })
    const lock = yield* Effect.makeSemaphore(1)
    const queue = yield* Queue.unbounded<Item<E>>()
    const wake = yield* Queue.unbounded<void>()
    const slots = yield* Effect.makeSemaphore(Config.asyncBatchesInFlight(config))
    const timeline = activity()
    const emit = (event: QueueEvent) => options.onEvent === undefined ? Effect.void : options.onEvent(event)

    let version = options.version
    const state = {
      // A sync checkpoint has no queue state: its batches so far were all trained.
      nextBatch: options.state?.nextBatch ?? Math.ceil((options.version * GA + options.pending) / perBatch),
      droppedBatches: options.state?.droppedBatches ?? 0,
      droppedSamples: options.state?.droppedSamples ?? 0
    }
    // Batches taken whose slots are released after the update that trains their last micro-batch.
    const held: Array<number> = []
    if (options.pending > 0) {
      held.push(state.nextBatch - 1)
      yield* slots.take(1)
    }
    let queuedEpisodes = 0

    // Per step, for the metrics.
    let step = { staleness: [] as Array<number>, dropped: 0, waited: 0, started: performance.now(), both: 0 }
    const totals = { staleness: 0, trained: 0 }

    // The model as the producer and evaluation use it: each call under the lock (the version changes only inside
    // it, with the weights), completions tagged with the version when the request was issued unless the backend
    // reported its own.
    const locked = <A, E2, R2>(effect: Effect.Effect<A, E2, R2>) => lock.withPermits(1)(effect)
    const lockedGenerate = <A, E2, R2>(effect: Effect.Effect<A, E2, R2>) =>
      model.remoteGeneration === true ? effect : locked(effect)
    let tracker = new Map<number, number>()
    let issuedMin = Infinity
    const tag =
      (requests: Parameters<TrainableModel["generate"]>[0], issued: number) =>
      (completions: ReadonlyArray<Completion>) =>
        completions.map((c, i): Completion => {
          const v = c.policyVersion ?? issued
          issuedMin = Math.min(issuedMin, v)
          const seed = requests[i].sampling.seed
          // An episode's turns share its sampling seed: the episode's version is its oldest turn's.
          if (seed !== undefined) tracker.set(seed, Math.min(tracker.get(seed) ?? v, v))
          return c.policyVersion === undefined ? { ...c, policyVersion: v } : c
        })
    // A step-wise decoder would bypass the model lock: not carried over.
    const { decoder: _unlocked, ...unlocked } = model
    const shared: TrainableModel = {
      ...unlocked,
      generate: (requests) => lockedGenerate(model.generate(requests)),
      score: (batch, temperature) => locked(model.score(batch, temperature))
    }
    // The versions the batch's old logprobs were scored at (none: not scored).
    let scored = { min: Infinity, max: -Infinity }
    const generateEach = model.generateEach
    const producerModel: TrainableModel = {
      ...shared,
      generate: (requests) =>
        lockedGenerate(Effect.suspend(() => Effect.map(model.generate(requests), tag(requests, version)))),
      // A model that serves each request on its own (policy servers): its completions are tagged the same way.
      ...(generateEach === undefined ? {} : {
        generateEach: (request: GenerateRequest) =>
          lockedGenerate(
            Effect.suspend(() => Effect.map(generateEach(request), (c) => tag([request], version)([c])[0]))
          )
      }),
      score: (batch, temperature) =>
        lock.withPermits(1)(Effect.suspend(() => {
          scored = { min: Math.min(scored.min, version), max: Math.max(scored.max, version) }
          return model.score(batch, temperature)
        }))
    }

    // The producer: one batch at a time, while a slot is free and the remaining steps can take it.
    const produceOne = (g: number, position: Position) =>
      Effect.gen(function*() {
        tracker = new Map()
        issuedMin = Infinity
        scored = { min: Infinity, max: -Infinity }
        const startedAt = version
        const out = yield* timeline.around("generation")(options.produce(slotOf(g), position, producerModel))
        const episodes = config.generationBatchSize
        const item: Produced = {
          _tag: "Produced",
          batch: g,
          result: out.result,
          next: out.next,
          // Nothing generated (every episode lost before its first turn): the version when the batch started.
          policyVersion: Number.isFinite(issuedMin) ? issuedMin : startedAt,
          versions: [...tracker.values()],
          scored: { ...scored },
          episodes
        }
        yield* emit({ _tag: "Produced", batch: g, policyVersion: item.policyVersion, episodes })
        queuedEpisodes += episodes
        yield* Queue.offer(queue, item)
        return out.next
      })
    const producer = Effect.gen(function*() {
      let g = state.nextBatch
      let position = options.position
      while (true) {
        while ((g - state.droppedBatches) * perBatch >= options.stopAt * GA) yield* Queue.take(wake)
        yield* slots.take(1)
        position = yield* produceOne(g, position)
        g++
      }
    }).pipe(Effect.catchAllCause((cause) => Queue.offer(queue, { _tag: "Failed", cause })))
    yield* Effect.forkScoped(producer)

    /** The next batch for the trainer at the current version; stale ones are dropped on the way. */
    const take = Effect.gen(function*() {
      while (true) {
        const waitStarted = performance.now()
        const item = yield* Queue.take(queue)
        step.waited += performance.now() - waitStarted
        if (item._tag === "Failed") return yield* Effect.failCause(item.cause)
        queuedEpisodes -= item.episodes
        state.nextBatch = item.batch + 1
        const staleness = version - item.policyVersion
        const event = {
          batch: item.batch,
          policyVersion: item.policyVersion,
          version,
          staleness,
          episodes: item.episodes
        }
        if (staleness > config.maxStaleness) {
          state.droppedBatches++
          state.droppedSamples += item.episodes
          step.dropped += item.episodes
          yield* slots.release(1)
          yield* Queue.offer(wake, undefined)
          yield* emit({ _tag: "Dropped", ...event })
          continue
        }
        held.push(item.batch)
        for (const v of item.versions) step.staleness.push(version - v)
        yield* emit({ _tag: "Taken", ...event })
        // Fresh: generated and scored at this version, so it trains exactly as the synchronous trainer's batch.
        const fresh = staleness === 0 && (item.scored.min === Infinity || item.scored.max === version) &&
          item.scored.min >= version
        return { result: fresh ? item.result : behaviorAsOld(item.result), next: item.next }
      }
    })

    return {
      /** The model for evaluation: its calls take the lock too. */
      model: shared,
      take,
      /**
       * Runs the update (micro-batches and the optimizer step) under the model lock, as training time; the weights
       * are then version `globalStep`.
       */
      training: <A, E2, R2>(update: Effect.Effect<A, E2, R2>, globalStep: number) =>
        locked(
          timeline.around("training")(update).pipe(Effect.tap(() => {
            version = globalStep
          }))
        ),
      /**
       * After the update: the slots of batches fully trained are released (all taken this step but the last when
       * it still has micro-batches pending). Returns the step's metrics.
       */
      stepped: (pendingLeft: boolean) =>
        Effect.gen(function*() {
          const done = pendingLeft ? held.splice(0, held.length - 1) : held.splice(0)
          if (done.length > 0) yield* slots.release(done.length)
          const now = performance.now()
          const both = timeline.both()
          const s = step.staleness
          for (const v of s) totals.staleness += v
          totals.trained += s.length
          const metrics: Record<string, number> = {
            "async/dropped_samples": step.dropped,
            "async/dropped_samples_total": state.droppedSamples,
            buffer_qsize: queuedEpisodes,
            queue_wait_time_s: step.waited / 1000,
            "async/overlap": Math.min(1, (both - step.both) / Math.max(1e-9, now - step.started))
          }
          if (s.length > 0) {
            metrics["async/staleness/mean"] = s.reduce((a, b) => a + b, 0) / s.length
            metrics["async/staleness/max"] = Math.max(...s)
          }
          step = { staleness: [], dropped: 0, waited: 0, started: now, both }
          return metrics
        }),
      state: (): QueueState => ({ ...state }),
      note: () =>
        `; async: ${state.droppedSamples} samples dropped as staler than ${config.maxStaleness}, mean staleness ` +
        `${(totals.trained === 0 ? 0 : totals.staleness / totals.trained).toFixed(2)}`
    }
  })

/** The trainer's side of a started queue (what {@link start} returns). */
export type Handle<E, R> = Effect.Effect.Success<ReturnType<typeof start<E, R>>>

/**
 * A stale batch: its old logprobs are the sampler's (behavior) logprobs, so the clipped ratio π/π_behavior is the
 * importance-sampling correction; the sampler correction against the trainer's logprobs at generation is dropped.
 */
export const behaviorAsOld = (result: GenerationResult): GenerationResult => ({
  ...result,
  microBatches: result.microBatches.map((m): MicroBatch => ({
    rows: m.rows.map((r): TrainRow => {
      const { old: _old, ratio: _ratio, ...rest } = r
      return { ...rest, old: r.sampler }
    }),
    numItemsInBatch: m.numItemsInBatch
  }))
})
