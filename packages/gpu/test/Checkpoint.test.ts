import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Checkpoint from "../src/formats/Checkpoint.js"
import * as ModelConfig from "../src/formats/ModelConfig.js"
import * as Safetensors from "../src/formats/Safetensors.js"

const tmp = Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped())

describe("Checkpoint", () => {
  it.scoped("init-model tiny writes a complete HF directory that loads back with everything", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = path.join(yield* tmp, "tiny")
      const made = yield* Checkpoint.initModel({ preset: "tiny", out: dir, seed: 7 })
      assert.strictEqual(made.config.vocab_size, 1024)
      assert.strictEqual(made.tokenizerVocabSize, 1024)
      assert.strictEqual(
        made.parameters,
        1024 * 64 + 2 * (64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 16 + 64 + 3 * 192 * 64) + 64
      )
      assert.deepStrictEqual((yield* fs.readDirectory(dir)).sort(), [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json"
      ])
      const model = yield* Checkpoint.load(dir)
      assert.strictEqual(model.config.hidden_size, 64)
      assert.strictEqual(model.config.num_key_value_heads, 2)
      assert.strictEqual(model.config.head_dim, 16)
      assert.isTrue(model.config.tie_word_embeddings)
      assert.deepStrictEqual([...model.tensors.keys()], ModelConfig.expectedTensors(model.config).map((t) => t.name))
      // HF-like init: matrices ~ N(0, 0.02), norms exactly 1.
      const embed = model.tensors.get("model.embed_tokens.weight")!.data
      const mean = embed.reduce((a, b) => a + b, 0) / embed.length
      const std = Math.sqrt(embed.reduce((a, b) => a + (b - mean) ** 2, 0) / embed.length)
      assert.isBelow(Math.abs(mean), 0.001)
      assert.isBelow(Math.abs(std - 0.02), 0.001)
      assert.isTrue(model.tensors.get("model.layers.1.self_attn.k_norm.weight")!.data.every((x) => x === 1))
      // Tokenizer and template came along, and agree with each other.
      const prompt = yield* model.chatTemplate.render({
        messages: [{ role: "user", content: "Guess the word." }],
        addGenerationPrompt: true,
        enableThinking: false
      })
      const ids = model.tokenizer.encode(prompt)
      assert.strictEqual(ids[0], model.tokenizer.tokenToId("<|im_start|>"))
      assert.strictEqual(model.tokenizer.decode(ids), prompt)
      assert.deepStrictEqual(model.config.eos_token_ids, [model.tokenizer.tokenToId("<|im_end|>")!])
      assert.deepStrictEqual(model.generationConfig.eos_token_id, model.tokenizer.eosTokenIds)
      // Same seed, same weights; another seed, other weights.
      const again = yield* Checkpoint.makeModel("tiny", 7)
      assert.deepStrictEqual(
        again.tensors.get("model.layers.0.mlp.up_proj.weight")!.data,
        model.tensors.get("model.layers.0.mlp.up_proj.weight")!.data
      )
      const other = yield* Checkpoint.makeModel("tiny", 8)
      assert.notDeepEqual(
        other.tensors.get("model.layers.0.mlp.up_proj.weight")!.data,
        model.tensors.get("model.layers.0.mlp.up_proj.weight")!.data
      )
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("loading then saving is byte-identical (f32), sharded saves load the same, bf16 saves are exact on reload", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const root = yield* tmp
      const a = path.join(root, "a")
      yield* Checkpoint.initModel({ preset: "tiny", out: a, seed: 1 })
      const model = yield* Checkpoint.load(a)
      const b = path.join(root, "b")
      yield* Checkpoint.save(b, model)
      for (
        const f of [
          "model.safetensors",
          "config.json",
          "tokenizer.json",
          "tokenizer_config.json",
          "generation_config.json"
        ]
      ) {
        assert.deepStrictEqual(yield* fs.readFile(path.join(b, f)), yield* fs.readFile(path.join(a, f)), f)
      }
      const c = path.join(root, "c")
      yield* Checkpoint.save(c, model, { maxShardBytes: 200_000 })
      assert.isTrue(yield* fs.exists(path.join(c, "model.safetensors.index.json")))
      const sharded = yield* Checkpoint.load(c)
      for (const [name, t] of model.tensors) assert.deepStrictEqual(sharded.tensors.get(name)!.data, t.data, name)
      const d = path.join(root, "d")
      yield* Checkpoint.save(d, sharded, { dtype: "BF16" })
      const half = yield* Checkpoint.load(d)
      assert.strictEqual(half.config.torch_dtype, "bfloat16")
      const e = path.join(root, "e")
      yield* Checkpoint.save(e, half, { dtype: "BF16" })
      assert.deepStrictEqual(
        yield* fs.readFile(path.join(e, "model.safetensors")),
        yield* fs.readFile(path.join(d, "model.safetensors"))
      )
      // With no dtype given, a loaded bf16 model saves bf16 again, bit for bit: it is not widened on disk.
      const f = path.join(root, "f")
      yield* Checkpoint.save(f, half)
      assert.deepStrictEqual(
        yield* fs.readFile(path.join(f, "model.safetensors")),
        yield* fs.readFile(path.join(d, "model.safetensors"))
      )
      assert.strictEqual(JSON.parse(yield* fs.readFileString(path.join(f, "config.json"))).torch_dtype, "bfloat16")
      // A weight bf16 cannot hold (as after an f32 training step) keeps the whole save in f32 rather than rounding.
      const trained = new Map(half.tensors)
      const norm = trained.get("model.norm.weight")!
      trained.set("model.norm.weight", { shape: norm.shape, data: norm.data.map((x) => x + 2 ** -20) })
      assert.strictEqual(Checkpoint.defaultDtype({ ...half, tensors: trained }), "F32")
      const g = path.join(root, "g")
      yield* Checkpoint.save(g, { ...half, tensors: trained })
      const reloaded = yield* Checkpoint.load(g)
      assert.strictEqual(reloaded.config.torch_dtype, "float32")
      assert.deepStrictEqual(reloaded.tensors.get("model.norm.weight")!.data, trained.get("model.norm.weight")!.data)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("a wrong shape, a missing tensor, an extra tensor and a foreign architecture are each explained", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = path.join(yield* tmp, "m")
      yield* Checkpoint.initModel({ preset: "tiny", out: dir, seed: 1 })
      const model = yield* Checkpoint.load(dir)
      const rewrite = (edit: (m: Map<string, Safetensors.Tensor>) => void) =>
        Effect.gen(function*() {
          const tensors = new Map(model.tensors)
          edit(tensors)
          yield* Safetensors.writeCheckpoint(dir, tensors)
          return yield* Effect.flip(Checkpoint.load(dir))
        })
      const shape = yield* rewrite((m) =>
        m.set("model.layers.1.self_attn.k_proj.weight", { shape: [64, 64], data: new Float32Array(64 * 64) })
      )
      assert.strictEqual(shape._tag, "TensorShapeMismatch")
      assert.include(
        shape.message,
        `Tensor "model.layers.1.self_attn.k_proj.weight" in ${dir} has shape [64, 64] but config.json implies [32, 64]`
      )
      const missing = yield* rewrite((m) => m.delete("model.norm.weight"))
      assert.strictEqual(missing._tag, "MissingTensor")
      assert.include(missing.message, `Tensor "model.norm.weight" is missing from ${dir}`)
      const extra = yield* rewrite((m) =>
        m.set("model.layers.0.self_attn.q_proj.bias", { shape: [64], data: new Float32Array(64) })
      )
      assert.strictEqual(extra._tag, "UnexpectedTensors")
      assert.include(extra.message, `"model.layers.0.self_attn.q_proj.bias"`)
      // A tied model may carry lm_head.weight anyway; it is ignored as transformers does.
      yield* Safetensors.writeCheckpoint(
        dir,
        new Map([...model.tensors, ["lm_head.weight", model.tensors.get("model.embed_tokens.weight")!]])
      )
      assert.strictEqual((yield* Checkpoint.load(dir)).tensors.size, model.tensors.size)
      const config = JSON.parse(yield* fs.readFileString(path.join(dir, "config.json")))
      yield* fs.writeFileString(
        path.join(dir, "config.json"),
        JSON.stringify({ ...config, architectures: ["MistralForCausalLM"], model_type: "mistral" })
      )
      const arch = yield* Effect.flip(Checkpoint.load(dir))
      assert.strictEqual(arch._tag, "UnsupportedArchitecture")
      yield* fs.remove(path.join(dir, "config.json"))
      const gone = yield* Effect.flip(Checkpoint.load(dir))
      assert.include(gone.message, "config.json: the file does not exist")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("the small preset is a few million parameters", () =>
    Effect.gen(function*() {
      const small = yield* Checkpoint.makeModel("small", 0)
      const n = ModelConfig.parameterCount(small.config)
      assert.isAbove(n, 3_000_000)
      assert.isBelow(n, 5_000_000)
      assert.strictEqual(small.config.vocab_size % 64, 0)
      assert.isAtLeast(small.config.vocab_size, small.tokenizer.vocabSize)
    }))
})
