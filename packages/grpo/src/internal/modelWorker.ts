/**
 * The worker thread's side of `workerModel.ts`: owns the CPU reference model (`cachedCpuModel`, the very code the
 * trainer's thread would run) and its frozen copies, and answers each request in order, one at a time. Every
 * method of the CPU model is synchronous, so a request runs to the end before the next message is read (no
 * interleaving); its effect is run with `runSyncExit` and its failure is sent back, never thrown. Started by
 * `workerModel.ts` as the thread's entry (from the sources through `modelWorkerEntry.mjs`, which registers tsx).
 */
import { CpuDevice } from "@envtrain/gpu"
import type { Tokenizer } from "@envtrain/text/Tokenizer"
import { Cause, Effect, Exit } from "effect"
import { parentPort } from "node:worker_threads"
import * as Loss from "../Loss.js"
import { cachedCpuModel } from "./cachedModel.js"
import { deviceModel } from "./deviceModel.js"
import type { TrainableModel } from "./model.js"
import { buffersOf, type Envelope, type Failure, type Reply, type Request } from "./workerProtocol.js"

const models = new Map<number, TrainableModel>()

const modelOf = (id: number) =>
  Effect.suspend(() => {
    const model = models.get(id)
    return model === undefined
      ? Effect.dieMessage(`no model ${id} in the worker (send Init first)`)
      : Effect.succeed(model)
  })

const add = (model: TrainableModel) => {
  const id = models.size
  models.set(id, model)
  return { model: id }
}

const handle = (request: Request): Effect.Effect<unknown, Failure> => {
  switch (request._tag) {
    case "Init": {
      const checkpoint = {
        config: request.config,
        tensors: request.tensors,
        generationConfig: request.generationConfig,
        // The worker's model never tokenises or renders a chat: the trainer's proxy holds the real ones.
        tokenizer: undefined as unknown as Tokenizer,
        chatTemplate: undefined as never
      }
      const batch = {
        ...(request.maxBatchSize === undefined ? {} : { maxBatchSize: request.maxBatchSize }),
        lora: request.lora
      }
      const options = request.device
      if (options === undefined) return Effect.sync(() => add(cachedCpuModel(checkpoint, batch)))
      // The device (its BLAS handle or WebAssembly memory) is made in this thread: it cannot cross threads.
      return Effect.map(
        Effect.mapError(CpuDevice.make(options), (e): Failure => ({ _tag: "Defect", message: e.message })),
        (device) => ({
          ...add(deviceModel(checkpoint, {
            gemm: device.gemm,
            ...batch,
            ...(options.maxTokensPerPass === undefined ? {} : { maxTokensPerPass: options.maxTokensPerPass }),
            gradientCheckpointing: options.gradientCheckpointing,
            frozenDtype: options.frozenDtype
          })),
          device: device.description
        })
      )
    }
    case "Generate":
      return Effect.flatMap(modelOf(request.model), (m) => m.generate(request.requests))
    case "Score":
      return Effect.flatMap(modelOf(request.model), (m) => m.score(request.batch, request.temperature))
    case "Accumulate":
      return Effect.flatMap(
        modelOf(request.model),
        (m) => m.accumulate(request.batch, request.temperature, () => request.weights)
      )
    case "AccumulateLoss":
      // Forward, the loss exactly as the trainer's thread computes it for a model without accumulateLoss
      // (generation.ts), and backward: one round trip per micro-batch.
      return Effect.flatMap(modelOf(request.model), (m) => {
        const { samplerCorrection: _correction, ...inputs } = request.inputs
        let result: Loss.LossResult | undefined
        return Effect.map(
          m.accumulate(request.batch, request.temperature, (scores) => {
            result = Loss.compute({
              ...inputs,
              rows: request.batch.prompts.length,
              length: request.batch.length,
              logprobs: scores.logprobs,
              entropies: scores.entropies
            }, request.options)
            return result.gradient
          }),
          () => ({ loss: result!.loss, metrics: result!.metrics })
        )
      })
    case "Step":
      return Effect.flatMap(modelOf(request.model), (m) => m.step(request.options))
    case "ExportState":
      return Effect.flatMap(modelOf(request.model), (m) => m.exportState)
    case "ImportState":
      return Effect.flatMap(modelOf(request.model), (m) => m.importState(request.state))
    case "ExportOptimizerState":
      return Effect.flatMap(modelOf(request.model), (m) => m.exportOptimizerState!)
    case "ImportOptimizerState":
      return Effect.flatMap(modelOf(request.model), (m) =>
        m.importOptimizerState!(request.state).pipe(
          Effect.mapError((e): Failure => ({ _tag: "OptimizerStateMismatch", problem: e.problem }))
        ))
    case "FrozenCopy":
      return Effect.flatMap(modelOf(request.model), (m) => Effect.map(m.frozenCopy, add))
  }
}

// Replies whose arrays are fresh copies the worker keeps no reference to: their buffers move instead of copying.
const transferred = new Set<Request["_tag"]>(["Score", "Accumulate", "ExportState", "ExportOptimizerState"])

const port = parentPort
if (port === null) throw new Error("modelWorker.ts runs as a worker thread (workerModel.ts starts it)")
port.on("message", (envelope: Envelope) => {
  const exit = Effect.runSyncExit(handle(envelope.request))
  let reply: Reply
  if (Exit.isSuccess(exit)) {
    reply = { _tag: "Success", id: envelope.id, value: exit.value }
  } else {
    const failure = Cause.failureOption(exit.cause)
    reply = {
      _tag: "Failure",
      id: envelope.id,
      failure: failure._tag === "Some"
        ? failure.value
        : { _tag: "Defect", message: Cause.pretty(exit.cause).slice(0, 4000) }
    }
  }
  port.postMessage(
    reply,
    reply._tag === "Success" && transferred.has(envelope.request._tag) ? buffersOf(reply.value) : []
  )
})
