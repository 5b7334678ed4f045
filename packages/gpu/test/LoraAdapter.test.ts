import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { bf16ToF32, f16BitsToF32, f32ToBf16, f32ToF16Bits, roundToDtype } from "../src/formats/internal/dtype.js"
import * as LoraAdapter from "../src/formats/LoraAdapter.js"
import { adaptedProjections, type LoraConfig, PEFT_KEY_PREFIX, scaling } from "../src/formats/LoraConfig.js"
import * as ModelConfig from "../src/formats/ModelConfig.js"
import * as Safetensors from "../src/formats/Safetensors.js"
import { random } from "./helpers.js"
import { testConfig, testModel } from "./qwen3Fixtures.js"

const tmp = Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped())
const base = testConfig()
const lora: LoraConfig = {
  r: 4,
  alpha: 8,
  dropout: 0.05,
  targetModules: ["q_proj", "v_proj", "down_proj"],
  useRsLora: true
}

const makeAdapter = (config: LoraConfig, seed: number): LoraAdapter.Adapter => {
  const tensors = new Map<string, Safetensors.Tensor>()
  let k = seed
  for (const p of adaptedProjections(base, config)) {
    for (const spec of [p.a, p.b]) {
      tensors.set(spec.name, { shape: spec.shape, data: random(spec.shape[0] * spec.shape[1], k++, 0.1) })
    }
  }
  return { config, tensors, baseModel: "models/base" }
}

/** Save a valid adapter, then rewrite its adapter_config.json with `edit` applied. */
const savedWith = (edit: (json: Record<string, unknown>) => Record<string, unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = path.join(yield* tmp, "adapter")
    yield* LoraAdapter.save(dir, makeAdapter(lora, 1))
    const file = path.join(dir, LoraAdapter.CONFIG_FILE)
    const json = JSON.parse(yield* fs.readFileString(file)) as Record<string, unknown>
    yield* fs.writeFileString(file, JSON.stringify(edit(json)))
    return dir
  })

const refusal = (edit: (json: Record<string, unknown>) => Record<string, unknown>) =>
  Effect.gen(function*() {
    const dir = yield* savedWith(edit)
    return yield* Effect.flip(LoraAdapter.load(dir, base))
  })

describe("LoraAdapter", () => {
  it.scoped("saves PEFT's files and key names, and loads them back exactly (f32) or rounded once (bf16)", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = path.join(yield* tmp, "adapter")
      const adapter = makeAdapter(lora, 3)
      yield* LoraAdapter.save(dir, adapter)
      assert.deepStrictEqual((yield* fs.readDirectory(dir)).sort(), [
        "adapter_config.json",
        "adapter_model.safetensors"
      ])
      const json = JSON.parse(yield* fs.readFileString(path.join(dir, "adapter_config.json")))
      assert.strictEqual(json.peft_type, "LORA")
      assert.strictEqual(json.task_type, "CAUSAL_LM")
      assert.strictEqual(json.r, 4)
      assert.strictEqual(json.lora_alpha, 8)
      assert.strictEqual(json.lora_dropout, 0.05)
      assert.strictEqual(json.use_rslora, true)
      assert.strictEqual(json.bias, "none")
      assert.strictEqual(json.fan_in_fan_out, false)
      assert.strictEqual(json.base_model_name_or_path, "models/base")
      assert.deepStrictEqual(json.target_modules, ["q_proj", "v_proj", "down_proj"])
      const raw = yield* Safetensors.readFile(path.join(dir, "adapter_model.safetensors"))
      assert.include([...raw.keys()], "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")
      assert.include([...raw.keys()], "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")
      assert.strictEqual(raw.size, adapter.tensors.size)

      const back = yield* LoraAdapter.load(dir, base)
      assert.deepStrictEqual(back.config, lora)
      assert.strictEqual(back.baseModel, "models/base")
      assert.deepStrictEqual([...back.tensors.keys()], [...adapter.tensors.keys()])
      for (const [name, t] of adapter.tensors) assert.deepStrictEqual(back.tensors.get(name)!.data, t.data)

      const half = path.join(yield* tmp, "half")
      yield* LoraAdapter.save(half, adapter, { dtype: "BF16" })
      const file = yield* Effect.scoped(Effect.map(
        Safetensors.open(path.join(half, "adapter_model.safetensors")),
        (f) => f.header.tensors.map((t) => t.dtype)
      ))
      assert.isTrue(file.every((d) => d === "BF16"))
      const halfBack = yield* LoraAdapter.load(half, base)
      for (const [name, t] of adapter.tensors) {
        const got = halfBack.tensors.get(name)!.data
        // bf16 keeps 8 significand bits: rounding to nearest errs by at most 2^-8 relative.
        for (let i = 0; i < got.length; i++) assert.isAtMost(Math.abs(got[i] - t.data[i]), Math.abs(t.data[i]) / 256)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("reads PEFT's other spellings of targets: all-linear and dotted module names", () =>
    Effect.gen(function*() {
      const all = yield* LoraAdapter.decodeConfig(
        { peft_type: "LORA", r: 2, lora_alpha: 4, target_modules: "all-linear" },
        "adapter_config.json"
      )
      assert.deepStrictEqual(all.config.targetModules, [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj"
      ])
      assert.strictEqual(all.config.dropout, 0)
      assert.strictEqual(all.config.useRsLora, false)
      const dotted = yield* LoraAdapter.decodeConfig(
        { peft_type: "LORA", r: 2, lora_alpha: 4, target_modules: ["mlp.up_proj", "self_attn.q_proj"] },
        "adapter_config.json"
      )
      assert.deepStrictEqual(dotted.config.targetModules, ["q_proj", "up_proj"])
    }))

  it.scoped("refuses every option it cannot honour, naming the field and the fix", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, Record<string, unknown>, RegExp]> = [
        ["use_dora", { use_dora: true }, /DoRA is not implemented/],
        ["bias", { bias: "lora_only" }, /no biases to train/],
        ["modules_to_save", { modules_to_save: ["lm_head"] }, /merge_and_unload/],
        ["layers_to_transform", { layers_to_transform: [0] }, /every layer/],
        ["rank_pattern", { rank_pattern: { q_proj: 8 } }, /drop rank_pattern/],
        ["alpha_pattern", { alpha_pattern: { q_proj: 8 } }, /drop alpha_pattern/],
        ["fan_in_fan_out", { fan_in_fan_out: true }, /Conv1D/],
        ["target_modules", { target_modules: ["q_proj", "lm_head"] }, /"lm_head", which is not a Qwen3 projection/],
        ["target_modules", { target_modules: ".*proj" }, /regular expression/],
        ["init_lora_weights", { init_lora_weights: "pissa" }, /path_initial_model_for_weight_conversion/],
        ["peft_type", { peft_type: "IA3" }, /Only LoRA/],
        ["r", { r: 0 }, /positive integer/]
      ]
      for (const [field, edit, fix] of cases) {
        const e = yield* refusal((json) => ({ ...json, ...edit }))
        assert.strictEqual(e._tag, "UnsupportedAdapterConfig", field)
        assert.include(e.message, `"${field}"`)
        assert.match(e.message, fix)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("refuses tensors that do not fit the base model: other rank, missing, extra", () =>
    Effect.gen(function*() {
      const otherRank = yield* refusal((json) => ({ ...json, r: 8 }))
      assert.strictEqual(otherRank._tag, "AdapterTensorMismatch")
      assert.include(otherRank.message, "has shape [4, 32] but r=8 on this base model needs [8, 32]")

      const fewer = yield* refusal((json) => ({ ...json, target_modules: ["q_proj", "v_proj"] }))
      assert.strictEqual(fewer._tag, "AdapterTensorMismatch")
      assert.include(fewer.message, "tensors this config does not describe")
      assert.include(fewer.message, `${PEFT_KEY_PREFIX}model.layers.0.mlp.down_proj.lora_A.weight`)

      const more = yield* refusal((json) => ({ ...json, target_modules: ["q_proj", "v_proj", "down_proj", "k_proj"] }))
      assert.strictEqual(more._tag, "AdapterTensorMismatch")
      assert.include(more.message, "k_proj.lora_A.weight\" is missing")

      const bigger = yield* Effect.flip(LoraAdapter.load(yield* savedWith((j) => j), testConfig({ hidden_size: 64 })))
      assert.strictEqual(bigger._tag, "AdapterTensorMismatch")
      assert.include(bigger.message, "another base model")

      const path = yield* Path.Path
      const missing = yield* Effect.flip(LoraAdapter.load(path.join(yield* tmp, "nothing"), base))
      assert.strictEqual(missing._tag, "AdapterFileError")
      assert.include(missing.message, "adapter_config.json")
    }).pipe(Effect.provide(NodeContext.layer)))

  it("rounds an f64 once to bf16, f16 and f32, ties to even, as the f32 narrowing does where they agree", () => {
    const xs = Array.from(random(2000, 11, 4), (x, i) => x * 2 ** ((i % 40) - 20))
    for (const x of xs) {
      const f = Math.fround(x)
      assert.strictEqual(roundToDtype(f, "BF16"), bf16ToF32(f32ToBf16(new Float32Array([f])))[0])
      assert.strictEqual(roundToDtype(f, "F16"), f16BitsToF32(f32ToF16Bits(f)))
      assert.strictEqual(roundToDtype(x, "F32"), f)
    }
    // Double rounding: 1 + 2^-8 + 2^-30 rounds up to 1 + 2^-7 in bf16, but via f32 it would be a tie and go to 1.
    assert.strictEqual(roundToDtype(1 + 2 ** -8 + 2 ** -30, "BF16"), 1 + 2 ** -7)
    assert.strictEqual(roundToDtype(1 + 2 ** -8, "BF16"), 1)
    assert.strictEqual(roundToDtype(1 + 3 * 2 ** -8, "BF16"), 1 + 2 ** -6)
    assert.strictEqual(roundToDtype(70000, "F16"), Infinity)
    assert.strictEqual(roundToDtype(-(2 ** -140), "BF16"), -0)
  })

  it("merges W + scaling·B·A in f64, rounded once to the base's dtype; other tensors pass through", () => {
    const { tensors } = testModel(base, 5)
    const adapter = makeAdapter(lora, 9)
    const s = scaling(lora)
    for (const dtype of ["F32", "BF16"] as const) {
      const merged = LoraAdapter.merge(base, tensors, adapter, dtype)
      assert.strictEqual(merged.size, tensors.size)
      assert.strictEqual(
        merged.get("model.layers.0.self_attn.k_proj.weight"),
        tensors.get("model.layers.0.self_attn.k_proj.weight")
      )
      for (const p of adaptedProjections(base, lora)) {
        const w = tensors.get(p.base)!.data
        const a = adapter.tensors.get(p.a.name)!.data
        const b = adapter.tensors.get(p.b.name)!.data
        const [rows, cols] = [p.b.shape[0], p.a.shape[1]]
        const got = merged.get(p.base)!.data
        let changed = 0
        for (let o = 0; o < rows; o++) {
          for (let i = 0; i < cols; i++) {
            let d = 0
            for (let k = 0; k < lora.r; k++) d += b[o * lora.r + k] * a[k * cols + i]
            const want = roundToDtype(w[o * cols + i] + s * d, dtype)
            assert.strictEqual(got[o * cols + i], want, `${p.base}[${o}, ${i}] ${dtype}`)
            if (got[o * cols + i] !== w[o * cols + i]) changed++
          }
        }
        assert.isAbove(changed, rows * cols / 2)
      }
    }
  })

  it.scoped("merge of two directories: the base's files copied, the weights merged in the base's dtype", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const root = yield* tmp
      const config = { ...base, torch_dtype: "bfloat16" as const }
      const { tensors } = testModel(config, 2)
      const baseDir = path.join(root, "base")
      yield* Safetensors.writeCheckpoint(baseDir, tensors, { dtype: "BF16" })
      yield* fs.writeFileString(path.join(baseDir, "config.json"), JSON.stringify(ModelConfig.toJson(config)))
      yield* fs.writeFileString(path.join(baseDir, "tokenizer_config.json"), "{\"chat_template\": \"x\"}")
      const adapterDir = path.join(root, "adapter")
      const adapter = makeAdapter(lora, 4)
      yield* LoraAdapter.save(adapterDir, adapter)
      const out = path.join(root, "merged")
      const r = yield* LoraAdapter.mergeDirectory({ base: baseDir, adapter: adapterDir, out })
      assert.strictEqual(r.dtype, "BF16")
      assert.strictEqual(r.mergedTensors, 6)
      assert.deepStrictEqual(r.files, ["config.json", "model.safetensors", "tokenizer_config.json"])
      assert.strictEqual(
        yield* fs.readFileString(path.join(out, "tokenizer_config.json")),
        "{\"chat_template\": \"x\"}"
      )
      const stored = yield* Effect.scoped(Effect.map(
        Safetensors.open(path.join(out, "model.safetensors")),
        (f) => new Set(f.header.tensors.map((t) => t.dtype))
      ))
      assert.deepStrictEqual([...stored], ["BF16"])
      const baseBf16 = yield* Safetensors.readFile(path.join(baseDir, "model.safetensors"))
      const want = LoraAdapter.merge(config, baseBf16, adapter, "BF16")
      const got = yield* Safetensors.readFile(path.join(out, "model.safetensors"))
      for (const [name, t] of want) assert.deepStrictEqual(got.get(name)!.data, t.data, name)

      const same = yield* Effect.flip(LoraAdapter.mergeDirectory({ base: baseDir, adapter: adapterDir, out: baseDir }))
      assert.strictEqual(same._tag, "MergeTargetError")
      const wrongBase = yield* Effect.flip(
        LoraAdapter.mergeDirectory({ base: adapterDir, adapter: adapterDir, out: path.join(root, "x") })
      )
      assert.include(wrongBase.message, "config.json")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a pushed adapter (one safetensors file, config in its metadata) decodes back; full weights do not", () =>
    Effect.gen(function*() {
      const adapter = makeAdapter(lora, 21)
      const bytes = LoraAdapter.encodePushed(adapter)
      const back = yield* LoraAdapter.decodePushed(bytes, base)
      assert.isDefined(back)
      assert.deepStrictEqual(back!.config, lora)
      for (const [name, t] of adapter.tensors) assert.deepStrictEqual(back!.tensors.get(name)!.data, t.data)
      const weights = Safetensors.encode(testModel(base, 1).tensors)
      assert.isUndefined(yield* LoraAdapter.decodePushed(weights, base))
      const other = yield* Effect.flip(LoraAdapter.decodePushed(bytes, testConfig({ hidden_size: 64 })))
      assert.strictEqual(other._tag, "AdapterTensorMismatch")
    }))
})
