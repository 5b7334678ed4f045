import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as CpuModel from "../src/cpu/CpuModel.js"
import * as Gemm from "../src/cpu/Gemm.js"
import { LORA_TARGETS } from "../src/formats/LoraConfig.js"
import * as Ref from "../src/model/Qwen3Reference.js"
import { testConfig, testModel } from "./qwen3Fixtures.js"

// Activation recomputation on the CPU device: the same arithmetic in the same order, so on a deterministic route
// (one thread) the gradients are the same bits with and without it, and the workspace is smaller.
const routes: ReadonlyArray<Gemm.Gemm> = [
  Gemm.spec,
  ...(["openblas", "wasm-simd"] as const).map((route) => Effect.runSync(Gemm.select({ route, threads: 1 })).gemm)
]

const T = 9
const tokens = Array.from({ length: 2 * T }, (_, i) => (i * 7 + 3) % 40)
const positions = [...Array.from({ length: T }, (_, t) => t), 0, 1, 2, 3, 0, 1, 2, 3, 4]

describe.each(["wasm-simd", "js"] as const)(
  "CpuModel gradient checkpointing, %s element-wise kernels",
  (elementwise) => {
    for (const gemm of routes) {
      for (
        const [label, withLora, attention] of [["full", false, "tiled"], ["LoRA with dropout", true, "matmul"]] as const
      ) {
        it(`${gemm.route}, ${label}, ${attention} attention: the same gradient bits, a smaller workspace`, () => {
          const config = testConfig({ num_hidden_layers: 3 })
          const { weights } = testModel(config, 3)
          const lora = { r: 4, alpha: 8, dropout: 0.2, targetModules: LORA_TARGETS, useRsLora: false }
          const adapters = Ref.initAdapters(config, lora, { seed: 2 })
          // B ≠ 0 so that every adapter path carries a gradient.
          for (const [name, b] of Object.entries(adapters)) {
            if (name.includes("lora_B")) { for (let i = 0; i < b.length; i++) b[i] = 0.1 * Math.cos(i) }
          }
          const make = (gradientCheckpointing: boolean) =>
            CpuModel.make(config, weights, gemm, {
              attention,
              elementwise,
              gradientCheckpointing,
              ...(withLora ? { lora: { config: lora, adapters } } : {})
            })
          const [plain, recomputed] = [make(false), make(true)]
          assert.isTrue(recomputed.gradientCheckpointing)
          const targets = Array.from({ length: 2 * T }, (_, i) => (i * 5 + 1) % 40)
          const lw = Array.from({ length: 2 * T }, (_, i) => (i % 4 === 0 ? 0 : -0.3 + 0.05 * i))
          const results = [plain, recomputed].map((m) => {
            const logits = Float32Array.from(m.forward(tokens, 2, T, positions, 11))
            return { logits, ...m.backward(targets, lw, 0.8) }
          })
          assert.deepStrictEqual(results[1].logits, results[0].logits)
          assert.strictEqual(results[1].loss, results[0].loss)
          for (const name of plain.trained) assert.deepStrictEqual(recomputed.grads[name], plain.grads[name], name)
          assert.isAbove(plain.gradNorm(), 1e-3)
          // Three layers' activations against one layer's plus three inputs.
          assert.isBelow(recomputed.workspaceBytes(), 0.7 * plain.workspaceBytes())
        })
      }
    }
  }
)
