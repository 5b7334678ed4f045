/**
 * The CPU reference model's generation with multi-turn KV-cache reuse. The episode loop asks for one completion per
 * turn with the whole conversation as the prompt; prefilling that prompt from scratch every turn makes a 10-turn
 * Catch episode cost ~10 full prefills. Here each finished generation keeps its cache, and the next request whose
 * prompt extends it only runs the new tokens (the tool result and the next turn's header). Sampling is the
 * reference's own (`sampleToken` with `samplingUniform(seed, promptLength, step)`), so the tokens are those
 * `Qwen3Reference.generate` would draw.
 */
import { Qwen3Reference } from "@envtrain/gpu"
import type { Checkpoint } from "@envtrain/gpu"
import type { Completion, GenerateRequest } from "@envtrain/rollout/Policy"
import { Effect } from "effect"
import { cpuModel, type TrainableModel } from "./model.js"

interface Entry {
  readonly tokens: Array<number>
  readonly cache: Qwen3Reference.KvCache
}

/** Most caches kept between turns, and the memory they may hold together (a cache is ~1 MB for the tiny preset). */
const POOL = 160
const POOL_BYTES = 1024 ** 3

export const cachedCpuModel = (
  model: Checkpoint.Model,
  options: { readonly maxBatchSize?: number } = {}
): TrainableModel => {
  const base = cpuModel(model, options)
  const config = model.config
  const capacity = Math.min(config.max_position_embeddings, 4096)
  const cacheBytes = 2 * config.num_hidden_layers * config.num_key_value_heads * capacity * config.head_dim * 4
  const poolSize = Math.max(1, Math.min(POOL, Math.floor(POOL_BYTES / cacheBytes)))
  let weights: Qwen3Reference.Weights | undefined
  let pool: Array<Entry> = []
  const stale = () => {
    weights = undefined
    pool = []
  }
  const currentWeights = Effect.suspend(() =>
    weights !== undefined ? Effect.succeed(weights) : Effect.map(base.exportState, (state) => {
      const w: Qwen3Reference.Weights = {}
      for (const [name, t] of state.weights) w[name] = Float32Array.from(t.data)
      weights = w
      return w
    })
  )

  const claim = (prompt: ReadonlyArray<number>): Entry => {
    let best = -1
    for (let i = 0; i < pool.length; i++) {
      const t = pool[i].tokens
      if (t.length > prompt.length || (best >= 0 && t.length <= pool[best].tokens.length)) continue
      let ok = true
      for (let j = 0; j < t.length && ok; j++) ok = t[j] === prompt[j]
      if (ok) best = i
    }
    if (best < 0) return { tokens: [], cache: Qwen3Reference.makeKvCache(config, capacity) }
    const [entry] = pool.splice(best, 1)
    return entry
  }

  interface Active {
    readonly request: GenerateRequest
    readonly entry: Entry
    readonly params: Qwen3Reference.SamplingParams
    readonly temperature: number
    readonly maxNew: number
    readonly stops: ReadonlySet<number>
    readonly context: Array<number>
    readonly tokens: Array<number>
    readonly logprobs: Array<number>
    finishReason: "stop" | "length"
  }

  const start = (request: GenerateRequest): Active => {
    const s = request.sampling
    const prompt = request.promptIds
    const temperature = s.temperature ?? 1
    const params: Qwen3Reference.SamplingParams = {
      temperature,
      ...(s.topK !== undefined && s.topK > 0 ? { topK: s.topK } : {}),
      ...(s.topP !== undefined ? { topP: s.topP } : {}),
      ...(s.minP !== undefined ? { minP: s.minP } : {}),
      ...(s.repetitionPenalty !== undefined ? { repetitionPenalty: s.repetitionPenalty } : {})
    }
    const maxNew = Math.max(0, Math.min(s.maxTokens, capacity - prompt.length))
    let entry = claim(prompt)
    if (entry.tokens.length === prompt.length) {
      // The same prompt again: re-run its last token to get the next-token logits.
      entry.cache.length -= 1
      entry.tokens.pop()
    }
    if (prompt.length + maxNew > capacity) entry = { tokens: [], cache: Qwen3Reference.makeKvCache(config, capacity) }
    return {
      request,
      entry,
      params,
      temperature,
      maxNew,
      stops: new Set(s.stopTokenIds ?? []),
      context: [...prompt],
      tokens: [],
      logprobs: [],
      finishReason: "length"
    }
  }

  // Every request of the batch decodes together: one batched pass per token over the sequences still running
  // (the same logits as separate passes; the CPU's matmuls are much cheaper per row when batched).
  const generateAll = (w: Qwen3Reference.Weights, requests: ReadonlyArray<GenerateRequest>): Array<Completion> => {
    const states = requests.map(start)
    let active = states.filter((a) => a.maxNew > 0)
    let rows = active.length === 0 ? [] : Qwen3Reference.extendBatch(
      config,
      w,
      active.map((a) => a.entry.cache),
      active.map((a) => a.request.promptIds.slice(a.entry.tokens.length))
    )
    for (let step = 0; active.length > 0; step++) {
      const next: Array<Active> = []
      const nextRows: Array<number> = []
      active.forEach((a, i) => {
        const s = a.request.sampling
        const u = a.temperature === 0
          ? 0
          : Qwen3Reference.samplingUniform(s.seed ?? 0, a.request.promptIds.length, step)
        const t = Qwen3Reference.sampleToken(rows[i], a.context, a.params, u)
        a.tokens.push(t.token)
        a.logprobs.push(a.temperature === 0 ? t.logprob : t.sampledLogprob)
        a.context.push(t.token)
        if (a.stops.has(t.token)) a.finishReason = "stop"
        else if (step + 1 < a.maxNew) {
          next.push(a)
          nextRows.push(t.token)
        }
      })
      active = next
      if (active.length > 0) {
        rows = Qwen3Reference.extendBatch(config, w, active.map((a) => a.entry.cache), nextRows.map((t) => [t]))
      }
    }
    return states.map((a) => {
      // What the cache holds: the prompt and every sampled token but the last.
      pool.push({ tokens: a.context.slice(0, a.entry.cache.length), cache: a.entry.cache })
      if (pool.length > poolSize) pool.shift()
      return { tokenIds: a.tokens, logprobs: a.logprobs, finishReason: a.finishReason }
    })
  }

  return {
    ...base,
    generate: (requests) => Effect.flatMap(currentWeights, (w) => Effect.sync(() => generateAll(w, requests))),
    step: (options) => Effect.tap(base.step(options), () => Effect.sync(stale)),
    importState: (state) => Effect.tap(base.importState(state), () => Effect.sync(stale))
  }
}
