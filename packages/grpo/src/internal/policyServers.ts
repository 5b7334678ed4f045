/**
 * A {@link TrainableModel} whose generation runs on policy servers (`envtrain serve-policy`, or any server of the
 * vLLM dialect that takes the pushed weights) while scoring, gradients, the optimizer step and the state stay on
 * the local model.
 *
 * - Requests: one `POST /v1/completions` per turn with the prompt as token ids and `return_token_ids` (the Policy's
 *   `completionRequestBody`), so nothing is re-tokenised; the processed logprobs and the response's
 *   `policy_version` come back with the tokens. Each request goes to the usable server with the fewest requests in
 *   flight (ties in turn), so a slow or busy server gets fewer.
 * - Weights: after every optimizer step (and at the start, and after `importState`), the local weights are encoded
 *   as one f32 safetensors file and pushed to every server with `POST /update_weights` (the bytes in the body: no
 *   shared disk, so the servers may be on other machines); each must answer with its previous `policy_version` + 1,
 *   else the run stops. A server is only sent requests once it holds the current weights.
 * - Failures: a request that cannot reach its server (refused, reset, timeout) fails with `PolicyTransportError`,
 *   which ends only that episode, as unscoreable (never trained on a partial completion), and marks the server
 *   down. A down server is tried again (`/health`, then the current weights) at the next push, or when no server
 *   is usable; once every server has been down for `unreachableTimeout` the run stops with `PolicyResponseError`
 *   naming the URLs and their last errors.
 */
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import type { Completion, GenerateRequest, PolicyError } from "@envtrain/rollout/Policy"
import {
  completionRequestBody,
  parseCompletion,
  PolicyResponseError,
  PolicyTransportError
} from "@envtrain/rollout/Policy"
import { Data, Duration, Effect } from "effect"
import type { TrainableModel } from "./model.js"

/** Options of {@link withPolicyServers}. */
export interface PolicyServersOptions {
  /** Server roots, e.g. `http://127.0.0.1:8000` (requests go to `${url}/v1/completions`). */
  readonly urls: ReadonlyArray<string>
  /**
   * How long the servers may all stay unreachable (at the start, or mid-run) before the run stops. Default 240 s
   * (TRL's `vllm_server_timeout`).
   */
  readonly unreachableTimeout?: Duration.DurationInput
  /** Time limit of one completion request. Default 5 minutes. */
  readonly requestTimeout?: Duration.DurationInput
  /** Time limit of one weight push. Default 10 minutes. */
  readonly pushTimeout?: Duration.DurationInput
  /** How often an unreachable server is tried again while none is usable. Default 1 s. */
  readonly retryInterval?: Duration.DurationInput
  /** Bearer token, if the servers want one. */
  readonly apiKey?: string
}

/** A policy server cannot be used: unreachable at the start, or it refused or mis-versioned the weights. */
export class PolicyServerError extends Data.TaggedError("PolicyServerError")<{
  readonly url: string
  readonly problem: string
}> {
  override get message() {
    return `Policy server ${this.url}: ${this.problem}`
  }
}

interface Server {
  readonly url: string
  /** The served model name (`/v1/models`), sent with every request. */
  model: string
  inFlight: number
  /** The last `policy_version` it reported; undefined for a server that reports none (vLLM). */
  version: number | undefined
  /** Which local weights it holds (see `weights.generation`); -1: none known. */
  holds: number
  up: boolean
  lastError: string
  /** Serialises pushes to this server (a revival and a step's push must not interleave). */
  readonly lock: Effect.Semaphore
}

// Probes go only to servers not in use (at the start, after a failure), which answer /v1/models at once.
const PROBE_TIMEOUT = Duration.seconds(10)

const trim = (url: string) => url.replace(/\/+$/, "")

// A fetch as an Effect: interruption aborts it; failures are the message (connection refused, reset, timeout).
const http = (
  url: string,
  init: RequestInit,
  timeout: Duration.Duration
): Effect.Effect<
  { readonly status: number; readonly text: string },
  { readonly reason: "connect" | "timeout"; readonly message: string }
> =>
  Effect.tryPromise({
    try: async (signal) => {
      const res = await fetch(url, { ...init, signal })
      return { status: res.status, text: await res.text() }
    },
    catch: (e) => {
      const cause = (e as { cause?: { code?: string; message?: string } }).cause
      const detail = cause?.code ?? cause?.message ?? (e as Error).message
      return { reason: "connect" as const, message: `${init.method ?? "GET"} ${url} failed: ${detail}` }
    }
  }).pipe(
    Effect.timeoutFail({
      duration: timeout,
      onTimeout: () => ({
        reason: "timeout" as const,
        message: `${init.method ?? "GET"} ${url} did not answer within ${Duration.format(timeout)}`
      })
    })
  )

const versionOf = (text: string): number | undefined => {
  try {
    const json = JSON.parse(text) as { policy_version?: unknown; data?: ReadonlyArray<{ policy_version?: unknown }> }
    const v = json.policy_version ?? json.data?.[0]?.policy_version
    return typeof v === "number" ? v : undefined
  } catch {
    return undefined
  }
}

/**
 * Wraps `model` so that its generation runs on the policy servers at `options.urls` (see the module comment).
 * Checks every server at the start (waiting up to `unreachableTimeout` for it to answer `/v1/models`) and pushes
 * the model's current weights to each, so the servers sample exactly what the local model would.
 */
export const withPolicyServers = (
  model: TrainableModel,
  options: PolicyServersOptions
): Effect.Effect<TrainableModel, PolicyServerError> =>
  Effect.gen(function*() {
    if (options.urls.length === 0) return model
    const unreachableTimeout = Duration.decode(options.unreachableTimeout ?? Duration.seconds(240))
    const requestTimeout = Duration.decode(options.requestTimeout ?? Duration.minutes(5))
    const pushTimeout = Duration.decode(options.pushTimeout ?? Duration.minutes(10))
    const retryInterval = Duration.decode(options.retryInterval ?? Duration.seconds(1))
    const auth: Record<string, string> = options.apiKey === undefined
      ? {}
      : { authorization: `Bearer ${options.apiKey}` }

    const servers: Array<Server> = []
    for (const raw of options.urls) {
      servers.push({
        url: trim(raw),
        model: "",
        inFlight: 0,
        version: undefined,
        holds: -1,
        up: false,
        lastError: "not contacted yet",
        lock: yield* Effect.makeSemaphore(1)
      })
    }
    // The local weights as the servers receive them; `generation` counts the local updates.
    const weights: { generation: number; bytes: Uint8Array<ArrayBuffer> } = { generation: 0, bytes: new Uint8Array(0) }
    const encodeWeights = Effect.map(model.exportState, (state) => {
      weights.generation++
      weights.bytes = Safetensors.encode(state.weights) as Uint8Array<ArrayBuffer>
    })

    // Asks `server` for its model name and version; fails with the reason it could not be reached.
    const probe = (server: Server) =>
      http(`${server.url}/v1/models`, { headers: auth }, PROBE_TIMEOUT).pipe(
        Effect.flatMap(({ status, text }) => {
          if (status !== 200) {
            return Effect.fail({ message: `GET ${server.url}/v1/models answered ${status}: ${text.slice(0, 300)}` })
          }
          try {
            const json = JSON.parse(text) as { data?: ReadonlyArray<{ id?: unknown }> }
            const id = json.data?.[0]?.id
            if (typeof id !== "string") throw new Error("no model id")
            server.model = id
            server.version = versionOf(text)
            return Effect.void
          } catch {
            return Effect.fail({ message: `GET ${server.url}/v1/models did not list a model: ${text.slice(0, 300)}` })
          }
        })
      )

    // Pushes the current weights to `server`: up-to-date on success; down on a transport failure; a refusal or a
    // policy_version other than the previous + 1 is a PolicyServerError (configuration, or another writer).
    const pushLocked = (server: Server): Effect.Effect<void, PolicyServerError> =>
      Effect.gen(function*() {
        if (server.holds === weights.generation) return
        const generation = weights.generation
        const before = server.version
        const answer = yield* http(`${server.url}/update_weights`, {
          method: "POST",
          headers: { ...auth, "content-type": "application/octet-stream" },
          body: weights.bytes
        }, pushTimeout).pipe(Effect.either)
        if (answer._tag === "Left") {
          server.up = false
          server.lastError = answer.left.message
          return
        }
        const { status, text } = answer.right
        if (status >= 500 && status !== 501) {
          server.up = false
          server.lastError = `POST /update_weights answered ${status}: ${text.slice(0, 300)}`
          return
        }
        if (status !== 200) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: `POST /update_weights answered ${status}: ${text.slice(0, 500)}. The server must take pushed ` +
              "safetensors weights (envtrain serve-policy does; see the README for vLLM)."
          })
        }
        const after = versionOf(text)
        if (after !== undefined && before !== undefined && after !== before + 1) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: `after the weight update it reports policy_version ${after}, expected ${before + 1}: another ` +
              "client updated its weights, or it restarted mid-update. Give each run servers of its own."
          })
        }
        server.version = after
        server.holds = generation
        server.up = true
      })
    const push = (server: Server) => server.lock.withPermits(1)(pushLocked(server))

    // Brings a down server back: it must answer /v1/models (a restarted server starts at its own version), then
    // take the current weights.
    const revive = (server: Server) =>
      server.lock.withPermits(1)(Effect.suspend(() =>
        server.up && server.holds === weights.generation
          ? Effect.void // another request revived it meanwhile
          : probe(server).pipe(
            Effect.matchEffect({
              onFailure: (e) => Effect.sync(() => void (server.lastError = e.message)),
              onSuccess: () =>
                Effect.suspend(() => {
                  // Whatever it held before it went away is gone.
                  server.holds = -1
                  return pushLocked(server)
                })
            })
          )
      ))

    const pushAll = Effect.forEach(servers, (s) => (s.up ? push(s) : revive(s)), {
      concurrency: "unbounded",
      discard: true
    })

    const usable = () => servers.filter((s) => s.up && s.holds === weights.generation)
    const downReport = () => servers.map((s) => `${s.url} (${s.lastError})`).join("; ")

    // The start: every server must answer within unreachableTimeout, then gets the model's weights.
    yield* encodeWeights
    yield* Effect.forEach(servers, (server) =>
      Effect.gen(function*() {
        const started = Date.now()
        while (true) {
          const probed = yield* Effect.either(probe(server))
          if (probed._tag === "Right") break
          server.lastError = probed.left.message
          if (Date.now() - started >= Duration.toMillis(unreachableTimeout)) {
            return yield* new PolicyServerError({
              url: server.url,
              problem: `it did not answer within ${Duration.format(unreachableTimeout)} (${probed.left.message}). ` +
                "Start it first (envtrain serve-policy --model DIR --port N, or vllm serve), or fix the URL " +
                "(policyServers / --policy-server)."
            })
          }
          yield* Effect.sleep(retryInterval)
        }
        server.up = true
        yield* push(server)
        if (!server.up) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: `the weights could not be sent: ${server.lastError}`
          })
        }
      }), { concurrency: "unbounded", discard: true })

    let turn = 0
    // A server for one request: the usable one with the fewest requests in flight; while none is usable, down
    // servers are tried again until unreachableTimeout has passed.
    const pick: Effect.Effect<Server, PolicyError> = Effect.gen(function*() {
      const started = Date.now()
      while (true) {
        const candidates = usable()
        if (candidates.length > 0) {
          const least = Math.min(...candidates.map((s) => s.inFlight))
          const tied = candidates.filter((s) => s.inFlight === least)
          return tied[turn++ % tied.length]
        }
        yield* Effect.forEach(servers, revive, { concurrency: "unbounded", discard: true }).pipe(
          Effect.catchAll((e) => new PolicyResponseError({ message: e.message }))
        )
        if (usable().length > 0) continue
        if (Date.now() - started >= Duration.toMillis(unreachableTimeout)) {
          return yield* new PolicyResponseError({
            message: `No policy server answered for ${Duration.format(unreachableTimeout)} ` +
              `(policyServerTimeout): ${downReport()}. Restart the server(s), or raise policyServerTimeout.`
          })
        }
        yield* Effect.sleep(retryInterval)
      }
    })

    const generateEach = (request: GenerateRequest): Effect.Effect<Completion, PolicyError> =>
      Effect.gen(function*() {
        const server = yield* pick
        const url = `${server.url}/v1/completions`
        server.inFlight++
        const answer = yield* http(url, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify(completionRequestBody({ model: server.model }, request))
        }, requestTimeout).pipe(
          Effect.ensuring(Effect.sync(() => void server.inFlight--)),
          Effect.either
        )
        if (answer._tag === "Left") {
          server.up = false
          server.lastError = answer.left.message
          return yield* new PolicyTransportError(answer.left)
        }
        const { status, text } = answer.right
        if (status >= 500) {
          return yield* new PolicyTransportError({
            reason: "server",
            message: `POST ${url} answered ${status}: ${text.slice(0, 500)}`
          })
        }
        if (status >= 400) {
          return yield* new PolicyResponseError({
            message: `POST ${url} answered ${status}: ${text.slice(0, 500)}. Check that the server serves the ` +
              "model being trained and accepts token-id prompts with logprobs."
          })
        }
        const completion = yield* parseCompletion(url, text)
        if (completion.policyVersion !== undefined) {
          server.version = Math.max(server.version ?? 0, completion.policyVersion)
        }
        return completion
      })

    // After a local update: the new weights to every server before the next generation uses them.
    const sync = Effect.zipRight(encodeWeights, pushAll).pipe(Effect.orDie)

    const wrapped: TrainableModel = {
      ...model,
      generate: (requests) => Effect.forEach(requests, generateEach, { concurrency: "unbounded" }).pipe(Effect.orDie),
      generateEach,
      step: (o) => Effect.tap(model.step(o), () => sync),
      importState: (state) => Effect.zipRight(model.importState(state), sync)
    }
    return wrapped
  })
