/**
 * The generation backends `envtrain serve-policy` serves (`@envtrain/rollout`'s `PolicyServer.Backend`):
 *
 * - {@link cpu}: the trainer's CPU reference model (`Trainer.referenceModel`: exact, batched decoding, multi-turn KV
 *   reuse), so a served completion is token for token what the in-process trainer samples. It decodes step by step
 *   (the model's `decoder`), so the server batches continuously: requests join the running batch between steps. Top logprobs come from
 *   one extra forward pass over prompt + completion (log_softmax(logits / T), T = 1 when greedy, before the
 *   top-k/top-p/min-p filters).
 * - {@link gpu}: Qwen3 on WebGPU with its generation slots (KV cache, sampling on the device) driven step by step
 *   (`Generation.makeStepwise`), so the server batches it continuously too: a request takes a free slot between two
 *   GPU submits (each of `stepsPerSubmit` decode steps, default 8), a finished sequence is answered after the submit
 *   it ended in and frees its slot, and a stream gets a chunk per submit. The device stops a sequence at its stop
 *   token or max tokens inside a submit, and a sequence ended by a stop string is cut by the server, so every
 *   completion is the request's solo `generate` (`LocalPolicy`'s sampling: seed per request, Philox stream = prompt
 *   length). Weight updates upload the new tensors to the device. Top logprobs (up to 20) are selected on the device
 *   by the sampler (one pass over the slot's logits per alternative, only for sequences that ask) and read back
 *   with the sampled tokens: log_softmax(logits / T) of the raw logits, as the CPU backend reports them.
 *
 * Both load weights from a checkpoint directory (`Checkpoint.loadWeights`: every tensor of the config with its
 * shape, nothing else) or from the bytes of one safetensors file, checked the same way.
 *
 * @example
 * ```ts
 * import { Effect, Random } from "effect"
 * import { Checkpoint } from "@envtrain/gpu"
 * import { PolicyServer } from "@envtrain/rollout"
 * import { PolicyBackend } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const backend = yield* PolicyBackend.cpu(yield* Checkpoint.load("models/tiny"), { maxBatchSize: 16 })
 *   const server = yield* PolicyServer.serve(backend, { port: 8000 })
 *   yield* Effect.never
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import type { Path } from "@effect/platform"
import { FileSystem } from "@effect/platform"
import * as CpuDevice from "@envtrain/gpu/cpu/CpuDevice"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as LoraAdapter from "@envtrain/gpu/formats/LoraAdapter"
import * as ModelConfig from "@envtrain/gpu/formats/ModelConfig"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import * as Generation from "@envtrain/gpu/model/Generation"
import * as Qwen3 from "@envtrain/gpu/model/Qwen3"
import * as Qwen3Reference from "@envtrain/gpu/model/Qwen3Reference"
import type { Gpu } from "@envtrain/gpu/runtime/Gpu"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as LocalPolicy from "@envtrain/rollout/LocalPolicy"
import type { BackendCompletion, BackendRequest, Decoder, WeightSource } from "@envtrain/rollout/PolicyServer"
import { type Backend, BackendError } from "@envtrain/rollout/PolicyServer"
import type { Scope } from "effect"
import { Effect, Random } from "effect"

/** Options of both backends. */
export interface BackendOptions {
  /** Most requests decoded together. Default 16. */
  readonly maxBatchSize?: number
  /** Longest prompt + completion. Default min(max_position_embeddings, 4096). */
  readonly contextLength?: number
}

// The sampling defaults of generation_config.json, as vLLM's `--generation-config auto` reads them.
const samplingDefaultsOf = (model: Checkpoint.Model): NonNullable<Backend["samplingDefaults"]> => {
  const g = model.generationConfig
  const num = (key: string) => typeof g[key] === "number" ? g[key] : undefined
  const pick = (key: string, name: string) => {
    const v = num(key)
    return v === undefined ? {} : { [name]: v }
  }
  return {
    ...pick("temperature", "temperature"),
    ...pick("top_p", "topP"),
    ...pick("top_k", "topK"),
    ...pick("min_p", "minP"),
    ...pick("repetition_penalty", "repetitionPenalty")
  }
}

const contextOf = (model: Checkpoint.Model, options: BackendOptions) =>
  Math.min(options.contextLength ?? 4096, model.config.max_position_embeddings, 4096)

/**
 * The tensors of `source`, checked against `config` (names and shapes), f32. Pushed bytes that carry a LoRA adapter
 * (`LoraAdapter.encodePushed`, what a trainer of an adapter sends) are merged into `base` (the weights the server
 * started with: the frozen base of the run) and the merged model is returned.
 */
export const readWeights = (
  config: ModelConfig.ModelConfig,
  source: WeightSource,
  base?: Safetensors.Tensors
): Effect.Effect<Map<string, Safetensors.Tensor>, BackendError, FileSystem.FileSystem | Path.Path> => {
  const refused = (e: { readonly message: string }) =>
    new BackendError({ status: 400, message: `The new weights do not fit this model: ${e.message}` })
  if (source._tag === "Directory") {
    return Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const exists = yield* fs.exists(source.path).pipe(Effect.orElseSucceed(() => false))
      if (!exists) {
        return yield* new BackendError({
          status: 400,
          message: `The checkpoint directory ${source.path} does not exist.`
        })
      }
      return yield* Checkpoint.loadWeights(source.path, config).pipe(Effect.mapError(refused))
    })
  }
  return Effect.gen(function*() {
    const adapter = yield* LoraAdapter.decodePushed(source.bytes, config).pipe(Effect.mapError(refused))
    if (adapter !== undefined) {
      if (base === undefined) {
        return yield* refused({ message: "this backend has no base to merge a LoRA adapter into." })
      }
      return LoraAdapter.merge(config, base, adapter, "F32")
    }
    const tensors = yield* Safetensors.decode(source.bytes, "<pushed weights>").pipe(Effect.mapError(refused))
    const out = new Map<string, Safetensors.Tensor>()
    for (const spec of ModelConfig.expectedTensors(config)) {
      const t = tensors.get(spec.name)
      if (t === undefined) {
        return yield* refused({ message: `the safetensors lack "${spec.name}" (shape [${spec.shape.join(", ")}]).` })
      }
      if (t.shape.join(",") !== spec.shape.join(",")) {
        return yield* refused({
          message: `"${spec.name}" has shape [${t.shape.join(", ")}]; the model's is [${spec.shape.join(", ")}].`
        })
      }
      out.set(spec.name, { shape: spec.shape, data: t.data })
    }
    const extra = [...tensors.keys()].filter((n) =>
      !out.has(n) && !(n === ModelConfig.LM_HEAD && config.tie_word_embeddings)
    )
    if (extra.length > 0) return yield* refused({ message: `unexpected tensors ${extra.slice(0, 5).join(", ")}.` })
    return out
  })
}

// The k most likely tokens of each completion position: log_softmax(logits / T) (T = 1 when greedy), one forward
// pass over prompt + completion under the weights that generated it.
const topLogprobsOf = (
  config: ModelConfig.ModelConfig,
  weights: Qwen3Reference.Weights,
  request: BackendRequest,
  tokenIds: ReadonlyArray<number>
) => {
  const tokens = [...request.promptIds, ...tokenIds]
  const fwd = Qwen3Reference.forward(config, weights, { tokens, batch: 1, seqLen: tokens.length })
  const V = config.vocab_size
  const T = (request.sampling.temperature ?? 1) === 0 ? 1 : request.sampling.temperature ?? 1
  const out: Array<Array<{ id: number; logprob: number }>> = []
  for (let i = 0; i < tokenIds.length; i++) {
    const row = (request.promptIds.length - 1 + i) * V
    let max = -Infinity
    for (let v = 0; v < V; v++) max = Math.max(max, fwd.logits[row + v] / T)
    let sum = 0
    for (let v = 0; v < V; v++) sum += Math.exp(fwd.logits[row + v] / T - max)
    const lse = max + Math.log(sum)
    const order = Array.from({ length: V }, (_, v) => v).sort((a, b) =>
      fwd.logits[row + b] - fwd.logits[row + a] || a - b
    )
    out.push(order.slice(0, request.topLogprobs).map((id) => ({ id, logprob: fwd.logits[row + id] / T - lse })))
  }
  return out
}

/**
 * The CPU device's model as a backend (`Trainer.deviceModel`: f32 kernels, matmuls on the route `options.device`
 * selects — the platform BLAS or WebAssembly SIMD). Decode steps run in the server's thread, one batched pass per
 * step. Needs `FileSystem` and `Path` (for checkpoint directories) from the context it is built in.
 */
export const cpu = (
  model: Checkpoint.Model,
  options: BackendOptions & { readonly device?: CpuDevice.DeviceOptions } = {}
): Effect.Effect<Backend, CpuDevice.Unavailable, FileSystem.FileSystem | Path.Path> =>
  Effect.flatMap(CpuDevice.make(options.device ?? {}), (device) =>
    cpuBackend(
      model,
      options,
      Trainer.deviceModel(model, { gemm: device.gemm, maxBatchSize: options.maxBatchSize ?? 16 }),
      "cpu"
    ))

/**
 * The CPU reference model (`Trainer.referenceModel`, the plain-TypeScript specification: exact, slow) as a backend.
 * Needs `FileSystem` and `Path` from the context it is built in.
 */
export const reference = (
  model: Checkpoint.Model,
  options: BackendOptions = {}
): Effect.Effect<Backend, never, FileSystem.FileSystem | Path.Path> =>
  cpuBackend(model, options, Trainer.referenceModel(model, { maxBatchSize: options.maxBatchSize ?? 16 }), "reference")

const cpuBackend = (
  model: Checkpoint.Model,
  options: BackendOptions,
  trainable: Trainer.TrainableModel,
  name: string
): Effect.Effect<Backend, never, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<FileSystem.FileSystem | Path.Path>()
    const maxBatchSize = options.maxBatchSize ?? 16
    const weightsNow = Effect.map(trainable.exportState, (state) => {
      const w: Qwen3Reference.Weights = {}
      for (const [name, t] of state.weights) w[name] = t.data
      return w
    })
    const withTop = (
      requests: ReadonlyArray<BackendRequest>,
      completions: ReadonlyArray<BackendCompletion | undefined>
    ) =>
      // Every decode step passes here: no generator unless a finished sequence wants top logprobs.
      !requests.some((r, i) => r.topLogprobs > 0 && completions[i] !== undefined)
        ? Effect.succeed(completions)
        : Effect.gen(function*() {
          const weights = yield* weightsNow
          return completions.map((c, i) =>
            c !== undefined && requests[i].topLogprobs > 0
              ? { ...c, topLogprobs: topLogprobsOf(model.config, weights, requests[i], c.tokenIds) }
              : c
          )
        })
    const stepwise = trainable.decoder
    interface Sequence {
      readonly request: BackendRequest
      readonly state: unknown
    }
    return {
      name,
      tokenizer: model.tokenizer,
      chatTemplate: model.chatTemplate,
      contextLength: contextOf(model, options),
      maxBatchSize,
      maxTopLogprobs: 20,
      samplingDefaults: samplingDefaultsOf(model),
      generate: (requests) =>
        Effect.flatMap(
          trainable.generate(requests),
          (completions) => withTop(requests, completions) as Effect.Effect<ReadonlyArray<BackendCompletion>>
        ),
      ...(stepwise === undefined ? {} : {
        decoder: {
          start: (request) => Effect.map(stepwise.start(request), (state): Sequence => ({ request, state })),
          step: (sequences) => {
            const seqs = sequences as ReadonlyArray<Sequence>
            return Effect.flatMap(
              stepwise.step(seqs.map((s) => s.state)),
              (completions) => withTop(seqs.map((s) => s.request), completions)
            )
          },
          ...(stepwise.progress === undefined ? {} : {
            progress: ((show) => (sequence: unknown) => show((sequence as Sequence).state))(stepwise.progress)
          })
        }
      }),
      loadWeights: (source) =>
        readWeights(model.config, source, model.tensors).pipe(
          Effect.flatMap((weights) => trainable.importState({ weights, optimizerStep: 0 })),
          Effect.provide(context)
        )
    } satisfies Backend
  })

// The GPU generator's stop-token slots per request.
const GPU_STOP_TOKENS = 8

// A request on the GPU backend: the policy request and its sequence in the generation slots.
interface GpuSequence {
  readonly request: BackendRequest
  readonly sequence: Generation.Sequence
}

/**
 * The GPU model (Qwen3 with its generation slots driven step by step, `Generation.makeStepwise`) as a backend; the
 * device buffers live in the Scope. Its `decoder` step is one submit of `stepsPerSubmit` decode steps.
 */
export const gpu = (
  model: Checkpoint.Model,
  options: BackendOptions & {
    /**
     * Decode steps per GPU submit (1…, default 8): requests join, and streams get a chunk, between submits; more
     * steps amortise the submit and read-back, fewer make joins and stream chunks finer.
     */
    readonly stepsPerSubmit?: number
  } = {}
): Effect.Effect<
  Backend,
  Generation.GenerationError | Qwen3.MakeError,
  Gpu | Scope.Scope | FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<FileSystem.FileSystem | Path.Path>()
    const maxBatchSize = options.maxBatchSize ?? 16
    const contextLength = contextOf(model, options)
    const stepsPerSubmit = options.stepsPerSubmit ?? 8
    if (!Number.isInteger(stepsPerSubmit) || stepsPerSubmit < 1) {
      return yield* new Generation.GenerationError({
        problem: `stepsPerSubmit must be a positive integer (got ${stepsPerSubmit}).`
      })
    }
    const qwen = yield* Qwen3.make(model, {
      batch: 1,
      seq: 1,
      trainable: false,
      generation: { slots: maxBatchSize, capacity: contextLength, stepsPerSubmit }
    })
    const slots = yield* Generation.makeStepwise(qwen)
    const failed = (e: { readonly message: string }) => new BackendError({ status: 500, message: e.message })
    const decoder = {
      start: (request: BackendRequest) =>
        Effect.gen(function*() {
          // A request without a seed gets a random one, as LocalPolicy gives it.
          const seed = request.sampling.seed ?? (yield* Random.nextIntBetween(0, 0x7fffffff))
          const sequence = yield* slots.start({
            ...LocalPolicy.toGeneration(request, seed),
            ...(request.topLogprobs > 0 ? { topLogprobs: request.topLogprobs } : {})
          }).pipe(Effect.mapError(failed))
          return { request, sequence } satisfies GpuSequence
        }),
      step: (sequences: ReadonlyArray<unknown>) => {
        const seqs = sequences as ReadonlyArray<GpuSequence>
        return slots.step(seqs.map((s) => s.sequence)).pipe(
          Effect.map((results) =>
            results.map((out, i): BackendCompletion | undefined =>
              out === undefined ? undefined : {
                ...LocalPolicy.toCompletion(seqs[i].request, out),
                ...(out.topLogprobs === undefined ? {} : { topLogprobs: out.topLogprobs })
              }
            )
          ),
          Effect.mapError(failed)
        )
      },
      progress: (sequence: unknown) => {
        const { request, sequence: s } = sequence as GpuSequence
        return {
          tokenIds: s.tokens,
          logprobs: (request.sampling.temperature ?? 1) === 0 ? s.logprobs : s.sampledLogprobs
        }
      },
      end: (sequence: unknown) => slots.end((sequence as GpuSequence).sequence)
    } satisfies Decoder
    // Window batching: the batch's sequences start together and are stepped until the last finishes.
    const generate = (requests: ReadonlyArray<BackendRequest>) =>
      Effect.suspend(() => {
        const seqs: Array<GpuSequence> = []
        return Effect.gen(function*() {
          for (const r of requests) seqs.push(yield* decoder.start(r))
          const done: Array<BackendCompletion | undefined> = requests.map(() => undefined)
          let left = seqs.map((_, i) => i)
          while (left.length > 0) {
            const results = yield* decoder.step(left.map((i) => seqs[i]))
            left.forEach((i, j) => (done[i] = results[j]))
            left = left.filter((i) => done[i] === undefined)
          }
          return done as ReadonlyArray<BackendCompletion>
        }).pipe(
          // Unfinished sequences (a failed start or step, an interruption) give their slots back.
          Effect.ensuring(Effect.sync(() => seqs.forEach(decoder.end)))
        )
      })
    return {
      name: "gpu",
      tokenizer: model.tokenizer,
      chatTemplate: model.chatTemplate,
      contextLength,
      maxBatchSize,
      maxTopLogprobs: 20,
      samplingDefaults: samplingDefaultsOf(model),
      maxStopTokenIds: GPU_STOP_TOKENS,
      generate,
      decoder,
      loadWeights: (source) =>
        readWeights(model.config, source, model.tensors).pipe(
          Effect.flatMap((weights) =>
            qwen.setWeights(weights).pipe(
              Effect.mapError((e) =>
                new BackendError({ status: 500, message: `Uploading the weights failed: ${e.message}` })
              )
            )
          ),
          Effect.provide(context)
        )
    } satisfies Backend
  })
