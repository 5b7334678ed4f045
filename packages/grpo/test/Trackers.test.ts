import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Config from "../src/Config.js"
import * as TfEvents from "../src/internal/tfevents.js"
import * as Trackers from "../src/Trackers.js"

// The event files and Trackio's inbox are opened by the real TensorBoard and Trackio in the interop suite
// (interop/python/test_trackers.py); here, the parts with known answers.
describe("report_to", () => {
  it("CRC-32C and TFRecord's masking match the published check values", () => {
    // CRC-32C's check value (RFC 3720's polynomial) for the ASCII digits 1-9.
    assert.strictEqual(TfEvents.crc32c(new TextEncoder().encode("123456789")), 0xe3069283)
    assert.strictEqual(TfEvents.crc32c(new Uint8Array(32)), 0x8a9136aa)
    const framed = TfEvents.record(new Uint8Array([1, 2, 3]))
    assert.strictEqual(framed.length, 8 + 4 + 3 + 4)
    const view = new DataView(framed.buffer)
    assert.strictEqual(view.getBigUint64(0, true), 3n)
    assert.strictEqual(view.getUint32(8, true), TfEvents.maskedCrc32c(framed.subarray(0, 8)))
  })

  it("training metrics are logged as train/<name> (transformers' rewrite_logs), evaluation metrics as they are", () => {
    assert.deepStrictEqual(
      Trackers.trainKeys({ step: 3, epoch: 0.5, reward: 0.25, loss: null, "eval/success_rate": 1 }),
      { "train/epoch": 0.5, "train/reward": 0.25, "train/loss": null, "eval/success_rate": 1 }
    )
  })

  it.effect("the configuration takes a name or a list; an unknown tracker is refused naming the ones written", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual((yield* Config.fromSources({ report_to: "tensorboard" })).reportTo, ["tensorboard"])
      assert.deepStrictEqual((yield* Config.fromSources({ report_to: ["trackio", "tensorboard"] })).reportTo, [
        "trackio",
        "tensorboard"
      ])
      assert.deepStrictEqual((yield* Config.fromSources({ report_to: "none" })).reportTo, [])
      assert.deepStrictEqual((yield* Config.fromSources({})).reportTo, [])
      for (const bad of ["wandb", ["trackio", "all"]]) {
        const error = yield* Effect.flip(Config.fromSources({ report_to: bad }))
        assert.include(error.message, "which envtrain does not write: it writes trackio, tensorboard (or \"none\"")
        assert.include(error.message, Array.isArray(bad) ? "\"all\"" : "\"wandb\"")
      }
    }))
})
