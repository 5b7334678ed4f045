/**
 * A list of ops compiled once against an arena: every pipeline compiled (in parallel), every bind group and the
 * parameter block of every dispatch created up front. Encoding it is then only setPipeline / setBindGroup /
 * dispatchWorkgroups — no allocation, no bind group creation, no shader work.
 *
 * Rule for the ops: within one op, a buffer that is written must not also be read (WebGPU usage scopes are
 * per buffer); keep activations in their own (ungrouped) tensors. Violations surface at the next fence as a
 * typed `GpuUncapturedError`.
 *
 * @example
 * ```ts
 * const program = yield* Program.compile(arena, ops)
 * yield* Program.submit(program) // one pass, one submit
 * ```
 *
 * @since 0.0.0
 */
// Its declarations name WebGPU's types (GPUDevice, GPUBuffer…): the emitted .d.ts keeps this reference for users.
/// <reference types="@webgpu/types" preserve="true" />
import { Effect } from "effect"
import type { Scope } from "effect"
import { type DispatchSpec, lower } from "../ops/Lowering.js"
import type { Op } from "../ops/Ops.js"
import type { Arena } from "./Arena.js"
import { Gpu } from "./Gpu.js"
import { type GpuDeviceLost, type GpuLimitExceeded, type GpuOutOfMemory, GpuShaderError } from "./GpuError.js"

/** Bytes of each dispatch's parameter block (the uniform offset alignment). */
export const PARAM_SLOT = 256

/** One recorded dispatch. */
export interface Dispatch {
  readonly label: string
  readonly pipeline: GPUComputePipeline
  readonly bindGroup: GPUBindGroup
  readonly groups: readonly [number, number, number]
  readonly flops: number
  readonly bytes: number
}

/** A compiled op list. */
export interface Program {
  readonly dispatches: ReadonlyArray<Dispatch>
  /** Records every dispatch into an open compute pass. */
  readonly encode: (pass: GPUComputePassEncoder) => void
}

/** Lowers ops to their dispatch specs without a device (kernel labels, grids, cost estimates). */
export const plan = (arena: Pick<Arena, "plan">, ops: ReadonlyArray<Op>): ReadonlyArray<DispatchSpec> =>
  ops.flatMap((op) => lower(op, arena.plan))

/** Compiles ops against an arena; the parameter buffer is released with the scope. */
export const compile = (
  arena: Arena,
  ops: ReadonlyArray<Op>,
  label = "program"
): Effect.Effect<
  Program,
  GpuShaderError | GpuDeviceLost | GpuOutOfMemory | GpuLimitExceeded,
  Gpu | Scope.Scope
> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const specs = plan(arena, ops)
    for (const s of specs) {
      const missing = (s.features ?? []).filter((f) => !gpu.hasFeature(f))
      if (missing.length > 0) {
        return yield* Effect.fail(
          new GpuShaderError({
            label: s.label,
            messages: [
              `needs the device feature(s) ${missing.join(", ")}, which this adapter (${
                gpu.adapter.device || gpu.adapter.description
              }) ` +
              `does not offer; pick a tier with Matmul.chooseTier(gpu.adapter) instead of asking for one`
            ]
          })
        )
      }
    }
    const codes = new Map<string, string>()
    for (const s of specs) codes.set(s.code, s.label)
    const compiled = yield* Effect.forEach(
      [...codes],
      ([code, name]) => Effect.map(gpu.pipeline(name, code), (p) => [code, p] as const),
      { concurrency: "unbounded" }
    )
    const pipelines = new Map(compiled)
    const params = yield* Effect.acquireRelease(
      gpu.createBuffer(
        `${label}.params`,
        Math.max(1, specs.length) * PARAM_SLOT,
        GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST
      ),
      (b) => Effect.sync(() => b.destroy())
    )
    const words = new DataView(new ArrayBuffer(Math.max(1, specs.length) * PARAM_SLOT))
    specs.forEach((s, i) =>
      s.params.forEach(([kind, value], j) => {
        if (kind === "u") words.setUint32(i * PARAM_SLOT + j * 4, value, true)
        else words.setFloat32(i * PARAM_SLOT + j * 4, value, true)
      })
    )
    gpu.device.queue.writeBuffer(params, 0, words.buffer)
    const scratchBytes = Math.max(4, ...specs.flatMap((s) => s.bindings.map((b) => ("scratch" in b ? b.scratch : 0))))
    const scratch = yield* Effect.acquireRelease(
      gpu.createBuffer(`${label}.scratch`, scratchBytes, GPUBufferUsage.STORAGE),
      (b) => Effect.sync(() => b.destroy())
    )
    const dispatches = specs.map((s, i): Dispatch => {
      const pipeline = pipelines.get(s.code)!
      const entries: Array<GPUBindGroupEntry> = [
        { binding: 0, resource: { buffer: params, offset: i * PARAM_SLOT, size: PARAM_SLOT } },
        ...s.bindings.map((b, j): GPUBindGroupEntry => ({
          binding: j + 1,
          resource: "shard" in b
            ? { buffer: arena.buffers[b.shard], offset: 0, size: b.bytes }
            : "scratch" in b
            ? { buffer: scratch, offset: 0, size: b.scratch }
            : arena.binding(b)
        }))
      ]
      const bindGroup = gpu.createBindGroup({
        label: `${label}[${i}] ${s.label}`,
        layout: pipeline.getBindGroupLayout(0),
        entries
      })
      return { label: s.label, pipeline, bindGroup, groups: s.groups, flops: s.flops, bytes: s.bytes }
    })
    const encode = (pass: GPUComputePassEncoder) => {
      let current: GPUComputePipeline | undefined
      for (const d of dispatches) {
        if (d.pipeline !== current) {
          pass.setPipeline(d.pipeline)
          current = d.pipeline
        }
        pass.setBindGroup(0, d.bindGroup)
        pass.dispatchWorkgroups(d.groups[0], d.groups[1], d.groups[2])
      }
    }
    return { dispatches, encode } satisfies Program
  })

/** Encodes programs into one compute pass and submits it (no waiting; `gpu.fence` to wait and check). */
export const submit = (...programs: ReadonlyArray<Program>) =>
  Effect.gen(function*() {
    const { device } = yield* Gpu
    const encoder = device.createCommandEncoder({ label: "program" })
    const pass = encoder.beginComputePass({ label: "program" })
    for (const p of programs) p.encode(pass)
    pass.end()
    device.queue.submit([encoder.finish()])
  })
