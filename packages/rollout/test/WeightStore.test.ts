// The weight store on a real temporary directory: what a publication writes (file, then manifest), how versions
// continue and are collected, and each way a reader refuses a version (partial, corrupt, another model, a bad
// manifest), naming the file and the mismatch. The policy servers that follow a store are tested with real
// `envtrain serve-policy` processes in @envtrain/harness (WeightStore.test.ts).
import { assert, describe, it } from "@effect/vitest"
import * as ModelConfig from "@envtrain/gpu/formats/ModelConfig"
import { Effect, Option } from "effect"
import * as NodeFs from "node:fs/promises"
import * as NodeOs from "node:os"
import * as NodePath from "node:path"
import { WeightStore } from "../src/index.js"
import * as Follower from "../src/internal/weightStore.js"

const tempDir = Effect.acquireRelease(
  Effect.promise(() => NodeFs.mkdtemp(NodePath.join(NodeOs.tmpdir(), "weight-store-"))),
  (dir) => Effect.promise(() => NodeFs.rm(dir, { recursive: true, force: true }))
)

const bytesOf = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) % 251)

const config = (hidden: number) =>
  ModelConfig.decode({
    architectures: ["Qwen3ForCausalLM"],
    vocab_size: 64,
    hidden_size: hidden,
    intermediate_size: 32,
    num_hidden_layers: 1,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    head_dim: 8,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 128
  }).pipe(Effect.orDie)

describe("WeightStore (a shared directory)", () => {
  it.scoped("publishes the file, then the manifest; versions continue; only the newest `keep` stay", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = WeightStore.directory(dir)
      assert.isTrue(Option.isNone(yield* store.latest))
      const hash = WeightStore.configHash(ModelConfig.toJson(yield* config(16)))
      for (let step = 0; step < 5; step++) {
        const m = yield* store.publish({ bytes: bytesOf(100 + step, step), step, configHash: hash, keep: 2 })
        assert.strictEqual(m.policy_version, step + 1)
        assert.strictEqual(m.bytes, 100 + step)
        assert.strictEqual(m.dtype, "F32")
        assert.strictEqual(m.config_hash, hash)
        assert.deepStrictEqual(yield* store.read(m, { configHash: hash }), bytesOf(100 + step, step))
      }
      const latest = Option.getOrThrow(yield* store.latest)
      assert.strictEqual(latest.policy_version, 5)
      assert.strictEqual(latest.step, 4)
      assert.strictEqual(latest.file, "weights/v00000005.safetensors")
      assert.deepStrictEqual((yield* Effect.promise(() => NodeFs.readdir(NodePath.join(dir, "weights")))).sort(), [
        "v00000004.safetensors",
        "v00000005.safetensors"
      ])
      // Nothing half-written is left behind.
      assert.deepStrictEqual((yield* Effect.promise(() => NodeFs.readdir(dir))).sort(), ["manifest.json", "weights"])
      // A second publisher (a restarted trainer) continues the count.
      const again = yield* WeightStore.directory(dir).publish({ bytes: bytesOf(8, 9), step: 0, configHash: hash })
      assert.strictEqual(again.policy_version, 6)
      const refused = yield* Effect.flip(store.publish({ bytes: bytesOf(8, 1), step: 1, configHash: hash, keep: 1 }))
      assert.include(refused.message, "keep must be a whole number >= 2")
    }))

  it.scoped("a reader refuses, naming the file and why: partial, corrupt, another model, a missing file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = WeightStore.directory(dir)
      const hash = WeightStore.configHash(ModelConfig.toJson(yield* config(16)))
      const m = yield* store.publish({ bytes: bytesOf(64, 3), step: 7, configHash: hash })
      const file = NodePath.join(dir, m.file)

      const other = WeightStore.configHash(ModelConfig.toJson(yield* config(24)))
      assert.notStrictEqual(other, hash)
      const wrongModel = yield* Effect.flip(store.read(m, { configHash: other }))
      assert.include(wrongModel.message, `version 1 (${file}) was published for another model`)

      yield* Effect.promise(() => NodeFs.writeFile(file, bytesOf(40, 3)))
      const partial = yield* Effect.flip(store.read(m))
      assert.include(partial.message, `version 1 (${file}) is partial or overwritten: 40 bytes, the manifest says 64`)

      const flipped = bytesOf(64, 3)
      flipped[10] ^= 1
      yield* Effect.promise(() => NodeFs.writeFile(file, flipped))
      const corrupt = yield* Effect.flip(store.read(m))
      assert.include(corrupt.message, `version 1 (${file}) is corrupt: sha256`)
      assert.strictEqual(corrupt._tag, "WeightStoreError")

      yield* Effect.promise(() => NodeFs.rm(file))
      assert.include((yield* Effect.flip(store.read(m))).message, "is missing")
    }))

  it.scoped("a manifest that is not one is refused by name; a file outside the store is refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const manifest = NodePath.join(dir, "manifest.json")
      yield* Effect.promise(() => NodeFs.writeFile(manifest, "{not json"))
      assert.include((yield* Effect.flip(WeightStore.directory(dir).latest)).message, "manifest.json is not JSON")
      yield* Effect.promise(() => NodeFs.writeFile(manifest, JSON.stringify({ format: "other" })))
      assert.include(
        (yield* Effect.flip(WeightStore.directory(dir).latest)).message,
        `has format "other", expected "${WeightStore.FORMAT}"`
      )
      const good = {
        format: WeightStore.FORMAT,
        policy_version: 1,
        step: 0,
        file: "../elsewhere.safetensors",
        sha256: "",
        bytes: 0,
        dtype: "F32",
        config_hash: "",
        published_at: ""
      }
      yield* Effect.promise(() => NodeFs.writeFile(manifest, JSON.stringify(good)))
      assert.include((yield* Effect.flip(WeightStore.directory(dir).latest)).message, "is outside the store")
      yield* Effect.promise(() => NodeFs.writeFile(manifest, JSON.stringify({ ...good, policy_version: -1 })))
      assert.include(
        (yield* Effect.flip(WeightStore.directory(dir).latest)).message,
        "policy_version must be a whole number"
      )
    }))

  it.scopedLive("servers register until their scope closes; a registration not refreshed in time is not listed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = WeightStore.directory(dir)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* store.register("http://10.0.0.1:8000", "50 millis")
        yield* store.register("http://10.0.0.2:8000", "50 millis")
        assert.deepStrictEqual((yield* store.registered("10 seconds")).map((r) => r.url), [
          "http://10.0.0.1:8000",
          "http://10.0.0.2:8000"
        ])
        // Refreshed while the scope is open: still fresh after several heartbeats.
        yield* Effect.sleep("300 millis")
        assert.strictEqual((yield* store.registered("200 millis")).length, 2)
      }))
      assert.deepStrictEqual(yield* store.registered("10 seconds"), [])
      // A server that died without removing its file: listed only while its last heartbeat is recent.
      const stale = NodePath.join(dir, "servers", "dead.json")
      yield* Effect.promise(() => NodeFs.writeFile(stale, JSON.stringify({ url: "http://10.0.0.3:8000", pid: 1 })))
      const past = new Date(Date.now() - 60_000)
      yield* Effect.promise(() => NodeFs.utimes(stale, past, past))
      assert.deepStrictEqual(yield* store.registered("10 seconds"), [])
      assert.strictEqual((yield* store.registered("120 seconds")).length, 1)
    }))
})

describe("a store's follower (what serve-policy --weights-from runs)", () => {
  it.scoped("loads the newest version once; refuses a bad one, keeps what it holds, and clears the refusal on the next", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = WeightStore.directory(dir)
      const hash = WeightStore.configHash(ModelConfig.toJson(yield* config(16)))
      const loads: Array<number> = []
      const { check, state } = Follower.follower(dir, {
        configHash: hash,
        load: (_bytes, manifest) => Effect.sync(() => void loads.push(manifest.policy_version)),
        describe: (e: never) => e
      })
      // Nothing published: nothing loaded, no complaint.
      yield* check
      assert.deepStrictEqual([loads, state.version, state.error], [[], undefined, undefined])
      yield* store.publish({ bytes: bytesOf(32, 1), step: 0, configHash: hash })
      yield* store.publish({ bytes: bytesOf(32, 2), step: 1, configHash: hash })
      // Only the newest is loaded, and only once.
      yield* check
      yield* check
      assert.deepStrictEqual(loads, [2])
      // Version 3's file is damaged after publication: refused by name, version 2 kept, tried again each check.
      const third = yield* store.publish({ bytes: bytesOf(32, 3), step: 2, configHash: hash })
      yield* Effect.promise(() => NodeFs.writeFile(NodePath.join(dir, third.file), bytesOf(32, 4)))
      yield* check
      assert.strictEqual(state.version, 2)
      assert.include(state.error, "version 3")
      assert.include(state.error, "is corrupt: sha256")
      // A later good version loads and clears the refusal.
      yield* store.publish({ bytes: bytesOf(32, 5), step: 3, configHash: hash })
      yield* check
      assert.deepStrictEqual([loads, state.version, state.error], [[2, 4], 4, undefined])
      // A version whose load fails (the backend refused the tensors) is refused with the backend's reason.
      const failing = Follower.follower(dir, {
        configHash: hash,
        load: () => Effect.fail("tensor model.norm.weight has shape [8], expected [16]"),
        describe: (e: string) => e
      })
      yield* failing.check
      assert.strictEqual(failing.state.version, undefined)
      assert.include(failing.state.error, "version 4 (weights/v00000004.safetensors) did not load: tensor model.norm")
    }))
})
