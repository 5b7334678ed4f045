/**
 * The Policy over the local GPU model: `@envtrain/gpu`'s Qwen3 with its `Generation` loop (KV cache, sampling on
 * the device), behind the batching policy. Concurrent episodes each call `generate`; their requests are gathered
 * into batches of at most `maxBatchSize` (waiting up to `window` after the first) and handed to the generator
 * together, so one decode step serves every episode of the batch.
 *
 * Sampling: a request without a `seed` gets a random one, so the G episodes of a group differ; with a seed (per
 * episode, as the trainer sets it) the tokens do not depend on how requests were batched. Logprobs are the
 * sampler's (`log_softmax(logits / T)` after the processors), or the plain T = 1 logprobs when greedy.
 * A request the generator refuses (e.g. prompt + maxTokens beyond the KV cache) and device failures fail every
 * request of its batch as a `PolicyTransportError`, which ends those episodes as unscoreable.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { Checkpoint, Gpu, Qwen3 } from "@envtrain/gpu"
 * import * as LocalPolicy from "@envtrain/rollout/LocalPolicy" // not in the barrel: it loads the WebGPU runtime
 *
 * const PolicyLive = Layer.unwrapScoped(Effect.gen(function*() {
 *   const ckpt = yield* Checkpoint.makeModel("tiny")
 *   const model = yield* Qwen3.make(ckpt, { batch: 1, seq: 8, trainable: false, generation: { slots: 16, capacity: 1024 } })
 *   return LocalPolicy.layer(model, { maxBatchSize: 16, window: "2 millis" })
 * })).pipe(Layer.provide(Gpu.Gpu.layer()))
 * ```
 *
 * @since 0.0.0
 */
import { Generation } from "@envtrain/gpu"
import type { Gpu, Qwen3 } from "@envtrain/gpu"
import type { Duration, Scope } from "effect"
import { Effect, Layer, Random } from "effect"
import type { Completion, GenerateRequest } from "./Policy.js"
import { makeBatching, Policy } from "./Policy.js"

/** Options of {@link make}. */
export interface LocalPolicyOptions {
  /** Most requests handed to the generator at once (at most its slots, or the extra requests wait for a slot). */
  readonly maxBatchSize: number
  /** How long a batch waits for more requests after its first (see `Policy.batching`); default 0. */
  readonly window?: Duration.DurationInput
}

/** Counters of a local policy (batches formed, requests served, the largest batch). */
export interface LocalPolicyStats {
  readonly batches: number
  readonly requests: number
  readonly largestBatch: number
}

/** The policy and its counters. */
export interface LocalPolicy {
  readonly policy: Policy["Type"]
  readonly stats: () => LocalPolicyStats
}

/**
 * The generator's request for one policy request (the grpo trainer's mapping: `sequence` = prompt length, so the
 * turns of one episode draw from different Philox streams under the same seed).
 */
export const toGeneration = (request: GenerateRequest, seed: number): Generation.GenerateRequest => {
  const s = request.sampling
  return {
    prompt: request.promptIds,
    maxNewTokens: s.maxTokens,
    stopTokens: s.stopTokenIds ?? [],
    seed,
    sequence: request.promptIds.length,
    temperature: s.temperature ?? 1,
    ...(s.topK !== undefined && s.topK > 0 ? { topK: s.topK } : {}),
    ...(s.topP !== undefined ? { topP: s.topP } : {}),
    ...(s.minP !== undefined ? { minP: s.minP } : {}),
    ...(s.repetitionPenalty !== undefined ? { repetitionPenalty: s.repetitionPenalty } : {})
  }
}

/** The policy's completion of a generator result: the sampler's logprobs, or the plain T = 1 ones when greedy. */
export const toCompletion = (request: GenerateRequest, out: Generation.GenerateResult): Completion => ({
  tokenIds: out.tokens,
  logprobs: (request.sampling.temperature ?? 1) === 0 ? out.logprobs : out.sampledLogprobs,
  finishReason: out.finishReason
})

/** A batching policy over a running generator (see {@link make} to start one for a model). */
export const fromGenerator = (
  generator: Generation.GeneratorService,
  options: LocalPolicyOptions
): Effect.Effect<LocalPolicy, never, Scope.Scope> =>
  Effect.gen(function*() {
    const counters = { batches: 0, requests: 0, largestBatch: 0 }
    const one = (request: GenerateRequest) =>
      Effect.gen(function*() {
        const seed = request.sampling.seed ?? (yield* Random.nextIntBetween(0, 0x7fffffff))
        return toCompletion(request, yield* generator.generate(toGeneration(request, seed)))
      })
    const policy = yield* makeBatching({
      maxBatchSize: Math.max(1, options.maxBatchSize),
      ...(options.window === undefined ? {} : { window: options.window }),
      generateBatch: (requests) => {
        counters.batches++
        counters.requests += requests.length
        counters.largestBatch = Math.max(counters.largestBatch, requests.length)
        // All of the batch is queued on the generator before its loop admits any, so they share decode steps.
        return Effect.forEach(requests, one, { concurrency: "unbounded" })
      }
    })
    return { policy, stats: () => ({ ...counters }) }
  })

/** Starts the generation loop of `model` (made with `generation` options) and the batching policy over it. */
export const make = (
  model: Qwen3.Qwen3Model,
  options: LocalPolicyOptions
): Effect.Effect<LocalPolicy, Generation.GenerationError, Gpu.Gpu | Scope.Scope> =>
  Effect.flatMap(Generation.make(model), (generator) => fromGenerator(generator, options))

/** The Policy service over the local model (the generator stops with the layer). */
export const layer = (
  model: Qwen3.Qwen3Model,
  options: LocalPolicyOptions
): Layer.Layer<Policy, Generation.GenerationError, Gpu.Gpu> =>
  Layer.scoped(Policy, Effect.map(make(model, options), (local) => local.policy))
