/**
 * The Policy: token ids in, token ids out. Given a prompt's token ids and sampling parameters it returns the
 * sampled completion ids, the log-probability of each sampled token under the sampler, and why it stopped.
 * The episode loop never sends text, so what the model sampled is exactly what is trained on.
 *
 * Implementations:
 * - {@link scripted}: a deterministic function from the decoded context to the next assistant text (tests, benchmarks).
 * - {@link openAiCompatible}: a vLLM/SGLang server's `/v1/completions` with token-id prompts.
 * - {@link batching}: a request queue drained by a batch function (up to a maximum batch size, with an optional wait
 *   window), so concurrent episodes share one batched forward pass; `LocalPolicy` plugs the local GPU model in here.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Policy } from "@envtrain/rollout"
 *
 * const turn = Effect.gen(function*() {
 *   const policy = yield* Policy.Policy
 *   const out = yield* policy.generate({ promptIds: [1, 2, 3], sampling: { maxTokens: 64, temperature: 1 } })
 *   return out.tokenIds // out.logprobs[i] belongs to out.tokenIds[i]
 * })
 * ```
 *
 * @since 0.0.0
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import type { Scope } from "effect"
import { Context, Data, Deferred, Duration, Effect, Layer, Queue, Schema } from "effect"
import * as PolicyRequest from "./PolicyRequest.js"

/** Sampling parameters of one request (vLLM's names in camelCase). Unset means the backend's default. */
export interface SamplingParams {
  /** Most new tokens to sample (the episode loop passes what is left of the completion budget). */
  readonly maxTokens: number
  readonly temperature?: number
  readonly topP?: number
  /** -1 or unset: no top-k. */
  readonly topK?: number
  readonly minP?: number
  readonly repetitionPenalty?: number
  /** Generation stops after sampling one of these (the token is kept in the completion). */
  readonly stopTokenIds?: ReadonlyArray<number>
  /** Per-request seed, for reproducible sampling. */
  readonly seed?: number
}

/** One generation request. */
export interface GenerateRequest {
  /**
   * The context to continue. Borrowed for the call: the episode loop passes its one live context array and appends
   * the turn's tokens to it after `generate` completes, so a policy that keeps the ids past the call (e.g. to match
   * a cached prefix next turn) must copy them (`[...request.promptIds]`). Never write to it.
   */
  readonly promptIds: ReadonlyArray<number>
  readonly sampling: SamplingParams
  /**
   * Optional: which episode asks, the same for all its turns (the episode loop sets it), so that a policy spread
   * over several servers keeps the episode on one and its cached prefix is reused there.
   */
  readonly episode?: string
}

/** `stop`: an end-of-turn / stop token was sampled (and is the last id); `length`: `maxTokens` ran out. */
export type FinishReason = "stop" | "length"

/** What the policy sampled. `logprobs[i]` is the sampler's log-probability of `tokenIds[i]`. */
export interface Completion {
  readonly tokenIds: ReadonlyArray<number>
  readonly logprobs: ReadonlyArray<number>
  readonly finishReason: FinishReason
  /**
   * The policy version (optimizer steps applied to the weights) that produced the tokens: a policy server's
   * `policy_version`, or the trainer's step count when the request was issued in-process. Absent when unknown.
   * A trainer compares it with its optimizer step count, so a wrapper over a server reports the step whose weights
   * the server's version holds (the server counts updates since it started).
   */
  readonly policyVersion?: number
}

/**
 * The inference backend could not be reached or did not answer in time (connection refused, reset, timeout, 5xx).
 * Ends only the episode that asked, as unscoreable.
 */
export class PolicyTransportError extends Data.TaggedError("PolicyTransportError")<{
  readonly reason: "connect" | "timeout" | "server"
  readonly message: string
}> {}

/**
 * The backend answered, but not with a usable completion (4xx, a body without token ids or logprobs). This is a
 * configuration problem that would repeat for every episode, so it stops the run.
 */
export class PolicyResponseError extends Data.TaggedError("PolicyResponseError")<{
  readonly message: string
}> {}

/** Any failure of a generation request. */
export type PolicyError = PolicyTransportError | PolicyResponseError

/** The Policy service. */
export class Policy extends Context.Tag("@envtrain/rollout/Policy")<Policy, {
  readonly generate: (request: GenerateRequest) => Effect.Effect<Completion, PolicyError>
}>() {}

// ---------------------------------------------------------------------------------------------------------------
// Scripted

/** The part of a tokenizer the scripted policy needs (`@envtrain/text`'s `Tokenizer` fits). */
export interface TokenCodec {
  readonly encode: (text: string) => Array<number>
  readonly decode: (ids: ReadonlyArray<number>) => string
  readonly eosTokenId: number | null
}

/** What a scripted policy sees: the prompt ids, their decoded text, and how many times it was asked before. */
export interface ScriptContext {
  readonly promptIds: ReadonlyArray<number>
  /** The decoded prompt (the whole conversation so far, with special tokens). */
  readonly text: string
  readonly sampling: SamplingParams
}

/** A deterministic stand-in for the model's logprob of `id` (distinct per id, so tests can check alignment). */
export const scriptedLogprob = (id: number): number => -((id % 97) + 1) / 100

/**
 * A deterministic policy: `respond` maps the decoded context to the next assistant text (without the end-of-turn
 * token), which is tokenised with the real tokenizer; the tokenizer's EOS is appended. The completion is cut at
 * `maxTokens` (finish reason "length") and after any stop token it contains. Logprobs are {@link scriptedLogprob}.
 *
 * @example
 * ```ts
 * const layer = Policy.scripted(tokenizer, ({ text }) =>
 *   text.includes("<tool_response>") ? "Done." : "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"message\": \"hi\"}}\n</tool_call>")
 * ```
 */
export const scripted = <E = never, R = never>(
  codec: TokenCodec,
  respond: (context: ScriptContext) => string | Effect.Effect<string, E, R>
): Layer.Layer<Policy, never, R> =>
  Layer.effect(
    Policy,
    Effect.map(Effect.context<R>(), (context) => ({
      generate: (request: GenerateRequest) =>
        Effect.gen(function*() {
          const text = codec.decode(request.promptIds)
          const answer = respond({ promptIds: request.promptIds, text, sampling: request.sampling })
          const reply = typeof answer === "string" ? answer : yield* Effect.orDie(answer)
          const ids = codec.encode(reply)
          if (codec.eosTokenId !== null) ids.push(codec.eosTokenId)
          return cut(ids, request.sampling)
        }).pipe(Effect.provide(context))
    }))
  )

// Applies stop tokens and the token limit the way an inference server does.
const cut = (ids: ReadonlyArray<number>, sampling: SamplingParams): Completion => {
  const stops = new Set(sampling.stopTokenIds ?? [])
  let end = ids.length
  let finishReason: FinishReason = "stop"
  for (let i = 0; i < ids.length; i++) {
    if (stops.has(ids[i])) {
      end = i + 1
      break
    }
  }
  if (end > sampling.maxTokens) {
    end = Math.max(0, sampling.maxTokens)
    finishReason = "length"
  }
  const tokenIds = ids.slice(0, end)
  return { tokenIds, logprobs: tokenIds.map(scriptedLogprob), finishReason }
}

// ---------------------------------------------------------------------------------------------------------------
// OpenAI-compatible (vLLM / SGLang)

/** Options of {@link openAiCompatible}. */
export interface OpenAiCompatibleOptions {
  /** Server root, e.g. `http://127.0.0.1:8000` (the request goes to `${baseUrl}/v1/completions`). */
  readonly baseUrl: string
  /** The served model name. */
  readonly model: string
  /** Bearer token, if the server wants one. */
  readonly apiKey?: string
  /** Time limit of one request. Default 5 minutes. */
  readonly requestTimeout?: Duration.DurationInput
  /** Extra fields merged into every request body (e.g. `{"priority": 1}`). */
  readonly extraBody?: Readonly<Record<string, unknown>>
}

const CompletionResponse = Schema.Struct({
  policy_version: Schema.optional(Schema.NullOr(Schema.Int)),
  choices: Schema.NonEmptyArray(Schema.Struct({
    finish_reason: Schema.NullOr(Schema.String),
    token_ids: Schema.optional(Schema.NullOr(Schema.Array(Schema.Int))),
    logprobs: Schema.NullOr(Schema.Struct({
      tokens: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
      token_logprobs: Schema.Array(Schema.NullOr(Schema.Number))
    }))
  }))
})

/**
 * The body sent to `POST /v1/completions` for one request. The prompt is a list of token ids (vLLM and SGLang
 * accept `prompt: number[]`); `logprobs: 0` asks for the sampled token's logprob only; `return_token_ids` (vLLM
 * ≥ 0.10.2) returns the completion ids in `choices[0].token_ids`, and `return_tokens_as_token_ids` makes
 * `logprobs.tokens` read `"token_id:<id>"` as a fallback for servers without `return_token_ids`;
 * `skip_special_tokens: false` and `include_stop_str_in_output: true` keep the end-of-turn token in the output.
 */
export const completionRequestBody = (
  options: Pick<OpenAiCompatibleOptions, "model" | "extraBody">,
  request: GenerateRequest
): Record<string, unknown> => {
  const s = request.sampling
  const body: Record<string, unknown> = {
    model: options.model,
    prompt: [...request.promptIds],
    max_tokens: s.maxTokens,
    n: 1,
    stream: false,
    logprobs: 0,
    return_token_ids: true,
    return_tokens_as_token_ids: true,
    skip_special_tokens: false,
    include_stop_str_in_output: true
  }
  if (s.temperature !== undefined) body.temperature = s.temperature
  if (s.topP !== undefined) body.top_p = s.topP
  if (s.topK !== undefined) body.top_k = s.topK
  if (s.minP !== undefined) body.min_p = s.minP
  if (s.repetitionPenalty !== undefined) body.repetition_penalty = s.repetitionPenalty
  if (s.stopTokenIds !== undefined && s.stopTokenIds.length > 0) body.stop_token_ids = [...s.stopTokenIds]
  if (s.seed !== undefined) body.seed = s.seed
  return { ...body, ...options.extraBody }
}

const tokenIdOf = (token: string): number | undefined => {
  const m = /^token_id:(\d+)$/.exec(token)
  return m === null ? undefined : Number(m[1])
}

/**
 * A remote OpenAI-compatible inference server (vLLM, SGLang) used token-in/token-out through
 * `/v1/completions` (see {@link completionRequestBody} for the exact request). Needs an `HttpClient`
 * (`FetchHttpClient.layer` or `NodeHttpClient.layerUndici`). A request the connection drops before any answer
 * (ECONNRESET, EPIPE, `UND_ERR_SOCKET`: what a kept-alive connection the server closed while idle fails with) is sent
 * once more, logged and counted in `PolicyRequest.resends`: this client cannot see whether the socket was a reused
 * one, so a server that resets fresh connections gets the request twice and fails it twice.
 *
 * @example
 * ```ts
 * const PolicyLive = Policy.openAiCompatible({ baseUrl: "http://127.0.0.1:8000", model: "Qwen/Qwen3-0.6B" })
 *   .pipe(Layer.provide(FetchHttpClient.layer))
 * ```
 */
export const openAiCompatible = (
  options: OpenAiCompatibleOptions
): Layer.Layer<Policy, never, HttpClient.HttpClient> =>
  Layer.effect(
    Policy,
    Effect.gen(function*() {
      const client = yield* HttpClient.HttpClient
      const url = `${options.baseUrl.replace(/\/+$/, "")}/v1/completions`
      const timeout = options.requestTimeout ?? Duration.minutes(5)
      const generate = Effect.fn("Policy.openAiCompatible.generate")(function*(request: GenerateRequest) {
        let req = HttpClientRequest.post(url).pipe(
          HttpClientRequest.bodyUnsafeJson(completionRequestBody(options, request))
        )
        if (options.apiKey !== undefined) req = HttpClientRequest.bearerToken(req, options.apiKey)
        const response = yield* client.execute(req).pipe(
          Effect.catchIf(
            (e) => e._tag === "RequestError" && PolicyRequest.dropCodeOf(e.cause) !== undefined,
            (e) =>
              Effect.zipRight(
                PolicyRequest.noteResend(
                  { reason: "dropped", message: `POST ${url} failed: ${e.message}` },
                  "the connection dropped the request before any answer (as a kept-alive connection the server " +
                    "closed while idle does)"
                ),
                client.execute(req)
              )
          ),
          Effect.mapError((e) =>
            new PolicyTransportError({ reason: "connect", message: `POST ${url} failed: ${e.message}` })
          )
        )
        const text = yield* response.text.pipe(
          Effect.mapError((e) =>
            new PolicyTransportError({
              reason: "connect",
              message: `POST ${url}: reading the body failed: ${e.message}`
            })
          )
        )
        if (response.status >= 500) {
          return yield* new PolicyTransportError({
            reason: "server",
            message: `POST ${url} answered ${response.status}: ${text.slice(0, 500)}`
          })
        }
        if (response.status >= 400) {
          return yield* new PolicyResponseError({
            message: `POST ${url} answered ${response.status}: ${
              text.slice(0, 500)
            }. Check the model name and that the server accepts token-id prompts with logprobs.`
          })
        }
        return yield* parseCompletion(url, text)
      }, (effect) =>
        effect.pipe(
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () =>
              new PolicyTransportError({
                reason: "timeout",
                message: `POST ${url} did not answer within ${Duration.format(timeout)}.`
              })
          })
        ))
      return { generate }
    })
  )

/**
 * Reads a `/v1/completions` response body (as {@link completionRequestBody} asked for it): the first choice's token
 * ids, logprobs and finish reason, and the top-level `policy_version` when the server sends one.
 */
export const parseCompletion = (url: string, text: string): Effect.Effect<Completion, PolicyResponseError> =>
  Effect.gen(function*() {
    const bad = (problem: string) =>
      new PolicyResponseError({
        message: `POST ${url}: ${problem}. The server must return token ids (vLLM >= 0.10.2 \`return_token_ids\`, or ` +
          `\`return_tokens_as_token_ids\`) and \`logprobs\`.`
      })
    const json = yield* Effect.try({ try: () => JSON.parse(text) as unknown, catch: () => bad("the body is not JSON") })
    const decoded = yield* Schema.decodeUnknown(CompletionResponse)(json).pipe(
      Effect.mapError((e) => bad(`unexpected response shape (${e.message.split("\n").slice(0, 3).join(" ")})`))
    )
    const choice = decoded.choices[0]
    if (choice.logprobs === null) return yield* bad("the choice has no logprobs")
    const tokenIds = choice.token_ids ?? choice.logprobs.tokens?.map(tokenIdOf)
    if (tokenIds === undefined || tokenIds === null || tokenIds.some((x) => x === undefined)) {
      return yield* bad("the choice has no token ids")
    }
    const logprobs = choice.logprobs.token_logprobs
    if (logprobs.length !== tokenIds.length) {
      return yield* bad(`${tokenIds.length} token ids but ${logprobs.length} logprobs`)
    }
    if (logprobs.some((x) => x === null)) return yield* bad("a sampled token has a null logprob")
    const finish = choice.finish_reason
    if (finish !== "stop" && finish !== "length") return yield* bad(`finish_reason is ${JSON.stringify(finish)}`)
    const completion: Completion = {
      tokenIds: tokenIds as ReadonlyArray<number>,
      logprobs: logprobs as ReadonlyArray<number>,
      finishReason: finish
    }
    const version = decoded.policy_version
    return typeof version === "number" ? { ...completion, policyVersion: version } : completion
  })

// ---------------------------------------------------------------------------------------------------------------
// Batching (the local GPU model)

/** Options of {@link batching}. */
export interface BatchingOptions<E> {
  /** Most requests in one batch (the model's batch size). */
  readonly maxBatchSize: number
  /**
   * How long a batch waits, after its first request, for more to arrive (unless it is already full). Default 0:
   * whatever is waiting when the previous batch finishes. A few milliseconds gathers the turns of episodes whose
   * tool calls finish at slightly different times.
   */
  readonly window?: Duration.DurationInput
  /**
   * Generates a whole batch: one completion per request, in order. Each request has its own prompt, `maxTokens`
   * and stop ids; a failure fails every request of the batch.
   */
  readonly generateBatch: (requests: ReadonlyArray<GenerateRequest>) => Effect.Effect<ReadonlyArray<Completion>, E>
}

interface Pending {
  readonly request: GenerateRequest
  readonly done: Deferred.Deferred<Completion, PolicyError>
  cancelled: boolean
}

/**
 * A policy that queues requests and hands them in batches (up to `maxBatchSize`, whatever is waiting when the
 * previous batch finishes) to `generateBatch`. This is the shape the local GPU model needs: concurrent episodes
 * each call `generate`, and one forward pass serves them all. Requests whose episode was interrupted while waiting
 * are dropped from the next batch. Failures of `generateBatch` become `PolicyTransportError` for every request of
 * the batch; defects stay defects.
 */
export const batching = <E extends { readonly message: string }>(
  options: BatchingOptions<E>
): Layer.Layer<Policy> => Layer.scoped(Policy, makeBatching(options))

/** The {@link batching} policy as a value; its queue and loop live in the Scope. */
export const makeBatching = <E extends { readonly message: string }>(
  options: BatchingOptions<E>
): Effect.Effect<Policy["Type"], never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Pending>(), Queue.shutdown)
    const runBatch = (batch: ReadonlyArray<Pending>) =>
      options.generateBatch(batch.map((p) => p.request)).pipe(
        Effect.flatMap((completions) =>
          completions.length === batch.length
            ? Effect.forEach(batch, (p, i) => Deferred.succeed(p.done, completions[i]), { discard: true })
            : Effect.dieMessage(
              `generateBatch returned ${completions.length} completions for ${batch.length} requests`
            )
        ),
        Effect.catchAll((e) =>
          Effect.forEach(
            batch,
            (p) => Deferred.fail(p.done, new PolicyTransportError({ reason: "server", message: e.message })),
            { discard: true }
          )
        ),
        Effect.onExit((exit) =>
          exit._tag === "Failure"
            ? Effect.forEach(batch, (p) => Deferred.failCause(p.done, exit.cause as never), { discard: true })
            : Effect.void
        )
      )
    const window = options.window === undefined ? Duration.zero : Duration.decode(options.window)
    const loop = Effect.gen(function*() {
      const first = yield* Queue.take(queue)
      if (Duration.greaterThan(window, Duration.zero) && (yield* Queue.size(queue)) < options.maxBatchSize - 1) {
        yield* Effect.sleep(window)
      }
      const rest = yield* Queue.takeUpTo(queue, Math.max(0, options.maxBatchSize - 1))
      const batch = [first, ...rest].filter((p) => !p.cancelled)
      if (batch.length > 0) yield* runBatch(batch)
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(loop)
    const generate = (request: GenerateRequest): Effect.Effect<Completion, PolicyError> =>
      Effect.gen(function*() {
        const pending: Pending = { request, done: yield* Deferred.make<Completion, PolicyError>(), cancelled: false }
        yield* Queue.offer(queue, pending)
        return yield* Deferred.await(pending.done).pipe(
          Effect.onInterrupt(() => Effect.sync(() => pending.cancelled = true))
        )
      })
    return { generate }
  })
