import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TinyTransformer from "../src/model/TinyTransformer.js"
import * as CpuTwin from "../src/ops/CpuTwin.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import * as StepProgram from "../src/runtime/StepProgram.js"
import { maxRelError } from "./helpers.js"

const tokens = (n: number, seed: number, vocab: number) =>
  Uint32Array.from({ length: n }, (_, i) => (i * 7 + seed * 13 + ((i * i) % 5)) % vocab)

const setup = (cfg: TinyTransformer.TinyTransformerConfig) =>
  Effect.gen(function*() {
    const plan = Arena.plan(TinyTransformer.specs(cfg))
    const h = Arena.host(plan)
    TinyTransformer.init(h, cfg, 3)
    const arena = yield* Arena.allocate(plan)
    arena.upload(h)
    const ops = TinyTransformer.ops(plan, cfg)
    const program = yield* StepProgram.make(arena, { microBatch: ops })
    return { plan, h, arena, ops, program }
  })

const hyper = { lr: 3e-3, beta1: 0.9, beta2: 0.95, weightDecay: 0.1, maxGradNorm: 1 }

layer(Gpu.layer())("StepProgram on a one-block Qwen3-style transformer", (it) => {
  it.scoped("a GPU step equals the CPU twin step (2 micro-batches, 2 logit chunks)", () =>
    Effect.gen(function*() {
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, chunk: 8, microBatches: 2 })
      const { arena, h, ops, plan } = yield* setup(cfg)
      const program = yield* StepProgram.make(arena, { microBatch: ops })
      const mbs = [TinyTransformer.batch(cfg, tokens(12, 1, 37)), TinyTransformer.batch(cfg, tokens(12, 2, 37))]
      for (let step = 1; step <= 2; step++) {
        const r = yield* program.step({ ...hyper, step }, mbs)
        const want = CpuTwin.step(h, { microBatch: ops }, { ...hyper, step }, mbs)
        assert.closeTo(r.loss, want[Arena.Result.loss], 1e-4 * Math.abs(want[0]))
        assert.closeTo(r.gradNorm, want[Arena.Result.gradNorm], 1e-4 * want[1])
        assert.isAbove(r.loss, 0)
        assert.isAbove(r.gradNorm, 0)
        const got = yield* arena.download
        for (const shard of [...plan.groups.get(Arena.PARAM)!, ...plan.groups.get(Arena.GRAD)!]) {
          const e = maxRelError(got.raw(shard), h.raw(shard))
          assert.isBelow(e, 2e-4, `${plan.buffers[shard].label} after step ${step}: ${e}`)
        }
      }
    }))

  it.scoped("training lowers the loss; steps create nothing and submit once per micro-batch", () =>
    Effect.gen(function*() {
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, tie: true })
      const { program } = yield* setup(cfg)
      const mb = TinyTransformer.batch(cfg, tokens(12, 5, 37))
      const losses: Array<number> = []
      for (let step = 1; step <= 25; step++) {
        const r = yield* program.step({ ...hyper, lr: 2e-2, step }, [mb])
        losses.push(r.loss)
        if (step > 1) {
          assert.strictEqual(r.counters.buffersCreated, 0)
          assert.strictEqual(r.counters.bindGroupsCreated, 0)
          assert.strictEqual(r.counters.pipelinesCreated, 0)
        }
        assert.strictEqual(r.counters.submits, 1)
        assert.strictEqual(
          r.counters.dispatches,
          program.microBatch.dispatches.length + program.optimizer.dispatches.length
        )
        assert.isFalse(r.skipped)
      }
      assert.isBelow(losses[losses.length - 1], losses[0] * 0.5, `losses: ${losses.map((l) => l.toFixed(3)).join(" ")}`)
    }))

  it.scoped("run-ahead: steps submitted back to back give the CPU twin's losses", () =>
    Effect.gen(function*() {
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, tie: true })
      const { h, ops, program } = yield* setup(cfg)
      const mbs = [1, 2, 3].map((s) => [TinyTransformer.batch(cfg, tokens(12, s, 37))])
      // Three submits without waiting: the third reuses the first read-back slot, so it waits for step 1.
      const pending = []
      for (let step = 1; step <= 3; step++) pending.push(yield* program.submit({ ...hyper, step }, mbs[step - 1]))
      const got = []
      for (const p of pending) got.push(yield* p.result)
      assert.strictEqual((yield* pending[0].result).loss, got[0].loss) // a handle can be read again
      for (let step = 1; step <= 3; step++) {
        const want = CpuTwin.step(h, { microBatch: ops }, { ...hyper, step }, mbs[step - 1])
        assert.closeTo(got[step - 1].loss, want[Arena.Result.loss], 1e-4 * want[Arena.Result.loss])
      }
    }))

  it.scoped("deterministic: two programs from the same state produce bit-identical parameters", () =>
    Effect.gen(function*() {
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, tie: true })
      const runs = []
      for (let k = 0; k < 2; k++) {
        const { arena, plan, program } = yield* setup(cfg)
        for (let step = 1; step <= 2; step++) {
          yield* program.step({ ...hyper, step }, [TinyTransformer.batch(cfg, tokens(12, step, 37))])
        }
        const got = yield* arena.download
        runs.push(plan.groups.get(Arena.PARAM)!.map((shard) => new Uint32Array(got.raw(shard).buffer)))
      }
      assert.deepStrictEqual(runs[0], runs[1])
    }))

  it.scoped("a non-finite gradient skips the update on the device and is reported", () =>
    Effect.gen(function*() {
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, tie: true })
      const { arena, program } = yield* setup(cfg)
      arena.write("param.wo", new Float32Array([NaN]))
      const before = yield* arena.read("param.wq")
      const r = yield* program.step({ ...hyper, step: 1 }, [TinyTransformer.batch(cfg, tokens(12, 5, 37))])
      assert.isTrue(r.skipped)
      assert.deepStrictEqual(Array.from(yield* arena.read("param.wq")), Array.from(before))
    }))

  it.scoped("profiles every kernel with timestamp queries", () =>
    Effect.gen(function*() {
      const gpu = yield* Gpu
      if (!gpu.hasFeature("timestamp-query")) return
      const cfg = TinyTransformer.config({ vocab: 37, dim: 32, ffn: 48, batch: 2, seq: 6, tie: true })
      const { program } = yield* setup(cfg)
      const profile = yield* program.profile({ ...hyper, step: 1 }, [TinyTransformer.batch(cfg, tokens(12, 5, 37))])
      const labels = profile.map((p) => p.label)
      for (const l of ["matmul_NT", "matmul_NN", "matmul_TN", "adamw", "attention_tiled_hd8_packed"]) {
        assert.include(labels, l)
      }
      assert.isTrue(profile.every((p) => p.micros >= 0 && p.calls > 0))
    }))
})
