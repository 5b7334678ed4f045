/**
 * Batched generation on the GPU with a KV cache and continuous batching.
 *
 * A `Generator` owns a Qwen3 model's generation slots. `generate(request)` enqueues the request and waits; one
 * loop fiber admits waiting requests into free slots (writing their sampling settings, running their prompts
 * through the prefill program into the cache), then encodes several decode steps per submit — each step runs
 * every slot through the model, samples on the GPU (`Sampling`: temperature, top-k, top-p, min-p, repetition
 * penalty, Philox4x32-10 uniforms keyed by (seed, sequence, step), as `Qwen3Reference.generate`) and feeds the
 * sampled token to the next step without a CPU round trip. Only the sampled tokens and their logprobs are read
 * back, once per submit (and, for requests that ask for `topLogprobs`, the k most likely tokens of each step with
 * their logprobs, selected on the device); a slot whose sequence ended (stop token or max tokens) is refilled by
 * the next waiting request before the next submit.
 *
 * `makeStepwise` drives the same slots from outside, one submit per `step` (the policy server's continuous
 * batching): the caller decides which sequences start, step, pause and end between submits.
 *
 * @example
 * ```ts
 * const model = yield* Qwen3.make(ckpt, { batch: 1, seq: 8, trainable: false, generation: { slots: 8, capacity: 512 } })
 * const generator = yield* Generation.make(model)
 * const out = yield* generator.generate({ prompt: [1, 2, 3], maxNewTokens: 32, temperature: 0.7, seed: 1 })
 * out.tokens // sampled ids; out.logprobs: log_softmax(logits / T)[token]
 * ```
 *
 * @since 0.0.0
 */
import { Context, Data, Deferred, Effect, Layer, Queue } from "effect"
import type { Scope } from "effect"
import { Gpu } from "../runtime/Gpu.js"
import type { GpuDeviceLost, GpuUncapturedError } from "../runtime/GpuError.js"
import * as Slots from "./internal/generationSlots.js"
import { NO_SLOT } from "./internal/qwen3Kernels.js"
import type { Qwen3Model } from "./Qwen3.js"
import type * as Sampling from "./Sampling.js"

/** One generation request. */
export interface GenerateRequest extends Sampling.SamplingOptions {
  readonly prompt: ReadonlyArray<number>
  readonly maxNewTokens: number
  /** Generation ends after any of these (included in the output); at most 8. */
  readonly stopTokens?: ReadonlyArray<number>
  readonly seed?: number
  /** Which sequence of the seed's stream (Philox counter word 1); default 0. */
  readonly sequence?: number
  /**
   * The k most likely tokens to report per sampled token (0…20, default 0): log_softmax(logits / T) (T = 1 when
   * greedy) of the raw logits, before the penalty and the filters, most likely first (ties: lower id first).
   */
  readonly topLogprobs?: number
}

/** One of the most likely tokens at a step. */
export interface TopLogprob {
  readonly id: number
  readonly logprob: number
}

/** One generated sequence: its tokens and their sampling logprobs. */
export interface GenerateResult {
  readonly tokens: ReadonlyArray<number>
  /** log_softmax(logits / T)[token] (T = 1 when greedy): what the trainer recomputes. */
  readonly logprobs: ReadonlyArray<number>
  /** Logprob under the processed distribution actually sampled from (0 when greedy). */
  readonly sampledLogprobs: ReadonlyArray<number>
  /** Per token, its request's `topLogprobs` most likely tokens (absent when it asked for none). */
  readonly topLogprobs?: ReadonlyArray<ReadonlyArray<TopLogprob>>
  readonly finishReason: "stop" | "length"
}

/** A request the generator cannot serve as given. */
export class GenerationError extends Data.TaggedError("GenerationError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** The generator's operations (the shape of the `Generator` service). */
export interface GeneratorService {
  readonly generate: (
    request: GenerateRequest
  ) => Effect.Effect<GenerateResult, GenerationError | GpuDeviceLost | GpuUncapturedError>
  /** Decode steps run and tokens produced so far (for throughput reports). */
  readonly stats: () => { readonly submits: number; readonly steps: number; readonly tokens: number }
}

/** The generator of a model (see {@link make}). */
export class Generator extends Context.Tag("@envtrain/gpu/Generator")<Generator, GeneratorService>() {
  static layer(model: Qwen3Model): Layer.Layer<Generator, GenerationError, Gpu> {
    return Layer.scoped(Generator, make(model))
  }
}

interface Pending {
  readonly request: GenerateRequest
  readonly done: Deferred.Deferred<GenerateResult, GenerationError | GpuDeviceLost | GpuUncapturedError>
}

interface Active extends Pending {
  readonly tokens: Array<number>
  readonly logprobs: Array<number>
  readonly sampledLogprobs: Array<number>
  readonly top: Array<ReadonlyArray<TopLogprob>>
  readonly stops: ReadonlySet<number>
}

const topOf = (r: GenerateRequest) => r.topLogprobs ?? 0

// A finished sequence's result (its top logprobs only when it asked for them).
const resultOf = (
  r: GenerateRequest,
  a: {
    readonly tokens: ReadonlyArray<number>
    readonly logprobs: ReadonlyArray<number>
    readonly sampledLogprobs: ReadonlyArray<number>
    readonly top: ReadonlyArray<ReadonlyArray<TopLogprob>>
  },
  finishReason: "stop" | "length"
): GenerateResult => ({
  tokens: a.tokens,
  logprobs: a.logprobs,
  sampledLogprobs: a.sampledLogprobs,
  ...(topOf(r) > 0 ? { topLogprobs: a.top } : {}),
  finishReason
})

// The model's slots, or why it has none.
const slotsFor = (model: Qwen3Model) =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const gen = model.gen
    const programs = model.programs
    if (gen === undefined || programs === undefined) {
      return yield* new GenerationError({
        problem: "The model was made without `generation` options; pass { generation: { slots, capacity } }."
      })
    }
    return yield* Slots.make(gpu, model, gen, programs)
  })

/** Starts the batching loop for a model made with `generation`; it stops when the scope closes. */
export const make = (model: Qwen3Model): Effect.Effect<GeneratorService, GenerationError, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const slotsOf = yield* slotsFor(model)
    const { K, S } = slotsOf
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Pending>(), Queue.shutdown)
    const slots: Array<Active | undefined> = Array.from({ length: S }, () => undefined)
    const counters = slotsOf.counters

    /** Writes the slot's state and queues its prompt (all but the last token) for the cache. */
    const admit = (slot: number, p: Pending, prefill: Array<Slots.PrefillRow>) => {
      const r = p.request
      slotsOf.admit(slot, r, prefill, true)
      slots[slot] = {
        ...p,
        tokens: [],
        logprobs: [],
        sampledLogprobs: [],
        top: [],
        stops: new Set(r.stopTokens ?? [])
      }
    }

    const finish = (slot: number, reason: "stop" | "length") =>
      Effect.gen(function*() {
        const a = slots[slot]!
        slots[slot] = undefined
        yield* Deferred.succeed(a.done, resultOf(a.request, a, reason))
      })

    const decode = Effect.gen(function*() {
      const sampled = yield* slotsOf.decode(K, slots.some((a) => a !== undefined && topOf(a.request) > 0))
      const { logprobs: lps, tokens: toks } = sampled
      for (let s = 0; s < S; s++) {
        const a = slots[s]
        if (a === undefined) continue
        for (let k = 0; k < K; k++) {
          const t = toks[s * K + k]
          if (t === NO_SLOT) continue
          a.tokens.push(t)
          a.logprobs.push(lps[(s * K + k) * 2])
          a.sampledLogprobs.push(lps[(s * K + k) * 2 + 1])
          if (topOf(a.request) > 0) a.top.push(Slots.topAt(sampled, K, s, k, topOf(a.request)))
          counters.tokens++
          // The same rule the sampler applies on the device.
          if (a.stops.has(t)) {
            yield* finish(s, "stop")
            break
          }
          if (a.tokens.length >= a.request.maxNewTokens) {
            yield* finish(s, "length")
            break
          }
        }
      }
    })

    const failAll = (e: GpuDeviceLost | GpuUncapturedError) =>
      Effect.forEach(slots.map((a, i) => [a, i] as const), ([a, i]) => {
        if (a === undefined) return Effect.void
        slots[i] = undefined
        return Deferred.fail(a.done, e)
      }, { discard: true })

    const loop = Effect.gen(function*() {
      const free = slots.flatMap((a, i) => (a === undefined ? [i] : []))
      const prefill: Array<Slots.PrefillRow> = []
      // Idle: block until work arrives.
      if (free.length === S) admit(free.shift()!, yield* Queue.take(queue), prefill)
      for (const slot of free) {
        const next = yield* Queue.poll(queue)
        if (next._tag === "None") break
        admit(slot, next.value, prefill)
      }
      slotsOf.runPrefill(prefill)
      yield* decode.pipe(Effect.catchAll(failAll))
    })
    yield* Effect.forkScoped(Effect.forever(loop))

    const generate = Effect.fn("Generator.generate")(function*(request: GenerateRequest) {
      const problem = slotsOf.validate(request)
      if (problem !== undefined) return yield* new GenerationError({ problem })
      const done = yield* Deferred.make<GenerateResult, GenerationError | GpuDeviceLost | GpuUncapturedError>()
      yield* Queue.offer(queue, { request, done })
      return yield* Deferred.await(done)
    })
    return { generate, stats: () => ({ ...counters }) } satisfies GeneratorService
  })

/** A sequence of a {@link StepwiseGenerator}: what it has sampled so far (read between steps). */
export interface Sequence {
  readonly tokens: ReadonlyArray<number>
  /** log_softmax(logits / T)[token] (T = 1 when greedy). */
  readonly logprobs: ReadonlyArray<number>
  /** Logprob under the processed distribution sampled from (0 when greedy). */
  readonly sampledLogprobs: ReadonlyArray<number>
}

/** Options of {@link makeStepwise}. */
export interface StepwiseOptions {
  /** Decode steps per `step` (one submit); 1 to the model's `stepsPerSubmit` (the default). */
  readonly stepsPerStep?: number
}

/**
 * The generation slots driven from outside, a step at a time (continuous batching by a caller, such as the policy
 * server): `start` gives a request a free slot, `step` runs one submit of decode steps for the given sequences (a
 * sequence's first step also runs its prompt into the cache) and answers each that finished inside it (its slot is
 * then free), `end` frees the slot of a sequence that will not be stepped again. A sequence left out of a step is
 * paused (its sampler off, its cache, position and Philox step kept) and goes on where it stopped when stepped
 * again, so its tokens are those of `generate` for its request, whichever sequences share its steps. The device
 * ends a sequence at its stop token or max tokens inside a submit; the steps left of that submit sample nothing
 * for it. Not to be used together with a `make` generator over the same model (they would share the slots).
 */
export interface StepwiseGenerator {
  /** Sequences that can run at once. */
  readonly slots: number
  /** Decode steps per `step`. */
  readonly stepsPerStep: number
  /** Fails when the request cannot be served as given or no slot is free. */
  readonly start: (request: GenerateRequest) => Effect.Effect<Sequence, GenerationError>
  /** Per sequence: its result when it finished during this step, else undefined. */
  readonly step: (
    sequences: ReadonlyArray<Sequence>
  ) => Effect.Effect<ReadonlyArray<GenerateResult | undefined>, GenerationError | GpuDeviceLost | GpuUncapturedError>
  /** Frees the slot of a running sequence (no-op for one that finished or ended). */
  readonly end: (sequence: Sequence) => void
  readonly stats: () => { readonly submits: number; readonly steps: number; readonly tokens: number }
}

class Stepped implements Sequence {
  readonly tokens: Array<number> = []
  readonly logprobs: Array<number> = []
  readonly sampledLogprobs: Array<number> = []
  readonly top: Array<ReadonlyArray<TopLogprob>> = []
  readonly stops: ReadonlySet<number>
  /** Whether the slot's sampler is on (as last written, or as the device left it when the sequence ended). */
  sampling = false
  constructor(readonly slot: number, readonly request: GenerateRequest) {
    this.stops = new Set(request.stopTokens ?? [])
  }
}

/** Drives a model's generation slots step by step (see {@link StepwiseGenerator}); made with `generation`. */
export const makeStepwise = (
  model: Qwen3Model,
  options: StepwiseOptions = {}
): Effect.Effect<StepwiseGenerator, GenerationError, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const slotsOf = yield* slotsFor(model)
    const { K, S } = slotsOf
    const steps = options.stepsPerStep ?? K
    if (!Number.isInteger(steps) || steps < 1 || steps > K) {
      return yield* new GenerationError({ problem: `stepsPerStep must be an integer in [1, ${K}] (got ${steps}).` })
    }
    const slots: Array<Stepped | undefined> = Array.from({ length: S }, () => undefined)
    // Prompt rows of started sequences, run at the next step.
    let prefill: Array<Slots.PrefillRow> = []

    const free = (r: Stepped) => {
      slots[r.slot] = undefined
      prefill = prefill.filter((row) => row[2] !== r.slot)
    }

    const start = (request: GenerateRequest) =>
      Effect.suspend(() => {
        const problem = slotsOf.validate(request)
        if (problem !== undefined) return Effect.fail(new GenerationError({ problem }))
        const slot = slots.indexOf(undefined)
        if (slot < 0) return Effect.fail(new GenerationError({ problem: `All ${S} generation slots are taken.` }))
        const r = new Stepped(slot, request)
        slotsOf.admit(slot, request, prefill, false)
        slots[slot] = r
        return Effect.succeed<Sequence>(r)
      })

    const end = (sequence: Sequence) => {
      const r = sequence as Stepped
      if (slots[r.slot] !== r) return
      if (r.sampling) slotsOf.setActive(r.slot, false)
      free(r)
    }

    // Step 1: every sequence given is running here.
    const running = (sequences: ReadonlyArray<Sequence>) =>
      Effect.suspend(() => {
        const rs = sequences as ReadonlyArray<Stepped>
        const bad = rs.findIndex((r) => !(r instanceof Stepped) || slots[r.slot] !== r)
        if (bad >= 0) {
          return Effect.fail(new GenerationError({ problem: `Sequence ${bad} of the step is not running.` }))
        }
        return Effect.succeed(rs)
      })

    // Step 2: the samplers of exactly the stepped sequences on (writes only the changes).
    const pauseAndResume = (rs: ReadonlyArray<Stepped>) => {
      const stepped = new Set(rs)
      for (const r of slots) {
        if (r === undefined || r.sampling === stepped.has(r)) continue
        r.sampling = !r.sampling
        slotsOf.setActive(r.slot, r.sampling)
      }
    }

    // Step 4: appends each sequence's tokens of this submit; the device's stop rule ends it (and its sampler).
    const collect = (rs: ReadonlyArray<Stepped>, sampled: Slots.Sampled) =>
      rs.map((r): GenerateResult | undefined => {
        const base = r.slot * K
        for (let k = 0; k < steps; k++) {
          const t = sampled.tokens[base + k]
          if (t === NO_SLOT) continue
          r.tokens.push(t)
          r.logprobs.push(sampled.logprobs[(base + k) * 2])
          r.sampledLogprobs.push(sampled.logprobs[(base + k) * 2 + 1])
          if (topOf(r.request) > 0) r.top.push(Slots.topAt(sampled, K, r.slot, k, topOf(r.request)))
          slotsOf.counters.tokens++
          const reason = r.stops.has(t) ? "stop" : r.tokens.length >= r.request.maxNewTokens ? "length" : undefined
          if (reason === undefined) continue
          r.sampling = false
          free(r)
          return resultOf(r.request, r, reason)
        }
        return undefined
      })

    // A failed submit leaves the device's state unknown: every sequence ends.
    const abandon = Effect.sync(() => {
      for (const r of slots) if (r !== undefined) free(r)
    })

    const step = Effect.fn("StepwiseGenerator.step")(function*(sequences: ReadonlyArray<Sequence>) {
      const rs = yield* running(sequences)
      if (rs.length === 0) return []
      pauseAndResume(rs)
      // Step 3: the new sequences' prompts into the cache, then one submit of decode steps.
      slotsOf.runPrefill(prefill)
      prefill = []
      const sampled = yield* slotsOf.decode(steps, rs.some((r) => topOf(r.request) > 0)).pipe(
        Effect.tapError(() => abandon)
      )
      return collect(rs, sampled)
    })

    return {
      slots: S,
      stepsPerStep: steps,
      start,
      step,
      end,
      stats: () => ({ ...slotsOf.counters })
    } satisfies StepwiseGenerator
  })
