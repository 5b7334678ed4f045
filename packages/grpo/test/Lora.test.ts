import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Checkpoint, Gemm, HalfFloat, LoraAdapter, LoraConfig } from "@envtrain/gpu"
import { Cause, Effect, Either, Exit } from "effect"
import * as CommandFile from "../src/CommandFile.js"
import * as Config from "../src/Config.js"
import { deviceModel } from "../src/internal/deviceModel.js"
import { batchOf, optimizerStep } from "../src/internal/model.js"
import * as Metrics from "../src/Metrics.js"
import * as SftTrainer from "../src/SftTrainer.js"
import * as Trainer from "../src/Trainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

// LoRA through the trainer's models: the CPU device against the reference model, the worker protocol, GRPO and
// SFT runs, checkpoints, and TRL's configuration keys.

const adam = optimizerStep(
  { maxGradNorm: 0.5, adamBeta1: 0.9, adamBeta2: 0.99, adamEpsilon: 1e-8, weightDecay: 0.01 },
  3e-2
)

const lora = (o: Partial<LoraConfig.LoraConfig> = {}): Trainer.LoraOptions => ({
  config: { r: 4, alpha: 8, dropout: 0, targetModules: LoraConfig.LORA_TARGETS, useRsLora: false, ...o },
  seed: 3
})

const decode = (raw: Record<string, unknown>) => Effect.either(Config.decode(raw))

describe("LoRA in the trainer's models", () => {
  it.effect("the CPU device's LoRA model generates, scores and trains as the reference's; only the adapter moves", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 2)
      const options = lora({ targetModules: ["q_proj", "v_proj", "o_proj", "up_proj"] })
      const ref = Trainer.referenceModel(checkpoint, { lora: options })
      const dev = deviceModel(checkpoint, { gemm: Gemm.spec, lora: options })
      const batch = batchOf(
        F.requests(0).map((r) => r.promptIds),
        (yield* ref.generate(F.requests(0))).map((c) => c.tokenIds)
      )
      for (let step = 0; step < 2; step++) {
        const w = (s: { readonly logprobs: Float64Array }) =>
          Array.from(s.logprobs, (l, i) => (i % 2 ? 0.3 : -0.2) * Math.exp(l))
        yield* dev.accumulate(batch, 0.9, w)
        yield* ref.accumulate(batch, 0.9, w)
        const [g1, g2] = [yield* dev.step(adam), yield* ref.step(adam)]
        // Step 1: B = 0 at PEFT's initialisation, so only B gets a gradient; step 2: both.
        assert.isAbove(g2.gradNorm, 0)
        assert.isBelow(Math.abs(g1.gradNorm - g2.gradNorm) / g2.gradNorm, 1e-4)
      }
      const [s1, s2] = [yield* dev.exportState, yield* ref.exportState]
      // The state is the adapter: lora_A/lora_B of each adapted projection, nothing of the base.
      const names = LoraConfig.adaptedProjections(checkpoint.config, options.config).flatMap((
        p
      ) => [p.a.name, p.b.name])
      assert.deepStrictEqual([...s1.weights.keys()], names)
      assert.deepStrictEqual(s1.lora, options.config)
      // AdamW's early steps move each entry by about lr·sign(g) (lr 3e-2 here), so an entry with a tiny gradient
      // amplifies f32 rounding: the adapters compare at 1e-3.
      for (const [name, t] of s2.weights) assert.isBelow(F.maxRel(s1.weights.get(name)!.data, t.data), 1e-3, name)
      // Generation runs the trained adapter: the same greedy tokens, different from the base's.
      const after = (yield* dev.generate(F.requests(1))).map((c) => c.tokenIds)
      assert.deepStrictEqual(after, (yield* ref.generate(F.requests(1))).map((c) => c.tokenIds))
      const base = Trainer.referenceModel(checkpoint)
      const scored = batchOf(F.requests(1).map((r) => r.promptIds), after)
      assert.isAbove(F.maxRel((yield* dev.score(scored, 1)).logprobs, (yield* base.score(scored, 1)).logprobs), 1e-3)
      // The KL reference of a LoRA model is the base (the adapter disabled).
      const frozen = yield* dev.frozenCopy
      assert.isBelow(F.maxRel((yield* frozen.score(scored, 1)).logprobs, (yield* base.score(scored, 1)).logprobs), 1e-5)
      // A state of the wrong kind is refused by name.
      const refused = yield* Effect.exit(dev.importState(yield* base.exportState))
      assert.isTrue(Exit.isFailure(refused))
      if (Exit.isFailure(refused)) {
        assert.match(Cause.pretty(refused.cause), /lacks "model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight"/)
      }
    }))

  it.effect("the CPU device holds a frozen base in bf16 where that is lossless, and rounds f32 weights only when asked", () =>
    Effect.gen(function*() {
      const f32 = yield* Checkpoint.makeModel("tiny", 2)
      const bf16: Checkpoint.Model = {
        ...f32,
        tensors: new Map(
          [...f32.tensors].map((
            [n, t]
          ) => [n, { shape: t.shape, data: HalfFloat.bf16ToF32(HalfFloat.f32ToBf16(t.data)) }])
        )
      }
      const options = lora({ targetModules: ["q_proj", "down_proj"] })
      const batch = batchOf(F.requests(0).map((r) => r.promptIds), [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8]])
      // The spec route sums each logit the same way whatever the head's tiling, so equal storage gives equal bits.
      const score = (checkpoint: Checkpoint.Model, frozenDtype?: "f32" | "bf16") =>
        deviceModel(checkpoint, { gemm: Gemm.spec, lora: options, ...(frozenDtype ? { frozenDtype } : {}) }).score(
          batch,
          1
        )
      // A bf16 checkpoint: the default (bf16 storage) computes what f32 storage does.
      assert.deepStrictEqual(yield* score(bf16), yield* score(bf16, "f32"))
      assert.deepStrictEqual(yield* score(bf16, "bf16"), yield* score(bf16, "f32"))
      // An f32 checkpoint: the default keeps f32; bf16 asked for rounds the base (other logprobs, those of the
      // rounded checkpoint).
      const kept = yield* score(f32)
      assert.deepStrictEqual(kept, yield* score(f32, "f32"))
      const roundedScores = yield* score(f32, "bf16")
      assert.isAbove(F.maxRel(roundedScores.logprobs, kept.logprobs), 1e-5)
      assert.deepStrictEqual(roundedScores, yield* score(bf16, "f32"))
    }))

  it.scoped("Trainer.cpuModel carries the LoRA config and frozenDtype to the worker: the in-thread model's results, bit for bit", () =>
    Effect.gen(function*() {
      const checkpoint = yield* Checkpoint.makeModel("tiny", 4)
      const options = lora({ dropout: 0.1 })
      const remote = yield* Trainer.cpuModel(checkpoint, { route: "openblas", threads: 1, lora: options })
      const gemm = (yield* Gemm.select({ route: "openblas", threads: 1 })).gemm
      const local = deviceModel(checkpoint, { gemm, lora: options })
      const batch = batchOf(
        F.requests(1).map((r) => r.promptIds),
        (yield* local.generate(F.requests(1))).map((c) => c.tokenIds)
      )
      // Weights that do not depend on the scores (as SFT's): the worker's host-weights path scores without dropout.
      const w = (s: { readonly logprobs: Float64Array }) => Array.from(s.logprobs, (_, i) => (i % 3) * -0.1)
      for (let i = 0; i < 2; i++) {
        assert.deepStrictEqual(yield* remote.accumulate(batch, 1, w), yield* local.accumulate(batch, 1, w))
        assert.deepStrictEqual(yield* remote.step(adam), yield* local.step(adam))
      }
      const [x, y] = [yield* remote.exportState, yield* local.exportState]
      assert.deepStrictEqual(x, y)
      assert.deepStrictEqual(x.lora, options.config)
      // frozenDtype reaches the worker: a bf16 base asked for there scores as the in-thread bf16 model, not the f32 one.
      const half = yield* Trainer.cpuModel(checkpoint, {
        route: "openblas",
        threads: 1,
        lora: options,
        frozenDtype: "bf16"
      })
      const scored = yield* half.score(batch, 1)
      assert.deepStrictEqual(
        scored,
        yield* deviceModel(checkpoint, { gemm, lora: options, frozenDtype: "bf16" }).score(batch, 1)
      )
      const f32 = yield* deviceModel(checkpoint, { gemm, lora: options }).score(batch, 1)
      assert.isAbove(F.maxRel(scored.logprobs, f32.logprobs), 1e-6)
    }))

  it.scoped("a GRPO run with LoRA on the CPU device changes only the adapter; its checkpoint is PEFT's files", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
      const before = new Map([...checkpoint.tensors].map(([n, t]) => [n, Float32Array.from(t.data)]))
      const options = lora({ dropout: 0.05 })
      const model = yield* Trainer.cpuModel(checkpoint, { threads: 1, lora: options })
      const initial = yield* model.exportState
      const config = yield* F.config({
        outputDir: dir,
        maxSteps: 2,
        saveSteps: 2,
        learningRate: 0.02,
        lora: options.config
      })
      // A configuration whose LoRA the model was not made with is refused before anything runs.
      const mismatch = yield* Effect.flip(Trainer.train({
        config: { ...config, lora: undefined },
        model,
        dataset: F.dataset(0, 64),
        open: F.open,
        rewardFunctions: [F.parityReward],
        progress: false
      }))
      assert.include(mismatch.message, "the model trains a LoRA adapter but the configuration sets no lora")
      const result = yield* Trainer.train({
        config,
        model,
        dataset: F.dataset(0, 64),
        open: F.open,
        rewardFunctions: [F.parityReward],
        progress: false
      })
      assert.strictEqual(result.globalStep, 2)
      for (const s of result.steps) {
        for (const [k, v] of Object.entries(s.values)) assert.isTrue(Number.isFinite(v) || Number.isNaN(v), k)
        assert.isTrue(Number.isFinite(s.values["loss"]), `loss ${s.values["loss"]}`)
        assert.isTrue(Number.isFinite(s.values["grad_norm"]) && s.values["grad_norm"] > 0)
      }
      // The base bytes are what they were; the adapter moved.
      for (const [name, t] of checkpoint.tensors) assert.deepStrictEqual(t.data, before.get(name), name)
      const after = yield* model.exportState
      const moved = [...after.weights].filter(([n, t]) => F.maxRel(t.data, initial.weights.get(n)!.data) > 0)
      assert.isAbove(moved.length, 0)
      // The checkpoint is the adapter as PEFT saves it, and a resume reads it back.
      const saved = path.join(dir, "checkpoint-2")
      const adapter = yield* LoraAdapter.load(saved, checkpoint.config)
      assert.deepStrictEqual(adapter.config, options.config)
      for (const [name, t] of after.weights) assert.deepStrictEqual(adapter.tensors.get(name)!.data, t.data, name)
      const fresh = yield* Trainer.cpuModel(checkpoint, { threads: 1, lora: options })
      yield* TrainerState.load(saved, fresh)
      assert.deepStrictEqual((yield* fresh.exportState).weights, after.weights)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("SFT with LoRA refuses a config whose lora is not the model's, and lowers its loss (reference backend)", () =>
    Effect.gen(function*() {
      const transcripts = F.sayTranscripts()
      const checkpoint = yield* Checkpoint.makeModel("tiny", 1)
      const options = lora({ r: 8, alpha: 16, targetModules: LoraConfig.LORA_TARGETS })
      const model = Trainer.referenceModel(checkpoint, { lora: options })
      const config = yield* F.config({
        outputDir: "/tmp/envtrain-lora-sft-unused",
        perDeviceTrainBatchSize: 2,
        gradientAccumulationSteps: 2,
        maxSteps: 6,
        learningRate: 0.01,
        saveSteps: 1000,
        lora: options.config
      })
      // A configuration whose lora is not the model's is refused before a step runs, as GRPO's is: none, another.
      for (
        const [other, wanted] of [
          [undefined, "the model trains a LoRA adapter but the configuration sets no lora"],
          [{ ...options.config, r: 4 }, "but the model trains"]
        ] as const
      ) {
        const refused = yield* Effect.flip(
          SftTrainer.train({ config: { ...config, lora: other }, model, transcripts, progress: false })
        )
        assert.strictEqual(refused._tag, "GRPOConfigError")
        assert.include(refused.message, wanted)
      }
      const full = Trainer.referenceModel(checkpoint)
      const everyWeight = yield* Effect.flip(SftTrainer.train({ config, model: full, transcripts, progress: false }))
      assert.include(everyWeight.message, "lora (use_peft / peft_config) is set but the model trains every weight")
      const run = yield* SftTrainer.train({ config, model, transcripts, progress: false })
      const losses = run.losses.map((l) => l.loss)
      assert.isTrue(losses[5] < losses[0] * 0.9, `loss should fall: ${losses.map((l) => l.toFixed(3)).join(", ")}`)
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("TRL's LoRA keys", () => {
  it.scoped("the frozenDtype run key (CPU device) is read, snake_case too, and other values are refused by name", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const load = (value: string) =>
        Effect.gen(function*() {
          const file = path.join(dir, `${value}.yaml`)
          yield* fs.writeFileString(file, ["model: unused", "backend: cpu", `frozen_dtype: ${value}`].join("\n"))
          return yield* Effect.either(CommandFile.load(file, []))
        })
      const f32 = yield* load("f32")
      assert.strictEqual(Either.isRight(f32) ? f32.right.spec.frozenDtype : undefined, "f32")
      const f16 = yield* load("f16")
      assert.include(Either.isLeft(f16) ? f16.left.message : "", "frozenDtype")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped(
    "a command file with use_peft (TRL's dropout 0.05) trains a step on backend cpu and on backend gpu",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const model = path.join(dir, "model")
        yield* Checkpoint.initModel({ preset: "tiny", out: model, seed: 3 })
        const file = path.join(dir, "lora.yaml")
        const lines = (backend: string) =>
          [
            `model: ${model}`,
            `backend: ${backend}`,
            `environment: ${path.resolve(__dirname, "../../../examples/src/environments/echo.ts")}`,
            "dataset: { seeds: [0, 4], prompt: \"Say something.\" }",
            `output_dir: ${path.join(dir, backend)}`,
            "use_peft: true",
            "lora_r: 4",
            "lora_target_modules: all-linear",
            "num_generations: 2",
            "perDeviceTrainBatchSize: 2",
            "maxCompletionLength: 8",
            "maxSteps: 1",
            "loggingSteps: 1"
          ].join("\n") + "\n"
        for (const backend of ["cpu", "gpu"]) {
          yield* fs.writeFileString(file, lines(backend))
          yield* CommandFile.train(file, [])
          const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, backend, Metrics.files.metrics))
          assert.deepStrictEqual(metrics.map((m) => m.step), [1], backend)
          assert.isTrue(Number.isFinite(metrics[0]["grad_norm"]), `${backend}: grad_norm ${metrics[0]["grad_norm"]}`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.effect("use_peft with lora_* keys (TRL's defaults), peft_config (PEFT's), all-linear, a direct lora block", () =>
    Effect.gen(function*() {
      const trl = yield* Config.decode({ use_peft: true })
      assert.deepStrictEqual(trl.lora, {
        r: 16,
        alpha: 32,
        dropout: 0.05,
        targetModules: ["q_proj", "v_proj"],
        useRsLora: false
      })
      const given = yield* Config.decode({
        use_peft: true,
        lora_r: 8,
        lora_alpha: 16,
        lora_dropout: 0,
        lora_target_modules: ["down_proj", "self_attn.q_proj"],
        use_rslora: true
      })
      assert.deepStrictEqual(given.lora, {
        r: 8,
        alpha: 16,
        dropout: 0,
        targetModules: ["q_proj", "down_proj"],
        useRsLora: true
      })
      const peft = yield* Config.decode({ peft_config: { r: 4, target_modules: "all-linear", task_type: "CAUSAL_LM" } })
      assert.deepStrictEqual(peft.lora, {
        r: 4,
        alpha: 8,
        dropout: 0,
        targetModules: LoraConfig.LORA_TARGETS,
        useRsLora: false
      })
      // TRL ignores lora_* without use_peft: no LoRA.
      assert.isUndefined((yield* Config.decode({ lora_r: 4 })).lora)
      const direct = yield* Config.decode({
        lora: { r: 2, alpha: 4, dropout: 0.1, targetModules: ["k_proj"], useRsLora: false }
      })
      assert.strictEqual(direct.lora?.r, 2)
      // gradient_checkpointing is read (the CPU device recomputes), TRL's default true.
      assert.isFalse((yield* Config.decode({ gradient_checkpointing: false })).gradientCheckpointing)
      assert.isTrue((yield* Config.decode({})).gradientCheckpointing)
    }))

  it.effect("what cannot be honoured is refused, naming the key", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [Record<string, unknown>, RegExp]> = [
        [{ peft_config: { r: 4, bias: "all" } }, /peft_config\.bias is "all"/],
        [{ peft_config: { r: 4, use_dora: true } }, /peft_config\.use_dora/],
        [{ peft_config: { r: 4, modules_to_save: ["lm_head"] } }, /peft_config\.modules_to_save/],
        [{ peft_config: { r: 4, layers_to_transform: [0] } }, /peft_config\.layers_to_transform/],
        [{ peft_config: { r: 4, rank_pattern: { q_proj: 8 } } }, /peft_config\.rank_pattern/],
        [{ peft_config: { r: 4, target_modules: ["lm_head"] } }, /"lm_head", which is not a Qwen3 projection/],
        [{ peft_config: { r: 4, lora_alpah: 8 } }, /lora_alpah is not a PEFT LoraConfig field/],
        [{ use_peft: true, use_dora: true }, /use_dora/],
        [{ use_peft: true, lora_modules_to_save: ["embed_tokens"] }, /lora_modules_to_save/],
        [{ use_peft: true, lora_target_modules: ["mlp"] }, /lora_target_modules names "mlp"/],
        [{ use_peft: true, peft_config: { r: 4 } }, /peft_config and use_peft both configure LoRA/],
        [{ use_peft: "yes" }, /use_peft: must be true or false/]
      ]
      for (const [raw, expected] of cases) {
        const decoded = yield* decode(raw)
        assert.isTrue(Either.isLeft(decoded), JSON.stringify(raw))
        if (Either.isLeft(decoded)) assert.match(decoded.left.message, expected, JSON.stringify(raw))
      }
    }))
})
