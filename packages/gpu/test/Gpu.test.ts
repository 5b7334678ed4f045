import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Gpu } from "../src/runtime/Gpu.js"
import { GpuUncapturedError } from "../src/runtime/GpuError.js"

// The device layer on the real adapter (the kernels themselves are checked against their twins in Kernels.test.ts).
layer(Gpu.layer())("Gpu on the real device", (it) => {
  it.effect("reports the adapter it opened", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      assert.isTrue(gpu.adapter.limits.maxStorageBufferBindingSize >= 128 * 1024 * 1024)
      assert.isTrue(gpu.adapter.features.every((f) => gpu.adapter.adapterFeatures.includes(f)))
      yield* gpu.fence
    }))

  it.effect("turns an uncaptured validation error into a typed failure at the next fence", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      // Writing past the end of a buffer is a validation error that nobody captures.
      const buffer = gpu.device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST })
      gpu.device.queue.writeBuffer(buffer, 64, new Float32Array(16))
      const result = yield* Effect.flip(gpu.fence)
      assert.instanceOf(result, GpuUncapturedError)
      assert.match(result.message, /uncaptured error/)
      buffer.destroy()
      // The error was consumed by the failing fence; the device keeps working.
      yield* gpu.fence
    }))

  it.effect("fails with a typed error naming the shader when WGSL does not compile", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      const error = yield* Effect.flip(gpu.pipeline("broken", "@compute @workgroup_size(1) fn main() { let x = ; }"))
      assert.strictEqual(error._tag, "GpuShaderError")
      assert.match(error.message, /broken:1:/)
    }))

  it.effect("refuses a buffer larger than the device allows, naming it", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      const error = yield* Effect.flip(
        gpu.createBuffer("huge.weights", gpu.adapter.limits.maxBufferSize + 4, GPUBufferUsage.STORAGE)
      )
      assert.strictEqual(error._tag, "GpuLimitExceeded")
      assert.match(error.message, /huge\.weights/)
    }))
})

describe("Gpu options", () => {
  layer(Gpu.layer({ optionalFeatures: [] }))((it) => {
    it.effect("enables no optional feature when none is asked for", () =>
      Effect.gen(function*() {
        const gpu = yield* Gpu
        assert.isFalse(gpu.hasFeature("shader-f16"))
      }))
  })
})
