// The policy server on node:http, run inside Effect: every HTTP exchange is a fiber in one FiberSet owned by the
// server's scope (closing the scope ends them), a client that hangs up interrupts its exchange (its queued requests
// are dropped from the next batch, its running sequences leave it), and every failure becomes an OpenAI-style error
// body, so one bad request never stops the server. On a continuous batch whose decoder shows its progress, streams
// are written token by token from the decode loop (`stream.ts`); otherwise they are cut from the finished answer.
import type { Scope } from "effect"
import { Cause, Duration, Effect, Exit, Fiber, FiberSet, Random } from "effect"
import { randomUUID } from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as ChatRenderer from "../../ChatRenderer.js"
import type {
  Backend,
  BackendError,
  BackendRequest,
  PolicyServerOptions,
  RunningPolicyServer,
  WeightSource
} from "../../PolicyServer.js"
import * as Adapters from "./adapters.js"
import * as Follow from "./follow.js"
import * as Metrics from "./metrics.js"
import {
  ApiError,
  apiError,
  type ChatRequest,
  chatRequest,
  type CompletionRequest,
  completionRequest
} from "./request.js"
import * as Response from "./response.js"
import * as Scheduler from "./scheduler.js"
import { ChoiceText, type Holds } from "./stream.js"

const VERSION_HEADER = "x-policy-version"

interface Resolved {
  readonly host: string
  readonly port: number
  readonly servedModelName: string
  readonly maxBatchSize: number
  readonly continuous: boolean
  readonly window: Duration.Duration
  readonly maxBodyBytes: number
  readonly maxQueue: number
  readonly requestTimeout: Duration.Duration
}

const resolve = (backend: Backend, options: PolicyServerOptions): Resolved | string => {
  const port = options.port ?? 8000
  if (!Number.isInteger(port) || port < 0 || port > 65535) return `port must be 0..65535, got ${port}`
  const maxBatchSize = options.maxBatchSize ?? backend.maxBatchSize
  if (!Number.isInteger(maxBatchSize) || maxBatchSize < 1) {
    return `maxBatchSize must be an integer >= 1, got ${maxBatchSize}`
  }
  if (maxBatchSize > backend.maxBatchSize) {
    return `maxBatchSize ${maxBatchSize} is more than the ${backend.name} backend takes at once (${backend.maxBatchSize})`
  }
  if (options.batching === "continuous" && backend.decoder === undefined) {
    return `the ${backend.name} backend cannot admit requests into a running decode; use batching "window"`
  }
  const servedModelName = options.servedModelName ?? "envtrain"
  if (servedModelName.length === 0) return "servedModelName must not be empty"
  return {
    host: options.host ?? "127.0.0.1",
    port,
    servedModelName,
    maxBatchSize,
    continuous: backend.decoder !== undefined && options.batching !== "window",
    window: Duration.decode(options.batchWindow ?? Duration.millis(2)),
    maxBodyBytes: options.maxBodyBytes ?? 1024 ** 3,
    maxQueue: options.maxQueue ?? 4096,
    requestTimeout: Duration.decode(options.requestTimeout ?? Duration.minutes(10))
  }
}

type Answer =
  | { readonly _tag: "Json"; readonly status: number; readonly body: unknown }
  | { readonly _tag: "Text"; readonly status: number; readonly body: string; readonly contentType: string }
  | { readonly _tag: "Sse"; readonly events: ReadonlyArray<unknown> }
  /** Already written (a token-by-token stream). */
  | { readonly _tag: "Streamed" }

const json = (body: unknown, status = 200): Answer => ({ _tag: "Json", status, body })
const hex = () => randomUUID().replace(/-/g, "")

const tryApi = <A>(f: () => A): Effect.Effect<A, ApiError> =>
  Effect.try({
    try: f,
    catch: (e) => e instanceof ApiError ? e : apiError(400, e instanceof Error ? e.message : String(e))
  })

export const make = (
  backend: Backend,
  options: PolicyServerOptions
): Effect.Effect<RunningPolicyServer, string, Scope.Scope> =>
  Effect.gen(function*() {
    const resolved = resolve(backend, options)
    if (typeof resolved === "string") return yield* Effect.fail(resolved)
    const { servedModelName } = resolved
    const tokenizer = backend.tokenizer
    const metrics = Metrics.make(servedModelName)
    const schedulerOptions = {
      maxBatchSize: resolved.maxBatchSize,
      continuous: resolved.continuous,
      window: resolved.window
    }
    const baseScheduler = yield* Scheduler.make(backend, schedulerOptions, metrics)
    const adapters = yield* Adapters.make(baseScheduler, options.adapters, schedulerOptions, metrics, servedModelName)
    // Generation routes by the request's adapter; weight updates and the policy version are the base's.
    const scheduler = adapters.scheduler
    const created = Math.floor(Date.now() / 1000)
    let shuttingDown = false
    // Weights pulled from a store: the newest loads before the server listens, so it never serves older ones.
    const follow = options.weightStore === undefined ? undefined : yield* Follow.make(options.weightStore, scheduler)

    // One renderer per distinct chat_template_kwargs (each keeps its own prompt frames).
    const renderers = new Map<string, ChatRenderer.Renderer>()
    const rendererFor = (kwargs: Readonly<Record<string, unknown>>) => {
      const key = JSON.stringify(kwargs)
      let r = renderers.get(key)
      if (r === undefined) {
        const { enable_thinking, ...extra } = kwargs
        r = ChatRenderer.make({
          tokenizer,
          template: backend.chatTemplate,
          ...(typeof enable_thinking === "boolean" ? { enableThinking: enable_thinking } : {}),
          ...(Object.keys(extra).length > 0 ? { extra } : {})
        })
        if (renderers.size >= 32) renderers.delete(renderers.keys().next().value!)
        renderers.set(key, r)
      }
      return r
    }

    const checkModel = (model: string | undefined) =>
      model === undefined || model === servedModelName || adapters.has(model)
        ? Effect.void
        : Effect.fail(apiError(404, `The model \`${model}\` does not exist.`, "model"))
    // Responses name the adapter a request asked for, as vLLM's do.
    const modelOf = (spec: { readonly model: string | undefined }) =>
      spec.model !== undefined && adapters.has(spec.model) ? spec.model : servedModelName

    const defaults = backend.samplingDefaults ?? {}
    const optional = <K extends string>(key: K, value: number | undefined) =>
      (value === undefined ? {} : { [key]: value }) as { [P in K]?: number }
    const vocab = tokenizer.vocabSize
    const promptIdsOf = (prompt: string | ReadonlyArray<number>, i: number) => {
      if (typeof prompt === "string") return tokenizer.encode(prompt)
      const badId = prompt.find((id) => id >= vocab)
      if (badId !== undefined) {
        throw apiError(400, `Token id ${badId} in prompt ${i} is out of vocabulary (size ${vocab}).`, "prompt")
      }
      return prompt
    }

    // The backend requests of one API request: n per prompt, each with its own seed (seed + i when given).
    const backendRequests = (prompts: ReadonlyArray<ReadonlyArray<number>>, spec: ChatRequest | CompletionRequest) =>
      Effect.gen(function*() {
        const stopIds = [...new Set([...(spec.ignoreEos ? [] : tokenizer.eosTokenIds), ...spec.stopTokenIds])]
        if (backend.maxStopTokenIds !== undefined && stopIds.length > backend.maxStopTokenIds) {
          return yield* apiError(
            400,
            `The ${backend.name} backend stops on at most ${backend.maxStopTokenIds} token ids (the end-of-turn ids ` +
              `${tokenizer.eosTokenIds.join(", ")} included), got ${stopIds.length}.`,
            "stop_token_ids"
          )
        }
        const out: Array<BackendRequest> = []
        for (const promptIds of prompts) {
          const maxTokens = spec.maxTokens ?? backend.contextLength - promptIds.length
          if (promptIds.length === 0) return yield* apiError(400, "The prompt is empty.", "prompt")
          if (maxTokens < 1 || promptIds.length + maxTokens > backend.contextLength) {
            const where = spec._tag === "Chat" ? "messages" : "prompt"
            return yield* apiError(
              400,
              `This model's maximum context length is ${backend.contextLength} tokens. However, you requested ` +
                `${promptIds.length + Math.max(1, maxTokens)} tokens (${promptIds.length} in the ${where}, ` +
                `${Math.max(1, maxTokens)} in the completion). Please reduce the length of the ${where} or completion.`,
              where
            )
          }
          for (let i = 0; i < spec.n; i++) {
            const seed = spec.seed !== undefined ? spec.seed + i : yield* Random.nextIntBetween(0, 0x7fffffff)
            out.push({
              promptIds,
              topLogprobs: spec.topLogprobs,
              ...Adapters.adapterField(adapters, spec.model),
              sampling: {
                maxTokens,
                temperature: spec.temperature ?? defaults.temperature ?? 1,
                ...optional("topP", spec.topP ?? defaults.topP),
                ...optional("topK", spec.topK ?? defaults.topK),
                ...optional("minP", spec.minP ?? defaults.minP),
                ...optional("repetitionPenalty", spec.repetitionPenalty ?? defaults.repetitionPenalty),
                stopTokenIds: stopIds,
                seed
              }
            })
          }
        }
        if (scheduler.waiting() + out.length > resolved.maxQueue) {
          return yield* apiError(503, `The server is busy (${scheduler.waiting()} requests waiting); retry later.`)
        }
        return out
      })

    const withTimeout = <A>(effect: Effect.Effect<A, ApiError>) =>
      Effect.timeoutFail(effect, {
        duration: resolved.requestTimeout,
        onTimeout: () => apiError(504, `The request did not finish within ${Duration.format(resolved.requestTimeout)}.`)
      })

    const holdsOf = (spec: ChatRequest | CompletionRequest, tools?: { readonly thinking: boolean }): Holds => ({
      stop: spec.stop,
      skipSpecialTokens: spec.skipSpecialTokens,
      ...(tools === undefined ? {} : { tools })
    })

    // Token by token: on a continuous batch that shows its progress, unless top logprobs are asked for (the CPU
    // backend computes them in one pass once the sequence has finished).
    const incremental = (spec: ChatRequest | CompletionRequest) => scheduler.watchable && spec.topLogprobs === 0

    // A sequence with stop strings ends at the step that completes one (the answer is cut there either way).
    const run = (requests: ReadonlyArray<BackendRequest>, spec: ChatRequest | CompletionRequest) =>
      withTimeout(
        scheduler.generate(
          requests,
          incremental(spec) && spec.stop.length > 0
            ? requests.map(() => {
              const text = new ChoiceText(tokenizer, holdsOf(spec))
              return (p: Scheduler.Progress) => text.read(p.tokenIds) === "stop" ? "stop" : undefined
            })
            : undefined
        ).pipe(Effect.mapError((e: BackendError) => apiError(e.status, e.message)))
      )

    // The answer to a streamed request as SSE on `res`; the head goes out with the first event, once the policy
    // version is known.
    const sse = (req: Http.IncomingMessage, res: Http.ServerResponse) => {
      let started = false
      return {
        started: () => started,
        /** Writes the head; false when it was already written. */
        start: (version: number) => {
          if (started) return false
          started = true
          metrics.request(new URL(req.url ?? "/", "http://localhost").pathname, 200)
          res.writeHead(200, {
            [VERSION_HEADER]: String(version),
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache"
          })
          return true
        },
        event: (e: unknown) => {
          if (!res.destroyed) res.write(`data: ${JSON.stringify(e)}\n\n`)
        },
        end: () => {
          if (!res.destroyed) res.end("data: [DONE]\n\n")
        }
      }
    }
    type Sse = ReturnType<typeof sse>

    // The partial choice of a running sequence, for the logprob builders.
    const partial = (p: Scheduler.Progress): Response.Choice => ({
      tokenIds: p.tokenIds,
      logprobs: p.logprobs,
      topLogprobs: undefined,
      text: "",
      finishReason: "length",
      stopReason: null,
      pieces: []
    })

    /**
     * Runs `requests` (one choice each) with every decode step streamed: `step(i, text, from, to, progress)` after a
     * step that sampled tokens `from..to` of choice i, `done(i, generated, text)` when choice i has finished (each
     * choice on its own, as soon as it finishes). A failure once the head is out ends the stream with an error event.
     */
    const streamChoices = (
      out: Sse,
      requests: ReadonlyArray<BackendRequest>,
      texts: ReadonlyArray<ChoiceText>,
      start: (version: number) => void,
      step: (i: number, text: string, from: number, to: number, progress: Scheduler.Progress) => void,
      done: (i: number, generated: Scheduler.Generated) => Response.Choice
    ): Effect.Effect<ReadonlyArray<Response.Choice> | undefined, ApiError> =>
      Effect.forEach(
        requests,
        (request, i) => {
          const text = texts[i]
          const watch: Scheduler.Watch = (p) => {
            const piece = text.read(p.tokenIds)
            if (piece === "stop") return "stop"
            if (p.tokenIds.length === text.sentTokens && piece.length === 0) return undefined
            start(p.policyVersion)
            step(i, piece, text.sentTokens, p.tokenIds.length, p)
            text.sentTokens = p.tokenIds.length
            return undefined
          }
          return Effect.map(
            scheduler.generate([request], [watch]),
            ([generated]) => {
              start(generated.policyVersion)
              return done(i, generated)
            }
          )
        },
        { concurrency: "unbounded" }
      ).pipe(
        Effect.mapError((e: BackendError) => apiError(e.status, e.message)),
        withTimeout,
        Effect.catchAll((e) => {
          if (!out.started()) return Effect.fail(e)
          out.event(e.body)
          out.end()
          return Effect.succeed(undefined)
        })
      )

    const usageOf = (prompts: ReadonlyArray<ReadonlyArray<number>>, choices: ReadonlyArray<Response.Choice>) => {
      const prompt = prompts.reduce((s, p) => s + p.length, 0)
      const completion = choices.reduce((s, c) => s + c.tokenIds.length, 0)
      metrics.tokens(prompt, completion)
      return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
    }

    // A chat stream token by token: the role chunks, a chunk per decode step (content, token ids, logprobs), then
    // per choice the rest of the answer, the parsed tool calls and the finish reason; usage; [DONE].
    const chatStream = (
      spec: ChatRequest,
      promptIds: ReadonlyArray<number>,
      requests: ReadonlyArray<BackendRequest>,
      thinking: boolean,
      req: Http.IncomingMessage,
      res: Http.ServerResponse
    ) =>
      Effect.gen(function*() {
        const out = sse(req, res)
        const head = {
          id: `chatcmpl-${hex()}`,
          object: "chat.completion.chunk",
          created: Math.floor(Date.now() / 1000)
        }
        let version = 0
        const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
          ...head,
          model: modelOf(spec),
          choices: [choice],
          ...extra,
          policy_version: version
        })
        const texts = requests.map(() =>
          new ChoiceText(tokenizer, holdsOf(spec, spec.parseTools ? { thinking } : undefined))
        )
        const start = (v: number) => {
          if (!out.start(v)) return
          version = v
          requests.forEach((_, i) =>
            out.event(chunk(
              { index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null },
              spec.returnTokenIds && i === 0 ? { prompt_token_ids: promptIds } : {}
            ))
          )
        }
        const tokens = (i: number, delta: Record<string, unknown>, choice: Response.Choice, from: number, to: number) =>
          out.event(chunk({
            index: i,
            delta,
            logprobs: spec.logprobs ? Response.chatLogprobs(tokenizer, spec, choice, from, to) : null,
            finish_reason: null,
            ...(spec.returnTokenIds ? { token_ids: choice.tokenIds.slice(from, to) } : {})
          }))
        const choices = yield* streamChoices(
          out,
          requests,
          texts,
          start,
          (i, text, from, to, p) => tokens(i, { content: text }, partial(p), from, to),
          (i, generated) => {
            const c = Response.finish(tokenizer, generated.completion, spec)
            const m = Response.chatMessage(c, spec.parseTools, thinking, () => `chatcmpl-tool-${hex()}`)
            const text = texts[i]
            const from = Math.min(text.sentTokens, c.tokenIds.length)
            const message = m.message as {
              content: string | null
              reasoning_content?: string
              tool_calls?: ReadonlyArray<unknown>
            }
            if (!m.toolCalls) {
              const rest = text.rest(c.text)
              if (rest.length > 0 || from < c.tokenIds.length) tokens(i, { content: rest }, c, from, c.tokenIds.length)
            } else {
              if (from < c.tokenIds.length) tokens(i, {}, c, from, c.tokenIds.length)
              const piece = (delta: Record<string, unknown>) =>
                out.event(chunk({ index: i, delta, logprobs: null, finish_reason: null }))
              if (message.reasoning_content !== undefined) piece({ reasoning_content: message.reasoning_content })
              const rest = text.rest(message.content ?? "")
              if (rest.length > 0) piece({ content: rest })
              piece({ tool_calls: (message.tool_calls ?? []).map((t, j) => ({ index: j, ...(t as object) })) })
            }
            out.event(chunk({
              index: i,
              delta: {},
              logprobs: null,
              finish_reason: m.toolCalls ? "tool_calls" : c.finishReason,
              stop_reason: c.stopReason
            }))
            return c
          }
        )
        if (choices === undefined) return { _tag: "Streamed" } satisfies Answer
        if (spec.includeUsage) {
          out.event({
            ...head,
            model: modelOf(spec),
            choices: [],
            usage: usageOf([promptIds], choices),
            policy_version: version
          })
        } else usageOf([promptIds], choices)
        out.end()
        return { _tag: "Streamed" } satisfies Answer
      })

    // A completions stream token by token: a chunk per decode step (text, token ids, logprobs; the prompt's ids on
    // each choice's first), the rest of each choice with its finish reason, usage, [DONE].
    const completionStream = (
      spec: CompletionRequest,
      prompts: ReadonlyArray<ReadonlyArray<number>>,
      requests: ReadonlyArray<BackendRequest>,
      req: Http.IncomingMessage,
      res: Http.ServerResponse
    ) =>
      Effect.gen(function*() {
        const out = sse(req, res)
        const head = { id: `cmpl-${hex()}`, object: "text_completion", created: Math.floor(Date.now() / 1000) }
        let version = 0
        const chunk = (choice: Record<string, unknown>) => ({
          ...head,
          model: modelOf(spec),
          choices: [choice],
          policy_version: version
        })
        const promptOf = (i: number) => prompts[Math.floor(i / spec.n)]
        const texts = requests.map(() => new ChoiceText(tokenizer, holdsOf(spec)))
        const start = (v: number) => {
          if (out.start(v)) version = v
        }
        // `offset`: where token `from`'s text starts, or each token's start.
        const tokens = (
          i: number,
          text: string,
          choice: Response.Choice,
          from: number,
          to: number,
          offset: number | ReadonlyArray<number>
        ) =>
          out.event(chunk({
            index: i,
            text,
            logprobs: spec.logprobs
              ? typeof offset === "number"
                ? Response.completionLogprobs(tokenizer, spec, choice, from, to, offset)
                : { ...Response.completionLogprobs(tokenizer, spec, choice, from, to), text_offset: offset }
              : null,
            finish_reason: null,
            ...(spec.returnTokenIds
              ? { token_ids: choice.tokenIds.slice(from, to), ...(from === 0 ? { prompt_token_ids: promptOf(i) } : {}) }
              : {})
          }))
        const choices = yield* streamChoices(
          out,
          requests,
          texts,
          start,
          (i, text, from, to, p) =>
            tokens(
              i,
              text,
              partial(p),
              from,
              to,
              // Several tokens in one step (the gpu backend's submit): each its own offset.
              spec.logprobs && to - from > 1 ? texts[i].offsets : texts[i].offset
            ),
          (i, generated) => {
            const c = Response.finish(tokenizer, generated.completion, spec)
            const text = texts[i]
            const from = Math.min(text.sentTokens, c.tokenIds.length)
            const rest = text.rest(c.text)
            if (rest.length > 0 || from < c.tokenIds.length) {
              const offset = c.pieces.slice(0, from).reduce((s, piece) => s + piece.length, 0)
              tokens(i, rest, c, from, c.tokenIds.length, offset)
            }
            out.event(chunk({
              index: i,
              text: "",
              logprobs: null,
              finish_reason: c.finishReason,
              stop_reason: c.stopReason,
              ...(spec.returnTokenIds && c.tokenIds.length === 0
                ? { token_ids: [], prompt_token_ids: promptOf(i) }
                : {})
            }))
            return c
          }
        )
        if (choices === undefined) return { _tag: "Streamed" } satisfies Answer
        const usage = usageOf(prompts, choices)
        if (spec.includeUsage) {
          out.event({ ...head, model: modelOf(spec), choices: [], usage, policy_version: version })
        }
        out.end()
        return { _tag: "Streamed" } satisfies Answer
      })

    const chat = (body: unknown, req: Http.IncomingMessage, res: Http.ServerResponse) =>
      Effect.gen(function*() {
        const spec = yield* tryApi(() => chatRequest(body, backend.maxTopLogprobs))
        yield* checkModel(spec.model)
        const renderer = rendererFor(spec.chatTemplateKwargs)
        const promptIds = yield* renderer.promptIds(spec.messages, spec.tools).pipe(
          Effect.mapError((e) =>
            apiError(400, `The chat template could not render the messages: ${e.message}`, "messages")
          )
        )
        const requests = yield* backendRequests([promptIds], spec)
        const thinking = typeof spec.chatTemplateKwargs.enable_thinking === "boolean"
          ? spec.chatTemplateKwargs.enable_thinking
          : true
        if (spec.stream && incremental(spec)) return yield* chatStream(spec, promptIds, requests, thinking, req, res)
        const generated = yield* run(requests, spec)
        const version = generated[0].policyVersion
        const choices = generated.map((g) => Response.finish(tokenizer, g.completion, spec))
        const usage = usageOf([promptIds], choices)
        const id = `chatcmpl-${hex()}`
        const messages = choices.map((c) =>
          Response.chatMessage(c, spec.parseTools, thinking, () => `chatcmpl-tool-${hex()}`)
        )
        const finishOf = (i: number) => messages[i].toolCalls ? "tool_calls" : choices[i].finishReason
        const head = { id, created: Math.floor(Date.now() / 1000), model: modelOf(spec) }
        if (!spec.stream) {
          return json({
            ...head,
            object: "chat.completion",
            choices: choices.map((c, i) => ({
              index: i,
              message: messages[i].message,
              logprobs: spec.logprobs ? Response.chatLogprobs(tokenizer, spec, c) : null,
              finish_reason: finishOf(i),
              stop_reason: c.stopReason,
              ...(spec.returnTokenIds ? { token_ids: c.tokenIds } : {})
            })),
            usage,
            ...(spec.returnTokenIds ? { prompt_token_ids: promptIds } : {}),
            policy_version: version
          })
        }
        const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
          ...head,
          object: "chat.completion.chunk",
          choices: [choice],
          ...extra,
          policy_version: version
        })
        const events: Array<unknown> = []
        choices.forEach((c, i) => {
          events.push(chunk(
            { index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null },
            spec.returnTokenIds && i === 0 ? { prompt_token_ids: promptIds } : {}
          ))
          const m = messages[i]
          c.tokenIds.forEach((tokenId, k) => {
            events.push(chunk({
              index: i,
              delta: m.toolCalls ? {} : { content: c.pieces[k] },
              logprobs: spec.logprobs ? Response.chatLogprobs(tokenizer, spec, c, k, k + 1) : null,
              finish_reason: null,
              ...(spec.returnTokenIds ? { token_ids: [tokenId] } : {})
            }))
          })
          if (m.toolCalls) {
            const message = m.message as {
              content: string | null
              reasoning_content?: string
              tool_calls?: ReadonlyArray<unknown>
            }
            if (message.reasoning_content !== undefined) {
              events.push(
                chunk({
                  index: i,
                  delta: { reasoning_content: message.reasoning_content },
                  logprobs: null,
                  finish_reason: null
                })
              )
            }
            if (message.content !== null) {
              events.push(chunk({ index: i, delta: { content: message.content }, logprobs: null, finish_reason: null }))
            }
            events.push(chunk({
              index: i,
              delta: { tool_calls: (message.tool_calls ?? []).map((t, j) => ({ index: j, ...(t as object) })) },
              logprobs: null,
              finish_reason: null
            }))
          }
          events.push(
            chunk({ index: i, delta: {}, logprobs: null, finish_reason: finishOf(i), stop_reason: c.stopReason })
          )
        })
        if (spec.includeUsage) {
          events.push({ ...head, object: "chat.completion.chunk", choices: [], usage, policy_version: version })
        }
        return { _tag: "Sse", events } satisfies Answer
      })

    const completions = (body: unknown, req: Http.IncomingMessage, res: Http.ServerResponse) =>
      Effect.gen(function*() {
        const spec = yield* tryApi(() => completionRequest(body, backend.maxTopLogprobs))
        yield* checkModel(spec.model)
        const prompts = yield* tryApi(() => spec.prompts.map(promptIdsOf))
        const requests = yield* backendRequests(prompts, spec)
        if (spec.stream && incremental(spec)) return yield* completionStream(spec, prompts, requests, req, res)
        const generated = yield* run(requests, spec)
        const version = generated[0].policyVersion
        const choices = generated.map((g) => Response.finish(tokenizer, g.completion, spec))
        const usage = usageOf(prompts, choices)
        const promptOf = (i: number) => prompts[Math.floor(i / spec.n)]
        const head = {
          id: `cmpl-${hex()}`,
          object: "text_completion",
          created: Math.floor(Date.now() / 1000),
          model: modelOf(spec)
        }
        if (!spec.stream) {
          return json({
            ...head,
            choices: choices.map((c, i) => ({
              index: i,
              text: c.text,
              logprobs: spec.logprobs ? Response.completionLogprobs(tokenizer, spec, c) : null,
              finish_reason: c.finishReason,
              stop_reason: c.stopReason,
              ...(spec.returnTokenIds ? { prompt_token_ids: promptOf(i), token_ids: c.tokenIds } : {})
            })),
            usage,
            policy_version: version
          })
        }
        const events: Array<unknown> = []
        const chunk = (choice: Record<string, unknown>) => ({ ...head, choices: [choice], policy_version: version })
        choices.forEach((c, i) => {
          let offset = 0
          c.tokenIds.forEach((tokenId, k) => {
            events.push(chunk({
              index: i,
              text: c.pieces[k],
              logprobs: spec.logprobs ? Response.completionLogprobs(tokenizer, spec, c, k, k + 1, offset) : null,
              finish_reason: null,
              ...(spec.returnTokenIds
                ? { token_ids: [tokenId], ...(k === 0 ? { prompt_token_ids: promptOf(i) } : {}) }
                : {})
            }))
            offset += c.pieces[k].length
          })
          events.push(chunk({
            index: i,
            text: "",
            logprobs: null,
            finish_reason: c.finishReason,
            stop_reason: c.stopReason,
            ...(spec.returnTokenIds && c.tokenIds.length === 0 ? { token_ids: [], prompt_token_ids: promptOf(i) } : {})
          }))
        })
        if (spec.includeUsage) events.push({ ...head, choices: [], usage, policy_version: version })
        return { _tag: "Sse", events } satisfies Answer
      })

    const update = (source: WeightSource) =>
      scheduler.update(source).pipe(
        Effect.tap(() => Effect.sync(() => metrics.weightUpdate(true))),
        Effect.tapError(() => Effect.sync(() => metrics.weightUpdate(false))),
        Effect.mapError((e) => apiError(e.status, e.message)),
        Effect.map((version) =>
          json({ success: true, message: `Loaded new weights: policy version ${version}.`, policy_version: version })
        )
      )

    const models = () =>
      json({
        object: "list",
        data: [{
          id: servedModelName,
          object: "model",
          created,
          owned_by: "envtrain",
          root: servedModelName,
          parent: null,
          max_model_len: backend.contextLength,
          policy_version: scheduler.version(),
          ...(follow === undefined ? {} : { weight_store: follow.status() })
        }, ...adapters.cards(servedModelName)]
      })

    const readBody = (req: Http.IncomingMessage) =>
      Effect.async<Buffer, ApiError>((resume) => {
        const declared = Number(req.headers["content-length"] ?? "0")
        if (declared > resolved.maxBodyBytes) {
          resume(Effect.fail(apiError(413, `The request body exceeds ${resolved.maxBodyBytes} bytes.`)))
          return
        }
        const chunks: Array<Buffer> = []
        let size = 0
        let done = false
        req.on("data", (chunk: Buffer) => {
          if (done) return
          size += chunk.length
          if (size > resolved.maxBodyBytes) {
            done = true
            resume(Effect.fail(apiError(413, `The request body exceeds ${resolved.maxBodyBytes} bytes.`)))
            return
          }
          chunks.push(chunk)
        })
        req.on("end", () => {
          if (!done) resume(Effect.succeed(Buffer.concat(chunks)))
        })
        req.on("error", (e) => {
          if (!done) resume(Effect.fail(apiError(400, `Reading the request body failed: ${e.message}`)))
        })
      })

    const parseJson = (bytes: Buffer) =>
      Effect.try({
        try: () => JSON.parse(bytes.toString("utf8")) as unknown,
        catch: (e) => apiError(400, `The request body is not valid JSON: ${(e as Error).message}`)
      })

    const route = (req: Http.IncomingMessage, res: Http.ServerResponse): Effect.Effect<Answer, ApiError> => {
      const path = new URL(req.url ?? "/", "http://localhost").pathname.replace(/\/+$/, "") || "/"
      const method = req.method ?? "GET"
      const expect = (m: string, f: () => Effect.Effect<Answer, ApiError>) =>
        method === m ? f() : Effect.fail(apiError(405, `Method ${method} is not allowed on ${path}; use ${m}.`))
      switch (path) {
        case "/health":
          return expect("GET", () => Effect.succeed({ _tag: "Text", status: 200, body: "", contentType: "text/plain" }))
        case "/metrics":
          return expect("GET", () =>
            Effect.succeed({
              _tag: "Text",
              status: 200,
              body: metrics.render(),
              contentType: "text/plain; version=0.0.4; charset=utf-8"
            }))
        case "/v1/models":
          return expect("GET", () => Effect.succeed(models()))
        case "/v1/chat/completions":
          return expect(
            "POST",
            () => Effect.flatMap(Effect.flatMap(readBody(req), parseJson), (body) => chat(body, req, res))
          )
        case "/v1/completions":
          return expect(
            "POST",
            () => Effect.flatMap(Effect.flatMap(readBody(req), parseJson), (body) => completions(body, req, res))
          )
        case "/v1/load_lora_adapter":
        case "/v1/unload_lora_adapter":
          return expect("POST", () =>
            Effect.gen(function*() {
              const body = yield* Effect.flatMap(readBody(req), parseJson)
              const text = yield* (path === "/v1/load_lora_adapter" ? adapters.load(body) : adapters.unload(body))
              return { _tag: "Text", status: 200, body: text, contentType: "text/plain; charset=utf-8" } as const
            }))
        case "/update_weights_from_disk":
          return expect("POST", () =>
            Effect.gen(function*() {
              const body = yield* Effect.flatMap(readBody(req), parseJson)
              const dir = typeof body === "object" && body !== null
                ? (body as Record<string, unknown>).model_path ?? (body as Record<string, unknown>).path
                : undefined
              if (typeof dir !== "string" || dir.length === 0) {
                return yield* apiError(400, "Give the checkpoint directory as {\"model_path\": DIR}.", "model_path")
              }
              return yield* update({ _tag: "Directory", path: dir })
            }))
        case "/update_weights":
          return expect("POST", () =>
            Effect.gen(function*() {
              const bytes = yield* readBody(req)
              if (bytes.length === 0) {
                return yield* apiError(400, "Send the weights as the body: the bytes of one safetensors file.")
              }
              return yield* update({
                _tag: "Safetensors",
                bytes: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length)
              })
            }))
        default:
          return Effect.fail(apiError(404, `Not Found: ${method} ${path}`))
      }
    }

    const send = (req: Http.IncomingMessage, res: Http.ServerResponse, answer: Answer) => {
      if (answer._tag === "Streamed") return
      const headers = { [VERSION_HEADER]: String(scheduler.version()) }
      const endpoint = new URL(req.url ?? "/", "http://localhost").pathname
      if (answer._tag === "Sse") {
        metrics.request(endpoint, 200)
        res.writeHead(200, {
          ...headers,
          "content-type": "text/event-stream; charset=utf-8",
          "cache-control": "no-cache"
        })
        for (const e of answer.events) res.write(`data: ${JSON.stringify(e)}\n\n`)
        res.end("data: [DONE]\n\n")
        return
      }
      metrics.request(endpoint, answer.status)
      const text = answer._tag === "Json" ? JSON.stringify(answer.body) : answer.body
      res.writeHead(answer.status, {
        ...headers,
        "content-type": answer._tag === "Json" ? "application/json" : answer.contentType,
        "content-length": Buffer.byteLength(text)
      })
      res.end(text)
    }

    const handle = (req: Http.IncomingMessage, res: Http.ServerResponse) =>
      route(req, res).pipe(
        Effect.catchAll((e) => Effect.succeed(json(e.body, e.status))),
        Effect.catchAllDefect((defect) =>
          Effect.succeed(
            json(
              apiError(500, `Internal error: ${defect instanceof Error ? defect.message : String(defect)}`).body,
              500
            )
          )
        ),
        Effect.flatMap((answer) => Effect.sync(() => send(req, res, answer))),
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause) && !res.headersSent) {
              send(req, res, json(apiError(500, "Internal error.").body, 500))
            } else if (!res.writableEnded) res.destroy()
          })
        )
      )

    const fiberSet = yield* FiberSet.make<unknown, unknown>()
    const runFork = yield* FiberSet.runtime(fiberSet)<never>()
    const server = Http.createServer((req, res) => {
      if (shuttingDown) {
        res.writeHead(503, { "content-type": "application/json", connection: "close" })
        res.end(JSON.stringify(apiError(503, "The server is shutting down.").body))
        return
      }
      const fiber = runFork(handle(req, res))
      // A client that hangs up before its answer interrupts the exchange (and drops its queued requests).
      res.on("close", () => {
        if (!res.writableEnded) runFork(Fiber.interrupt(fiber))
      })
    })
    server.headersTimeout = 60_000
    server.requestTimeout = Duration.toMillis(resolved.requestTimeout)
    server.on("clientError", (_err, socket) => socket.destroy())

    const address = yield* Effect.acquireRelease(
      Effect.async<AddressInfo, string>((resume) => {
        const onError = (e: Error) =>
          resume(Effect.fail(`Cannot listen on ${resolved.host}:${resolved.port}: ${e.message}`))
        server.once("error", onError)
        server.listen(resolved.port, resolved.host, () => {
          server.off("error", onError)
          resume(Effect.succeed(server.address() as AddressInfo))
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        shuttingDown = true
        return FiberSet.clear(fiberSet)
      })
    )
    const url = `http://${resolved.host.includes(":") ? `[${resolved.host}]` : resolved.host}:${address.port}`
    if (follow !== undefined) yield* follow.start(url)
    return {
      host: resolved.host,
      port: address.port,
      url,
      servedModelName,
      policyVersion: Effect.sync(() => scheduler.version())
    }
  })
