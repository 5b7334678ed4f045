/**
 * The messages between the trainer's thread and the CPU model's worker thread (`workerModel.ts` ↔
 * `modelWorker.ts`). Every message is a tagged plain object that structured clone copies exactly (typed arrays
 * keep their bits, Maps their order), so the worker computes on the very numbers the trainer would. Requests carry
 * an id; each gets one reply with that id. Models in the worker are numbered: 0 is the trained model, frozen copies
 * (the KL reference) get the next numbers.
 */
import type { CpuDevice, ModelConfig, Safetensors } from "@envtrain/gpu"
import type { Completion, GenerateRequest } from "@envtrain/rollout/Policy"
import type { LossOptions } from "../Loss.js"
import type {
  LoraOptions,
  LossInputs,
  ModelState,
  OptimizerState,
  OptimizerStep,
  SequenceBatch,
  TokenScores
} from "./model.js"

/** What the trainer asks of the worker; `model` names one of the worker's models. */
export type Request =
  | {
    readonly _tag: "Init"
    readonly config: ModelConfig.ModelConfig
    readonly tensors: Safetensors.Tensors
    readonly generationConfig: Readonly<Record<string, unknown>>
    readonly maxBatchSize: number | undefined
    /** The CPU device's options, or undefined for the reference model (`Trainer.workerModel`). */
    readonly device:
      | (CpuDevice.DeviceOptions & {
        readonly maxTokensPerPass?: number | undefined
        readonly gradientCheckpointing?: boolean | undefined
        readonly frozenDtype?: "f32" | "bf16" | undefined
      })
      | undefined
    /** Train a LoRA adapter on the frozen base (then states and weight syncs are the adapter's). */
    readonly lora: LoraOptions | undefined
  }
  | { readonly _tag: "Generate"; readonly model: number; readonly requests: ReadonlyArray<GenerateRequest> }
  | { readonly _tag: "Score"; readonly model: number; readonly batch: SequenceBatch; readonly temperature: number }
  | {
    /** Forward and backward of Σ w·l with the per-token weights already chosen (from a `Score` of the batch). */
    readonly _tag: "Accumulate"
    readonly model: number
    readonly batch: SequenceBatch
    readonly temperature: number
    readonly weights: Float64Array
  }
  | {
    readonly _tag: "AccumulateLoss"
    readonly model: number
    readonly batch: SequenceBatch
    readonly temperature: number
    readonly inputs: LossInputs
    readonly options: LossOptions
  }
  | { readonly _tag: "Step"; readonly model: number; readonly options: OptimizerStep }
  | { readonly _tag: "ExportState"; readonly model: number }
  | { readonly _tag: "ImportState"; readonly model: number; readonly state: ModelState }
  | { readonly _tag: "ExportOptimizerState"; readonly model: number }
  | { readonly _tag: "ImportOptimizerState"; readonly model: number; readonly state: OptimizerState }
  | { readonly _tag: "FrozenCopy"; readonly model: number }

/** The value each request answers with. */
export interface Replies {
  /** `device`: which CPU device runs the model, in words (absent for the reference model). */
  readonly Init: { readonly model: number; readonly device?: string }
  readonly Generate: ReadonlyArray<Completion>
  readonly Score: TokenScores
  readonly Accumulate: TokenScores
  readonly AccumulateLoss: { readonly loss: number; readonly metrics: Record<string, number> }
  readonly Step: { readonly gradNorm: number }
  readonly ExportState: ModelState
  readonly ImportState: void
  readonly ExportOptimizerState: OptimizerState
  readonly ImportOptimizerState: void
  readonly FrozenCopy: { readonly model: number }
}

export interface Envelope {
  readonly id: number
  readonly request: Request
}

/** A request that failed in the worker: the model refused optimizer state, or the computation threw. */
export type Failure =
  | { readonly _tag: "OptimizerStateMismatch"; readonly problem: string }
  | { readonly _tag: "Defect"; readonly message: string }

export type Reply =
  | { readonly _tag: "Success"; readonly id: number; readonly value: unknown }
  | { readonly _tag: "Failure"; readonly id: number; readonly failure: Failure }

/** Whether a message from the worker is a reply (anything else is a bug on one side, reported as such). */
export const isReply = (message: unknown): message is Reply => {
  if (typeof message !== "object" || message === null) return false
  const m = message as { _tag?: unknown; id?: unknown; failure?: unknown }
  return typeof m.id === "number" &&
    (m._tag === "Success" || (m._tag === "Failure" && typeof m.failure === "object" && m.failure !== null))
}

/** The ArrayBuffers behind a value's typed arrays (in Maps, arrays and plain objects), to transfer, not copy. */
export const buffersOf = (value: unknown, out: Set<ArrayBuffer> = new Set()): Array<ArrayBuffer> => {
  if (ArrayBuffer.isView(value)) {
    if (value.buffer instanceof ArrayBuffer) out.add(value.buffer)
  } else if (value instanceof Map) {
    for (const v of value.values()) buffersOf(v, out)
  } else if (Array.isArray(value)) {
    for (const v of value) buffersOf(v, out)
  } else if (typeof value === "object" && value !== null) {
    for (const v of Object.values(value)) buffersOf(v, out)
  }
  return [...out]
}
