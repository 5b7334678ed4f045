/**
 * Batched generation on the GPU with a KV cache and continuous batching.
 *
 * A `Generator` owns a Qwen3 model's generation slots. `generate(request)` enqueues the request and waits; one
 * loop fiber admits waiting requests into free slots (writing their sampling settings, running their prompts
 * through the prefill program into the cache), then encodes several decode steps per submit — each step runs
 * every slot through the model, samples on the GPU (`Sampling`: temperature, top-k, top-p, min-p, repetition
 * penalty, Philox4x32-10 uniforms keyed by (seed, sequence, step), as `Qwen3Reference.generate`) and feeds the
 * sampled token to the next step without a CPU round trip. Only the sampled tokens and their logprobs are read
 * back, once per submit; a slot whose sequence ended (stop token or max tokens) is refilled by the next waiting
 * request before the next submit.
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
import { GpuDeviceLost, type GpuUncapturedError } from "../runtime/GpuError.js"
import { NO_SLOT } from "./internal/qwen3Kernels.js"
import type { Qwen3Model } from "./Qwen3.js"
import * as Sampling from "./Sampling.js"

/** One generation request. */
export interface GenerateRequest extends Sampling.SamplingOptions {
  readonly prompt: ReadonlyArray<number>
  readonly maxNewTokens: number
  /** Generation ends after any of these (included in the output); at most 8. */
  readonly stopTokens?: ReadonlyArray<number>
  readonly seed?: number
  /** Which sequence of the seed's stream (Philox counter word 1); default 0. */
  readonly sequence?: number
}

export interface GenerateResult {
  readonly tokens: ReadonlyArray<number>
  /** log_softmax(logits / T)[token] (T = 1 when greedy): what the trainer recomputes. */
  readonly logprobs: ReadonlyArray<number>
  /** Logprob under the processed distribution actually sampled from (0 when greedy). */
  readonly sampledLogprobs: ReadonlyArray<number>
  readonly finishReason: "stop" | "length"
}

/** A request the generator cannot serve as given. */
export class GenerationError extends Data.TaggedError("GenerationError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

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
  readonly stops: ReadonlySet<number>
}

/** Starts the batching loop for a model made with `generation`; it stops when the scope closes. */
export const make = (model: Qwen3Model): Effect.Effect<GeneratorService, GenerationError, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const { device } = gpu
    const gen = model.gen
    const programs = model.programs
    if (gen === undefined || programs === undefined) {
      return yield* new GenerationError({
        problem: "The model was made without `generation` options; pass { generation: { slots, capacity } }."
      })
    }
    const { arena } = model
    const V = model.config.vocab_size
    const S = gen.slots
    const K = gen.stepsPerSubmit
    const P = gen.prefillChunk
    const tokBytes = S * K * 4
    const lpBytes = S * K * 8
    const staging = yield* Effect.acquireRelease(
      gpu.createBuffer("generation.readback", tokBytes + lpBytes, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST),
      (b) => Effect.sync(() => b.destroy())
    ).pipe(Effect.orDie)
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Pending>(), Queue.shutdown)
    const slots: Array<Active | undefined> = Array.from({ length: S }, () => undefined)
    const counters = { submits: 0, steps: 0, tokens: 0 }

    const validate = (r: GenerateRequest): string | undefined => {
      if (r.prompt.length === 0) return "generate needs a non-empty prompt."
      if (!Number.isInteger(r.maxNewTokens) || r.maxNewTokens < 1) return "maxNewTokens must be a positive integer."
      if (r.prompt.length + r.maxNewTokens > gen.capacity) {
        return `The prompt (${r.prompt.length} tokens) plus maxNewTokens (${r.maxNewTokens}) exceed the KV cache ` +
          `capacity of ${gen.capacity}; make the model with a larger generation.capacity.`
      }
      if ((r.stopTokens ?? []).length > 8) return "At most 8 stop tokens are supported per request."
      for (const t of [...r.prompt, ...(r.stopTokens ?? [])]) {
        if (!Number.isInteger(t) || t < 0 || t >= V) return `Token id ${t} is outside the vocabulary [0, ${V}).`
      }
      return Sampling.validate(r)
    }

    const submit = (encode: (pass: GPUComputePassEncoder) => void, after?: (e: GPUCommandEncoder) => void) => {
      const encoder = device.createCommandEncoder({ label: "generation" })
      const pass = encoder.beginComputePass({ label: "generation" })
      encode(pass)
      pass.end()
      after?.(encoder)
      device.queue.submit([encoder.finish()])
    }

    /** Writes the slot's state and runs its prompt (all but the last token) into the cache. */
    const admit = (slot: number, p: Pending, prefill: Array<readonly [number, number, number]>) => {
      const r = p.request
      const su = Sampling.slotWords(r, r.maxNewTokens, r.stopTokens ?? [])
      arena.write("g.su", su, slot * su.length)
      arena.write("g.sf", Sampling.slotFloats(r), slot * 4)
      const seen = new Uint32Array(V)
      for (const t of r.prompt) seen[t] = 1
      arena.write("g.seen", seen, slot * V)
      arena.write("g.d.ids", Uint32Array.of(r.prompt[r.prompt.length - 1]), slot)
      arena.write("g.d.pos", Uint32Array.of(r.prompt.length - 1), slot)
      for (let i = 0; i + 1 < r.prompt.length; i++) prefill.push([r.prompt[i], i, slot])
      slots[slot] = { ...p, tokens: [], logprobs: [], sampledLogprobs: [], stops: new Set(r.stopTokens ?? []) }
    }

    const runPrefill = (rows: ReadonlyArray<readonly [number, number, number]>) => {
      for (let start = 0; start < rows.length; start += P) {
        const ids = new Uint32Array(P)
        const pos = new Uint32Array(P)
        const slot = new Uint32Array(P).fill(NO_SLOT)
        rows.slice(start, start + P).forEach(([t, i, s], j) => {
          ids[j] = t
          pos[j] = i
          slot[j] = s
        })
        arena.write("g.p.ids", ids)
        arena.write("g.p.pos", pos)
        arena.write("g.p.slot", slot)
        submit(programs.prefill.encode)
        counters.submits++
      }
    }

    const finish = (slot: number, reason: "stop" | "length") =>
      Effect.gen(function*() {
        const a = slots[slot]!
        slots[slot] = undefined
        yield* Deferred.succeed(a.done, {
          tokens: a.tokens,
          logprobs: a.logprobs,
          sampledLogprobs: a.sampledLogprobs,
          finishReason: reason
        })
      })

    const decode = Effect.gen(function*() {
      arena.write("g.ctl", new Uint32Array(4))
      const outTok = arena.binding(arena.tensor("g.outTok"))
      const outLp = arena.binding(arena.tensor("g.outLp"))
      submit((pass) => {
        for (let k = 0; k < K; k++) programs.decode.encode(pass)
      }, (e) => {
        e.copyBufferToBuffer(outTok.buffer, outTok.offset ?? 0, staging, 0, tokBytes)
        e.copyBufferToBuffer(outLp.buffer, outLp.offset ?? 0, staging, tokBytes, lpBytes)
      })
      counters.submits++
      counters.steps += K
      yield* Effect.tryPromise({
        try: () =>
          Promise.race([
            staging.mapAsync(GPUMapMode.READ),
            device.lost.then(() => Promise.reject(new Error("device lost")))
          ]),
        catch: (e) => new GpuDeviceLost({ reason: "unknown", detail: `reading sampled tokens failed: ${String(e)}` })
      })
      const bytes = staging.getMappedRange().slice(0)
      staging.unmap()
      yield* gpu.check
      const toks = new Uint32Array(bytes, 0, S * K)
      const lps = new Float32Array(bytes, tokBytes, S * K * 2)
      for (let s = 0; s < S; s++) {
        const a = slots[s]
        if (a === undefined) continue
        for (let k = 0; k < K; k++) {
          const t = toks[s * K + k]
          if (t === NO_SLOT) continue
          a.tokens.push(t)
          a.logprobs.push(lps[(s * K + k) * 2])
          a.sampledLogprobs.push(lps[(s * K + k) * 2 + 1])
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
      const prefill: Array<readonly [number, number, number]> = []
      // Idle: block until work arrives.
      if (free.length === S) admit(free.shift()!, yield* Queue.take(queue), prefill)
      for (const slot of free) {
        const next = yield* Queue.poll(queue)
        if (next._tag === "None") break
        admit(slot, next.value, prefill)
      }
      runPrefill(prefill)
      yield* decode.pipe(Effect.catchAll(failAll))
    })
    yield* Effect.forkScoped(Effect.forever(loop))

    const generate = Effect.fn("Generator.generate")(function*(request: GenerateRequest) {
      const problem = validate(request)
      if (problem !== undefined) return yield* new GenerationError({ problem })
      const done = yield* Deferred.make<GenerateResult, GenerationError | GpuDeviceLost | GpuUncapturedError>()
      yield* Queue.offer(queue, { request, done })
      return yield* Deferred.await(done)
    })
    return { generate, stats: () => ({ ...counters }) } satisfies GeneratorService
  })
