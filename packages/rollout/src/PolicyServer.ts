/**
 * The policy server: an OpenAI-compatible HTTP server (vLLM's dialect) over a generation {@link Backend}, so that
 * rollouts, capture proxies and trainers on other machines or in other processes sample from envtrain's model the
 * way they would from `vllm serve`.
 *
 * Endpoints: `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text), `POST /v1/chat/completions`,
 * `POST /v1/completions`, vLLM's LoRA routes `POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter` (with
 * {@link PolicyServerOptions.adapters}), and two weight-update endpoints named as SGLang names them: `POST /update_weights_from_disk`
 * (`{"model_path": DIR}`) and `POST /update_weights` (the raw bytes of a safetensors file). vLLM's extensions keep
 * vLLM's field names: `return_token_ids` (→ `prompt_token_ids` and `token_ids`), `return_tokens_as_token_ids`
 * (→ logprob tokens `"token_id:N"`), `stop_token_ids`, `include_stop_str_in_output`, `skip_special_tokens`,
 * `chat_template_kwargs`; logprobs are the sampler's processed logprobs (vLLM's `--logprobs-mode processed_logprobs`).
 *
 * Batching and weights: requests wait in one queue. With a backend that decodes step by step (`decoder`: the CPU
 * and GPU backends) the server batches continuously, as vLLM does: one running batch of up to `maxBatchSize`
 * sequences, queued requests join it between decode steps, and a finished sequence is answered at once and frees its
 * slot.
 * Otherwise (or with `batching: "window"`) a batch of up to `maxBatchSize` (gathered for `batchWindow` after the
 * first) is handed to the backend, which decodes it together; the next batch starts when it finishes. A weight
 * update queues behind the requests already waiting; once it is next, nothing more is admitted, the running
 * sequences finish, the weights load and `policy_version` increments; so every completion is produced entirely by
 * one version, which every response names (the `policy_version` field and the `x-policy-version` header).
 * Streams (`stream: true`) go out step by step when the batch is continuous and the decoder shows its `progress`
 * (token by token on the CPU backend; a chunk per submit on the GPU backend); otherwise they are cut from the
 * finished completion.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { PolicyServer } from "@envtrain/rollout"
 *
 * const program = Effect.gen(function*() {
 *   const server = yield* PolicyServer.serve(backend, { port: 8000, servedModelName: "tiny" })
 *   yield* Effect.log(`serving on ${server.url}`)
 *   yield* Effect.never
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import type { ChatTemplate } from "@envtrain/text/ChatTemplate"
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import type { Duration, Scope } from "effect"
import { Context, Data, Effect, Layer } from "effect"
import * as internal from "./internal/policyServer/server.js"
import type { Completion, GenerateRequest, SamplingParams } from "./Policy.js"

/** One request to the backend: the policy request, plus how many top alternatives to report per token. */
export interface BackendRequest extends GenerateRequest {
  /** 0: none. At most the backend's `maxTopLogprobs`. */
  readonly topLogprobs: number
  /** The LoRA adapter the request named as its `model` (set by the server; the adapter's backend serves it). */
  readonly adapter?: string
}

/** A token and its logprob. */
export interface TokenLogprob {
  readonly id: number
  readonly logprob: number
}

/**
 * What the backend sampled. `logprobs[i]` is the processed logprob of `tokenIds[i]` (log_softmax after temperature
 * and the filters; with temperature 0, the plain T = 1 logprob). `topLogprobs[i]`, when asked for, lists the most
 * likely tokens at position i, most likely first.
 */
export interface BackendCompletion extends Completion {
  readonly topLogprobs?: ReadonlyArray<ReadonlyArray<TokenLogprob>>
}

/**
 * New weights for the backend. `policyVersion`, when given (weights pulled from a weight store), is the version the
 * server reports from then on; otherwise it counts its updates.
 */
export type WeightSource =
  | { readonly _tag: "Directory"; readonly path: string }
  | { readonly _tag: "Safetensors"; readonly bytes: Uint8Array; readonly policyVersion?: number }

/**
 * The backend refused or failed. `status` < 500 means the request was at fault (e.g. weights that do not fit the
 * model), ≥ 500 that the backend failed.
 */
export class BackendError extends Data.TaggedError("BackendError")<{
  readonly message: string
  readonly status: number
}> {}

/**
 * Step-wise decoding, for continuous batching. `start` prepares a request as a sequence (an opaque value the server
 * only passes back); `step` runs one decode step of the given sequences together (or a few: the GPU backend runs one
 * submit of several; a new sequence's first step also runs its prompt) and returns, per sequence, its completion
 * when it finished during this step, or undefined while it runs. A sequence's output must not depend on which
 * sequences share its steps.
 */
export interface Decoder {
  readonly start: (request: BackendRequest) => Effect.Effect<unknown, BackendError>
  readonly step: (
    sequences: ReadonlyArray<unknown>
  ) => Effect.Effect<ReadonlyArray<BackendCompletion | undefined>, BackendError>
  /**
   * Optional: the tokens a running sequence has sampled so far and their logprobs (read between steps, not kept).
   * With it the server streams tokens as they are sampled and ends a sequence at its stop string.
   */
  readonly progress?: (sequence: unknown) => {
    readonly tokenIds: ReadonlyArray<number>
    readonly logprobs: ReadonlyArray<number>
  }
  /**
   * Optional: the sequence leaves the batch unfinished and will not be stepped again (its client went away, a stop
   * string ended it, or a step failed); the backend frees what it holds for it (e.g. a KV-cache slot).
   */
  readonly end?: (sequence: unknown) => void
}

/**
 * A generation engine the server serves. The server calls `generate`, the `decoder`'s functions and `loadWeights`
 * one at a time, and `loadWeights` only while no sequence is running.
 */
export interface Backend {
  /** "cpu", "gpu", … (shown in `/v1/models` as `owned_by`). */
  readonly name: string
  readonly tokenizer: Tokenizer
  readonly chatTemplate: ChatTemplate
  /** Longest prompt + completion, in tokens (vLLM's `max_model_len`). */
  readonly contextLength: number
  /** Most requests `generate` takes at once. */
  readonly maxBatchSize: number
  /** Largest `topLogprobs` the backend can report (0: none). */
  readonly maxTopLogprobs: number
  /** Most stop token ids per request (end-of-turn ids included); unset: no limit. */
  readonly maxStopTokenIds?: number
  /**
   * Sampling settings of requests that leave them out (vLLM reads them from the model's generation_config.json);
   * unset fields: temperature 1 and no filters.
   */
  readonly samplingDefaults?: Omit<SamplingParams, "maxTokens" | "stopTokenIds" | "seed">
  /** One completion per request, in order; the requests decode together. */
  readonly generate: (
    requests: ReadonlyArray<BackendRequest>
  ) => Effect.Effect<ReadonlyArray<BackendCompletion>, BackendError>
  /** Optional: step-wise decoding; the server then batches continuously (see {@link Decoder}). */
  readonly decoder?: Decoder
  /** Replaces the weights (never called while `generate` runs). */
  readonly loadWeights: (source: WeightSource) => Effect.Effect<void, BackendError>
}

/** Options of {@link serve}. Every field is optional. */
export interface PolicyServerOptions {
  /** Default "127.0.0.1". */
  readonly host?: string
  /** Default 8000; 0 picks a free port. */
  readonly port?: number
  /** The model name clients send (`model`); default "envtrain". */
  readonly servedModelName?: string
  /** Most requests per batch; default (and at most) the backend's `maxBatchSize`. */
  readonly maxBatchSize?: number
  /**
   * "continuous" (default when the backend has a `decoder`): requests join the running batch between decode
   * steps. "window": a batch is gathered, decoded to its end, then the next (what a backend without a decoder gets).
   */
  readonly batching?: "continuous" | "window"
  /** How long a batch (continuous: an idle server's first step) waits for more requests after its first; default 2 ms. */
  readonly batchWindow?: Duration.DurationInput
  /** Largest request body (pushed weights included); default 1 GiB. */
  readonly maxBodyBytes?: number
  /** Requests waiting beyond this are refused with 503; default 4096. */
  readonly maxQueue?: number
  /** A request (waiting and generating) that takes longer fails with 504; default 10 minutes. */
  readonly requestTimeout?: Duration.DurationInput
  /**
   * LoRA adapters served as vLLM serves them (`--enable-lora` with runtime loading): `POST /v1/load_lora_adapter
   * {lora_name, lora_path}` calls `load` for a backend that serves the adapter (e.g. the base with it merged in),
   * which then answers every request whose `model` is `lora_name`, with its own batches; `POST
   * /v1/unload_lora_adapter {lora_name}` releases it once its running requests finish; `/v1/models` lists each as
   * vLLM does (`root`: its path, `parent`: the base). Absent: those routes answer 400 (as vLLM without the flag).
   */
  readonly adapters?: {
    readonly load: (name: string, path: string) => Effect.Effect<Backend, BackendError, Scope.Scope>
    /** Most adapters loaded at once (vLLM's `--max-loras`); default 4. */
    readonly maxLoras?: number
  }
  /** Pull weights from a weight store (see {@link FollowOptions}). */
  readonly weightStore?: FollowOptions
}

/**
 * A server following a weight store (`WeightStore`): before it listens it loads the store's newest version (if any),
 * then each new version as it appears (a change in the directory, or every `pollInterval`), checked (size, sha256,
 * config hash); it reports the manifest's `policy_version` and, in `/v1/models`, `weight_store` (the version held and
 * the last refusal). A version that fails its checks is refused, logged, and tried again; the server keeps serving
 * the weights it holds. It registers `advertiseUrl` in the store so trainers can discover it.
 */
export interface FollowOptions {
  readonly directory: string
  /** The served model's `WeightStore.configHash`: weights for another model are refused. */
  readonly configHash?: string
  /** Default 250 ms. */
  readonly pollInterval?: Duration.DurationInput
  /** The URL trainers reach this server at; default its own `url` (loopback unless `host` says otherwise). */
  readonly advertiseUrl?: string
  /** How often the registration is refreshed; default 2 s. */
  readonly heartbeat?: Duration.DurationInput
}

/** A running policy server. */
export interface RunningPolicyServer {
  readonly host: string
  readonly port: number
  /** `http://host:port` (give it to `Policy.openAiCompatible` as `baseUrl`). */
  readonly url: string
  readonly servedModelName: string
  /** The version of the weights now loaded: 0 at start, +1 per weight update. */
  readonly policyVersion: Effect.Effect<number>
}

/** The options cannot be served (a bad port, a batch size below 1, …). */
export class PolicyServerError extends Data.TaggedError("PolicyServerError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** Serves `backend` until the scope closes (requests in flight are answered 503 while shutting down). */
export const serve = (
  backend: Backend,
  options: PolicyServerOptions = {}
): Effect.Effect<RunningPolicyServer, PolicyServerError, Scope.Scope> =>
  internal.make(backend, options).pipe(
    Effect.mapError((problem) => new PolicyServerError({ problem })),
    Effect.withSpan("PolicyServer.serve", { attributes: { backend: backend.name } })
  )

/** The running server as a service. */
export class PolicyServer extends Context.Tag("@envtrain/rollout/PolicyServer")<PolicyServer, RunningPolicyServer>() {
  static readonly layer = (backend: Backend, options: PolicyServerOptions = {}) =>
    Layer.scoped(PolicyServer, serve(backend, options))
}
