// PolicyServers.forConfig's refusals: settings for policy servers given without any server, said rather than ignored.
// (Generation on real servers is tested in @envtrain/harness: PolicyServers.test.ts, WeightStore.test.ts.)
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import { LORA_TARGETS } from "@envtrain/gpu/formats/LoraConfig"
import { Duration, Effect, Either } from "effect"
import * as Config from "../src/Config.js"
import * as PolicyServers from "../src/PolicyServers.js"
import * as Trainer from "../src/Trainer.js"

describe("PolicyServers.forConfig", () => {
  it.effect("a weight store with no servers, or discovery with no store, is refused naming the fix", () =>
    Effect.gen(function*() {
      const model = Trainer.referenceModel(yield* Checkpoint.makeModel("tiny", 1))
      const plain = yield* PolicyServers.forConfig(model, yield* Config.decode({}))
      assert.strictEqual(plain, model)
      const storeOnly = yield* Effect.flip(
        PolicyServers.forConfig(model, yield* Config.decode({ policyServerWeightStore: "/shared/w" }))
      )
      assert.include(storeOnly.message, "policyServerWeightStore (/shared/w) publishes weights for policy servers")
      assert.include(storeOnly.message, "policyServerDiscover: true")
      const discoverOnly = yield* Effect.flip(
        PolicyServers.forConfig(model, yield* Config.decode({ policyServerDiscover: true }))
      )
      assert.include(discoverOnly.message, "discovering servers reads the weight store's registrations")
    }))

  it.effect("a LoRA run with a weight store or a weight directory is refused at config decoding, naming the key", () =>
    Effect.gen(function*() {
      const lora = { use_peft: true, lora_r: 4, lora_target_modules: ["q_proj"] }
      const store = yield* Effect.either(Config.decode({ ...lora, policyServerWeightStore: "/shared/w" }))
      assert.isTrue(Either.isLeft(store))
      if (Either.isLeft(store)) {
        assert.include(store.left.message, "the weight store /shared/w publishes whole models")
        assert.include(store.left.message, "drop policyServerWeightStore")
      }
      const directory = yield* Effect.either(Config.decode({ ...lora, policyServerWeightDirectory: "/shared/d" }))
      assert.isTrue(Either.isLeft(directory))
      if (Either.isLeft(directory)) assert.include(directory.left.message, "drop policyServerWeightDirectory")
      // Without LoRA both routes decode, and LoRA decodes alone (the adapter is pushed).
      yield* Config.decode({ policyServerWeightDirectory: "/shared/d" })
      assert.isDefined((yield* Config.decode(lora)).lora)
    }))

  it.scoped("withPolicyServers refuses a LoRA model with a weight store before contacting a server or publishing", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const lora = {
        config: { r: 4, alpha: 8, dropout: 0, targetModules: LORA_TARGETS, useRsLora: false },
        seed: 1
      }
      const model = Trainer.referenceModel(yield* Checkpoint.makeModel("tiny", 1), { lora })
      // Port 9 on loopback answers nothing: a server probe would wait out the timeout and fail another way.
      const refused = yield* Effect.flip(PolicyServers.withPolicyServers(model, {
        urls: ["http://127.0.0.1:9"],
        unreachableTimeout: Duration.minutes(5),
        weightStore: dir
      }))
      assert.include(refused.message, `the weight store ${dir} publishes whole models`)
      assert.deepStrictEqual(yield* fs.readDirectory(dir), [])
    }).pipe(Effect.provide(NodeContext.layer)))
})
