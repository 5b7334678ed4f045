// LoRA adapters served beside the base model, as vLLM serves them with `--enable-lora`: loaded and unloaded at run
// time by name, chosen per request by `model`. Each adapter gets its own backend (built by the server's
// `adapters.load`, e.g. the base with the adapter merged in) and its own scheduler, so its batches never mix with the
// base's or another adapter's; the server's one scheduler view routes each request by its `adapter`.
import type { Scope } from "effect"
import { Cause, Effect, ExecutionStrategy, Exit, Option, Schedule, Scope as ScopeOps } from "effect"
import type { Backend, BackendRequest, PolicyServerOptions } from "../../PolicyServer.js"
import { BackendError } from "../../PolicyServer.js"
import type { Metrics } from "./metrics.js"
import type { ApiError } from "./request.js"
import { apiError } from "./request.js"
import * as Scheduler from "./scheduler.js"

interface Loaded {
  readonly name: string
  readonly path: string
  readonly created: number
  readonly scheduler: Scheduler.Scheduler
  readonly scope: Scope.CloseableScope
  inFlight: number
}

/** The adapters of one server. */
export interface Adapters {
  readonly enabled: boolean
  readonly has: (name: string) => boolean
  /** Routes by `requests[0].adapter` (one API request's backend requests all name the same model). */
  readonly scheduler: Scheduler.Scheduler
  readonly load: (body: unknown) => Effect.Effect<string, ApiError>
  readonly unload: (body: unknown) => Effect.Effect<string, ApiError>
  /** `/v1/models` cards, vLLM's fields. */
  readonly cards: (baseName: string) => ReadonlyArray<Record<string, unknown>>
}

const field = (body: unknown, key: string) =>
  typeof body === "object" && body !== null ? (body as Record<string, unknown>)[key] : undefined

export const make = (
  base: Scheduler.Scheduler,
  options: NonNullable<PolicyServerOptions["adapters"]> | undefined,
  schedulerOptions: Parameters<typeof Scheduler.make>[1],
  metrics: Metrics,
  servedModelName: string
): Effect.Effect<Adapters, never, Scope.Scope> =>
  Effect.gen(function*() {
    const serverScope = yield* Effect.scope
    const loaded = new Map<string, Loaded>()
    const lock = yield* Effect.makeSemaphore(1)
    const max = options?.maxLoras ?? 4
    // Adapters add to the server's counters and histograms; the gauges (running, waiting, policy version) stay the
    // base scheduler's, which an adapter's scheduler would otherwise overwrite with its own.
    const adapterMetrics: Metrics = { ...metrics, running: () => {}, waiting: () => {}, version: () => {} }

    const generate: Scheduler.Scheduler["generate"] = (requests, watches) => {
      const name = requests[0]?.adapter
      if (name === undefined) return base.generate(requests, watches)
      const adapter = loaded.get(name)
      if (adapter === undefined) {
        return Effect.fail(new BackendError({ status: 404, message: `The model \`${name}\` does not exist.` }))
      }
      adapter.inFlight++
      return adapter.scheduler.generate(requests, watches).pipe(Effect.ensuring(Effect.sync(() => adapter.inFlight--)))
    }

    const load = (body: unknown) =>
      lock.withPermits(1)(Effect.gen(function*() {
        if (options === undefined) {
          return yield* apiError(
            400,
            "LoRA adapters are not enabled on this server; start it with adapters enabled (envtrain serve-policy " +
              "--enable-lora, as vLLM's --enable-lora).",
            "lora_name"
          )
        }
        const name = field(body, "lora_name")
        const path = field(body, "lora_path")
        if (typeof name !== "string" || name.length === 0 || typeof path !== "string" || path.length === 0) {
          return yield* apiError(400, "Both 'lora_name' and 'lora_path' must be provided.", "lora_name")
        }
        if (name === servedModelName || loaded.has(name)) {
          return yield* apiError(400, `The lora adapter '${name}' has already been loaded.`, "lora_name")
        }
        if (loaded.size >= max) {
          return yield* apiError(
            400,
            `${loaded.size} LoRA adapters are loaded, the most this server holds (--max-loras ${max}); unload one ` +
              `first (POST /v1/unload_lora_adapter).`,
            "lora_name"
          )
        }
        const scope = yield* ScopeOps.fork(serverScope, ExecutionStrategy.sequential)
        const built = yield* Effect.exit(
          options.load(name, path).pipe(
            Effect.flatMap((backend: Backend) => Scheduler.make(backend, schedulerOptions, adapterMetrics)),
            ScopeOps.extend(scope)
          )
        )
        if (Exit.isFailure(built)) {
          yield* ScopeOps.close(scope, built)
          const e = Option.getOrUndefined(Cause.failureOption(built.cause))
          return yield* apiError(
            e?.status ?? 500,
            `Loading the LoRA adapter '${name}' from ${path} failed: ${e?.message ?? Cause.pretty(built.cause)}`,
            "lora_path"
          )
        }
        loaded.set(name, {
          name,
          path,
          created: Math.floor(Date.now() / 1000),
          scheduler: built.value,
          scope,
          inFlight: 0
        })
        return `Success: LoRA adapter '${name}' added successfully.`
      }))

    const unload = (body: unknown) =>
      lock.withPermits(1)(Effect.gen(function*() {
        const name = field(body, "lora_name")
        if (typeof name !== "string" || name.length === 0) {
          return yield* apiError(400, "'lora_name' needs to provided to unload a LoRA adapter.", "lora_name")
        }
        const adapter = loaded.get(name)
        if (adapter === undefined) {
          return yield* apiError(404, `The lora adapter '${name}' cannot be found.`, "lora_name")
        }
        loaded.delete(name)
        // New requests no longer find it; the ones running finish on it, then its backend is released.
        yield* Effect.forkIn(
          Effect.repeat(Effect.sync(() => adapter.inFlight), {
            schedule: Schedule.spaced("20 millis"),
            until: (n) => n === 0
          }).pipe(Effect.zipRight(ScopeOps.close(adapter.scope, Exit.void))),
          serverScope
        )
        return `Success: LoRA adapter '${name}' removed successfully.`
      }))

    const cards = (baseName: string) =>
      [...loaded.values()].map((a) => ({
        id: a.name,
        object: "model",
        created: a.created,
        owned_by: "envtrain",
        root: a.path,
        parent: baseName,
        policy_version: a.scheduler.version()
      }))

    const waiting = () => [...loaded.values()].reduce((n, a) => n + a.scheduler.waiting(), base.waiting())
    return {
      enabled: options !== undefined,
      has: (name) => loaded.has(name),
      scheduler: { ...base, generate, waiting },
      load,
      unload,
      cards
    } satisfies Adapters
  })

/** The backend request's adapter field for a request naming `model`. */
export const adapterField = (adapters: Adapters, model: string | undefined): Pick<BackendRequest, "adapter"> =>
  model !== undefined && adapters.has(model) ? { adapter: model } : {}
