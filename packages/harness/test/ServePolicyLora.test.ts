// `envtrain serve-policy --enable-lora`: LoRA adapters loaded and unloaded at run time through vLLM's routes, a
// request naming an adapter as its `model` served by the base with that adapter merged in, `/v1/models` listing
// them, vLLM's errors (unknown model 404, double load 400, unknown adapter 404). The command runs as a child process
// (the reference backend: its greedy tokens are the specification's, so they can be compared exactly); every query
// is a real fetch over loopback; the gpu backend (lavapipe here) is checked the same way. Live clock throughout.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as LoraAdapter from "@envtrain/gpu/formats/LoraAdapter"
import { adaptedProjections, type LoraConfig } from "@envtrain/gpu/formats/LoraConfig"
import type * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import * as Qwen3Reference from "@envtrain/gpu/model/Qwen3Reference"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import { Effect } from "effect"
import * as PolicyBackend from "../src/PolicyBackend.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"

type Json = Record<string, any>

const call = (url: string, body?: unknown) =>
  Effect.promise(async () => {
    const res = await fetch(
      url,
      body === undefined ? {} : {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body)
      }
    )
    const text = await res.text()
    const json = (res.headers.get("content-type") ?? "").includes("json") ? JSON.parse(text) as Json : {}
    return { status: res.status, text, json }
  })

const lora: LoraConfig = {
  r: 4,
  alpha: 16,
  dropout: 0,
  targetModules: ["q_proj", "v_proj", "down_proj"],
  useRsLora: false
}

// A tiny model's logits are nearly flat; scaled weights make greedy outputs vary, so "equal" means something.
const base = Checkpoint.makeModel("tiny", 5).pipe(
  Effect.map((m): Checkpoint.Model => ({
    ...m,
    tensors: new Map(
      [...m.tensors].map(([n, t]) => [n, n.endsWith("norm.weight") ? t : { ...t, data: t.data.map((x) => x * 30) }])
    )
  })),
  Effect.orDie
)

// Both factors non-zero (a trained adapter), large enough to change the greedy tokens.
const adapterFor = (model: Checkpoint.Model, seed: number): LoraAdapter.Adapter => {
  const tensors = new Map<string, Safetensors.Tensor>()
  let k = seed
  for (const p of adaptedProjections(model.config, lora)) {
    for (const spec of [p.a, p.b]) {
      const n = spec.shape[0] * spec.shape[1]
      tensors.set(spec.name, {
        shape: spec.shape,
        data: Float32Array.from({ length: n }, (_, i) => 0.5 * Math.sin(++k * 1.7 + i))
      })
    }
  }
  return { config: lora, tensors, baseModel: null }
}

const greedyOf = (model: Checkpoint.Model, tensors: Safetensors.Tensors, prompt: ReadonlyArray<number>) =>
  Qwen3Reference.generate(
    model.config,
    Object.fromEntries([...tensors].map(([n, t]) => [n, t.data])),
    prompt,
    { maxNewTokens: 8, temperature: 0, stopTokens: model.tokenizer.eosTokenIds.slice(0, 8) }
  ).tokens

describe("envtrain serve-policy --enable-lora", () => {
  it.scopedLive("loads, serves, lists and unloads adapters through vLLM's routes", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const model = yield* base
      const root = yield* fs.makeTempDirectoryScoped()
      const dir = path.join(root, "base")
      yield* Checkpoint.save(dir, model)
      const adapterDir = path.join(root, "adapter")
      const adapter = adapterFor(model, 1)
      yield* LoraAdapter.save(adapterDir, adapter)
      const { url } = yield* PolicyServerProcess.launch({
        model: dir,
        backend: "reference",
        servedModelName: "tiny",
        enableLora: true,
        maxLoras: 1
      })
      const prompt = model.tokenizer.encode("Catch the ball")
      const complete = (name: string) =>
        call(`${url}/v1/completions`, { model: name, prompt, max_tokens: 8, temperature: 0, return_token_ids: true })

      const loaded = yield* call(`${url}/v1/load_lora_adapter`, { lora_name: "catch-lora", lora_path: adapterDir })
      assert.strictEqual(loaded.status, 200, loaded.text)
      assert.strictEqual(loaded.text, "Success: LoRA adapter 'catch-lora' added successfully.")
      const listed = (yield* call(`${url}/v1/models`)).json.data as Array<Json>
      assert.deepStrictEqual(listed.map((m) => m.id), ["tiny", "catch-lora"])
      assert.strictEqual(listed[1].parent, "tiny")
      assert.strictEqual(listed[1].root, adapterDir)

      // The adapter's request is the merged model's greedy output; the base's stays the base's.
      const merged = LoraAdapter.merge(model.config, model.tensors, adapter, "F32")
      const withAdapter = yield* complete("catch-lora")
      assert.strictEqual(withAdapter.status, 200, withAdapter.text)
      assert.strictEqual(withAdapter.json.model, "catch-lora")
      assert.deepStrictEqual(withAdapter.json.choices[0].token_ids, greedyOf(model, merged, prompt))
      const plain = yield* complete("tiny")
      assert.deepStrictEqual(plain.json.choices[0].token_ids, greedyOf(model, model.tensors, prompt))
      assert.notDeepEqual(withAdapter.json.choices[0].token_ids, plain.json.choices[0].token_ids)
      // The unmerged LoRA forward (the specification) picks the same tokens.
      const adapters = Object.fromEntries([...adapter.tensors].map(([n, t]) => [n, t.data]))
      const weights = Object.fromEntries([...model.tensors].map(([n, t]) => [n, t.data]))
      const spec = Qwen3Reference.generate(model.config, weights, prompt, {
        maxNewTokens: 8,
        temperature: 0,
        stopTokens: model.tokenizer.eosTokenIds.slice(0, 8)
      }, { config: lora, adapters })
      assert.deepStrictEqual(withAdapter.json.choices[0].token_ids, spec.tokens)

      // vLLM's refusals.
      const again = yield* call(`${url}/v1/load_lora_adapter`, { lora_name: "catch-lora", lora_path: adapterDir })
      assert.strictEqual(again.status, 400)
      assert.strictEqual(again.json.error.message, "The lora adapter 'catch-lora' has already been loaded.")
      const full = yield* call(`${url}/v1/load_lora_adapter`, { lora_name: "second", lora_path: adapterDir })
      assert.strictEqual(full.status, 400)
      assert.include(full.json.error.message, "--max-loras 1")
      const unknown = yield* complete("no-such-adapter")
      assert.strictEqual(unknown.status, 404)
      assert.deepStrictEqual(unknown.json.error, {
        message: "The model `no-such-adapter` does not exist.",
        type: "NotFoundError",
        param: "model",
        code: 404
      })

      const unloaded = yield* call(`${url}/v1/unload_lora_adapter`, { lora_name: "catch-lora" })
      assert.strictEqual(unloaded.status, 200)
      assert.strictEqual(unloaded.text, "Success: LoRA adapter 'catch-lora' removed successfully.")
      assert.strictEqual((yield* complete("catch-lora")).status, 404)
      assert.deepStrictEqual(((yield* call(`${url}/v1/models`)).json.data as Array<Json>).map((m) => m.id), ["tiny"])
      const gone = yield* call(`${url}/v1/unload_lora_adapter`, { lora_name: "catch-lora" })
      assert.strictEqual(gone.status, 404)
      assert.strictEqual(gone.json.error.message, "The lora adapter 'catch-lora' cannot be found.")

      // A directory that is not an adapter for this base: refused, naming the problem; nothing is listed.
      const bad = yield* call(`${url}/v1/load_lora_adapter`, { lora_name: "bad", lora_path: root })
      assert.strictEqual(bad.status, 400)
      assert.include(bad.json.error.message, "adapter_config.json")
      assert.deepStrictEqual(((yield* call(`${url}/v1/models`)).json.data as Array<Json>).map((m) => m.id), ["tiny"])
    }).pipe(Effect.provide(NodeContext.layer)), 180_000)

  it.scopedLive(
    "the gpu backend serves an adapter from its own merged copy on the device (lavapipe here)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const model = yield* base
        const root = yield* fs.makeTempDirectoryScoped()
        const dir = path.join(root, "base")
        yield* Checkpoint.save(dir, model)
        const adapterDir = path.join(root, "adapter")
        const adapter = adapterFor(model, 2)
        yield* LoraAdapter.save(adapterDir, adapter, { dtype: "BF16" })
        const { url } = yield* PolicyServerProcess.launch({
          model: dir,
          backend: "gpu",
          servedModelName: "tiny",
          maxModelLen: 64,
          maxBatch: 2,
          enableLora: true
        })
        const loaded = yield* call(`${url}/v1/load_lora_adapter`, { lora_name: "g", lora_path: adapterDir })
        assert.strictEqual(loaded.status, 200, loaded.text)
        const prompt = model.tokenizer.encode("Guess a word")
        const complete = (name: string) =>
          call(`${url}/v1/completions`, { model: name, prompt, max_tokens: 8, temperature: 0, return_token_ids: true })
        // The adapter as stored (bf16), merged: what the server's copy holds.
        const stored = yield* LoraAdapter.load(adapterDir, model.config)
        const merged = LoraAdapter.merge(model.config, model.tensors, stored, "F32")
        const served = yield* complete("g")
        assert.strictEqual(served.status, 200, served.text)
        assert.deepStrictEqual(served.json.choices[0].token_ids, greedyOf(model, merged, prompt))
        assert.deepStrictEqual(
          (yield* complete("tiny")).json.choices[0].token_ids,
          greedyOf(model, model.tensors, prompt)
        )
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "unloading an adapter mid-stream: the running request finishes on it, new ones get 404",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const model = yield* base
        const adapterDir = path.join(yield* fs.makeTempDirectoryScoped(), "adapter")
        const adapter = adapterFor(model, 3)
        yield* LoraAdapter.save(adapterDir, adapter)
        const backend = yield* PolicyBackend.reference(model, { maxBatchSize: 2 })
        const server = yield* PolicyServer.serve(backend, {
          port: 0,
          servedModelName: "tiny",
          adapters: {
            load: (_name, dir) =>
              Effect.gen(function*() {
                const loaded = yield* LoraAdapter.load(dir, model.config)
                const tensors = LoraAdapter.merge(model.config, model.tensors, loaded, "F32")
                return yield* PolicyBackend.reference({ ...model, tensors }, { maxBatchSize: 2 })
              }).pipe(
                Effect.mapError((e) => new PolicyServer.BackendError({ status: 400, message: e.message })),
                Effect.provide(NodeContext.layer)
              )
          }
        })
        assert.strictEqual(
          (yield* call(`${server.url}/v1/load_lora_adapter`, { lora_name: "s", lora_path: adapterDir })).status,
          200
        )
        const prompt = model.tokenizer.encode("Catch the ball")
        const body = {
          model: "s",
          prompt,
          max_tokens: 24,
          temperature: 0,
          ignore_eos: true,
          stream: true,
          return_token_ids: true
        }
        const ids = yield* Effect.promise(async () => {
          const res = await fetch(`${server.url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body)
          })
          const reader = res.body!.getReader()
          let text = new TextDecoder().decode((await reader.read()).value)
          // The first chunk is out: the sequence is running on the adapter. Unload it now.
          const unload = await fetch(`${server.url}/v1/unload_lora_adapter`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ lora_name: "s" })
          })
          if (unload.status !== 200) throw new Error(`unload answered ${unload.status}`)
          for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
            text += new TextDecoder().decode(chunk.value)
          }
          return text.split("\n").filter((l) => l.startsWith("data: {")).flatMap((l) =>
            (JSON.parse(l.slice(6)).choices[0]?.token_ids ?? []) as Array<number>
          )
        })
        const merged = LoraAdapter.merge(model.config, model.tensors, adapter, "F32")
        const want = Qwen3Reference.generate(
          model.config,
          Object.fromEntries([...merged].map(([n, t]) => [n, t.data])),
          prompt,
          { maxNewTokens: 24, temperature: 0 }
        ).tokens
        assert.deepStrictEqual(ids, want)
        const after = yield* call(`${server.url}/v1/completions`, { ...body, stream: false })
        assert.strictEqual(after.status, 404)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive("without adapters enabled the routes refuse, saying how to enable them", () =>
    Effect.gen(function*() {
      const model = yield* base
      const backend = yield* PolicyBackend.reference(model, { maxBatchSize: 2 })
      const server = yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
      const r = yield* call(`${server.url}/v1/load_lora_adapter`, { lora_name: "a", lora_path: "/nowhere" })
      assert.strictEqual(r.status, 400)
      assert.include(r.json.error.message, "--enable-lora")
    }).pipe(Effect.provide(NodeContext.layer)), 60_000)
})
