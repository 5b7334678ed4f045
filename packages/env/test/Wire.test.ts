// The observation envelope: reward/done/metadata never travel inside the observation, whatever object it is.
import { assert, describe, it } from "@effect/vitest"
import * as Wire from "../src/Wire.js"

describe("Wire.envelope", () => {
  it("drops reward, done and metadata from the observation and keeps the rest in order", () => {
    const frame = Wire.envelope({
      observation: { text: "hi", reward: 5, done: true, metadata: { a: 1 }, n: 2 },
      reward: 0.5,
      done: false
    })
    assert.strictEqual(
      Wire.encodeFrame(frame),
      `{"type":"observation","data":{"observation":{"text":"hi","n":2},"reward":0.5,"done":false}}`
    )
  })

  it("writes a bare observation as given, with a null reward when there is none", () => {
    const observation = { text: "hi", n: 2 }
    const frame = Wire.envelope({ observation, reward: undefined, done: true } as never)
    assert.strictEqual(
      Wire.encodeFrame(frame),
      `{"type":"observation","data":{"observation":{"text":"hi","n":2},"reward":null,"done":true}}`
    )
  })

  it("sends a class instance's own fields (as a plain copy: its prototype's toJSON is not used)", () => {
    class Observation {
      constructor(readonly text: string) {}
      toJSON() {
        return { replaced: true }
      }
    }
    const frame = Wire.envelope({ observation: new Observation("hi") as never, reward: 1, done: false })
    assert.strictEqual(
      Wire.encodeFrame(frame),
      `{"type":"observation","data":{"observation":{"text":"hi"},"reward":1,"done":false}}`
    )
  })

  it("a non-enumerable toJSON on the observation is not used either (the copy drops it)", () => {
    const observation = Object.defineProperty({ text: "hi" }, "toJSON", { value: () => ({ replaced: true }) })
    const frame = Wire.envelope({ observation, reward: 1, done: false })
    assert.strictEqual(
      Wire.encodeFrame(frame),
      `{"type":"observation","data":{"observation":{"text":"hi"},"reward":1,"done":false}}`
    )
  })
})
