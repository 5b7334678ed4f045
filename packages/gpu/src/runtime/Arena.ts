/**
 * Tensor memory planned once per model and shape.
 *
 * A plan names every tensor (parameters, gradients, optimiser state, activations, scratch) with its shape.
 * Tensors that belong to a group ("param", "grad", "adam.m", "adam.v", or any name) are packed into a few
 * large shard buffers, each no larger than one storage binding, so one dispatch can sweep a whole group (the
 * fused AdamW, the gradient norm) and the mirrored groups share one layout. Ungrouped tensors get a buffer each.
 * Every buffer is created once by `allocate` and destroyed when its scope closes; nothing is allocated later.
 * The same plan also builds a host mirror (`host`) that the CPU twin of a step program runs on.
 *
 * @example
 * ```ts
 * const plan = Arena.plan({
 *   ...Arena.parameters({ w: { shape: [64, 64], decay: true } }),
 *   x: { shape: [8, 64] }
 * })
 * const arena = yield* Arena.allocate(plan)
 * arena.write("param.w", weights)
 * ```
 *
 * @since 0.0.0
 */
// Its declarations name WebGPU's types (GPUDevice, GPUBuffer…): the emitted .d.ts keeps this reference for users.
/// <reference types="@webgpu/types" preserve="true" />
import { Effect } from "effect"
import type { Scope } from "effect"
import { Gpu } from "./Gpu.js"
import { type GpuDeviceLost, GpuLimitExceeded, type GpuOutOfMemory, type GpuUncapturedError } from "./GpuError.js"

/**
 * Element types: all compute is f32; token ids, positions and flags are u32; "f16" is storage only (IEEE half,
 * packed two per 32-bit word) for matmul operands that are read at half the bandwidth.
 */
export type Dtype = "f32" | "u32" | "f16"

/** Bytes of `size` elements of a dtype (f16 rounds up to whole 32-bit words). */
export const byteSize = (dtype: Dtype, size: number) => (dtype === "f16" ? Math.ceil(size / 2) * 4 : size * 4)

/** One tensor to plan. */
export interface TensorSpec {
  readonly shape: ReadonlyArray<number>
  readonly dtype?: Dtype
  /** Pack into this group's shards (tensors of one group are laid out in declaration order). */
  readonly group?: string
  /** For tensors of the "param" group: apply AdamW weight decay (default false). */
  readonly decay?: boolean
  /**
   * Split into row blocks exactly like this (earlier declared) tensor, if that one is split: e.g. an f16 copy
   * of a weight, so that per-block ops pair the same rows.
   */
  readonly blockLike?: string
}

/** A planned tensor: where it lives. */
export interface Tensor {
  readonly name: string
  readonly shape: ReadonlyArray<number>
  readonly dtype: Dtype
  /** Elements. */
  readonly size: number
  /** Index into the plan's buffers. */
  readonly buffer: number
  /** Byte offset into that buffer (a multiple of GROUP_ALIGN_BYTES inside groups, 0 otherwise). */
  readonly offset: number
  readonly bytes: number
  readonly group: string | undefined
  readonly decay: boolean
  /**
   * A grouped tensor larger than one shard (one storage binding) is split into row blocks, each a tensor of its
   * own (`name#i`, rows in order) in the group's shards; ops on it run per block (see `Ops`). Such a tensor has
   * no single binding: `buffer` and `offset` then name its first block.
   */
  readonly blocks?: ReadonlyArray<Tensor>
}

/** The row blocks of a tensor (itself when it is not split), with the first row of each. */
export const rowBlocks = (t: Tensor): ReadonlyArray<{ readonly tensor: Tensor; readonly row0: number }> => {
  if (t.blocks === undefined) return [{ tensor: t, row0: 0 }]
  let row0 = 0
  return t.blocks.map((b) => {
    const out = { tensor: b, row0 }
    row0 += b.shape[0]
    return out
  })
}

/** One GPU buffer of the plan. */
export interface BufferPlan {
  readonly label: string
  readonly bytes: number
  readonly group: string | undefined
}

/** The whole layout: pure data, no device needed. */
export interface ArenaPlan {
  readonly tensors: ReadonlyMap<string, Tensor>
  readonly buffers: ReadonlyArray<BufferPlan>
  /** For each group, the buffer indices of its shards in order. */
  readonly groups: ReadonlyMap<string, ReadonlyArray<number>>
  readonly totalBytes: number
}

/** Tensors in groups start on 1 KiB boundaries: any binding offset alignment is met, and blocks of 256 never straddle two tensors. */
export const GROUP_ALIGN_BYTES = 1024
/** Elements per optimiser block: weight decay is flagged per block. */
export const BLOCK = 256

/** Hyper-parameters of one optimiser step. */
export interface StepScalars {
  readonly lr: number
  /** 1-based step number (for the bias corrections). */
  readonly step: number
  readonly beta1?: number
  readonly beta2?: number
  readonly eps?: number
  readonly weightDecay?: number
  /** Clip the global gradient norm to this (≤ 0 or absent: no clipping). */
  readonly maxGradNorm?: number
  /** Values for scalar slots 8..15 (seeds, loss scales). */
  readonly user?: ReadonlyArray<number>
}

/** The step scalars as the device sees them. */
export const scalarWords = (s: StepScalars): Float32Array => {
  const beta1 = s.beta1 ?? 0.9
  const beta2 = s.beta2 ?? 0.999
  const out = new Float32Array(SCALAR_SLOTS)
  out[Scalar.lr] = s.lr
  out[Scalar.beta1] = beta1
  out[Scalar.beta2] = beta2
  out[Scalar.eps] = s.eps ?? 1e-8
  out[Scalar.weightDecay] = s.weightDecay ?? 0
  out[Scalar.biasCorrection1] = 1 - Math.pow(beta1, s.step)
  out[Scalar.biasCorrection2] = 1 - Math.pow(beta2, s.step)
  out[Scalar.maxGradNorm] = s.maxGradNorm ?? 0
  ;(s.user ?? []).slice(0, SCALAR_SLOTS - Scalar.user).forEach((v, i) => (out[Scalar.user + i] = v))
  return out
}

/** Names of the tensors every plan carries. */
export const STEP_SCALARS = "step.scalars"
/** The tensor of a step's results: the only values read back each step. */
export const STEP_RESULTS = "step.results"
/** Slots of `step.scalars` (written by the host each step). */
export const Scalar = {
  lr: 0,
  beta1: 1,
  beta2: 2,
  eps: 3,
  weightDecay: 4,
  biasCorrection1: 5,
  biasCorrection2: 6,
  maxGradNorm: 7,
  /** Slots 8..15 are free for programs (seeds, loss scales). */
  user: 8
} as const
/** Slots of `step.results` (the only values read back each step). */
export const Result = { loss: 0, gradNorm: 1, clipScale: 2, skipped: 3, user: 4 } as const
/** The number of slots in `step.scalars`. */
export const SCALAR_SLOTS = 16

/** The groups of a parameter set and its AdamW state, mirrored slot for slot. */
export const PARAM = "param"
/** The group of gradients (`grad.<name>`). */
export const GRAD = "grad"
/** The group of AdamW's first moments (`adam.m.<name>`). */
export const ADAM_M = "adam.m"
/** The group of AdamW's second moments (`adam.v.<name>`). */
export const ADAM_V = "adam.v"

/** Declares `param.<name>`, `grad.<name>`, `adam.m.<name>` and `adam.v.<name>` for each parameter. */
export const parameters = (
  params: Record<string, { readonly shape: ReadonlyArray<number>; readonly decay?: boolean }>
): Record<string, TensorSpec> => {
  const out: Record<string, TensorSpec> = {}
  for (const group of [PARAM, GRAD, ADAM_M, ADAM_V]) {
    for (const [name, p] of Object.entries(params)) {
      out[`${group}.${name}`] = { shape: p.shape, group, decay: p.decay ?? false }
    }
  }
  return out
}

const product = (shape: ReadonlyArray<number>) => shape.reduce((a, b) => a * b, 1)

/** Options for {@link plan}. */
export interface PlanOptions {
  /** Largest shard of a group, in bytes (default 128 MiB, lavapipe's binding limit; `allocate` lowers it to the device's). */
  readonly maxShardBytes?: number
}

/**
 * Lays out tensors. Also adds `step.scalars`, `step.results`, and when a "param" group exists, the AdamW
 * decay flags (`opt.decay.<shard>`, one u32 per 256-element block) and the gradient-norm partial sums.
 */
export const plan = (specs: Record<string, TensorSpec>, options: PlanOptions = {}): ArenaPlan => {
  const maxShard = Math.floor((options.maxShardBytes ?? 128 * 1024 * 1024) / GROUP_ALIGN_BYTES) * GROUP_ALIGN_BYTES
  const tensors = new Map<string, Tensor>()
  const buffers: Array<BufferPlan> = []
  const groups = new Map<string, Array<number>>()
  const shardFill = new Map<number, number>()
  const all: Record<string, TensorSpec> = {
    ...specs,
    [STEP_SCALARS]: { shape: [SCALAR_SLOTS] },
    [STEP_RESULTS]: { shape: [SCALAR_SLOTS] }
  }
  const place = (name: string, spec: TensorSpec) => {
    for (const d of spec.shape) {
      if (!Number.isInteger(d) || d <= 0) {
        throw new RangeError(
          `Arena.plan: tensor "${name}" has shape [${spec.shape.join(", ")}]; dims must be positive integers`
        )
      }
    }
    const size = product(spec.shape)
    const bytes = byteSize(spec.dtype ?? "f32", size)
    const base = { name, shape: [...spec.shape], dtype: spec.dtype ?? "f32", size, bytes, decay: spec.decay ?? false }
    if (spec.group === undefined) {
      buffers.push({ label: name, bytes, group: undefined })
      tensors.set(name, { ...base, buffer: buffers.length - 1, offset: 0, group: undefined })
      return
    }
    const padded = Math.ceil(bytes / GROUP_ALIGN_BYTES) * GROUP_ALIGN_BYTES
    const like = spec.blockLike === undefined ? undefined : tensors.get(spec.blockLike)
    if (spec.blockLike !== undefined && like === undefined) {
      throw new RangeError(
        `Arena.plan: tensor "${name}" is to be blocked like "${spec.blockLike}", declared later or not at all`
      )
    }
    if (padded > maxShard || like?.blocks !== undefined) {
      const rows = spec.shape[0]
      const rowElems = size / rows
      const rowBytes = byteSize(base.dtype, rowElems)
      if (spec.shape.length < 2 || rowBytes > maxShard || (base.dtype === "f16" && rowElems % 2 !== 0)) {
        throw new RangeError(
          `Arena.plan: tensor "${name}" (${bytes} bytes) is larger than one shard (${maxShard} bytes, the binding ` +
            `limit) and cannot be split into row blocks (a row must fit a shard${
              base.dtype === "f16" ? " and have an even length" : ""
            })`
        )
      }
      const per = like?.blocks?.map((b) => b.shape[0]) ?? []
      if (per.length === 0) {
        const step = Math.floor(maxShard / rowBytes)
        for (let r = 0; r < rows; r += step) per.push(Math.min(step, rows - r))
      }
      const blocks = per.map((n, i) =>
        placeGrouped(`${name}#${i}`, { ...spec, shape: [n, ...spec.shape.slice(1)] }, spec.group!)
      )
      tensors.set(name, { ...base, buffer: blocks[0].buffer, offset: blocks[0].offset, group: spec.group, blocks })
      return
    }
    tensors.set(name, placeGrouped(name, spec, spec.group))
  }
  const placeGrouped = (name: string, spec: TensorSpec, group: string): Tensor => {
    const size = product(spec.shape)
    const dtype = spec.dtype ?? "f32"
    const bytes = byteSize(dtype, size)
    const padded = Math.ceil(bytes / GROUP_ALIGN_BYTES) * GROUP_ALIGN_BYTES
    const shards = groups.get(group) ?? []
    groups.set(group, shards)
    let shard = shards[shards.length - 1]
    if (shard === undefined || (shardFill.get(shard) ?? 0) + padded > maxShard) {
      buffers.push({ label: `${group}#${shards.length}`, bytes: 0, group })
      shard = buffers.length - 1
      shards.push(shard)
      shardFill.set(shard, 0)
    }
    const offset = shardFill.get(shard)!
    shardFill.set(shard, offset + padded)
    return {
      name,
      shape: [...spec.shape],
      dtype,
      size,
      bytes,
      decay: spec.decay ?? false,
      buffer: shard,
      offset,
      group
    }
  }
  for (const [name, spec] of Object.entries(all)) place(name, spec)
  for (const [index, fill] of shardFill) buffers[index] = { ...buffers[index], bytes: fill }
  const paramShards = groups.get(PARAM) ?? []
  if (paramShards.length > 0) {
    paramShards.forEach((shard, i) =>
      place(`opt.decay.${i}`, { shape: [buffers[shard].bytes / 4 / BLOCK], dtype: "u32" })
    )
    place("opt.partials", { shape: [Math.max(1, partialCount(buffers, groups.get(GRAD) ?? []))] })
  }
  const totalBytes = buffers.reduce((a, b) => a + b.bytes, 0)
  return { tensors, buffers, groups, totalBytes }
}

/** Workgroups of the first gradient-norm stage for a shard of `elements`. */
export const normGroups = (elements: number) => Math.min(1024, Math.max(1, Math.ceil(elements / 1024)))

const partialCount = (buffers: ReadonlyArray<BufferPlan>, shards: ReadonlyArray<number>) =>
  shards.reduce((a, s) => a + normGroups(buffers[s].bytes / 4), 0)

/** Looks up a tensor, failing loudly with the names that do exist. */
export const tensorOf = (p: ArenaPlan, name: string): Tensor => {
  const t = p.tensors.get(name)
  if (t === undefined) {
    throw new RangeError(`Arena: no tensor named "${name}"; planned: ${[...p.tensors.keys()].slice(0, 40).join(", ")}`)
  }
  return t
}

/** The AdamW decay flags of param shard `i`: 1 for blocks of tensors with `decay`. */
export const decayFlags = (p: ArenaPlan, shard: number): Uint32Array => {
  const flags = new Uint32Array(p.buffers[shard].bytes / 4 / BLOCK)
  for (const t of p.tensors.values()) {
    if (t.group !== PARAM || !t.decay) continue
    for (const { tensor: b } of rowBlocks(t)) {
      if (b.buffer !== shard) continue
      const first = b.offset / 4 / BLOCK
      flags.fill(1, first, first + Math.ceil(b.size / BLOCK))
    }
  }
  return flags
}

/** Host memory with the plan's layout: the CPU twin's arena. */
export interface HostArena {
  readonly plan: ArenaPlan
  readonly buffers: ReadonlyArray<ArrayBuffer>
  readonly f32: (name: string) => Float32Array
  readonly u32: (name: string) => Uint32Array
  /** The raw half-precision bits of an f16 tensor (see `HalfFloat`). */
  readonly f16: (name: string) => Uint16Array
  /** A whole shard or buffer as f32. */
  readonly raw: (buffer: number) => Float32Array
  /** An f32 tensor's values as one array, also for a tensor split into row blocks (a copy). */
  readonly readRows: (name: string) => Float32Array
  /** Sets an f32 tensor's values, also for a tensor split into row blocks. */
  readonly writeRows: (name: string, data: Float32Array) => void
}

/** Builds zeroed host memory for a plan, with the decay flags filled in. */
export const host = (p: ArenaPlan, buffers?: ReadonlyArray<ArrayBuffer>): HostArena => {
  const mem = buffers ?? p.buffers.map((b) => new ArrayBuffer(Math.max(4, b.bytes)))
  const one = (name: string) => {
    const t = tensorOf(p, name)
    if (t.blocks !== undefined) {
      throw new RangeError(
        `Arena.host: "${name}" is split into ${t.blocks.length} row blocks (${
          t.blocks[0].name
        }, …); view the blocks, or use readRows / writeRows`
      )
    }
    return t
  }
  const f32 = (name: string) => {
    const t = one(name)
    return new Float32Array(mem[t.buffer], t.offset, t.size)
  }
  const u32 = (name: string) => {
    const t = one(name)
    return new Uint32Array(mem[t.buffer], t.offset, t.size)
  }
  const f16 = (name: string) => {
    const t = one(name)
    return new Uint16Array(mem[t.buffer], t.offset, t.size)
  }
  const blockView = (b: Tensor) => new Float32Array(mem[b.buffer], b.offset, b.size)
  const readRows = (name: string) => {
    const t = tensorOf(p, name)
    const out = new Float32Array(t.size)
    let at = 0
    for (const { tensor: b } of rowBlocks(t)) {
      out.set(blockView(b), at)
      at += b.size
    }
    return out
  }
  const writeRows = (name: string, data: Float32Array) => {
    let at = 0
    for (const { tensor: b } of rowBlocks(tensorOf(p, name))) {
      blockView(b).set(data.subarray(at, at + b.size))
      at += b.size
    }
  }
  if (buffers === undefined) {
    ;(p.groups.get(PARAM) ?? []).forEach((shard, i) => u32(`opt.decay.${i}`).set(decayFlags(p, shard)))
  }
  return { plan: p, buffers: mem, f32, u32, f16, readRows, writeRows, raw: (i) => new Float32Array(mem[i]) }
}

/** A planned arena on the device. */
export interface Arena {
  readonly plan: ArenaPlan
  readonly buffers: ReadonlyArray<GPUBuffer>
  readonly tensor: (name: string) => Tensor
  /** The binding resource of a tensor (its byte range in its buffer). */
  readonly binding: (t: Tensor) => GPUBufferBinding
  /** Queues an upload of a whole tensor (or `data` at element `offset`). */
  readonly write: (name: string, data: Float32Array | Uint32Array | Uint16Array, offset?: number) => void
  /** Reads a tensor back (waits for the queue, checks the device). */
  readonly read: (name: string) => Effect.Effect<Float32Array, GpuDeviceLost | GpuUncapturedError>
  readonly readU32: (name: string) => Effect.Effect<Uint32Array, GpuDeviceLost | GpuUncapturedError>
  /** Uploads every buffer of a host arena of the same plan. */
  readonly upload: (h: HostArena) => void
  /** Copies every buffer into a new host arena. */
  readonly download: Effect.Effect<HostArena, GpuDeviceLost | GpuUncapturedError>
}

/**
 * Creates the plan's buffers (once), shrinking shards to the device's binding limit if needed is not done
 * here: plan with `maxShardBytes` ≤ the device's `maxStorageBufferBindingSize` (checked). Buffers are
 * destroyed when the scope closes.
 */
export const allocate = (
  p: ArenaPlan
): Effect.Effect<Arena, GpuOutOfMemory | GpuLimitExceeded | GpuDeviceLost, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const { device } = gpu
    const bindingLimit = gpu.adapter.limits.maxStorageBufferBindingSize ?? 128 * 1024 * 1024
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC
    const buffers: Array<GPUBuffer> = []
    for (const b of p.buffers) {
      if (b.bytes > bindingLimit) {
        return yield* Effect.fail(
          new GpuLimitExceeded({
            label: b.label,
            limit: "maxStorageBufferBindingSize",
            requested: b.bytes,
            allowed: bindingLimit
          })
        )
      }
      buffers.push(
        yield* Effect.acquireRelease(gpu.createBuffer(b.label, b.bytes, usage), (x) => Effect.sync(() => x.destroy()))
      )
    }
    const tensor = (name: string) => tensorOf(p, name)
    const binding = (t: Tensor): GPUBufferBinding => {
      if (t.blocks !== undefined) {
        throw new RangeError(`Arena.binding: "${t.name}" is split into row blocks; bind its blocks (ops do this)`)
      }
      return { buffer: buffers[t.buffer], offset: t.offset, size: t.bytes }
    }
    const write = (name: string, data: Float32Array | Uint32Array | Uint16Array, offset = 0) => {
      const t = tensor(name)
      if (offset + data.length > t.size) {
        throw new RangeError(`Arena.write: ${data.length} elements at ${offset} overflow "${name}" of ${t.size}`)
      }
      const width = data.BYTES_PER_ELEMENT
      if ((t.dtype === "f16") !== (width === 2) || (width === 2 && (offset % 2 !== 0 || data.byteLength % 4 !== 0))) {
        throw new RangeError(
          `Arena.write: "${name}" is ${t.dtype}; write Uint16Array bits to f16 tensors (an even count at an even offset), 32-bit arrays otherwise`
        )
      }
      // Element range [offset, offset + length) cut at the row blocks' boundaries.
      let start = 0
      for (const { tensor: b } of rowBlocks(t)) {
        const lo = Math.max(offset, start)
        const hi = Math.min(offset + data.length, start + b.size)
        if (lo < hi) {
          device.queue.writeBuffer(
            buffers[b.buffer],
            b.offset + (lo - start) * width,
            data.buffer,
            data.byteOffset + (lo - offset) * width,
            (hi - lo) * width
          )
        }
        start += b.size
      }
    }
    const readBlocks = (t: Tensor) =>
      Effect.map(
        Effect.forEach(rowBlocks(t), ({ tensor: b }) => gpu.read(buffers[b.buffer], b.bytes, b.offset)),
        (parts) => {
          if (parts.length === 1) return parts[0]
          const out = new Uint8Array(parts.reduce((a, x) => a + x.byteLength, 0))
          let at = 0
          for (const x of parts) {
            out.set(new Uint8Array(x), at)
            at += x.byteLength
          }
          return out.buffer
        }
      )
    const read = (name: string) => Effect.map(readBlocks(tensor(name)), (b) => new Float32Array(b))
    const readU32 = (name: string) => Effect.map(readBlocks(tensor(name)), (b) => new Uint32Array(b))
    const upload = (h: HostArena) =>
      h.buffers.forEach((b, i) => device.queue.writeBuffer(buffers[i], 0, b, 0, p.buffers[i].bytes))
    const download = Effect.gen(function*() {
      const out: Array<ArrayBuffer> = []
      for (let i = 0; i < buffers.length; i++) {
        const b = yield* gpu.read(buffers[i], p.buffers[i].bytes)
        const copy = new ArrayBuffer(Math.max(4, p.buffers[i].bytes))
        new Uint8Array(copy).set(new Uint8Array(b))
        out.push(copy)
      }
      return host(p, out)
    })
    ;(p.groups.get(PARAM) ?? []).forEach((shard, i) => write(`opt.decay.${i}`, decayFlags(p, shard)))
    return { plan: p, buffers, tensor, binding, write, read, readU32, upload, download } satisfies Arena
  })
