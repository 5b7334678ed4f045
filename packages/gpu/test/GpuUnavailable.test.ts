import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Gpu } from "../src/Gpu.js"

describe("Gpu without a usable adapter", () => {
  it.effect("fails with GpuUnavailable whose message carries the exact fix", () =>
    Effect.gen(function*() {
      // Asking Dawn for an adapter that does not exist is what a machine without a driver looks like to us.
      const error = yield* Effect.flip(
        Effect.scoped(Effect.provide(Gpu, Gpu.layer({ dawnOptions: ["adapter=no-such-adapter"] })))
      )
      assert.strictEqual(error._tag, "GpuUnavailable")
      assert.include(error.message, "apt-get install -y -t bookworm-backports mesa-vulkan-drivers")
      assert.include(error.message, "No WebGPU adapter is available")
    }))
})
