import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as CpuTwin from "../src/ops/CpuTwin.js"
import * as Ops from "../src/ops/Ops.js"
import * as Arena from "../src/runtime/Arena.js"
import { Gpu } from "../src/runtime/Gpu.js"
import * as Program from "../src/runtime/Program.js"
import { maxRelError, random } from "./helpers.js"

// A tied embedding E [V, h] larger than one (artificially tiny) binding is split into row blocks; every op that
// touches it runs per block. The same ops on an unsplit plan are the reference, on the device and on the twin.
const V = 40
const H = 32
const N = 12 // tokens
const specs = (): Record<string, Arena.TensorSpec> => ({
  ...Arena.parameters({ E: { shape: [V, H], decay: true }, W: { shape: [H, 8] } }),
  w16: { shape: [V, H], dtype: "f16", group: "w16", blockLike: "param.E" },
  ids: { shape: [N], dtype: "u32" },
  x: { shape: [N, H] },
  dOut: { shape: [N, H] },
  logits: { shape: [N, V] },
  logits16: { shape: [N, V] },
  dl: { shape: [N, V] },
  dx: { shape: [N, H] },
  y: { shape: [V, 8] },
  z: { shape: [V, 8] },
  ez: { shape: [H, 8] }
})
// 2 KiB shards: 16 rows of E per block, so E is 3 blocks (16, 16, 8) and so are its gradient and moments.
const SMALL = { maxShardBytes: 2048 }
const IDS = [3, 17, 39, 3, 20, 40, 0, 31, 16, 15, 17, 3] // repeats, every block, one id past the table

const ops = (plan: Arena.ArenaPlan) => {
  const t = (n: string) => Arena.tensorOf(plan, n)
  return [
    Ops.embedding({ table: t("param.E"), ids: t("ids"), out: t("x") }),
    // The tied LM head: logits = x · Eᵀ (N split), its f16 copy, and both gradients.
    Ops.matmul({ a: t("x"), b: t("param.E"), c: t("logits"), m: N, n: V, k: H, transB: true }),
    Ops.cast({ x: t("param.E"), y: t("w16") }),
    Ops.matmul({ a: t("x"), b: t("w16"), c: t("logits16"), m: N, n: V, k: H, transB: true, tier: "tiled128h" }),
    Ops.matmul({ a: t("dl"), b: t("param.E"), c: t("dx"), m: N, n: H, k: V, beta: 0.5 }), // K split
    Ops.matmul({ a: t("dl"), b: t("x"), c: t("grad.E"), m: V, n: H, k: N, transA: true, beta: 1 }), // C blocked
    Ops.matmul({ a: t("param.E"), b: t("param.W"), c: t("y"), m: V, n: 8, k: H }), // A blocked, M split
    Ops.matmul({ a: t("param.E"), b: t("z"), c: t("ez"), m: H, n: 8, k: V, transA: true }), // A blocked, K split
    Ops.embeddingBackward({ ids: t("ids"), dOut: t("dOut"), dTable: t("grad.E") })
  ]
}

const fill = (h: Arena.HostArena) => {
  let seed = 40
  for (const [name, t] of h.plan.tensors) {
    if (t.dtype !== "f32" || name.startsWith("step.") || name.startsWith("opt.")) continue
    h.writeRows(name, random(t.size, seed++))
  }
  h.u32("ids").set(IDS)
}

describe("Arena row blocks", () => {
  it("splits a grouped tensor over the binding limit into row blocks, mirrored across groups", () => {
    const plan = Arena.plan(specs(), SMALL)
    const e = Arena.tensorOf(plan, "param.E")
    assert.deepStrictEqual(e.blocks?.map((b) => b.shape), [[16, H], [16, H], [8, H]])
    const g = Arena.tensorOf(plan, "grad.E")
    assert.deepStrictEqual(g.blocks?.map((b) => b.offset), e.blocks?.map((b) => b.offset))
    assert.deepStrictEqual(Arena.tensorOf(plan, "w16").blocks?.map((b) => b.shape[0]), [16, 16, 8])
    assert.isUndefined(Arena.tensorOf(Arena.plan(specs()), "param.E").blocks)
    // Weight decay covers every block of E (and only E's blocks).
    const flags = plan.groups.get(Arena.PARAM)!.map((s) => Array.from(Arena.decayFlags(plan, s)))
    assert.deepStrictEqual(flags.map((f) => f.reduce((a, b) => a + b, 0)), [2, 2, 1])
    assert.throws(() => Arena.host(plan).f32("param.E"), /row blocks/)
    assert.throws(() => Arena.plan({ big: { shape: [1024], group: "g" } }, SMALL), /cannot be split/)
  })
})

layer(Gpu.layer())("ops over row-blocked tensors", (it) => {
  it.scoped("embedding, its backward and the tied-head matmuls equal the unsplit ops, on the device and the twin", () =>
    Effect.gen(function*() {
      const run = (plan: Arena.ArenaPlan) =>
        Effect.gen(function*() {
          const h = Arena.host(plan)
          fill(h)
          const arena = yield* Arena.allocate(plan)
          arena.upload(h)
          yield* Program.submit(yield* Program.compile(arena, ops(plan)))
          const gpu = yield* arena.download
          CpuTwin.run(h, ops(plan))
          return { gpu, cpu: h }
        })
      const split = Arena.plan(specs(), SMALL)
      const whole = Arena.plan(specs())
      const labels = Program.plan({ plan: split }, ops(split)).map((d) => d.label)
      assert.strictEqual(labels.filter((l) => l === "embedding").length, 3)
      assert.strictEqual(labels.filter((l) => l === "embedding_backward").length, 3)
      assert.strictEqual(labels.length, 3 * 9)
      const a = yield* run(split)
      const b = yield* run(whole)
      assert.deepStrictEqual(b.gpu.readRows("x").slice(5 * H, 6 * H), new Float32Array(H)) // id 40: zeros
      for (const name of ["x", "logits", "logits16", "dx", "grad.E", "y", "ez"]) {
        const want = b.cpu.readRows(name)
        assert.isBelow(maxRelError(a.gpu.readRows(name), b.gpu.readRows(name)), 1e-5, `${name}: split vs whole`)
        assert.isBelow(maxRelError(a.gpu.readRows(name), want), 1e-5, `${name}: split device vs twin`)
        assert.isBelow(maxRelError(a.cpu.readRows(name), want), 1e-6, `${name}: split twin vs whole twin`)
      }
      // The deterministic backward gives the same bits however the table is split.
      assert.deepStrictEqual(a.gpu.readRows("grad.E"), b.gpu.readRows("grad.E"))
    }))

  it.scoped("Arena.write and read cut element ranges at block boundaries", () =>
    Effect.gen(function*() {
      const plan = Arena.plan(specs(), SMALL)
      const arena = yield* Arena.allocate(plan)
      const all = random(V * H, 7)
      arena.write("param.E", all)
      const patch = random(25 * H + 3, 8) // from inside block 0, across block 1, into block 2
      arena.write("param.E", patch, 10 * H + 5)
      const want = all.slice()
      want.set(patch, 10 * H + 5)
      assert.deepStrictEqual(yield* arena.read("param.E"), want)
      assert.throws(() => arena.binding(arena.tensor("param.E")), /row blocks/)
    }))
})
