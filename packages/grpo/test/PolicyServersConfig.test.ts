// PolicyServers.forConfig's refusals: settings for policy servers given without any server, said rather than ignored.
// (Generation on real servers is tested in @envtrain/harness: PolicyServers.test.ts, WeightStore.test.ts.)
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import { Effect } from "effect"
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
})
