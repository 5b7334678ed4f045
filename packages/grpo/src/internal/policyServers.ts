/**
 * A {@link TrainableModel} whose generation runs on policy servers (`envtrain serve-policy`, or any server of the
 * vLLM dialect that takes or reloads the weights) while scoring, gradients, the optimizer step and the state stay on
 * the local model.
 *
 * - Requests: one `POST /v1/completions` per turn with the prompt as token ids and `return_token_ids` (the Policy's
 *   `completionRequestBody`), so nothing is re-tokenised; the processed logprobs and the response's
 *   `policy_version` come back with the tokens. An episode's turns all go to the server its first turn went to
 *   (while it is usable), so its cached prefix is reused; a new episode goes to the usable server with the fewest
 *   active episodes, then the fewest requests in flight (`generationRouter.ts`).
 * - Weights: after every optimizer step (and at the start, and after `importState`), the local weights are encoded
 *   as one f32 safetensors file and pushed to every server with `POST /update_weights` (the bytes in the body: no
 *   shared disk, so the servers may be on other machines); each must answer with its previous `policy_version` + 1,
 *   else the run stops. When the model trains a LoRA adapter only the adapter is pushed (`LoraAdapter.encodePushed`:
 *   its tensors with the adapter config in the file's metadata), which the server merges into the base it holds.
 *   A server is only sent requests once it holds the current weights. With `weightDirectory`
 *   the file goes through a shared directory instead (see there; the route a vLLM server can take). A push that a
 *   closed kept-alive connection dropped before any answer is sent again (see `pushLocked`); one that still fails,
 *   or times out (`pushTimeout`), marks the server down with a warning.
 * - Connections are kept alive (`@envtrain/rollout/PolicyRequest`); a request or probe that a kept-alive connection
 *   the server had closed dropped before any answer byte never reached it, and is sent again once on a fresh
 *   connection (logged, counted in `PolicyRequest.resends`).
 * - Failures: a request that cannot reach its server (refused, reset, timeout) fails with `PolicyTransportError`,
 *   which ends only that episode, as unscoreable (never trained on a partial completion), and marks the server
 *   down. A down server is tried again (`/v1/models`, then the current weights) at the next push, or when no server
 *   is usable; once every server has been down for `unreachableTimeout` the run stops with `PolicyResponseError`
 *   naming the URLs and their last errors.
 */
import * as LoraAdapter from "@envtrain/gpu/formats/LoraAdapter"
import * as ModelConfig from "@envtrain/gpu/formats/ModelConfig"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import type { Completion, GenerateRequest, PolicyError } from "@envtrain/rollout/Policy"
import {
  completionRequestBody,
  parseCompletion,
  PolicyResponseError,
  PolicyTransportError
} from "@envtrain/rollout/Policy"
import * as PolicyRequest from "@envtrain/rollout/PolicyRequest"
import * as WeightStore from "@envtrain/rollout/WeightStore"
import { Data, Duration, Effect, Either } from "effect"
import * as NodeFs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Config from "../Config.js"
import * as GenerationRouter from "./generationRouter.js"
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
  /**
   * An episode's turns all go to one server (its cached prefix is reused there); it counts toward that server's load
   * until this long passes without a request from it. Default 60 s.
   */
  readonly episodeIdle?: Duration.DurationInput
  /** Bearer token, if the servers want one. */
  readonly apiKey?: string
  /**
   * Send the weights through this directory, which the servers see at the same path, instead of in the request
   * body: each update replaces `model.safetensors` there (written beside it, then renamed) and asks each server to
   * reload it: envtrain's `POST /update_weights_from_disk {"model_path": DIR}`, or for a vLLM server (its
   * `/v1/models` says `owned_by: "vllm"`) `POST /collective_rpc {"method": "reload_weights"}` then
   * `POST /reset_prefix_cache` (vLLM with `VLLM_SERVER_DEV_MODE=1`, started with `--model DIR`). The directory must
   * not hold a `model.safetensors.index.json` (it would win over the single file).
   */
  readonly weightDirectory?: string
  /**
   * Publish the weights to this weight store (`@envtrain/rollout/WeightStore`, a directory the servers see) once per
   * update, instead of sending them to each server: the servers (`envtrain serve-policy --weights-from DIR`) pull,
   * verify and load them, and each is sent requests only once its `/v1/models` reports the published version
   * (waited for up to `pushTimeout`; a server that does not get there is marked down with a warning naming why).
   */
  readonly weightStore?: string
  /** Versions the store keeps (the newest included); default 3. */
  readonly keepVersions?: number
  /**
   * Use the servers registered in the weight store (`servers/`: every `serve-policy --weights-from` registers its
   * URL and refreshes it) besides `urls`: read at the start (waiting up to `unreachableTimeout` for one) and at
   * every update, so a server that joins takes part from the next update and one whose registration goes stale
   * (stopped, or dead for 10 s) is marked down. Needs `weightStore`.
   */
  readonly discoverServers?: boolean
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
  /** vLLM reloads weights its own way (see `weightDirectory`) and reports no policy_version. */
  vllm: boolean
  /** The served model name (`/v1/models`), sent with every request. */
  model: string
  inFlight: number
  /** The last `policy_version` it reported; undefined for a server that reports none (vLLM). */
  version: number | undefined
  /**
   * Its `policy_version` after each of our pushes → the optimizer steps those weights had (the trainer's policy
   * version): the server counts its own updates from its start, the trainer counts steps from the run's start.
   */
  readonly trainerVersions: Map<number, number>
  /** Which local weights it holds (see `weights.generation`); -1: none known. */
  holds: number
  up: boolean
  lastError: string
  /** What its `/v1/models` says of the weight store it follows (undefined: it follows none). */
  store: { readonly error: string | null } | undefined
  /** Serialises pushes to this server (a revival and a step's push must not interleave). */
  readonly lock: Effect.Semaphore
}

// Probes go only to servers not in use (at the start, after a failure), which answer /v1/models at once.
const PROBE_TIMEOUT = Duration.seconds(10)
// A registration not refreshed for this long (servers refresh every 2 s) is a stopped or dead server's.
const DISCOVERY_FRESH = Duration.seconds(10)
// How often a server pulling from the weight store is asked for its version.
const PULL_POLL = Duration.millis(20)

const trim = (url: string) => url.replace(/\/+$/, "")

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
    if (options.urls.length === 0 && options.discoverServers !== true) return model
    const unreachableTimeout = Duration.decode(options.unreachableTimeout ?? Duration.seconds(240))
    const requestTimeout = Duration.decode(options.requestTimeout ?? Duration.minutes(5))
    const pushTimeout = Duration.decode(options.pushTimeout ?? Duration.minutes(10))
    const retryInterval = Duration.decode(options.retryInterval ?? Duration.seconds(1))
    const episodeIdle = Duration.decode(options.episodeIdle ?? Duration.seconds(60))
    const auth: Record<string, string> = options.apiKey === undefined
      ? {}
      : { authorization: `Bearer ${options.apiKey}` }

    const servers: Array<Server> = []
    const addServer = (raw: string) =>
      Effect.map(Effect.makeSemaphore(1), (lock) => {
        const server: Server = {
          url: trim(raw),
          vllm: false,
          model: "",
          inFlight: 0,
          version: undefined,
          trainerVersions: new Map(),
          holds: -1,
          up: false,
          lastError: "not contacted yet",
          store: undefined,
          lock
        }
        servers.push(server)
        return server
      })
    for (const raw of options.urls) yield* addServer(raw)
    // The local weights as the servers receive them; `generation` counts the local updates.
    const weights: { generation: number; optimizerStep: number; bytes: Uint8Array<ArrayBuffer> } = {
      generation: 0,
      optimizerStep: 0,
      bytes: new Uint8Array(0)
    }
    const directory = options.weightDirectory
    const store = options.weightStore === undefined ? undefined : WeightStore.directory(options.weightStore)
    if (store !== undefined && directory !== undefined) {
      return yield* new PolicyServerError({
        url: servers.map((x) => x.url).join(", "),
        problem: "give the weights one way: a weight directory (the trainer asks each server to reload it) or a " +
          "weight store (the servers pull from it), not both"
      })
    }
    // Refused here, before any server is contacted: the adapter cannot go through a store or a directory.
    const loraRoute = model.lora === undefined
      ? undefined
      : Config.loraWeightsProblem({ weightStore: options.weightStore, weightDirectory: directory })
    if (loraRoute !== undefined) {
      return yield* new PolicyServerError({
        url: store?.location ?? servers.map((x) => x.url).join(", "),
        problem: loraRoute
      })
    }
    const configHash = WeightStore.configHash(ModelConfig.toJson(model.config))
    // The store's version the servers must report (the trainer's generation counts differ after a restart).
    let published = 0
    const encodeWeights = Effect.flatMap(model.exportState, (state) => {
      weights.generation++
      weights.optimizerStep = state.optimizerStep
      // Training a LoRA, only the adapter travels (the servers merge it into the base they hold).
      weights.bytes = (state.lora === undefined
        ? Safetensors.encode(state.weights)
        : LoraAdapter.encodePushed({ config: state.lora, tensors: state.weights, baseModel: null })) as Uint8Array<
          ArrayBuffer
        >
      if (store !== undefined) {
        return store.publish({
          bytes: weights.bytes,
          step: state.optimizerStep,
          configHash,
          ...(options.keepVersions === undefined ? {} : { keep: options.keepVersions })
        }).pipe(
          Effect.map((manifest) => void (published = manifest.policy_version)),
          Effect.mapError((e) => new PolicyServerError({ url: store.location, problem: e.message }))
        )
      }
      if (directory === undefined) return Effect.void
      // Renamed into place, so a server never reads a half-written file.
      const file = NodePath.join(directory, Safetensors.SINGLE_FILE)
      const partial = `${file}.partial-${process.pid}`
      return Effect.tryPromise({
        try: async () => {
          await NodeFs.writeFile(partial, weights.bytes)
          await NodeFs.rename(partial, file)
        },
        catch: (e) =>
          new PolicyServerError({
            url: servers.map((x) => x.url).join(", "),
            problem: `writing the weights to ${file} failed: ${(e as Error).message}`
          })
      })
    })

    // Asks `server` for its model name and version; fails with the reason it could not be reached.
    const probe = (server: Server) =>
      PolicyRequest.sendResending(`${server.url}/v1/models`, { headers: auth }, { timeout: PROBE_TIMEOUT }).pipe(
        Effect.flatMap(({ status, text }) => {
          if (status !== 200) {
            return Effect.fail({ message: `GET ${server.url}/v1/models answered ${status}: ${text.slice(0, 300)}` })
          }
          try {
            const json = JSON.parse(text) as { data?: ReadonlyArray<{ id?: unknown; owned_by?: unknown }> }
            const id = json.data?.[0]?.id
            if (typeof id !== "string") throw new Error("no model id")
            server.model = id
            server.vllm = json.data?.[0]?.owned_by === "vllm"
            server.version = versionOf(text)
            const followed = (json.data?.[0] as { weight_store?: { error?: unknown } } | undefined)?.weight_store
            server.store = followed === undefined
              ? undefined
              : { error: typeof followed.error === "string" ? followed.error : null }
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
        if (store !== undefined) return yield* awaitPulled(server)
        const generation = weights.generation
        const optimizerStep = weights.optimizerStep
        const before = server.version
        if (directory === undefined && server.vllm) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: "it is a vLLM server, which takes no pushed weights. Start it with VLLM_SERVER_DEV_MODE=1 and " +
              "--model DIR on a disk the trainer can write, and give that DIR as the weight directory " +
              "(policyServerWeightDirectory / --policy-server-weights DIR); or use envtrain serve-policy."
          })
        }
        const post = (route: string, body: Uint8Array<ArrayBuffer> | string, type: string, fresh: boolean) =>
          PolicyRequest.send(
            `${server.url}${route}`,
            { method: "POST", headers: { ...auth, "content-type": type }, body },
            { timeout: pushTimeout, limit: "pushTimeout", fresh }
          )
        const send = (fresh: boolean) =>
          Effect.either(
            directory === undefined
              ? post("/update_weights", weights.bytes, "application/octet-stream", fresh)
              : server.vllm
              ? post("/collective_rpc", JSON.stringify({ method: "reload_weights" }), "application/json", fresh).pipe(
                // Cached prefixes hold keys and values of the old weights.
                Effect.tap(({ status }) =>
                  status === 200 ? post("/reset_prefix_cache", "", "application/json", fresh) : Effect.void
                )
              )
              : post(
                "/update_weights_from_disk",
                JSON.stringify({ model_path: directory }),
                "application/json",
                fresh
              )
          )
        let answer = yield* send(false)
        // A push that a kept-alive connection dropped before any answer (`PolicyRequest.isDroppedBeforeAnswer`: the
        // server closed it while this process was busy, e.g. a synchronous optimizer step longer than the server's
        // keep-alive on a loaded machine) did not arrive. It is sent again on a fresh connection, after asking the
        // server whether it landed after all (it counts its updates); other failures and timeouts are not (the
        // server may still be loading those weights).
        if (answer._tag === "Left" && answer.left.reason === "dropped") {
          const failed = answer.left
          if (Either.isRight(yield* Effect.either(probe(server)))) {
            if (before !== undefined && server.version === before + 1) {
              answer = Either.right({ status: 200, text: JSON.stringify({ policy_version: before + 1 }) })
            } else if (server.version === before) {
              // (Another version: it restarted, or another client updated it; the revival sorts that out.)
              yield* PolicyRequest.noteResend(failed)
              answer = yield* send(true)
            }
          }
        }
        if (answer._tag === "Left") {
          server.up = false
          server.lastError = answer.left.message
          // Not silent: it is retried before the server serves again, but a run that ends here leaves it on the old
          // weights.
          return yield* Effect.logWarning(
            `policy server ${server.url}: the weight push failed (${answer.left.message}); marked down until it ` +
              "answers again and takes the current weights"
          )
        }
        const { status, text } = answer.right
        if (status >= 500 && status !== 501) {
          server.up = false
          server.lastError = `the weight update answered ${status}: ${text.slice(0, 300)}`
          return
        }
        if (status !== 200) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: `the weight update answered ${status}: ${text.slice(0, 500)}. ` + (directory === undefined
              ? "The server must take pushed safetensors weights (POST /update_weights: envtrain serve-policy does)."
              : server.vllm
              ? "vLLM reloads from disk only with VLLM_SERVER_DEV_MODE=1 (POST /collective_rpc)."
              : `The server must read ${directory} (the same path on its machine).`)
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
        if (after !== undefined) server.trainerVersions.set(after, optimizerStep)
        server.holds = generation
        server.up = true
      })
    const push = (server: Server) => server.lock.withPermits(1)(pushLocked(server))

    // With a weight store: waits until `server` reports the published version (it pulls it by itself). One that
    // follows no store, or a newer version than this trainer published, is a configuration error; one that does not
    // get there within pushTimeout (a refused file, a hung load, a store it cannot see) is marked down, with why.
    function awaitPulled(server: Server): Effect.Effect<void, PolicyServerError> {
      return Effect.gen(function*() {
        const generation = weights.generation
        const optimizerStep = weights.optimizerStep
        const target = published
        const started = Date.now()
        while (true) {
          const probed = yield* Effect.either(probe(server))
          if (probed._tag === "Left") {
            server.up = false
            server.lastError = probed.left.message
            return yield* Effect.logWarning(
              `policy server ${server.url}: unreachable while loading version ${target} from the weight store ` +
                `(${probed.left.message}); marked down until it answers with the current weights`
            )
          }
          if (server.store === undefined) {
            return yield* new PolicyServerError({
              url: server.url,
              problem: `it does not follow the weight store ${store!.location}: start it with envtrain serve-policy ` +
                "--weights-from DIR (the same store, as its machine sees it)"
            })
          }
          const at = server.version ?? 0
          if (at === target) break
          if (at > target) {
            return yield* new PolicyServerError({
              url: server.url,
              problem: `it reports policy_version ${at}, beyond the ${target} this trainer published to ` +
                `${store!.location}: another trainer publishes to that store. Give each run a store of its own.`
            })
          }
          if (Date.now() - started >= Duration.toMillis(pushTimeout)) {
            server.up = false
            server.lastError = `still at version ${at}, ${Duration.format(pushTimeout)} after version ${target} ` +
              `was published to ${store!.location}` +
              (server.store.error === null ? "" : ` (it refused it: ${server.store.error})`)
            return yield* Effect.logWarning(
              `policy server ${server.url}: the weight sync hung: ${server.lastError}; marked down until it reports ` +
                "the current version"
            )
          }
          yield* Effect.sleep(PULL_POLL)
        }
        server.trainerVersions.set(target, optimizerStep)
        server.holds = generation
        server.up = true
      })
    }

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
                  server.trainerVersions.clear()
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
    if (directory !== undefined) {
      const index = NodePath.join(directory, Safetensors.INDEX_FILE)
      if (yield* Effect.promise(() => NodeFs.access(index).then(() => true, () => false))) {
        return yield* new PolicyServerError({
          url: servers[0].url,
          problem: `the weight directory holds ${index}, which servers would read instead of the model.safetensors ` +
            "the trainer writes there: give a directory with a single-file checkpoint (or none)."
        })
      }
    }
    // Servers registered in the store: new ones are added (brought up by the next update or revival); listed
    // ones whose registration went stale are marked down.
    const discover = Effect.gen(function*() {
      if (store === undefined || options.discoverServers !== true) return
      const registered = new Set((yield* store.registered(DISCOVERY_FRESH)).map((r) => trim(r.url)))
      for (const url of registered) {
        if (!servers.some((s) => s.url === url)) yield* addServer(url)
      }
      for (const s of servers) {
        if (!registered.has(s.url) && !options.urls.some((u) => trim(u) === s.url) && s.up) {
          s.up = false
          s.lastError = `its registration in ${store.location} is gone or stale (stopped, or dead)`
          yield* Effect.logWarning(`policy server ${s.url}: ${s.lastError}; marked down`)
        }
      }
    })
    if (options.discoverServers === true) {
      if (store === undefined) {
        return yield* new PolicyServerError({
          url: "(discovery)",
          problem: "discovering servers reads the weight store's registrations: give the weight store too " +
            "(policyServerWeightStore / weightStore)"
        })
      }
      const started = Date.now()
      while (true) {
        yield* discover
        if (servers.length > 0) break
        if (Date.now() - started >= Duration.toMillis(unreachableTimeout)) {
          return yield* new PolicyServerError({
            url: "(discovery)",
            problem: `no policy server registered in ${store.location}/servers within ` +
              `${Duration.format(unreachableTimeout)}: start envtrain serve-policy --weights-from DIR (with ` +
              "--advertise-url where it listens on 0.0.0.0)"
          })
        }
        yield* Effect.sleep(retryInterval)
      }
    }
    yield* encodeWeights
    const listed = (server: Server) => options.urls.some((u) => trim(u) === server.url)
    yield* Effect.forEach(servers, (server) =>
      Effect.gen(function*() {
        const started = Date.now()
        while (true) {
          const probed = yield* Effect.either(probe(server))
          if (probed._tag === "Right") break
          server.lastError = probed.left.message
          // A discovered server (its registration may outlive it by a few seconds) is left down, not waited for.
          if (!listed(server)) {
            return yield* Effect.logWarning(
              `policy server ${server.url} (registered in the store): ${server.lastError}`
            )
          }
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
        if (!server.up && listed(server)) {
          return yield* new PolicyServerError({
            url: server.url,
            problem: `the weights could not be sent: ${server.lastError}`
          })
        }
      }), { concurrency: "unbounded", discard: true })

    const router = GenerationRouter.make<Server>(Duration.toMillis(episodeIdle))
    // A server for one request (see internal/generationRouter.ts: an episode stays on one server, least-loaded
    // across episodes); while none is usable, down servers are tried again until unreachableTimeout has passed.
    const pick = (episode: string | undefined): Effect.Effect<Server, PolicyError> =>
      Effect.gen(function*() {
        const started = Date.now()
        while (true) {
          const candidates = usable()
          if (candidates.length > 0) return router.choose(candidates, episode)
          yield* discover
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
        const server = yield* pick(request.episode)
        const url = `${server.url}/v1/completions`
        server.inFlight++
        // A request that a closed kept-alive connection dropped before any answer is sent again on a fresh one
        // (PolicyRequest); any other failure ends the episode, as unscoreable.
        const answer = yield* PolicyRequest.sendResending(url, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json" },
          body: JSON.stringify(completionRequestBody({ model: server.model }, request))
        }, { timeout: requestTimeout }).pipe(
          Effect.ensuring(Effect.sync(() => void server.inFlight--)),
          Effect.either
        )
        if (answer._tag === "Left") {
          server.up = false
          server.lastError = answer.left.message
          return yield* new PolicyTransportError({
            reason: answer.left.reason === "timeout" ? "timeout" : "connect",
            message: answer.left.message
          })
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
        if (completion.policyVersion === undefined) return completion // vLLM: the trainer takes the issue-time version
        server.version = Math.max(server.version ?? 0, completion.policyVersion)
        // In the trainer's count (async GRPO's staleness compares it with the optimizer step); a version no push of
        // ours produced (a restarted server's own weights) is unknown, so the trainer takes the issue-time version.
        const { policyVersion: _served, ...rest } = completion
        const trainerVersion = server.trainerVersions.get(completion.policyVersion)
        return trainerVersion === undefined ? rest : { ...rest, policyVersion: trainerVersion }
      })

    // After a local update: the new weights to every server before the next generation uses them.
    const sync = Effect.zipRight(encodeWeights, Effect.zipRight(discover, Effect.suspend(() => pushAll))).pipe(
      Effect.orDie
    )

    // The local model's step-wise decoder would bypass the servers: not carried over.
    const { decoder: _local, ...local } = model
    const wrapped: TrainableModel = {
      ...local,
      // Generation runs in the servers' processes: async GRPO need not hold the model's lock around it.
      remoteGeneration: true,
      generate: (requests) => Effect.forEach(requests, generateEach, { concurrency: "unbounded" }).pipe(Effect.orDie),
      generateEach,
      step: (o) => Effect.tap(model.step(o), () => sync),
      importState: (state) => Effect.zipRight(model.importState(state), sync)
    }
    return wrapped
  })
