import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Config from "../src/Config.js"

const defaults = () => Config.decode({})

describe("Config: TRL defaults", () => {
  it.effect("decoding {} gives TRL's GRPOConfig defaults", () =>
    Effect.gen(function*() {
      const c = yield* defaults()
      assert.strictEqual(c.numGenerations, 8)
      assert.strictEqual(c.perDeviceTrainBatchSize, 8)
      assert.strictEqual(c.gradientAccumulationSteps, 1)
      assert.strictEqual(c.maxCompletionLength, 512)
      assert.strictEqual(c.learningRate, 1e-6)
      assert.strictEqual(c.lrSchedulerType, "linear")
      assert.strictEqual(c.lossType, "dapo")
      assert.strictEqual(c.beta, 0)
      assert.strictEqual(c.epsilon, 0.2)
      assert.strictEqual(c.epsilonHigh, null)
      assert.strictEqual(c.scaleRewards, "group")
      assert.strictEqual(c.importanceSamplingLevel, "token")
      assert.strictEqual(c.importanceSamplingMode, "sequence_mask")
      assert.strictEqual(c.importanceSamplingClipMax, 3)
      assert.strictEqual(c.importanceSamplingClipMin, null)
      assert.strictEqual(c.sapoTemperatureNeg, 1.05)
      assert.strictEqual(c.loggingSteps, 10)
      assert.strictEqual(c.seed, 42)
      assert.strictEqual(c.maxGradNorm, 1)
      assert.strictEqual(c.adamBeta2, 0.999)
      const r = yield* Config.resolve(c)
      assert.strictEqual(r.stepsPerGeneration, 1)
      assert.strictEqual(r.generationBatchSize, 8)
      assert.strictEqual(r.promptsPerGeneration, 1)
      assert.strictEqual(r.epsilonHigh, 0.2)
      assert.strictEqual(r.evalSteps, 10)
      assert.isTrue(
        Config.describeFields().includes(
          "--numGenerations (--num_generations) default 8: G: completions (episodes) per prompt; must be >= 2."
        )
      )
    }))
})

describe("Config: keys and overrides", () => {
  it.effect("accepts camelCase and snake_case, TRL's vllm_* names, and scale_rewards booleans", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({
        num_generations: 4,
        lossType: "grpo",
        vllm_importance_sampling_cap: 2,
        scale_rewards: false
      })
      assert.strictEqual(c.numGenerations, 4)
      assert.strictEqual(c.lossType, "grpo")
      assert.strictEqual(c.importanceSamplingClipMax, 2)
      assert.strictEqual(c.scaleRewards, "none")
    }))

  it.effect("rejects unknown keys with a did-you-mean, duplicates, and bad values", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Config.decode({ numGeneration: 4, learning_rte: 1, fooBarBaz: 1 }))
      assert.match(e.message, /unknown key "numGeneration": did you mean "numGenerations"\?/)
      assert.match(e.message, /unknown key "learning_rte": did you mean "learning_rate"\?/)
      assert.match(e.message, /unknown key "fooBarBaz": remove it/)
      const d = yield* Effect.flip(Config.decode({ numGenerations: 4, num_generations: 2 }))
      assert.match(d.message, /set the same field numGenerations/)
      const v = yield* Effect.flip(Config.decode({ lossType: "ppo", numGenerations: 2.5 }))
      assert.match(v.message, /lossType/)
      assert.match(v.message, /numGenerations/)
    }))

  it.effect("parses --key value, --key=value and bare flags", () =>
    Effect.gen(function*() {
      const o = yield* Config.parseOverrides([
        "--num_generations",
        "4",
        "--learningRate=1e-5",
        "--logCompletions",
        "--output_dir",
        "123",
        "--reward_weights",
        "[1, 0.5]",
        "--epsilon_high",
        "null"
      ])
      assert.deepStrictEqual(o, {
        num_generations: 4,
        learningRate: 1e-5,
        logCompletions: true,
        output_dir: "123",
        reward_weights: [1, 0.5],
        epsilon_high: null
      })
      const e = yield* Effect.flip(Config.parseOverrides(["stray"]))
      assert.match(e.message, /--key value or --key=value/)
    }))

  it.scoped("loads YAML and JSON files; command-line overrides win", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(`${dir}/c.yaml`, "num_generations: 4\nloss_type: grpo\nbeta: 0.04\n")
      const y = yield* Config.load(`${dir}/c.yaml`, ["--beta", "0.1", "--maxSteps=20"])
      assert.strictEqual(y.numGenerations, 4)
      assert.strictEqual(y.lossType, "grpo")
      assert.strictEqual(y.beta, 0.1)
      assert.strictEqual(y.maxSteps, 20)
      yield* fs.writeFileString(`${dir}/c.json`, JSON.stringify({ perDeviceTrainBatchSize: 4, scale_rewards: "batch" }))
      const j = yield* Config.load(`${dir}/c.json`)
      assert.strictEqual(j.perDeviceTrainBatchSize, 4)
      assert.strictEqual(j.scaleRewards, "batch")
      yield* fs.writeFileString(`${dir}/bad.yaml`, "numGenerashuns: 4\n")
      const e = yield* Effect.flip(Config.load(`${dir}/bad.yaml`))
      assert.match(e.message, /bad\.yaml/)
      assert.match(e.message, /did you mean "numGenerations"/)
      const missing = yield* Effect.flip(Config.load(`${dir}/nope.yaml`))
      assert.match(missing.message, /cannot read the file/)
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Config.resolve: derived values and refused combinations", () => {
  it.effect("derives the generation batch from stepsPerGeneration and vice versa", () =>
    Effect.gen(function*() {
      const a = yield* Config.resolve(
        yield* Config.decode({ perDeviceTrainBatchSize: 8, gradientAccumulationSteps: 4, numGenerations: 4 })
      )
      assert.strictEqual(a.stepsPerGeneration, 4)
      assert.strictEqual(a.generationBatchSize, 32)
      assert.strictEqual(a.promptsPerGeneration, 8)
      const b = yield* Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, generationBatchSize: 16 }))
      assert.strictEqual(b.stepsPerGeneration, 4)
      const c = yield* Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, stepsPerGeneration: 3 }), {
        numProcesses: 2
      })
      assert.strictEqual(c.generationBatchSize, 24)
      // totalSteps: 100 prompts, 3 prompts per generation → 33 generations → 33×3/1 steps per epoch, 3 epochs
      const t = yield* Config.resolve(
        yield* Config.decode({ perDeviceTrainBatchSize: 6, numGenerations: 2, stepsPerGeneration: 1 })
      )
      assert.strictEqual(Config.totalSteps(t, 100), 3 * 33)
      const s = yield* Config.resolve(yield* Config.decode({ maxSteps: 7 }))
      assert.strictEqual(Config.totalSteps(s, 100), 7)
    }))

  it.effect("refuses a generation batch not divisible by numGenerations, saying what to change", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(
        Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 6, numGenerations: 4 }))
      )
      assert.match(e.message, /generation batch \(6 episodes .*not divisible by numGenerations \(4\)/)
      assert.match(e.message, /generationBatchSize 12/)
    }))

  it.effect("refuses a remote environment with fewer sessions than episodes in flight", () =>
    Effect.gen(function*() {
      const c = yield* Config.decode({ perDeviceTrainBatchSize: 8, gradientAccumulationSteps: 8, numGenerations: 4 })
      const e = yield* Effect.flip(Config.resolve(c, { remoteMaxConcurrentSessions: 32 }))
      assert.match(e.message, /allows 32 concurrent sessions but 64 episodes run at once/)
      assert.match(e.message, /MAX_CONCURRENT_ENVS to at least 64/)
      const ok = yield* Config.resolve(c, { remoteMaxConcurrentSessions: 32, episodesInFlight: 32 })
      assert.strictEqual(ok.episodesInFlight, 32)
    }))

  it.effect("refuses every other invalid combination at once", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Config.resolve(
        yield* Config.decode({
          numGenerations: 1,
          generationBatchSize: 8,
          stepsPerGeneration: 2,
          epsilon: 0.3,
          epsilonHigh: 0.2,
          importanceSamplingClipMin: 4,
          rewardWeights: [1, 2]
        }),
        { numRewardFunctions: 3 }
      ))
      assert.match(e.message, /both set: set only one/)
      assert.match(e.message, /at least 2 completions per prompt/)
      assert.match(e.message, /epsilonHigh \(0\.2\) is below epsilon \(0\.3\)/)
      assert.match(e.message, /importanceSamplingClipMin \(4\) must be less than importanceSamplingClipMax \(3\)/)
      assert.match(e.message, /rewardWeights has 2 entries but there are 3 reward functions/)
      const t = yield* Effect.flip(Config.resolve(
        yield* Config.decode({ importanceSamplingMode: "token_truncate", importanceSamplingClipMax: null })
      ))
      assert.match(t.message, /needs at least one of importanceSamplingClipMin or importanceSamplingClipMax/)
      const v = yield* Effect.flip(Config.resolve(yield* Config.decode({ lossType: "vespo" })))
      assert.match(v.message, /vespo loss needs a token-level sampler correction/)
      const g = yield* Effect.flip(
        Config.resolve(yield* Config.decode({ perDeviceTrainBatchSize: 4, generationBatchSize: 10 }))
      )
      assert.match(g.message, /must be divisible by perDeviceTrainBatchSize × processes \(4\)/)
    }))

  it.effect("warns (without refusing) where TRL warns", () =>
    Effect.gen(function*() {
      const r = yield* Config.resolve(yield* Config.decode({ lossType: "cispo" }))
      assert.isTrue(r.warnings.some((w) => /caps every ratio at epsilonHigh/.test(w)))
      const l = yield* Config.resolve(yield* Config.decode({ lossType: "luspo" }))
      assert.isTrue(l.warnings.some((w) => /luspo expects importanceSamplingLevel "sequence"/.test(w)))
    }))
})
