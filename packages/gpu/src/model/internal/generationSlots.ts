// The generation slots of a Qwen3 model made with `generation`, as both of their drivers use them: the loop of
// `Generation.make` and the step-wise `Generation.makeStepwise`. One slot holds one sequence: its sampling state
// (`g.su`, `g.sf`, `g.seen`), its next input token and position (`g.d.ids`, `g.d.pos`) and its rows of the KV
// cache. The decode program runs every slot; a slot whose state word 0 is 0 is idle (its sampler writes NO_SLOT and
// leaves its token, position and step counter alone), so a sequence can also be paused and resumed exactly.
import { Effect } from "effect"
import type { Scope } from "effect"
import type { GpuService } from "../../runtime/Gpu.js"
import { GpuDeviceLost, type GpuUncapturedError } from "../../runtime/GpuError.js"
import type { Qwen3Model } from "../Qwen3.js"
import * as Sampling from "../Sampling.js"
import type { GenShape } from "./qwen3Graph.js"
import { NO_SLOT } from "./qwen3Kernels.js"
import { MAX_TOP, SLOT_U } from "./samplingKernel.js"

/** What a slot is given (the fields of `Generation.GenerateRequest` the device reads). */
export interface SlotRequest extends Sampling.SamplingOptions {
  readonly prompt: ReadonlyArray<number>
  readonly maxNewTokens: number
  readonly stopTokens?: ReadonlyArray<number>
  readonly seed?: number
  readonly sequence?: number
  /** Top logprobs to report per sampled token (0…20; default 0). */
  readonly topLogprobs?: number
}

/** A prompt token to run into the cache: (token, position, slot). */
export type PrefillRow = readonly [number, number, number]

/**
 * The tokens of one decode submit: `tokens[s·K + k]` (NO_SLOT: slot s was idle at step k), two logprobs each; with
 * `top` read back, `top[((s·K + k)·MAX_TOP + j)·2]` is the j-th most likely token (as f32) and `+ 1` its logprob,
 * for j below the slot's `topLogprobs`.
 */
export interface Sampled {
  readonly tokens: Uint32Array
  readonly logprobs: Float32Array
  readonly top?: Float32Array
}

/** The top logprobs of slot `slot` at step `k` of a submit of ring `K` (`n` of them). */
export const topAt = (
  sampled: Sampled,
  K: number,
  slot: number,
  k: number,
  n: number
): ReadonlyArray<{ readonly id: number; readonly logprob: number }> => {
  const out: Array<{ id: number; logprob: number }> = []
  const top = sampled.top
  if (top === undefined) return out
  for (let j = 0; j < n; j++) {
    const o = ((slot * K + k) * MAX_TOP + j) * 2
    out.push({ id: top[o], logprob: top[o + 1] })
  }
  return out
}

export interface Slots {
  /** Slots. */
  readonly S: number
  /** Decode steps a submit can hold (the read-back ring). */
  readonly K: number
  readonly counters: { submits: number; steps: number; tokens: number }
  /** Why the request cannot be served as given, or undefined. */
  readonly validate: (r: SlotRequest) => string | undefined
  /** Writes the slot's sampling state (idle unless `active`) and queues its prompt but the last token in `prefill`. */
  readonly admit: (slot: number, r: SlotRequest, prefill: Array<PrefillRow>, active: boolean) => void
  /** Turns the slot's sampler on or off (state word 0). */
  readonly setActive: (slot: number, active: boolean) => void
  /** Runs the rows through the prefill program, a chunk per submit. */
  readonly runPrefill: (rows: ReadonlyArray<PrefillRow>) => void
  /** One submit of `steps` (≤ K) decode steps; reads back the sampled tokens and logprobs (and `top`, if asked). */
  readonly decode: (steps: number, top?: boolean) => Effect.Effect<Sampled, GpuDeviceLost | GpuUncapturedError>
}

type Programs = NonNullable<Qwen3Model["programs"]>

/** The slots of `model` (its `gen` and `programs` checked by the caller); the read-back buffer lives in the Scope. */
export const make = (
  gpu: GpuService,
  model: Qwen3Model,
  gen: GenShape,
  programs: Programs
): Effect.Effect<Slots, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { device } = gpu
    const { arena } = model
    const V = model.config.vocab_size
    const S = gen.slots
    const K = gen.stepsPerSubmit
    const P = gen.prefillChunk
    const tokBytes = S * K * 4
    const lpBytes = S * K * 8
    const topBytes = S * K * MAX_TOP * 8
    const staging = yield* Effect.acquireRelease(
      gpu.createBuffer(
        "generation.readback",
        tokBytes + lpBytes + topBytes,
        GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST
      ),
      (b) => Effect.sync(() => b.destroy())
    ).pipe(Effect.orDie)
    const counters = { submits: 0, steps: 0, tokens: 0 }

    const validate = (r: SlotRequest): string | undefined => {
      if (r.prompt.length === 0) return "generate needs a non-empty prompt."
      if (!Number.isInteger(r.maxNewTokens) || r.maxNewTokens < 1) return "maxNewTokens must be a positive integer."
      if (r.prompt.length + r.maxNewTokens > gen.capacity) {
        return `The prompt (${r.prompt.length} tokens) plus maxNewTokens (${r.maxNewTokens}) exceed the KV cache ` +
          `capacity of ${gen.capacity}; make the model with a larger generation.capacity.`
      }
      if ((r.stopTokens ?? []).length > 8) return "At most 8 stop tokens are supported per request."
      const top = r.topLogprobs ?? 0
      if (!Number.isInteger(top) || top < 0 || top > Math.min(MAX_TOP, V)) {
        return `topLogprobs must be an integer in [0, ${Math.min(MAX_TOP, V)}] (got ${top}).`
      }
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

    const admit = (slot: number, r: SlotRequest, prefill: Array<PrefillRow>, active: boolean) => {
      const su = Sampling.slotWords(r, r.maxNewTokens, r.stopTokens ?? [], r.topLogprobs ?? 0)
      if (!active) su[0] = 0
      arena.write("g.su", su, slot * su.length)
      arena.write("g.sf", Sampling.slotFloats(r), slot * 4)
      const seen = new Uint32Array(V)
      for (const t of r.prompt) seen[t] = 1
      arena.write("g.seen", seen, slot * V)
      arena.write("g.d.ids", Uint32Array.of(r.prompt[r.prompt.length - 1]), slot)
      arena.write("g.d.pos", Uint32Array.of(r.prompt.length - 1), slot)
      for (let i = 0; i + 1 < r.prompt.length; i++) prefill.push([r.prompt[i], i, slot])
    }

    const setActive = (slot: number, active: boolean) =>
      arena.write("g.su", Uint32Array.of(active ? 1 : 0), slot * SLOT_U)

    const runPrefill = (rows: ReadonlyArray<PrefillRow>) => {
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

    const decode = (steps: number, top = false) =>
      Effect.gen(function*() {
        arena.write("g.ctl", new Uint32Array(4))
        const outTok = arena.binding(arena.tensor("g.outTok"))
        const outLp = arena.binding(arena.tensor("g.outLp"))
        const outTop = arena.binding(arena.tensor("g.outTop"))
        submit((pass) => {
          for (let k = 0; k < steps; k++) programs.decode.encode(pass)
        }, (e) => {
          e.copyBufferToBuffer(outTok.buffer, outTok.offset ?? 0, staging, 0, tokBytes)
          e.copyBufferToBuffer(outLp.buffer, outLp.offset ?? 0, staging, tokBytes, lpBytes)
          // Only when a slot asked: the top logprobs are MAX_TOP times the rest of the read-back.
          if (top) e.copyBufferToBuffer(outTop.buffer, outTop.offset ?? 0, staging, tokBytes + lpBytes, topBytes)
        })
        counters.submits++
        counters.steps += steps
        yield* Effect.tryPromise({
          try: () =>
            Promise.race([
              staging.mapAsync(GPUMapMode.READ),
              device.lost.then(() => Promise.reject(new Error("device lost")))
            ]),
          catch: (e) => new GpuDeviceLost({ reason: "unknown", detail: `reading sampled tokens failed: ${String(e)}` })
        })
        const bytes = staging.getMappedRange(0, top ? tokBytes + lpBytes + topBytes : tokBytes + lpBytes).slice(0)
        staging.unmap()
        yield* gpu.check
        return {
          tokens: new Uint32Array(bytes, 0, S * K),
          logprobs: new Float32Array(bytes, tokBytes, S * K * 2),
          ...(top ? { top: new Float32Array(bytes, tokBytes + lpBytes, S * K * MAX_TOP * 2) } : {})
        }
      })

    return { S, K, counters, validate, admit, setActive, runPrefill, decode } satisfies Slots
  })
