/**
 * `envtrain serve-policy --model DIR [--backend cpu|gpu|reference] [--threads N] [--host H] [--port P] [--max-batch N]
 * [--served-model-name NAME] [--max-model-len L] [--batch-window-ms MS] [--batching continuous|window]
 * [--steps-per-submit K] [--enable-lora [--max-loras N]] [--weights-from DIR [--weights-poll-ms MS]
 * [--advertise-url URL]]`: serves a model over an OpenAI-compatible HTTP API in vLLM's dialect
 * (`@envtrain/rollout`'s `PolicyServer`), with weight updates: pushed by the trainer, or with `--weights-from` pulled from a weight store (`@envtrain/rollout`'s `WeightStore`) that the
 * trainer publishes to. Runs until interrupted.
 *
 * @example
 * ```ts
 * // envtrain serve-policy --model models/tiny --backend cpu --port 8000 --max-batch 16
 * // curl localhost:8000/v1/completions -d '{"prompt": [1, 2, 3], "max_tokens": 8, "return_token_ids": true}'
 * ```
 *
 * @since 0.0.0
 */
import { Command, Options } from "@effect/cli"
import type { FileSystem, Path } from "@effect/platform"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as LoraAdapter from "@envtrain/gpu/formats/LoraAdapter"
import * as ModelConfig from "@envtrain/gpu/formats/ModelConfig"
import { Gpu } from "@envtrain/gpu/runtime/Gpu"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import * as WeightStore from "@envtrain/rollout/WeightStore"
import { Data, Duration, Effect, Layer, Option } from "effect"
import * as PolicyBackend from "../PolicyBackend.js"

const options = {
  model: Options.directory("model").pipe(Options.withDescription("a Hugging Face model directory")),
  backend: Options.choice("backend", ["cpu", "gpu", "reference"] as const).pipe(
    Options.withDefault("gpu" as const),
    Options.withDescription(
      "gpu: Qwen3 on WebGPU (its generation slots); cpu: the CPU device (BLAS or WebAssembly SIMD kernels); " +
        "reference: the plain-TypeScript specification model (exact, slow)"
    )
  ),
  threads: Options.integer("threads").pipe(
    Options.optional,
    Options.withDescription("cpu backend: threads per matmul (default every core)")
  ),
  host: Options.text("host").pipe(Options.withDefault("127.0.0.1"), Options.withDescription("interface to bind")),
  port: Options.integer("port").pipe(Options.withDefault(8000), Options.withDescription("port (0 = any free port)")),
  maxBatch: Options.integer("max-batch").pipe(
    Options.withDefault(16),
    Options.withDescription("most sequences decoded together")
  ),
  servedModelName: Options.text("served-model-name").pipe(
    Options.optional,
    Options.withDescription("the model name clients send (default: --model as given, as vLLM does)")
  ),
  maxModelLen: Options.integer("max-model-len").pipe(
    Options.optional,
    Options.withDescription("longest prompt + completion (default: min(max_position_embeddings, 4096))")
  ),
  batchWindowMs: Options.float("batch-window-ms").pipe(
    Options.withDefault(2),
    Options.withDescription("how long a batch (continuous: an idle server's first step) waits for more requests")
  ),
  batching: Options.choice("batching", ["continuous", "window"] as const).pipe(
    Options.optional,
    Options.withDescription(
      "continuous (default): requests join the running decode between steps; window: a batch decodes to its end " +
        "before the next starts"
    )
  ),
  enableLora: Options.boolean("enable-lora").pipe(
    Options.withDescription(
      "serve LoRA adapters as vLLM's --enable-lora does: POST /v1/load_lora_adapter {lora_name, lora_path} (a PEFT " +
        "adapter directory), then requests whose model is lora_name use it; each adapter costs one more model copy"
    )
  ),
  maxLoras: Options.integer("max-loras").pipe(
    Options.withDefault(4),
    Options.withDescription("most LoRA adapters loaded at once (with --enable-lora)")
  ),
  stepsPerSubmit: Options.integer("steps-per-submit").pipe(
    Options.optional,
    Options.withDescription(
      "gpu backend: decode steps per GPU submit (requests join, and streams get a chunk, between submits); " +
        "default 8"
    )
  ),
  weightsFrom: Options.directory("weights-from", { exists: "either" }).pipe(
    Options.optional,
    Options.withDescription(
      "follow this weight store (a directory the trainer publishes to, e.g. policyServerWeightStore): load its " +
        "newest weights before serving and every new version as it appears, checked by sha256"
    )
  ),
  weightsPollMs: Options.integer("weights-poll-ms").pipe(
    Options.optional,
    Options.withDescription("with --weights-from: how often the store is read besides change events (default 250)")
  ),
  advertiseUrl: Options.text("advertise-url").pipe(
    Options.optional,
    Options.withDescription(
      "with --weights-from: the URL trainers reach this server at, registered in the store (default its own " +
        "http://host:port; give the pod or node address when --host is 0.0.0.0)"
    )
  )
}

/** A flag combination serve-policy cannot honour; the message names the fix. */
export class ServePolicyUsageError extends Data.TaggedError("ServePolicyUsageError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** `serve-policy`. */
export const command = Command.make("serve-policy", options, (a) =>
  Effect.gen(function*() {
    const model = yield* Checkpoint.load(a.model)
    const backendOptions = {
      maxBatchSize: a.maxBatch,
      ...Option.match(a.maxModelLen, { onNone: () => ({}), onSome: (contextLength) => ({ contextLength }) })
    }
    // A GPU-only setting given with the CPU backend would change nothing: said, not ignored.
    if (a.backend !== "gpu" && Option.isSome(a.stepsPerSubmit)) {
      return yield* new ServePolicyUsageError({
        problem:
          `--steps-per-submit sets the gpu backend's decode steps per GPU submit: drop it with --backend ${a.backend}`
      })
    }
    if (Option.isNone(a.weightsFrom) && (Option.isSome(a.weightsPollMs) || Option.isSome(a.advertiseUrl))) {
      return yield* new ServePolicyUsageError({
        problem: "--weights-poll-ms and --advertise-url configure following a weight store: give --weights-from DIR"
      })
    }
    if (a.backend !== "cpu" && Option.isSome(a.threads)) {
      return yield* new ServePolicyUsageError({
        problem: `--threads sets the cpu backend's matmul threads: drop it with --backend ${a.backend}`
      })
    }
    // The device lives as long as the server: built in the command's scope, not the backend constructor's.
    const gpuContext = a.backend === "gpu" ? yield* Layer.build(Gpu.layer()) : undefined
    const backendFor = (m: Checkpoint.Model) =>
      a.backend === "cpu"
        ? PolicyBackend.cpu(m, {
          ...backendOptions,
          device: Option.match(a.threads, { onNone: () => ({}), onSome: (threads) => ({ threads }) })
        })
        : a.backend === "reference" || gpuContext === undefined
        ? PolicyBackend.reference(m, backendOptions)
        : PolicyBackend.gpu(m, {
          ...backendOptions,
          stepsPerSubmit: Option.getOrElse(a.stepsPerSubmit, () => 8)
        }).pipe(Effect.provide(gpuContext))
    const backend = yield* backendFor(model)
    const context = yield* Effect.context<FileSystem.FileSystem | Path.Path>()
    // An adapter is served by its own backend over a copy of the base with the adapter merged in (f64 sums, rounded
    // once to f32): one more model's memory per adapter, and the adapted model's exact arithmetic.
    const adapters = a.enableLora
      ? {
        maxLoras: a.maxLoras,
        load: (_name: string, dir: string) =>
          Effect.gen(function*() {
            const adapter = yield* LoraAdapter.load(dir, model.config)
            const tensors = LoraAdapter.merge(model.config, model.tensors, adapter, "F32")
            return yield* backendFor({ ...model, tensors })
          }).pipe(
            Effect.mapError((e) =>
              e instanceof PolicyServer.BackendError
                ? e
                : new PolicyServer.BackendError({ status: 400, message: e.message })
            ),
            Effect.provide(context)
          )
      }
      : undefined
    // vLLM's default: the --model argument as given.
    const servedModelName = Option.getOrElse(a.servedModelName, () => a.model)
    const server = yield* PolicyServer.serve(backend, {
      host: a.host,
      port: a.port,
      servedModelName,
      batchWindow: Duration.millis(a.batchWindowMs),
      ...(adapters === undefined ? {} : { adapters }),
      ...Option.match(a.batching, { onNone: () => ({}), onSome: (batching) => ({ batching }) }),
      ...Option.match(a.weightsFrom, {
        onNone: () => ({}),
        onSome: (directory) => ({
          weightStore: {
            directory,
            configHash: WeightStore.configHash(ModelConfig.toJson(model.config)),
            ...Option.match(a.weightsPollMs, {
              onNone: () => ({}),
              onSome: (ms) => ({ pollInterval: Duration.millis(ms) })
            }),
            ...Option.match(a.advertiseUrl, { onNone: () => ({}), onSome: (advertiseUrl) => ({ advertiseUrl }) })
          }
        })
      })
    })
    yield* Effect.logInfo(
      `serving ${servedModelName} (${backend.name} backend, ` +
        `${Option.getOrElse(a.batching, () => backend.decoder ? "continuous" : "window")} batches of ` +
        `${backend.maxBatchSize}, context ` +
        `${backend.contextLength}) on ${server.url}/v1` +
        Option.match(a.weightsFrom, { onNone: () => "", onSome: (dir) => `, weights from ${dir}` })
    )
    return yield* Effect.never
  }).pipe(Effect.scoped)).pipe(
    Command.withDescription(
      "Serve a model over an OpenAI/vLLM-compatible HTTP API (chat, completions, token ids, logprobs, weight updates)."
    )
  )
