/**
 * The CPU device: the matmul route (the platform BLAS through an FFI, or WebAssembly SIMD) that the CPU model
 * runs its step on, chosen once, described in words, and provided as a scoped service beside `Gpu`.
 *
 * The device belongs to the thread that made it (an FFI handle or a WebAssembly memory cannot cross threads): the
 * trainer's CPU model (`Trainer.cpuModel`) makes its own in its worker thread from the same {@link DeviceOptions}.
 *
 * @since 0.0.0
 */
import type { Effect } from "effect"
import { Context, Layer } from "effect"
import * as Gemm from "./Gemm.js"

/**
 * How to choose the device: `threads` per matmul (default every core), `deterministic` (one thread, a fixed
 * summation order: the same bits every run on one machine), or exactly one `route` (never a substitute).
 *
 * @since 0.0.0
 */
export type DeviceOptions = Gemm.SelectOptions

/** @since 0.0.0 */
export interface Device {
  readonly gemm: Gemm.Gemm
  /** Which route, on how many threads, and why a faster one was passed over. */
  readonly description: string
  /** Ends the route's helper threads (the multi-threaded WebAssembly route has some); a no-op for the others. */
  readonly close: () => void
}

/**
 * The route asked for cannot run here (the error names the fix).
 *
 * @since 0.0.0
 */
export const Unavailable = Gemm.GemmRouteUnavailable
/** @since 0.0.0 */
export type Unavailable = Gemm.GemmRouteUnavailable

/**
 * Chooses the device in the current thread; the caller ends it with `close` (or use {@link CpuDevice.layer}).
 *
 * @since 0.0.0
 */
export const make = (options: DeviceOptions = {}): Effect.Effect<Device, Unavailable> => Gemm.select(options)

/**
 * The CPU device as a service.
 *
 * @example
 * ```ts
 * const program = Effect.gen(function*() {
 *   const device = yield* CpuDevice.CpuDevice
 *   console.log(device.description)
 * }).pipe(Effect.provide(CpuDevice.CpuDevice.layer({ threads: 2 })))
 * ```
 *
 * @since 0.0.0
 */
export class CpuDevice extends Context.Tag("@envtrain/gpu/CpuDevice")<CpuDevice, Device>() {
  /** The device for the layer's scope: its helper threads end when the scope closes. */
  static readonly layer = (options: DeviceOptions = {}): Layer.Layer<CpuDevice, Unavailable> =>
    Layer.scoped(CpuDevice, Gemm.selectScoped(options))
}
