import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gemm } from "@envtrain/gpu"
import { Effect, Exit } from "effect"
import { deviceModel } from "../src/internal/deviceModel.js"
import { batchOf, optimizerStep } from "../src/internal/model.js"
import * as Trainer from "../src/Trainer.js"
import * as F from "./fixtures.js"

// The CPU device's model against the CPU reference model (the specification) through the trainer's interface.

const adam = optimizerStep(
  { maxGradNorm: 0.5, adamBeta1: 0.9, adamBeta2: 0.99, adamEpsilon: 1e-8, weightDecay: 0.01 },
  3e-3
)

describe("CPU device model", () => {
  it.effect("generates the reference's greedy tokens, scores and trains like it (f32 tolerance)", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 2)
      const ref = Trainer.referenceModel(checkpoint)
      const dev = deviceModel(checkpoint, { gemm: Gemm.spec })
      const greedy = yield* dev.generate(F.requests(0))
      assert.deepStrictEqual(
        greedy.map((c) => c.tokenIds),
        (yield* ref.generate(F.requests(0))).map((c) => c.tokenIds)
      )
      const batch = batchOf(F.requests(0).map((r) => r.promptIds), greedy.map((c) => c.tokenIds))
      const [a, b] = [yield* dev.score(batch, 0.9), yield* ref.score(batch, 0.9)]
      assert.isBelow(F.maxRel(a.logprobs, b.logprobs), 1e-4)
      assert.isBelow(F.maxRel(a.entropies, b.entropies), 1e-4)
      // Two updates with a weighting that depends on the scores, as GRPO's does.
      for (let step = 0; step < 2; step++) {
        const w = (s: { readonly logprobs: Float64Array }) =>
          Array.from(s.logprobs, (l, i) => (i % 2 ? 0.3 : -0.2) * Math.exp(l))
        yield* dev.accumulate(batch, 0.9, w)
        yield* ref.accumulate(batch, 0.9, w)
        const [g1, g2] = [yield* dev.step(adam), yield* ref.step(adam)]
        assert.isAbove(g2.gradNorm, 0)
        assert.isBelow(Math.abs(g1.gradNorm - g2.gradNorm) / g2.gradNorm, 1e-4)
      }
      const [s1, s2] = [yield* dev.exportState, yield* ref.exportState]
      assert.strictEqual(s1.optimizerStep, 2)
      for (const [name, t] of s2.weights) assert.isBelow(F.maxRel(s1.weights.get(name)!.data, t.data), 1e-5, name)
      // Generation after the update runs on the new weights (the KV-cache pool was dropped).
      assert.deepStrictEqual(
        (yield* dev.generate(F.requests(1))).map((c) => c.tokenIds),
        (yield* ref.generate(F.requests(1))).map((c) => c.tokenIds)
      )
    }))

  it.effect("several passes per batch give the one-pass scores and gradient; state and moments round-trip", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 3)
      const one = deviceModel(checkpoint, { gemm: Gemm.spec })
      const many = deviceModel(checkpoint, { gemm: Gemm.spec, maxTokensPerPass: 12 })
      const completions = (yield* one.generate(F.requests(1))).map((c) => c.tokenIds)
      const batch = batchOf(F.requests(1).map((r) => r.promptIds), completions)
      const w = () => Array.from({ length: 3 * batch.length }, (_, i) => (i % 3) - 1)
      const [a, b] = [yield* one.accumulate(batch, 1, w), yield* many.accumulate(batch, 1, w)]
      // Passes of other sizes change the matmuls' shapes (BLAS picks kernels by shape) and the packing: f32 rounding.
      assert.isBelow(F.maxRel(a.logprobs, b.logprobs), 1e-5)
      yield* one.step(adam)
      yield* many.step(adam)
      const s1 = yield* one.exportState
      const s2 = yield* many.exportState
      for (const [name, t] of s1.weights) assert.isBelow(F.maxRel(s2.weights.get(name)!.data, t.data), 1e-5, name)
      // A fresh model given the state and moments continues exactly like the first.
      const copy = deviceModel(checkpoint, { gemm: Gemm.spec })
      yield* copy.importState(s1)
      yield* copy.importOptimizerState!(yield* one.exportOptimizerState!)
      yield* one.accumulate(batch, 1, w)
      yield* copy.accumulate(batch, 1, w)
      yield* one.step(adam)
      yield* copy.step(adam)
      const [x, y] = [yield* one.exportState, yield* copy.exportState]
      for (const [name, t] of x.weights) assert.deepStrictEqual(y.weights.get(name)!.data, t.data, name)
      const bad = yield* Effect.flip(copy.importOptimizerState!({ moments: new Map() }))
      assert.match(bad.problem, /lacks "exp_avg\./)
    }))

  it.scoped("Trainer.cpuModel runs the device in a worker thread: the in-thread results, bit for bit, and a free event loop", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 4)
      const remote = yield* Trainer.cpuModel(checkpoint, { route: "openblas", threads: 1 })
      assert.match(remote.device ?? "", /^OpenBLAS .* on 1 thread/)
      const local = deviceModel(checkpoint, { gemm: (yield* Gemm.select({ route: "openblas", threads: 1 })).gemm })
      const [a, b] = [yield* remote.generate(F.requests(1)), yield* local.generate(F.requests(1))]
      assert.deepStrictEqual(a, b)
      const batch = batchOf(F.requests(1).map((r) => r.promptIds), a.map((c) => c.tokenIds))
      const w = (s: { readonly logprobs: Float64Array }) => Array.from(s.logprobs, (l) => -0.1 * l)
      assert.deepStrictEqual(yield* remote.accumulate(batch, 1, w), yield* local.accumulate(batch, 1, w))
      assert.deepStrictEqual(yield* remote.step(adam), yield* local.step(adam))
      const [x, y] = [yield* remote.exportState, yield* local.exportState]
      for (const [name, t] of y.weights) assert.deepStrictEqual(x.weights.get(name)!.data, t.data, name)
      // While the worker scores a large batch, this thread's timers keep firing (a blocked loop fires none until the
      // end; the bound is loose so that a loaded machine does not fail it).
      const big = batchOf(
        Array.from({ length: 24 }, (_, i) => Array.from({ length: 200 }, (_, t) => (i * 31 + t * 7) % 900)),
        Array.from({ length: 24 }, (_, i) => Array.from({ length: 100 }, (_, t) => (i + t * 3) % 900))
      )
      let ticks = 0
      const started = performance.now()
      const timer = setInterval(() => ticks++, 5)
      yield* remote.score(big, 1)
      clearInterval(timer)
      const elapsed = performance.now() - started
      assert.isAbove(ticks, 0, `no timer fired in ${elapsed.toFixed(0)} ms of scoring`)
      assert.isAtLeast(ticks, Math.floor(elapsed / 5 / 10), `only ${ticks} ticks in ${elapsed.toFixed(0)} ms`)
    }))

  it.scoped("a route this machine does not have fails the start, naming the fix; it is never substituted", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 4)
      const exit = yield* Effect.exit(Trainer.cpuModel(checkpoint, { route: "accelerate" }))
      assert.isTrue(Exit.isFailure(exit))
      const message = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.match(message, /accelerate matmul route is not available/)
      assert.match(message, /Fix: ask for openblas/)
    }))

  it.scoped("a kernel that throws in the worker fails the call with an error naming the device and the call", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 4)
      const model = yield* Trainer.cpuModel(checkpoint, { threads: 1 })
      const exit = yield* Effect.exit(model.score(batchOf([[1, 2, 99_999]], [[3]]), 1))
      assert.isTrue(Exit.isFailure(exit))
      const message = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.match(message, /CPU model worker envtrain-cpu-model \(thread \d+, OpenBLAS .* on 1 thread\)/)
      assert.match(message, /Token id 99999 at index 2 is outside the vocabulary/)
      assert.match(message, /\[call: Score\]/)
    }))
})
