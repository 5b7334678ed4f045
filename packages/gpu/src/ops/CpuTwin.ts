/**
 * Runs a list of ops on a host arena with each op's CPU twin (its naive specification): the CPU specification of a whole step
 * program. Slow (f64 math, f32 storage, like the GPU's buffers), for tests at tiny shapes only.
 *
 * @example
 * ```ts
 * const h = Arena.host(plan)
 * h.f32("param.w").set(weights)
 * CpuTwin.run(h, ops)
 * ```
 *
 * @since 0.0.0
 */
import { GRAD, type HostArena, scalarWords, STEP_RESULTS, STEP_SCALARS, type StepScalars } from "../runtime/Arena.js"
import { twinAdamw } from "./adamw.js"
import { twinAttention, twinAttentionBackward } from "./attention.js"
import { twinAxpy } from "./axpy.js"
import { twinCast } from "./cast.js"
import { twinEmbedding, twinEmbeddingBackward } from "./embedding.js"
import { twinFill } from "./fill.js"
import { twinGradNorm } from "./gradNorm.js"
import { expandBlocks } from "./internal/blocks.js"
import { twinMaskedMean } from "./maskedMean.js"
import { twinMatmul } from "./matmul.js"
import type { Op } from "./Ops.js"
import { twinRmsNorm, twinRmsNormBackward } from "./rmsNorm.js"
import { twinRope } from "./rope.js"
import { twinSwiglu, twinSwigluBackward } from "./swiglu.js"
import { twinTokenLogprobs, twinTokenLogprobsBackward } from "./tokenLogprobs.js"

/** Executes `ops` in order on `h` (ops over row-blocked tensors per block, as the device does). */
export const run = (h: HostArena, ops: ReadonlyArray<Op>): void => {
  for (const op of ops) for (const o of expandBlocks(op)) step1(h, o)
}

/** A micro-batch's inputs: tensor name → data (as `StepProgram.MicroBatch`). */
export type MicroBatch = ReadonlyArray<readonly [name: string, data: Float32Array | Uint32Array]>

/**
 * One training step on the host, mirroring `StepProgram.step`: writes the scalars, clears the gradients and
 * results, runs the micro-batch ops once per micro-batch (after writing its inputs), then the optimiser ops.
 * Returns a copy of `step.results`.
 */
export const step = (
  h: HostArena,
  program: { readonly microBatch: ReadonlyArray<Op>; readonly optimizer?: ReadonlyArray<Op> },
  scalars: StepScalars,
  microBatches: ReadonlyArray<MicroBatch>
): Float32Array => {
  h.f32(STEP_SCALARS).set(scalarWords(scalars))
  h.f32(STEP_RESULTS).fill(0)
  for (const shard of h.plan.groups.get(GRAD) ?? []) h.raw(shard).fill(0)
  for (const mb of microBatches) {
    for (const [name, data] of mb) {
      const t = h.plan.tensors.get(name)
      if (t === undefined) throw new RangeError(`CpuTwin.step: no tensor named "${name}"`)
      new Uint8Array(h.buffers[t.buffer], t.offset, data.byteLength).set(
        new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
      )
    }
    run(h, program.microBatch)
  }
  run(h, program.optimizer ?? [{ kind: "gradNorm" }, { kind: "adamw" }])
  return h.f32(STEP_RESULTS).slice()
}

const step1 = (h: HostArena, op: Op): void => {
  switch (op.kind) {
    case "custom":
      if (op.cpu === undefined) throw new RangeError(`CpuTwin: custom op "${op.label}" has no CPU twin`)
      op.cpu(h)
      return
    case "fill":
      return twinFill(h, op)
    case "cast":
      return twinCast(h, op)
    case "axpy":
      return twinAxpy(h, op)
    case "matmul":
      return twinMatmul(h, op)
    case "embedding":
      return twinEmbedding(h, op)
    case "embeddingBackward":
      return twinEmbeddingBackward(h, op)
    case "rmsNorm":
      return twinRmsNorm(h, op)
    case "rmsNormBackward":
      return twinRmsNormBackward(h, op)
    case "rope":
      return twinRope(h, op)
    case "attention":
      return twinAttention(h, op)
    case "attentionBackward":
      return twinAttentionBackward(h, op)
    case "swiglu":
      return twinSwiglu(h, op)
    case "swigluBackward":
      return twinSwigluBackward(h, op)
    case "tokenLogprobs":
      return twinTokenLogprobs(h, op)
    case "tokenLogprobsBackward":
      return twinTokenLogprobsBackward(h, op)
    case "maskedMean":
      return twinMaskedMean(h, op)
    case "gradNorm":
      return twinGradNorm(h)
    case "adamw":
      return twinAdamw(h)
  }
}
