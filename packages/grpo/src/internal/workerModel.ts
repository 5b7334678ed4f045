/**
 * The CPU reference model in a worker thread (`Trainer.workerModel`): a {@link TrainableModel} whose every method
 * is a message to a `node:worker_threads` worker that owns the weights, the gradients and the AdamW state
 * (`modelWorker.ts`, the same `cachedCpuModel` code). The trainer's thread only waits, so its event loop stays free
 * while a forward, backward or optimizer step runs: async GRPO's producer keeps sending requests to a policy server
 * during the update. Results are bit-identical to the in-thread model's (same code, numbers copied exactly).
 *
 * - `accumulateLoss`: forward, `Loss.compute` and backward in the worker, one round trip per micro-batch (the GRPO
 *   trainer then takes that path; its loss and gradient are the ones the host path computes).
 * - `accumulate` with a host `weightsFor` (SFT): a `Score` round trip for the logprobs, then the weights go back
 *   with the batch and the worker runs forward and backward again (one extra forward; bit-identical, as the
 *   forward is deterministic). With LoRA dropout the `Score` runs without dropout (it is not a training forward),
 *   so weights that depend on the scores see dropout-free logprobs; SFT's do not depend on them, and GRPO takes
 *   `accumulateLoss`, whose forward is the training one.
 * - Lifetime: the worker lives as long as the Scope; closing it terminates the thread. A worker that exits or
 *   crashes fails every waiting and later call with {@link WorkerModelError} naming it (a defect: the trainer's
 *   model interface has no error channel, and the run stops); every call has a time limit, after which the worker
 *   is terminated (its state is unknown) and the call fails the same way.
 */
import { Launcher } from "@envtrain/env"
import type { Checkpoint, CpuDevice } from "@envtrain/gpu"
import { Data, Deferred, Duration, Effect, type Scope } from "effect"
import { Worker } from "node:worker_threads"
import { type LoraOptions, OptimizerStateMismatch, type TrainableModel } from "./model.js"
import { type Envelope, isReply, type Replies, type Reply, type Request } from "./workerProtocol.js"

/** Options of {@link workerModel}. */
export interface WorkerModelOptions {
  /** Most generation requests served by one call of `generate` (as `Trainer.referenceModel`'s). */
  readonly maxBatchSize?: number
  /** Time limit of one call (a forward/backward, an optimizer step, a generate call). Default 30 minutes. */
  readonly callTimeout?: Duration.DurationInput
  /** Time limit of the start: the thread loading the sources (tsx) and taking the weights. Default 2 minutes. */
  readonly startTimeout?: Duration.DurationInput
  /**
   * Run the CPU device's model (f32 kernels, BLAS or WebAssembly SIMD matmuls) instead of the reference model, with
   * these options (`Trainer.cpuModel`).
   */
  readonly device?: CpuDevice.DeviceOptions & {
    readonly maxTokensPerPass?: number
    readonly gradientCheckpointing?: boolean | undefined
    readonly frozenDtype?: "f32" | "bf16" | undefined
  }
  /** Train a LoRA adapter on the frozen base: the weights the trainer reads back and syncs are the adapter's. */
  readonly lora?: LoraOptions | undefined
}

/** The CPU model's worker thread stopped, crashed, or did not answer in time. */
export class WorkerModelError extends Data.TaggedError("WorkerModelError")<{
  readonly worker: string
  readonly problem: string
}> {
  override get message() {
    return `CPU model worker ${this.worker}: ${this.problem}`
  }
}

/** The worker itself, for tests: its name and a way to end it as a crash would. */
export interface WorkerHandle {
  readonly name: string
  readonly terminate: Effect.Effect<void>
}

// From the build the worker is modelWorker.js itself. From the sources (this file is .ts) the entry registers tsx in
// the thread, then imports modelWorker.ts; the thread gets the source condition (Launcher.sourceConditions) too.
const ENTRY = import.meta.url.endsWith(".ts")
  ? new URL("./modelWorkerEntry.mjs", import.meta.url)
  : new URL("./modelWorker.js", import.meta.url)

/** Starts the worker in the current Scope, gives it the weights, and returns the model and the worker. */
export const start = (
  checkpoint: Checkpoint.Model,
  options: WorkerModelOptions = {}
): Effect.Effect<{ readonly model: TrainableModel; readonly worker: WorkerHandle }, WorkerModelError, Scope.Scope> =>
  Effect.gen(function*() {
    const callTimeout = Duration.decode(options.callTimeout ?? Duration.minutes(30))
    const startTimeout = Duration.decode(options.startTimeout ?? Duration.minutes(2))
    const pending = new Map<number, Deferred.Deferred<unknown, WorkerModelError | OptimizerStateMismatch>>()
    let nextId = 0
    // Why the worker is gone (undefined while it runs).
    let gone: WorkerModelError | undefined
    let name = "envtrain-cpu-model"

    const end = (problem: string) => {
      if (gone !== undefined) return
      gone = new WorkerModelError({ worker: name, problem })
      for (const deferred of pending.values()) Deferred.unsafeDone(deferred, Effect.fail(gone))
      pending.clear()
    }

    const worker = yield* Effect.acquireRelease(
      Effect.try({
        try: () => new Worker(ENTRY, { name, execArgv: [...process.execArgv, ...Launcher.sourceConditions] }),
        catch: (e) => new WorkerModelError({ worker: name, problem: `it could not start: ${(e as Error).message}` })
      }),
      (w) =>
        Effect.suspend(() => {
          end("it was stopped (the model's scope closed); the model cannot be used after its run")
          return Effect.promise(() => w.terminate())
        })
    )
    name = `envtrain-cpu-model (thread ${worker.threadId})`
    worker.on("message", (message: unknown) => {
      if (!isReply(message)) return end(`it sent something that is not a reply: ${String(message).slice(0, 200)}`)
      const deferred = pending.get(message.id)
      if (deferred === undefined) return // a call that timed out or was interrupted
      pending.delete(message.id)
      Deferred.unsafeDone(deferred, outcome(message))
    })
    worker.on("error", (e) => end(`it crashed: ${e.stack ?? e.message}`))
    worker.on("exit", (code) =>
      end(
        `it exited (code ${code}) while the trainer still used it: killed, out of memory, or crashed; the run ` +
          "cannot continue on its weights (resume from the last checkpoint)"
      ))

    const outcome = (reply: Reply): Effect.Effect<unknown, WorkerModelError | OptimizerStateMismatch> =>
      reply._tag === "Success"
        ? Effect.succeed(reply.value)
        : reply.failure._tag === "OptimizerStateMismatch"
        ? Effect.fail(new OptimizerStateMismatch({ problem: reply.failure.problem }))
        : Effect.fail(new WorkerModelError({ worker: name, problem: `it failed: ${reply.failure.message}` }))

    // One request and its reply, within `timeout`; a timeout ends the worker (what it holds is no longer known).
    const ask = <T extends Request["_tag"]>(
      request: Extract<Request, { readonly _tag: T }>,
      timeout: Duration.Duration = callTimeout
    ): Effect.Effect<Replies[T], WorkerModelError | OptimizerStateMismatch> =>
      Effect.flatMap(Deferred.make<unknown, WorkerModelError | OptimizerStateMismatch>(), (deferred) => {
        if (gone !== undefined) return Effect.fail(gone)
        const id = nextId++
        pending.set(id, deferred)
        worker.postMessage({ id, request } satisfies Envelope)
        return Deferred.await(deferred).pipe(
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () => {
              end(
                `it did not answer ${request._tag} within ${Duration.format(timeout)} (callTimeout); ` +
                  "it was stopped. Raise callTimeout for a larger model."
              )
              void worker.terminate()
              return gone!
            }
          }),
          Effect.ensuring(Effect.sync(() => pending.delete(id)))
        ) as Effect.Effect<Replies[T], WorkerModelError | OptimizerStateMismatch>
      }).pipe(
        // Name the call that met the failure (the worker's state, not the call, is usually the cause).
        Effect.mapError((e) =>
          e._tag === "WorkerModelError"
            ? new WorkerModelError({ worker: e.worker, problem: `${e.problem} [call: ${request._tag}]` })
            : e
        )
      )
    // The trainer's model interface has no error channel: a lost worker ends the run (a defect naming it).
    const call = <T extends Request["_tag"]>(request: Extract<Request, { readonly _tag: T }>) =>
      Effect.orDie(ask(request))

    const first = yield* ask({
      _tag: "Init",
      config: checkpoint.config,
      tensors: checkpoint.tensors,
      generationConfig: checkpoint.generationConfig,
      maxBatchSize: options.maxBatchSize,
      device: options.device,
      lora: options.lora
    }, startTimeout).pipe(
      Effect.catchTag("OptimizerStateMismatch", (e) => new WorkerModelError({ worker: name, problem: e.problem }))
    )

    if (first.device !== undefined) name = `envtrain-cpu-model (thread ${worker.threadId}, ${first.device})`
    const { chatTemplate, config, generationConfig, tokenizer } = checkpoint
    const proxy = (id: number, trainsLora = true): TrainableModel => ({
      ...(first.device === undefined ? {} : { device: first.device }),
      ...(options.lora === undefined || !trainsLora ? {} : { lora: options.lora.config }),
      config,
      tokenizer,
      chatTemplate,
      generationConfig,
      maxBatchSize: options.maxBatchSize ?? 64,
      generate: (requests) =>
        // The episode loop lends its live context arrays; structured clone copies them at the call.
        call({ _tag: "Generate", model: id, requests }),
      score: (batch, temperature) => call({ _tag: "Score", model: id, batch, temperature }),
      accumulate: (batch, temperature, weightsFor) =>
        Effect.flatMap(call({ _tag: "Score", model: id, batch, temperature }), (scores) =>
          call({
            _tag: "Accumulate",
            model: id,
            batch,
            temperature,
            weights: Float64Array.from(weightsFor(scores))
          })),
      accumulateLoss: (batch, temperature, inputs, lossOptions) =>
        call({ _tag: "AccumulateLoss", model: id, batch, temperature, inputs, options: lossOptions }),
      step: (o) => call({ _tag: "Step", model: id, options: o }),
      exportState: call({ _tag: "ExportState", model: id }),
      importState: (state) => call({ _tag: "ImportState", model: id, state }),
      exportOptimizerState: call({ _tag: "ExportOptimizerState", model: id }),
      importOptimizerState: (state) =>
        ask({ _tag: "ImportOptimizerState", model: id, state }).pipe(
          Effect.catchTag("WorkerModelError", (e) => Effect.die(e))
        ),
      // A LoRA model's frozen copy is the base: it trains no adapter.
      frozenCopy: Effect.map(call({ _tag: "FrozenCopy", model: id }), (copy) => proxy(copy.model, false))
    })

    return {
      model: proxy(first.model),
      worker: {
        name,
        terminate: Effect.promise(() => worker.terminate()).pipe(Effect.asVoid)
      }
    }
  })

/** {@link start}'s model alone (`Trainer.workerModel`). */
export const workerModel = (
  checkpoint: Checkpoint.Model,
  options: WorkerModelOptions = {}
): Effect.Effect<TrainableModel, WorkerModelError, Scope.Scope> =>
  Effect.map(start(checkpoint, options), (s) => s.model)
