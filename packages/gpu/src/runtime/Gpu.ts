/**
 * The WebGPU device as a scoped service.
 *
 * `Gpu.layer()` opens Dawn (npm `webgpu`), picks the high-performance adapter, requests the adapter's own
 * maxima for the limits that training needs (the WebGPU defaults are far too small), enables shader-f16 and
 * subgroups when present, and destroys the device when its scope closes so the process can exit.
 * Device loss and uncaptured errors are recorded as they happen and surface as typed errors at the next
 * `fence` — never as a hang or as silently dropped work.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Gpu } from "@envtrain/gpu"
 *
 * const program = Effect.gen(function*() {
 *   const gpu = yield* Gpu.Gpu
 *   console.log(gpu.adapter.vendor, gpu.adapter.architecture)
 *   yield* gpu.fence
 * })
 * Effect.runPromise(program.pipe(Effect.provide(Gpu.Gpu.layer()), Effect.scoped))
 * ```
 *
 * @since 0.0.0
 */
// Its declarations name WebGPU's types (GPUDevice, GPUBuffer…): the emitted .d.ts keeps this reference for users.
/// <reference types="@webgpu/types" preserve="true" />
import { Context, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { create, globals } from "webgpu"
import {
  formatBytes,
  GpuDeviceLost,
  type GpuError,
  GpuLimitExceeded,
  GpuOutOfMemory,
  GpuShaderError,
  GpuUnavailable,
  GpuUncapturedError
} from "./GpuError.js"

// Node has no WebGPU globals (GPUBufferUsage, GPUMapMode, ...); install Dawn's, as a browser would have them.
for (const [key, value] of Object.entries(globals as Record<string, unknown>)) {
  if (!(key in globalThis)) Object.defineProperty(globalThis, key, { value, configurable: true, writable: true })
}

/** What the adapter is and what the device was given. */
export interface AdapterSummary {
  readonly vendor: string
  readonly architecture: string
  readonly device: string
  readonly description: string
  /** True for CPU (software) adapters such as lavapipe/llvmpipe or SwiftShader. */
  readonly isSoftware: boolean
  /** Features enabled on the device. */
  readonly features: ReadonlyArray<string>
  /** Every feature the adapter offers (a superset of `features`). */
  readonly adapterFeatures: ReadonlyArray<string>
  /** The device's limits, as granted. */
  readonly limits: Readonly<Record<string, number>>
  /** Subgroup-matrix configurations (tensor-core access) the adapter reports, if any, as readable strings. */
  readonly subgroupMatrixConfigs: ReadonlyArray<string>
  /** The same configurations as data (Dawn's `GPUSubgroupMatrixConfig`), in the adapter's order of preference. */
  readonly subgroupMatrix: ReadonlyArray<SubgroupMatrixConfig>
  /** Subgroup sizes the adapter reports (0 when it does not say). */
  readonly subgroupMinSize: number
  readonly subgroupMaxSize: number
}

/**
 * One subgroup-matrix configuration: left M×K and right K×N matrices of `componentType`, an M×N result of
 * `resultComponentType` (e.g. f16 × f16 → f32, 16×16×16 on NVIDIA; 8×8×8 on Apple).
 */
export interface SubgroupMatrixConfig {
  readonly componentType: string
  readonly resultComponentType: string
  readonly M: number
  readonly N: number
  readonly K: number
}

/** Reads Dawn's config objects field by field (their attributes are getters, which JSON.stringify skips). */
export const parseSubgroupMatrixConfigs = (raw: ReadonlyArray<unknown> | undefined): Array<SubgroupMatrixConfig> =>
  (raw ?? []).map((c) => {
    const o = c as Record<string, unknown>
    return {
      componentType: String(o.componentType),
      resultComponentType: String(o.resultComponentType),
      M: Number(o.M),
      N: Number(o.N),
      K: Number(o.K)
    }
  })

/** Options for {@link Gpu.layer}. */
export interface GpuOptions {
  /** Default "high-performance": on a box with a GPU and lavapipe, pick the GPU. */
  readonly powerPreference?: GPUPowerPreference
  /** Fail with `GpuUnavailable` if the only adapter is a software one (use on GPU machines). */
  readonly requireHardware?: boolean
  /** Optional features to enable when the adapter has them. */
  readonly optionalFeatures?: ReadonlyArray<string>
  /** Extra Dawn instance options, e.g. "backend=vulkan" or "adapter=NAME". */
  readonly dawnOptions?: ReadonlyArray<string>
}

/** Limits that training needs raised to the adapter's maxima (the spec defaults are 128 MiB bindings, 8 buffers, ...). */
const RAISED_LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupSizeY",
  "maxComputeWorkgroupSizeZ",
  "maxComputeWorkgroupsPerDimension",
  "maxBindGroups",
  "maxUniformBufferBindingSize"
] as const

const DEFAULT_OPTIONAL_FEATURES = [
  "shader-f16",
  "subgroups",
  "timestamp-query",
  "chromium-experimental-subgroup-matrix"
] as const

/** Dawn toggles: f16 on NVIDIA Vulkan is off unless asked for; timestamps are quantised unless told not to be. */
const DAWN_DEFAULTS = [
  "enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia",
  "disable-dawn-features=timestamp_quantization"
]

const MAX_RECORDED_ERRORS = 64

// One Dawn instance per process and per option set. Dropping an instance and creating another while Dawn's
// worker threads wind down crashed the process intermittently (a futex abort), so instances are kept for the
// life of the process. Programs end with an explicit exit (see `Main.run`), as Dawn's threads keep Node alive.
const instances = new Map<string, GPU>()
const dawnInstance = (extra: ReadonlyArray<string>): GPU => {
  const args = [...DAWN_DEFAULTS, ...extra]
  const key = args.join("\u0000")
  let instance = instances.get(key)
  if (instance === undefined) {
    instance = create(args)
    instances.set(key, instance)
  }
  return instance
}

/**
 * Running totals of objects created through the service, so a step program can prove it creates nothing per
 * step after warm-up (read before and after, compare).
 */
export interface GpuCounters {
  buffers: number
  bindGroups: number
  pipelines: number
}

/** The service: a device plus the checks that make its failures visible. */
export interface GpuService {
  readonly device: GPUDevice
  readonly adapter: AdapterSummary
  /** True when the device has the feature. */
  readonly hasFeature: (feature: string) => boolean
  /**
   * Waits until all submitted work has finished, then fails if the device was lost or if any uncaptured error
   * was reported since the previous fence (errors are cleared by the check).
   */
  readonly fence: Effect.Effect<void, GpuDeviceLost | GpuUncapturedError>
  /** The same checks as `fence`, without waiting for the queue. */
  readonly check: Effect.Effect<void, GpuDeviceLost | GpuUncapturedError>
  /** Creates a buffer, failing with a typed error naming `label` when it exceeds a limit or memory runs out. */
  readonly createBuffer: (
    label: string,
    size: number,
    usage: GPUBufferUsageFlags
  ) => Effect.Effect<GPUBuffer, GpuOutOfMemory | GpuLimitExceeded | GpuDeviceLost>
  /** Compiles a compute pipeline once per (label, source, entryPoint); compile errors come back with line numbers. */
  readonly pipeline: (
    label: string,
    code: string,
    entryPoint?: string
  ) => Effect.Effect<GPUComputePipeline, GpuShaderError | GpuDeviceLost>
  /** Copies `size` bytes from a STORAGE|COPY_SRC buffer to the host, checking the device afterwards. */
  readonly read: (
    buffer: GPUBuffer,
    size: number,
    offset?: number
  ) => Effect.Effect<ArrayBuffer, GpuDeviceLost | GpuUncapturedError>
  /** Objects created so far through `createBuffer`, `read`, `pipeline` and `createBindGroup`. */
  readonly counters: Readonly<GpuCounters>
  /** `device.createBindGroup`, counted. */
  readonly createBindGroup: (descriptor: GPUBindGroupDescriptor) => GPUBindGroup
}

/** The WebGPU device. */
export class Gpu extends Context.Tag("@envtrain/gpu/Gpu")<Gpu, GpuService>() {
  /** Opens the device for the life of the layer's scope. */
  static layer(options: GpuOptions = {}): Layer.Layer<Gpu, GpuUnavailable> {
    return Layer.scoped(Gpu, make(options))
  }
}

const isSoftwareAdapter = (info: GPUAdapterInfo): boolean => {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.toLowerCase()
  return /llvmpipe|lavapipe|swiftshader|software|warp/.test(text)
}

/** `Gpu.layer` as a module function, so `import { Gpu } from "@envtrain/gpu"` reads `Gpu.layer()`. */
export const layer = (options: GpuOptions = {}): Layer.Layer<Gpu, GpuUnavailable> => Gpu.layer(options)

/** Builds the service; the device is destroyed when the surrounding scope closes. */
export const make = (options: GpuOptions = {}): Effect.Effect<GpuService, GpuUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    const instance = dawnInstance(options.dawnOptions ?? [])
    const adapter = yield* Effect.tryPromise({
      try: () => instance.requestAdapter({ powerPreference: options.powerPreference ?? "high-performance" }),
      catch: (e) => new GpuUnavailable({ reason: `requestAdapter failed: ${String(e)}` })
    })
    if (adapter === null) {
      return yield* Effect.fail(new GpuUnavailable({ reason: "Dawn found no adapter (no Vulkan driver installed?)" }))
    }
    const info = adapter.info
    if (options.requireHardware === true && isSoftwareAdapter(info)) {
      return yield* Effect.fail(
        new GpuUnavailable({
          reason: `the only adapter is a software one (${info.vendor} ${info.device}) and requireHardware is set`
        })
      )
    }
    const wanted = options.optionalFeatures ?? DEFAULT_OPTIONAL_FEATURES
    const requiredFeatures = wanted.filter((f) => adapter.features.has(f)) as Array<GPUFeatureName>
    const requiredLimits: Record<string, number> = {}
    for (const name of RAISED_LIMITS) {
      const value = (adapter.limits as unknown as Record<string, number | undefined>)[name]
      if (typeof value === "number") requiredLimits[name] = value
    }
    let released = false
    const device = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => adapter.requestDevice({ requiredFeatures, requiredLimits, label: "envtrain" }),
        catch: (e) => new GpuUnavailable({ reason: `requestDevice failed: ${String(e)}` })
      }),
      (device) =>
        Effect.sync(() => {
          released = true
          device.destroy()
        })
    )

    // Failures are recorded as they happen and raised at the next fence.
    let lost: GpuDeviceLost | undefined
    const errors: Array<string> = []
    let droppedErrors = 0
    device.lost.then((l) => {
      if (!released) lost = new GpuDeviceLost({ reason: l.reason, detail: l.message || "no detail from the driver" })
    })
    device.onuncapturederror = (event: GPUUncapturedErrorEvent) => {
      if (errors.length < MAX_RECORDED_ERRORS) errors.push(`${event.error.constructor.name}: ${event.error.message}`)
      else droppedErrors++
    }

    const check = Effect.suspend((): Effect.Effect<void, GpuDeviceLost | GpuUncapturedError> => {
      if (lost !== undefined) return Effect.fail(lost)
      if (errors.length > 0) {
        const all = droppedErrors > 0 ? [...errors, `${droppedErrors} further errors not recorded`] : [...errors]
        errors.length = 0
        droppedErrors = 0
        return Effect.fail(new GpuUncapturedError({ errors: all }))
      }
      return Effect.void
    })

    // Resolves when the queue drains, or when the device is lost (whichever happens first), so it cannot hang.
    const fence = Effect.promise(() =>
      Promise.race([device.queue.onSubmittedWorkDone(), device.lost.then(() => undefined)])
    ).pipe(Effect.zipRight(check), Effect.withSpan("Gpu.fence"))

    const limits: Record<string, number> = {}
    for (const key in device.limits) {
      const v = (device.limits as unknown as Record<string, unknown>)[key]
      if (typeof v === "number") limits[key] = v
    }

    const counters: GpuCounters = { buffers: 0, bindGroups: 0, pipelines: 0 }
    const createBindGroup = (descriptor: GPUBindGroupDescriptor) => {
      counters.bindGroups++
      return device.createBindGroup(descriptor)
    }

    const createBuffer = Effect.fn("Gpu.createBuffer")(function*(label: string, size: number, usage: number) {
      if (lost !== undefined) return yield* Effect.fail(lost)
      counters.buffers++
      if (size > device.limits.maxBufferSize) {
        return yield* Effect.fail(
          new GpuLimitExceeded({ label, limit: "maxBufferSize", requested: size, allowed: device.limits.maxBufferSize })
        )
      }
      device.pushErrorScope("out-of-memory")
      device.pushErrorScope("validation")
      // Sizes are rounded up to 4 bytes: every storage binding must be a multiple of 4.
      const buffer = device.createBuffer({ label, size: Math.max(4, Math.ceil(size / 4) * 4), usage })
      const validation = yield* Effect.promise(() => device.popErrorScope())
      const oom = yield* Effect.promise(() => device.popErrorScope())
      if (oom !== null || validation !== null) {
        buffer.destroy()
        return yield* Effect.fail(
          new GpuOutOfMemory({ label, bytes: size, detail: (oom ?? validation)!.message })
        )
      }
      return buffer
    })

    const pipelines = new Map<string, GPUComputePipeline>()
    const pipeline = Effect.fn("Gpu.pipeline")(function*(label: string, code: string, entryPoint = "main") {
      const key = `${label}\u0000${entryPoint}\u0000${code}`
      const cached = pipelines.get(key)
      if (cached !== undefined) return cached
      if (lost !== undefined) return yield* Effect.fail(lost)
      const module = device.createShaderModule({ label, code })
      const info = yield* Effect.promise(() => module.getCompilationInfo())
      const compileErrors = info.messages
        .filter((m) => m.type === "error")
        .map((m) => `${label}:${m.lineNum}:${m.linePos} ${m.message}`)
      if (compileErrors.length > 0) return yield* Effect.fail(new GpuShaderError({ label, messages: compileErrors }))
      const created = yield* Effect.tryPromise({
        try: () => device.createComputePipelineAsync({ label, layout: "auto", compute: { module, entryPoint } }),
        catch: (e) => new GpuShaderError({ label, messages: [String(e)] })
      })
      counters.pipelines++
      pipelines.set(key, created)
      return created
    })

    const read = Effect.fn("Gpu.read")(function*(buffer: GPUBuffer, size: number, offset = 0) {
      const padded = Math.ceil(size / 4) * 4
      return yield* Effect.acquireUseRelease(
        Effect.sync(() => {
          counters.buffers++
          return device.createBuffer({
            label: `readback(${buffer.label})`,
            size: padded,
            usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST
          })
        }),
        (staging) =>
          Effect.gen(function*() {
            const encoder = device.createCommandEncoder({ label: "readback" })
            encoder.copyBufferToBuffer(buffer, offset, staging, 0, padded)
            device.queue.submit([encoder.finish()])
            yield* fence
            yield* Effect.tryPromise({
              try: () => staging.mapAsync(GPUMapMode.READ),
              catch: (e) => new GpuDeviceLost({ reason: "unknown", detail: `mapAsync failed: ${String(e)}` })
            })
            const out = staging.getMappedRange().slice(0, size)
            staging.unmap()
            return out
          }),
        (staging) => Effect.sync(() => staging.destroy())
      )
    })

    const adapterFeatures = [...adapter.features].sort()
    const rawInfo = info as unknown as {
      subgroupMatrixConfigs?: ReadonlyArray<unknown>
      subgroupMinSize?: number
      subgroupMaxSize?: number
    }
    const subgroupMatrix = parseSubgroupMatrixConfigs(rawInfo.subgroupMatrixConfigs)
    const summary: AdapterSummary = {
      vendor: info.vendor,
      architecture: info.architecture,
      device: info.device,
      description: info.description,
      isSoftware: isSoftwareAdapter(info),
      features: [...device.features].sort(),
      adapterFeatures,
      limits,
      subgroupMatrixConfigs: subgroupMatrix.map((c) =>
        `${c.componentType}×${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`
      ),
      subgroupMatrix,
      subgroupMinSize: rawInfo.subgroupMinSize ?? 0,
      subgroupMaxSize: rawInfo.subgroupMaxSize ?? 0
    }

    return {
      device,
      adapter: summary,
      hasFeature: (f: string) => device.features.has(f),
      fence,
      check,
      createBuffer,
      pipeline,
      read,
      counters,
      createBindGroup
    } satisfies GpuService
  })

/** A one-line description of the adapter, for logs. */
export const describe = (a: AdapterSummary): string =>
  `${a.vendor || "unknown vendor"} / ${a.architecture || "unknown architecture"} / ${a.device || a.description}` +
  `${a.isSoftware ? " (software)" : ""}; max binding ${formatBytes(a.limits.maxStorageBufferBindingSize ?? 0)}, ` +
  `max buffer ${formatBytes(a.limits.maxBufferSize ?? 0)}, workgroup storage ` +
  `${formatBytes(a.limits.maxComputeWorkgroupStorageSize ?? 0)}`

export type { GpuError }
