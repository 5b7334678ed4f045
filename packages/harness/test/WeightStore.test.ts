// Policy servers that pull their weights from a weight store: real `envtrain serve-policy --weights-from DIR`
// children (reference backend: the specification model on both sides, so "the same run" is checked bit for bit) on
// loopback, a trainer that publishes once per step. Live clock throughout.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as ModelConfig from "@envtrain/gpu/formats/ModelConfig"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import * as CommandFile from "@envtrain/grpo/CommandFile"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as WeightStore from "@envtrain/rollout/WeightStore"
import { Effect, Option, Schedule } from "effect"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import { catchRunFile, completionRows, modelsEntry, policyVersion, timeless, tinyDir, train } from "./parityRun.js"

const follow = (model: string, store: string) =>
  PolicyServerProcess.launch({ model, backend: "reference", servedModelName: "tiny", weightsFrom: store })

// Polls `url` until `ok` holds of its /v1/models entry (a follower loads within a poll or an inotify event).
const until = (
  url: string,
  ok: (entry: Effect.Effect.Success<ReturnType<typeof modelsEntry>>) => boolean,
  what: string
) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (true) {
      const entry = yield* modelsEntry(url)
      if (ok(entry)) return entry
      if (Date.now() - started > 20_000) return assert.fail(`${what}: still ${JSON.stringify(entry)}`)
      yield* Effect.sleep("50 millis")
    }
  })

describe("policy servers pulling from a weight store", () => {
  it.scopedLive(
    "two followers: async GRPO at maxStaleness 0 equals the in-process run; one publication per update; each " +
      "server reports the store's version; old versions collected",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const { dir, model } = yield* tinyDir
        const store = yield* fs.makeTempDirectoryScoped()
        const servers = [yield* follow(dir, store), yield* follow(dir, store)]
        // Before any publication: the model's own weights, version 0, no complaint.
        assert.deepStrictEqual((yield* modelsEntry(servers[0].url)).weight_store, {
          directory: store,
          policy_version: null,
          error: null
        })
        const local = yield* train(Trainer.referenceModel(model), 3)
        const remoteModel = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: servers.map((s) => s.url),
          weightStore: store
        })
        for (const s of servers) assert.strictEqual(yield* policyVersion(s.url), 1)
        const remote = yield* train(remoteModel, 3, undefined, { async: true, maxStaleness: 0 })
        const fields = (values: Readonly<Record<string, number>>) =>
          Object.fromEntries(
            Object.entries(timeless(values)).filter(([k]) => !k.startsWith("async/") && k !== "buffer_qsize")
          )
        assert.deepStrictEqual(
          remote.result.steps.map((s) => [s.step, s.loss, fields(s.values)]),
          local.result.steps.map((s) => [s.step, s.loss, fields(s.values)])
        )
        assert.isAbove(completionRows(local.completions).length, 0)
        assert.deepStrictEqual(completionRows(remote.completions), completionRows(local.completions))
        // The start's publication, then one per step; every server on the newest.
        const manifest = Option.getOrThrow(yield* WeightStore.directory(store).latest)
        assert.strictEqual(manifest.policy_version, 4)
        assert.strictEqual(manifest.step, 3)
        for (const s of servers) {
          const entry = yield* modelsEntry(s.url)
          assert.strictEqual(entry.policy_version, 4)
          assert.deepStrictEqual(entry.weight_store, { directory: store, policy_version: 4, error: null })
        }
        assert.deepStrictEqual((yield* fs.readDirectory(path.join(store, "weights"))).sort(), [
          "v00000002.safetensors",
          "v00000003.safetensors",
          "v00000004.safetensors"
        ])
        // Both registered themselves for discovery.
        const registered = yield* WeightStore.directory(store).registered("30 seconds")
        assert.deepStrictEqual(registered.map((r) => r.url).sort(), servers.map((s) => s.url).sort())
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "envtrain train with policyServerWeightStore and policyServerDiscover: no URL list, the store's server generates",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const { dir } = yield* tinyDir
        const store = yield* fs.makeTempDirectoryScoped()
        const server = yield* follow(dir, store)
        yield* Effect.repeat(WeightStore.directory(store).registered("10 seconds"), {
          until: (r) => r.length === 1,
          schedule: Schedule.spaced("50 millis")
        })
        const file = yield* catchRunFile(dir, [])
        yield* CommandFile.train(file, [`policyServerWeightStore=${store}`, "policyServerDiscover=true"])
        // The start's publication, then one per step, each loaded by the server.
        assert.strictEqual(yield* policyVersion(server.url), 3)
        assert.strictEqual(Option.getOrThrow(yield* WeightStore.directory(store).latest).step, 2)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "a corrupt version is refused by name and retried; a server started later loads the newest before serving; a " +
      "trainer whose servers never reach its version fails naming the hang; a server following no store is refused",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const { dir, model } = yield* tinyDir
        const storeDir = yield* fs.makeTempDirectoryScoped()
        const store = WeightStore.directory(storeDir)
        const configHash = WeightStore.configHash(ModelConfig.toJson(model.config))
        const server = yield* follow(dir, storeDir)
        const bytes = Safetensors.encode(model.tensors)
        yield* store.publish({ bytes, step: 0, configHash })
        yield* until(server.url, (e) => e.policy_version === 1, "version 1 loaded")

        // Version 2, published by hand with a flipped byte: refused, named, and the server keeps version 1.
        const second = yield* store.publish({ bytes, step: 1, configHash })
        yield* until(server.url, (e) => e.policy_version === 2, "version 2 loaded")
        const corrupt = Uint8Array.from(bytes)
        corrupt[corrupt.length - 1] ^= 0x40
        const manifestPath = path.join(storeDir, "manifest.json")
        const third = { ...second, policy_version: 3, file: "weights/v00000003.safetensors" }
        yield* fs.writeFile(path.join(storeDir, third.file), corrupt)
        yield* fs.writeFileString(manifestPath, JSON.stringify(third))
        const refused = yield* until(
          server.url,
          (e) => e.weight_store?.error !== null && e.weight_store?.error !== undefined,
          "corrupt version refused"
        )
        assert.include(
          refused.weight_store!.error!,
          `version 3 (${path.join(storeDir, third.file)}) is corrupt: sha256`
        )
        assert.strictEqual(refused.policy_version, 2)
        // Repaired: the next check loads it.
        yield* fs.writeFile(path.join(storeDir, third.file), bytes)
        const repaired = yield* until(server.url, (e) => e.policy_version === 3, "repaired version 3 loaded")
        assert.isNull(repaired.weight_store!.error)

        // A server started now loads version 3 before it answers anything.
        const late = yield* follow(dir, storeDir)
        assert.strictEqual(yield* policyVersion(late.url), 3)

        // A trainer publishing to a store its server does not follow (one already at version 5): the server never
        // reaches its version; the sync is named as hung.
        const elsewhere = yield* fs.makeTempDirectoryScoped()
        for (let i = 0; i < 5; i++) yield* WeightStore.directory(elsewhere).publish({ bytes, step: i, configHash })
        const hung = yield* Effect.flip(PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: [server.url],
          weightStore: elsewhere,
          pushTimeout: "1 second"
        }))
        assert.strictEqual(hung._tag, "PolicyServerError")
        assert.include(hung.message, `Policy server ${server.url}: the weights could not be sent: still at version 3`)
        assert.include(hung.message, `after version 6 was published to ${elsewhere}`)
        // One at version 0 of a fresh store: the server is beyond it, so another trainer must be publishing.
        const fresh = yield* fs.makeTempDirectoryScoped()
        const beyond = yield* Effect.flip(PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: [server.url],
          weightStore: fresh
        }))
        assert.include(beyond.message, "it reports policy_version 3, beyond the 1 this trainer published")

        // A server that follows no store cannot be used with one.
        const plain = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
        const unfollowed = yield* Effect.flip(PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: [plain.url],
          weightStore: storeDir
        }))
        assert.include(unfollowed.message, "it does not follow the weight store")
        assert.include(unfollowed.message, "--weights-from DIR")
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
})
