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
import { cpuModel, type LoraOptions, type StepDecoder, type TrainableModel } from "./model.js"

/** A KV cache of either CPU implementation: how many tokens it holds (the rest is the engine's). */
interface Cache {
  length: number
}

/**
 * What KV-cache reuse needs of a CPU model: caches, and one batched pass of new tokens through them giving each
 * sequence's last-token logits. The engine runs on the model's current weights.
 */
export interface DecodeEngine {
  readonly makeKvCache: (capacity: number) => Cache
  readonly extendBatch: (
    caches: ReadonlyArray<Cache>,
    chunks: ReadonlyArray<ReadonlyArray<number>>
  ) => ReadonlyArray<ArrayLike<number>>
}

interface Entry {
  readonly tokens: Array<number>
  readonly cache: Cache
}

/** Most caches kept between turns, and the memory they may hold together (a cache is ~1 MB for the tiny preset). */
const POOL = 160
const POOL_BYTES = 1024 ** 3

export const cachedCpuModel = (
  model: Checkpoint.Model,
  options: { readonly maxBatchSize?: number; readonly lora?: LoraOptions | undefined } = {}
): TrainableModel => {
  const base = cpuModel(model, options)
  const config = model.config
  const lora = options.lora
  let weights: Qwen3Reference.Weights | undefined
  // With LoRA the exported state is the adapter: decoding runs it on a copy of the (frozen) base, taken once.
  const frozenBase = lora === undefined ? undefined : Object.fromEntries(
    [...model.tensors].map(([name, t]) => [name, Float32Array.from(t.data)])
  )
  // The reference decodes on a copy of the weights (or adapter), taken again after every update.
  const currentEngine = Effect.suspend(() =>
    weights !== undefined ? Effect.succeed(weights) : Effect.map(base.exportState, (state) => {
      const w: Qwen3Reference.Weights = {}
      for (const [name, t] of state.weights) w[name] = Float32Array.from(t.data)
      weights = w
      return w
    })
  ).pipe(Effect.map((w): DecodeEngine => ({
    makeKvCache: (capacity) => Qwen3Reference.makeKvCache(config, capacity),
    extendBatch: (caches, chunks) =>
      frozenBase === undefined
        ? Qwen3Reference.extendBatch(config, w, caches as ReadonlyArray<Qwen3Reference.KvCache>, chunks)
        : Qwen3Reference.extendBatch(config, frozenBase, caches as ReadonlyArray<Qwen3Reference.KvCache>, chunks, {
          config: lora!.config,
          adapters: w
        })
  })))
  return withKvReuse(base, config, currentEngine, () => weights = undefined)
}

/**
 * A CPU model with multi-turn KV-cache reuse and step-wise decoding on `engine` (see the module's comment). `stale`
 * is called after every update of the weights.
 */
export const withKvReuse = (
  base: Omit<TrainableModel, "generate" | "decoder">,
  config: TrainableModel["config"],
  currentEngine: Effect.Effect<DecodeEngine>,
  onUpdate: () => void
): TrainableModel => {
  const capacity = Math.min(config.max_position_embeddings, 4096)
  const cacheBytes = 2 * config.num_hidden_layers * config.num_key_value_heads * capacity * config.head_dim * 4
  const poolSize = Math.max(1, Math.min(POOL, Math.floor(POOL_BYTES / cacheBytes)))
  let pool: Array<Entry> = []
  let engine: DecodeEngine | undefined
  const stale = () => {
    onUpdate()
    engine = undefined
    pool = []
  }
  const current = Effect.suspend(() =>
    engine !== undefined ? Effect.succeed(engine) : Effect.tap(currentEngine, (e) => engine = e)
  )

  const claim = (e: DecodeEngine, prompt: ReadonlyArray<number>): Entry => {
    let best = -1
    for (let i = 0; i < pool.length; i++) {
      const t = pool[i].tokens
      if (t.length > prompt.length || (best >= 0 && t.length <= pool[best].tokens.length)) continue
      let ok = true
      for (let j = 0; j < t.length && ok; j++) ok = t[j] === prompt[j]
      if (ok) best = i
    }
    if (best < 0) return { tokens: [], cache: e.makeKvCache(capacity) }
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

  const start = (e: DecodeEngine, request: GenerateRequest): Active => {
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
    let entry = claim(e, prompt)
    if (entry.tokens.length === prompt.length) {
      // The same prompt again: re-run its last token to get the next-token logits.
      entry.cache.length -= 1
      entry.tokens.pop()
    }
    if (prompt.length + maxNew > capacity) entry = { tokens: [], cache: e.makeKvCache(capacity) }
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

  interface Running extends Active {
    /** Tokens to run through the cache at the next step: the uncached prompt, then the last sampled token. */
    pending: ReadonlyArray<number>
    step: number
  }

  const begin = (e: DecodeEngine, request: GenerateRequest): Running => {
    const a = start(e, request)
    return { ...a, pending: a.request.promptIds.slice(a.entry.tokens.length), step: 0 }
  }

  const done = (a: Running): Completion => {
    // What the cache holds: the prompt and every sampled token but the last.
    pool.push({ tokens: a.context.slice(0, a.entry.cache.length), cache: a.entry.cache })
    if (pool.length > poolSize) pool.shift()
    return { tokenIds: a.tokens, logprobs: a.logprobs, finishReason: a.finishReason }
  }

  // One batched pass over the given sequences (a new one's uncached prompt, the others' last token; the same logits
  // as separate passes, and the CPU's matmuls are much cheaper per row when batched), then one sampled token each.
  // Sampling depends only on the sequence's own seed, prompt length and step, so a sequence's tokens do not depend
  // on which others share its steps. Returns each sequence's completion when it finished at this step.
  const stepAll = (e: DecodeEngine, states: ReadonlyArray<Running>): Array<Completion | undefined> => {
    const out: Array<Completion | undefined> = states.map(() => undefined)
    const live: Array<number> = []
    states.forEach((a, i) => {
      if (a.step >= a.maxNew) out[i] = done(a)
      else live.push(i)
    })
    if (live.length === 0) return out
    const rows = e.extendBatch(live.map((i) => states[i].entry.cache), live.map((i) => states[i].pending))
    live.forEach((i, r) => {
      const a = states[i]
      const s = a.request.sampling
      const u = a.temperature === 0
        ? 0
        : Qwen3Reference.samplingUniform(s.seed ?? 0, a.request.promptIds.length, a.step)
      const t = Qwen3Reference.sampleToken(rows[r], a.context, a.params, u)
      a.tokens.push(t.token)
      a.logprobs.push(a.temperature === 0 ? t.logprob : t.sampledLogprob)
      a.context.push(t.token)
      a.step += 1
      if (a.stops.has(t.token)) a.finishReason = "stop"
      if (a.stops.has(t.token) || a.step >= a.maxNew) out[i] = done(a)
      else a.pending = [t.token]
    })
    return out
  }

  // Every request of the batch decodes together until the last one finishes.
  const generateAll = (e: DecodeEngine, requests: ReadonlyArray<GenerateRequest>): Array<Completion> => {
    const states = requests.map((r) => begin(e, r))
    const results: Array<Completion | undefined> = states.map(() => undefined)
    let active = states.map((_, i) => i)
    while (active.length > 0) {
      const out = stepAll(e, active.map((i) => states[i]))
      active.forEach((i, j) => results[i] = out[j])
      active = active.filter((_, j) => out[j] === undefined)
    }
    return results as Array<Completion>
  }

  const decoder: StepDecoder = {
    start: (request) => Effect.flatMap(current, (e) => Effect.sync(() => begin(e, request))),
    step: (sequences) =>
      Effect.flatMap(current, (e) => Effect.sync(() => stepAll(e, sequences as ReadonlyArray<Running>))),
    progress: (sequence) => {
      const a = sequence as Running
      return { tokenIds: a.tokens, logprobs: a.logprobs }
    }
  }

  return {
    ...base,
    decoder,
    generate: (requests) => Effect.flatMap(current, (e) => Effect.sync(() => generateAll(e, requests))),
    step: (options) => Effect.tap(base.step(options), () => Effect.sync(stale)),
    importState: (state) => Effect.tap(base.importState(state), () => Effect.sync(stale))
  }
}
