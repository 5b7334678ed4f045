import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Matmul from "../src/Matmul.js"
import * as Reference from "../src/ops/Reference.js"
import { Gpu } from "../src/runtime/Gpu.js"
import { GpuUncapturedError } from "../src/runtime/GpuError.js"

const random = (n: number, seed: number) => {
  // xorshift: deterministic inputs so a failure reproduces.
  let s = seed >>> 0 || 1
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    out[i] = ((s >>> 0) / 0xffffffff) * 2 - 1
  }
  return out
}

const maxRelError = (got: Float32Array, want: Float32Array) => {
  let worst = 0
  for (let i = 0; i < want.length; i++) {
    worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])))
  }
  return worst
}

layer(Gpu.layer())("Matmul (tiled f32) on the real device", (it) => {
  // Shapes straddle the 64×64×16 tile: exact multiples, ragged edges, and degenerate vectors.
  const shapes = [
    { m: 64, n: 64, k: 16 },
    { m: 37, n: 53, k: 29 },
    { m: 1, n: 130, k: 7 },
    { m: 70, n: 1, k: 33 }
  ]
  for (const shape of shapes) {
    it.scoped(`matches the TypeScript twin at ${shape.m}×${shape.n}×${shape.k}`, () =>
      Effect.gen(function*() {
        const mm = yield* Matmul.make(shape)
        const a = random(shape.m * shape.k, 1 + shape.m)
        const b = random(shape.k * shape.n, 2 + shape.n)
        const got = yield* mm.run(a, b)
        const want = Reference.matmul(a, b, shape.m, shape.n, shape.k)
        assert.strictEqual(got.length, want.length)
        assert.isBelow(maxRelError(got, want), 1e-5)
      }))
  }

  it.scoped("reuses its buffers and bind group across runs", () =>
    Effect.gen(function*() {
      const mm = yield* Matmul.make({ m: 8, n: 8, k: 8 })
      const first = yield* mm.run(random(64, 3), random(64, 4))
      const second = yield* mm.run(random(64, 5), random(64, 6))
      assert.notDeepEqual(Array.from(first), Array.from(second))
      assert.isBelow(maxRelError(second, Reference.matmul(random(64, 5), random(64, 6), 8, 8, 8)), 1e-5)
    }))

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
