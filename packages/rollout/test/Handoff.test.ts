import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import * as Handoff from "../src/internal/handoff.js"

// Lets forked fibers run until they block.
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("Handoff", () => {
  it.effect("delivers in offer order, waits for room beyond its capacity, and ends after the remaining items", () =>
    Effect.gen(function*() {
      const h = Handoff.make<number, string>(2)
      const offered: Array<number> = []
      const producer = yield* Effect.fork(
        Effect.forEach([1, 2, 3, 4, 5], (n) => Effect.tap(h.offer(n), () => Effect.sync(() => offered.push(n))))
      )
      yield* settle
      // Two fit; the third waits for room.
      assert.deepStrictEqual(offered, [1, 2])
      assert.strictEqual(yield* h.take, 1)
      yield* settle
      assert.deepStrictEqual(offered, [1, 2, 3])
      const rest = [yield* h.take, yield* h.take]
      yield* settle
      rest.push(yield* h.take, yield* h.take)
      yield* Fiber.join(producer)
      h.end(Exit.void)
      assert.deepStrictEqual(rest, [2, 3, 4, 5])
      const after = yield* Effect.exit(h.take)
      assert.deepStrictEqual(after, Exit.fail(Option.none()))
    }))

  it.effect("a waiting consumer gets the next item at once, and the producers' failure after the items", () =>
    Effect.gen(function*() {
      const h = Handoff.make<string, string>(1)
      const consumer = yield* Effect.fork(h.take)
      yield* settle
      yield* h.offer("a")
      assert.strictEqual(yield* Fiber.join(consumer), "a")
      yield* h.offer("b")
      h.end(Exit.fail("boom"))
      assert.strictEqual(yield* h.take, "b")
      const failed = yield* Effect.exit(h.take)
      assert.isTrue(Exit.isFailure(failed))
      if (Exit.isFailure(failed)) {
        assert.deepStrictEqual(Cause.failureOption(failed.cause), Option.some(Option.some("boom")))
      }
    }))

  it.effect("an interrupted offer or take leaves nothing behind", () =>
    Effect.gen(function*() {
      const h = Handoff.make<number, never>(1)
      yield* h.offer(1)
      const blocked = yield* Effect.fork(h.offer(2))
      yield* settle
      yield* Fiber.interrupt(blocked)
      assert.strictEqual(yield* h.take, 1)
      // The interrupted offer's item never arrives; a new offer goes straight through.
      const waiting = yield* Effect.fork(h.take)
      yield* settle
      yield* Fiber.interrupt(waiting)
      yield* h.offer(3)
      assert.strictEqual(yield* h.take, 3)
    }))
})
