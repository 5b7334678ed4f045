/**
 * A training step recorded once and replayed: the micro-batch program (forward, loss, backward — gradients
 * accumulate) and the optimiser program (global gradient norm, clip scale, fused AdamW, all on the device).
 *
 * Per step the host only writes `step.scalars` (learning rate, betas, bias corrections, clip threshold, user
 * slots such as seeds) and each micro-batch's inputs (token ids, masks, ...), then submits one command buffer
 * per micro-batch, each with one compute pass (the gradient group and `step.results` are cleared by the first;
 * the last also runs the optimiser and copies `step.results` to a dedicated read-back buffer). The only read
 * back is those 16 floats (loss, grad norm, clip scale, skipped, user slots), after which the device is checked
 * for loss and uncaptured errors, so a dropped submit fails the step with a typed error instead of training
 * on garbage. No buffer, bind group or pipeline is created per step (see `counters`).
 *
 * @example
 * ```ts
 * const program = yield* StepProgram.make(arena, { microBatch: [...forward, ...loss, ...backward] })
 * const r = yield* program.step({ lr: 1e-3, step: 1 }, [[["ids", ids], ["mask", mask]]])
 * console.log(r.loss, r.gradNorm, r.counters.cpuMicrosPerDispatch)
 * ```
 *
 * @since 0.0.0
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Ops from "../ops/Ops.js"
import type { Op } from "../ops/Ops.js"
import * as Arena from "./Arena.js"
import { GRAD, Result, STEP_RESULTS, STEP_SCALARS, type StepScalars } from "./Arena.js"
import { Gpu } from "./Gpu.js"
import {
  GpuDeviceLost,
  type GpuLimitExceeded,
  type GpuOutOfMemory,
  type GpuShaderError,
  GpuUnavailable,
  type GpuUncapturedError
} from "./GpuError.js"
import * as Program from "./Program.js"

export type { StepScalars }

/** Inputs of one micro-batch: tensor name → data written before its pass. */
export type MicroBatch = ReadonlyArray<readonly [name: string, data: Float32Array | Uint32Array]>

/** What one step cost on the CPU and what it created. */
export interface StepCounters {
  readonly dispatches: number
  readonly submits: number
  readonly buffersCreated: number
  readonly bindGroupsCreated: number
  readonly pipelinesCreated: number
  /** Wall time spent writing inputs and recording the command buffers (before any submit). */
  readonly encodeMicros: number
  /** encodeMicros / dispatches: the CPU cost of replaying one dispatch. */
  readonly cpuMicrosPerDispatch: number
  /**
   * Wall time inside `queue.submit`. Reported apart because on a software adapter it includes waiting for
   * the CPU cores the "GPU" itself runs on.
   */
  readonly submitMicros: number
  /** Wall time including the wait for the read-back. */
  readonly wallMillis: number
}

/** What one step reads back: the loss, the gradient norm and the clipping. */
export interface StepResult {
  readonly loss: number
  readonly gradNorm: number
  readonly clipScale: number
  readonly skipped: boolean
  readonly results: Float32Array
  readonly counters: StepCounters
}

/** A submitted step; `result` waits for it (once; later calls return the same values). */
export interface PendingStep {
  readonly result: Effect.Effect<StepResult, GpuDeviceLost | GpuUncapturedError>
}

/** Time of one kernel in a timestamp profile. */
export interface KernelProfile {
  readonly label: string
  readonly calls: number
  readonly micros: number
  readonly gflops: number
  readonly gbytesPerSecond: number
}

/** A recorded training step: the micro-batch program and the optimizer program, replayed every step. */
export interface StepProgram {
  readonly microBatch: Program.Program
  readonly optimizer: Program.Program
  /** Runs one step over the given micro-batches (at least one) and waits for its results. */
  readonly step: (
    scalars: StepScalars,
    microBatches: ReadonlyArray<MicroBatch>
  ) => Effect.Effect<StepResult, GpuDeviceLost | GpuUncapturedError>
  /**
   * Submits one step without waiting (run-ahead): the next step can be encoded while this one runs. Up to
   * two steps are in flight; submitting a third first waits for the oldest one's results (kept for its
   * handle). Inputs are queued writes, so they never overwrite an in-flight step's data.
   */
  readonly submit: (
    scalars: StepScalars,
    microBatches: ReadonlyArray<MicroBatch>
  ) => Effect.Effect<PendingStep, GpuDeviceLost | GpuUncapturedError>
  /**
   * Runs one step with every dispatch in its own timestamped pass and returns the time per kernel label
   * (needs the timestamp-query feature). It does update the parameters, like `step`.
   */
  readonly profile: (
    scalars: StepScalars,
    microBatches: ReadonlyArray<MicroBatch>
  ) => Effect.Effect<ReadonlyArray<KernelProfile>, GpuDeviceLost | GpuUncapturedError | GpuUnavailable>
}

/** Options of {@link make}. */
export interface StepProgramOptions {
  /** Forward, loss and backward of one micro-batch. Parameter gradients must accumulate. */
  readonly microBatch: ReadonlyArray<Op>
  /** Default: global grad norm + clip, then fused AdamW. */
  readonly optimizer?: ReadonlyArray<Op>
}

/** The step scalars as the device sees them. */
export const scalarWords = Arena.scalarWords

const READBACK_RING = 2

/** Compiles the step (pipelines, bind groups, read-back ring) once. */
export const make = (
  arena: Arena.Arena,
  options: StepProgramOptions
): Effect.Effect<StepProgram, GpuShaderError | GpuDeviceLost | GpuOutOfMemory | GpuLimitExceeded, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const { device } = gpu
    const microBatch = yield* Program.compile(arena, options.microBatch, "microbatch")
    const optimizer = yield* Program.compile(arena, options.optimizer ?? [Ops.gradNorm, Ops.adamw], "optimizer")
    const results = arena.tensor(STEP_RESULTS)
    const ring: Array<GPUBuffer> = []
    for (let i = 0; i < READBACK_RING; i++) {
      ring.push(
        yield* Effect.acquireRelease(
          gpu.createBuffer(`step.readback#${i}`, results.bytes, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST),
          (b) => Effect.sync(() => b.destroy())
        )
      )
    }
    const gradShards = (arena.plan.groups.get(GRAD) ?? []).map((i) => arena.buffers[i])
    let steps = 0

    const writeInputs = (mb: MicroBatch) => {
      for (const [name, data] of mb) arena.write(name, data)
    }
    const beginStep = (scalars: StepScalars, encoder: GPUCommandEncoder) => {
      arena.write(STEP_SCALARS, scalarWords(scalars))
      for (const b of gradShards) encoder.clearBuffer(b)
      const r = arena.binding(results)
      encoder.clearBuffer(r.buffer, r.offset ?? 0, r.size)
    }
    const readResults = (staging: GPUBuffer, encoder: GPUCommandEncoder) => {
      const r = arena.binding(results)
      encoder.copyBufferToBuffer(r.buffer, r.offset ?? 0, staging, 0, results.bytes)
    }
    const mapResults = (staging: GPUBuffer) =>
      Effect.gen(function*() {
        yield* Effect.tryPromise({
          try: () =>
            Promise.race([
              staging.mapAsync(GPUMapMode.READ),
              device.lost.then(() => Promise.reject(new Error("device lost")))
            ]),
          catch: (e) => new GpuDeviceLost({ reason: "unknown", detail: `reading step results failed: ${String(e)}` })
        })
        const out = new Float32Array(staging.getMappedRange().slice(0))
        staging.unmap()
        yield* gpu.check
        return out
      })
    const needBatches = (mbs: ReadonlyArray<MicroBatch>) =>
      mbs.length === 0 ? Effect.dieMessage("StepProgram.step: give at least one micro-batch") : Effect.void

    // The read-back ring: each slot remembers the unread result of the step that used it last.
    const pendingOf: Array<Effect.Effect<StepResult, GpuDeviceLost | GpuUncapturedError> | undefined> = ring.map(
      () => undefined
    )
    const submit = Effect.fn("StepProgram.submit")(
      function*(scalars: StepScalars, microBatches: ReadonlyArray<MicroBatch>) {
        yield* needBatches(microBatches)
        const slot = steps++ % READBACK_RING
        const previous = pendingOf[slot]
        if (previous !== undefined) yield* previous
        const before = { ...gpu.counters }
        const t0 = performance.now()
        const staging = ring[slot]
        let submits = 0
        let encodeMillis = 0
        let submitMillis = 0
        microBatches.forEach((mb, i) => {
          const e0 = performance.now()
          writeInputs(mb)
          const encoder = device.createCommandEncoder({ label: `step.microbatch#${i}` })
          if (i === 0) beginStep(scalars, encoder)
          const pass = encoder.beginComputePass({ label: "microbatch" })
          microBatch.encode(pass)
          if (i === microBatches.length - 1) optimizer.encode(pass)
          pass.end()
          if (i === microBatches.length - 1) readResults(staging, encoder)
          const commands = encoder.finish()
          const e1 = performance.now()
          device.queue.submit([commands])
          submitMillis += performance.now() - e1
          encodeMillis += e1 - e0
          submits++
        })
        const created = {
          buffers: gpu.counters.buffers - before.buffers,
          bindGroups: gpu.counters.bindGroups - before.bindGroups,
          pipelines: gpu.counters.pipelines - before.pipelines
        }
        // Map now (the promise settles when the copy has run); never leave a rejection unhandled.
        const mapped = staging.mapAsync(GPUMapMode.READ).then(() => undefined, (e: unknown) => e ?? "mapAsync failed")
        const read = Effect.gen(function*() {
          const failure = yield* Effect.promise(() =>
            Promise.race([mapped, device.lost.then((l) => `device lost: ${l.message}`)])
          )
          if (failure !== undefined) {
            return yield* Effect.fail(
              new GpuDeviceLost({ reason: "unknown", detail: `reading step results failed: ${String(failure)}` })
            )
          }
          const values = new Float32Array(staging.getMappedRange().slice(0))
          staging.unmap()
          yield* gpu.check
          return values
        })
        const result = yield* Effect.cached(Effect.map(read, (out) => {
          const t2 = performance.now()
          const dispatches = microBatch.dispatches.length * microBatches.length + optimizer.dispatches.length
          const counters: StepCounters = {
            dispatches,
            submits,
            buffersCreated: created.buffers,
            bindGroupsCreated: created.bindGroups,
            pipelinesCreated: created.pipelines,
            encodeMicros: encodeMillis * 1000,
            cpuMicrosPerDispatch: encodeMillis * 1000 / dispatches,
            submitMicros: submitMillis * 1000,
            wallMillis: t2 - t0
          }
          return {
            loss: out[Result.loss],
            gradNorm: out[Result.gradNorm],
            clipScale: out[Result.clipScale],
            skipped: out[Result.skipped] !== 0,
            results: out,
            counters
          } satisfies StepResult
        }))
        pendingOf[slot] = result
        return { result } satisfies PendingStep
      }
    )

    const step = (scalars: StepScalars, microBatches: ReadonlyArray<MicroBatch>) =>
      Effect.flatMap(submit(scalars, microBatches), (p) => p.result)

    const profile = Effect.fn("StepProgram.profile")(
      function*(scalars: StepScalars, microBatches: ReadonlyArray<MicroBatch>) {
        yield* needBatches(microBatches)
        if (!gpu.hasFeature("timestamp-query")) {
          return yield* Effect.fail(new GpuUnavailable({ reason: "the device has no timestamp-query feature" }))
        }
        const all = [
          ...microBatches.flatMap((_, i) =>
            microBatch.dispatches.map((d) => ({ d, mb: i, last: i === microBatches.length - 1 }))
          ),
          ...optimizer.dispatches.map((d) => ({ d, mb: microBatches.length - 1, last: true }))
        ]
        return yield* Effect.acquireUseRelease(
          Effect.sync(() => ({
            querySet: device.createQuerySet({ type: "timestamp", count: 2 * all.length }),
            resolve: device.createBuffer({
              size: 16 * all.length,
              usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC
            }),
            read: device.createBuffer({
              size: 16 * all.length,
              usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST
            })
          })),
          ({ querySet, read, resolve }) =>
            Effect.gen(function*() {
              const slot = steps++ % READBACK_RING
              const previous = pendingOf[slot]
              if (previous !== undefined) yield* previous
              pendingOf[slot] = undefined
              const staging = ring[slot]
              let q = 0
              microBatches.forEach((mb, i) => {
                writeInputs(mb)
                const encoder = device.createCommandEncoder({ label: `profile#${i}` })
                if (i === 0) beginStep(scalars, encoder)
                for (const x of all.filter((x) => x.mb === i)) {
                  const pass = encoder.beginComputePass({
                    timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * q, endOfPassWriteIndex: 2 * q + 1 }
                  })
                  pass.setPipeline(x.d.pipeline)
                  pass.setBindGroup(0, x.d.bindGroup)
                  pass.dispatchWorkgroups(x.d.groups[0], x.d.groups[1], x.d.groups[2])
                  pass.end()
                  q++
                }
                if (i === microBatches.length - 1) {
                  readResults(staging, encoder)
                  encoder.resolveQuerySet(querySet, 0, 2 * all.length, resolve, 0)
                  encoder.copyBufferToBuffer(resolve, 0, read, 0, 16 * all.length)
                }
                device.queue.submit([encoder.finish()])
              })
              yield* mapResults(staging)
              yield* Effect.promise(() => read.mapAsync(GPUMapMode.READ))
              const stamps = new BigUint64Array(read.getMappedRange().slice(0))
              read.unmap()
              const byLabel = new Map<string, { calls: number; ns: number; flops: number; bytes: number }>()
              all.forEach(({ d }, i) => {
                const e = byLabel.get(d.label) ?? { calls: 0, ns: 0, flops: 0, bytes: 0 }
                e.calls++
                e.ns += Number(stamps[2 * i + 1] - stamps[2 * i])
                e.flops += d.flops
                e.bytes += d.bytes
                byLabel.set(d.label, e)
              })
              return [...byLabel].map(([label, e]): KernelProfile => ({
                label,
                calls: e.calls,
                micros: e.ns / 1000,
                gflops: e.ns > 0 ? e.flops / e.ns : 0,
                gbytesPerSecond: e.ns > 0 ? e.bytes / e.ns : 0
              })).sort((a, b) => b.micros - a.micros)
            }),
          ({ querySet, read, resolve }) =>
            Effect.sync(() => {
              querySet.destroy()
              resolve.destroy()
              read.destroy()
            })
        )
      }
    )

    return { microBatch, optimizer, step, submit, profile } satisfies StepProgram
  })
