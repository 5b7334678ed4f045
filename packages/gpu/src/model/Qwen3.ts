/**
 * The Qwen3 model on the GPU, in f32: weights loaded from a Hugging Face checkpoint into a planned arena, the
 * training step (packed sequences, per-token loss coefficients, gradient accumulation over micro-batches,
 * global-norm clipping and AdamW, all on the device, one submit per micro-batch), logprobs of given tokens, and
 * the generation programs that `Generation` drives. It computes what `Qwen3Reference` specifies (tests).
 *
 * The loss of a micro-batch is Σ_t L_t with a per-token coefficient c_t (mask, aggregation weight, sign and
 * 1/accumulation folded in by the caller):
 * - `"weighted"`: L_t = c_t·logprob_t — any loss whose gradient w.r.t. the logprobs is known (with c_t = that
 *   gradient, e.g. every TRL GRPO loss type on-policy, or c_t = −1/tokens for next-token NLL);
 * - `"grpo"`: every TRL GRPO loss type (see `GrpoLoss`), computed by a kernel between the forward and the
 *   backward from each micro-batch's `grpo` inputs; `coef` is unused and the loss and metrics come back as `grpo`.
 *
 * A frozen reference policy is a second model made with `trainable: false` (no gradient or optimiser memory);
 * the "old" policy's logprobs are `logprobs` of the current weights taken before the optimisation steps.
 *
 * With `lora` (PEFT's `LoraConfig`, see `LoraConfig.ts`) the checkpoint's weights are a frozen base, loaded once
 * and never written again: gradients, AdamW moments, clipping, `weights`, `setWeights` and the optimizer state
 * cover only the adapter tensors (`lora_A` [r, in], `lora_B` [out, r] of each adapted projection), and `save`
 * writes the adapter as PEFT does. Training micro-batches draw dropout masks from their `dropoutSeed`;
 * scoring and generation run without dropout. `logprobs(batch, { adapter: false })` scores the base alone (the KL
 * reference of a LoRA run) on the same device memory.
 *
 * @example
 * ```ts
 * const ckpt = yield* Checkpoint.load("models/tiny")
 * const model = yield* Qwen3.make(ckpt, { batch: 4, seq: 128 })
 * const old = yield* model.logprobs({ tokens })
 * const r = yield* model.step([{ tokens, coef }], { lr: 1e-5, step: 1, maxGradNorm: 1 }, { mode: "weighted" })
 * yield* model.save("out/step-1", ckpt)
 * // Exact resume: the weights and the AdamW state into a fresh model.
 * const opt = yield* model.optimizerState
 * const resumed = yield* Qwen3.make({ config: ckpt.config, tensors: yield* model.weights }, { batch: 4, seq: 128 })
 * yield* resumed.setOptimizerState(opt)
 * yield* resumed.step(batches, { lr: 1e-5, step: opt.step + 1, maxGradNorm: 1 })
 * ```
 *
 * @since 0.0.0
 */
import type { FileSystem, Path } from "@effect/platform"
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import * as Checkpoint from "../formats/Checkpoint.js"
import * as LoraAdapter from "../formats/LoraAdapter.js"
import type { LoraConfig } from "../formats/LoraConfig.js"
import type { Config, ModelConfig } from "../formats/ModelConfig.js"
import type * as Safetensors from "../formats/Safetensors.js"
import * as GrpoLoss from "../ops/GrpoLoss.js"
import * as Arena from "../runtime/Arena.js"
import { Gpu } from "../runtime/Gpu.js"
import type {
  GpuDeviceLost,
  GpuLimitExceeded,
  GpuOutOfMemory,
  GpuShaderError,
  GpuUncapturedError
} from "../runtime/GpuError.js"
import * as Program from "../runtime/Program.js"
import * as StepProgram from "../runtime/StepProgram.js"
import * as G from "./internal/qwen3Graph.js"
import * as L from "./internal/qwen3Lora.js"
import * as O from "./internal/qwen3Optimizer.js"

export type { GenShape, TrainShape } from "./internal/qwen3Graph.js"

/** Options of {@link make}. */
export interface Qwen3Options {
  /** Rows of the packed training / scoring batch. */
  readonly batch: number
  /** Tokens per row. */
  readonly seq: number
  /**
   * Logit rows materialised at once (default min(batch·seq, 256)); never more than one storage binding holds
   * (a 151936-token vocabulary fits 220 f32 rows in 128 MiB).
   */
  readonly chunk?: number
  /** Logprobs are of softmax(logits / temperature); default 1. */
  readonly temperature?: number
  /**
   * Mixed precision (default false): the training / scoring forward reads f16 copies of the linear and LM-head
   * weights, refreshed from the f32 masters at every forward; gradients, master weights and AdamW stay f32.
   * Uses the shader-f16 matmul tier where the adapter has shader-f16 (packed f16 pairs otherwise). Generation
   * keeps reading the f32 weights.
   */
  readonly f16Weights?: boolean
  /**
   * Largest storage binding to plan for, in bytes (default: the device's maxStorageBufferBindingSize). Parameters
   * larger than this (e.g. a 151936×1024 embedding, 622 MB in f32, on a 128 MiB-binding adapter) are split into
   * row blocks; a small value forces the split (tests).
   */
  readonly maxBindingBytes?: number
  /** Allocate gradients and AdamW state and compile the step (default true). */
  readonly trainable?: boolean
  /**
   * Train (or, with `trainable: false`, just apply) a LoRA adapter on the frozen checkpoint weights: its config and
   * its tensors by envtrain's names (`Qwen3Reference.initAdapters` makes PEFT's initial ones, `LoraAdapter.load`
   * reads a saved one). Not with `f16Weights`.
   */
  readonly lora?: {
    readonly config: LoraConfig
    readonly adapters: ReadonlyMap<string, { readonly data: ArrayLike<number> }>
  }
  /** Allocate the KV cache and compile the generation programs. */
  readonly generation?: {
    readonly slots: number
    readonly capacity: number
    readonly prefillChunk?: number
    readonly stepsPerSubmit?: number
  }
}

/** Token ids of a packed batch: `batch·seq` or fewer (the rest is padding). */
export interface TokenBatch {
  readonly tokens: ArrayLike<number>
  /** Position ids; default 0…seq−1 per row. A 0 at t > 0 starts a new sequence (packing). */
  readonly positions?: ArrayLike<number>
  /** Target of each token; default the next token of the same sequence (none at a sequence's end). < 0: none. */
  readonly targets?: ArrayLike<number>
}

/** Options of {@link Qwen3Model.logprobs}. */
export interface LogprobsOptions {
  /**
   * false: score with the LoRA adapter turned off, i.e. the frozen base alone (PEFT's disabled adapter, the KL
   * reference of a LoRA run) on the same device memory. Only for a model made with `lora`.
   */
  readonly adapter?: boolean
}

/** One micro-batch of the training step. */
export interface TrainBatch extends TokenBatch {
  /** Per-token loss coefficient (0 where there is no loss). */
  readonly coef: ArrayLike<number>
  /** With LoRA dropout: the seed of this micro-batch's masks (`Qwen3Reference.dropoutMask`); default 0. */
  readonly dropoutSeed?: number
  /** For "grpo": the loss inputs in the packed layout. */
  readonly grpo?: GrpoLoss.MicroBatchInputs
}

/** How the per-token loss is formed (see the module doc). */
export interface LossSettings {
  readonly mode: "weighted" | "grpo"
  /** For "grpo": the loss's settings. */
  readonly grpo?: GrpoLoss.Settings
}

/** One training step's results (the step program's, plus the GRPO loss in `"grpo"` mode). */
export interface TrainResult extends StepProgram.StepResult {
  /** "grpo": the summed loss and TRL's loss-side metrics. */
  readonly grpo?: GrpoLoss.StepLoss
}

/**
 * AdamW's state: the first (`m`) and second (`v`) moments of every parameter, by Hugging Face name, and the
 * number of the last optimiser step taken (the `step` scalar of the last `step` call; 0 before any).
 */
export interface OptimizerState {
  readonly step: number
  readonly m: ReadonlyMap<string, Float32Array>
  readonly v: ReadonlyMap<string, Float32Array>
}

/** The model was asked for something its options did not allocate, or given a batch that does not fit. */
export class Qwen3UsageError extends Data.TaggedError("Qwen3UsageError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** Every way running a step of the model can fail. */
export type RunError = GpuDeviceLost | GpuUncapturedError | Qwen3UsageError
/** Every way building the model on the device can fail. */
export type MakeError = GpuShaderError | GpuDeviceLost | GpuOutOfMemory | GpuLimitExceeded | Qwen3UsageError

/** A model on the device. */
export interface Qwen3Model {
  readonly config: ModelConfig
  readonly arena: Arena.Arena
  readonly train: G.TrainShape
  readonly gen: G.GenShape | undefined
  readonly trainable: boolean
  /** The LoRA adapter trained on the frozen base, if any. */
  readonly lora: LoraConfig | undefined
  /** Per-token logprobs (of each token's target) and entropies under the current weights. */
  readonly logprobs: (
    batch: TokenBatch,
    options?: LogprobsOptions
  ) => Effect.Effect<{ readonly logprobs: Float32Array; readonly entropy: Float32Array }, RunError>
  /** One optimiser step over micro-batches (gradients accumulate; clipping and AdamW on the device). */
  readonly step: (
    microBatches: ReadonlyArray<TrainBatch>,
    scalars: Omit<Arena.StepScalars, "user">,
    loss?: LossSettings
  ) => Effect.Effect<TrainResult, RunError>
  /** The trained weights, by Hugging Face name (a download): with LoRA, the adapter tensors only. */
  readonly weights: Effect.Effect<Map<string, Safetensors.Tensor>, GpuDeviceLost | GpuUncapturedError>
  /** Replaces the trained weights (e.g. syncing a reference model from the policy); with LoRA, the adapter's. */
  readonly setWeights: (tensors: ReadonlyMap<string, { readonly data: Float32Array }>) => Effect.Effect<void, RunError>
  /**
   * The AdamW state (a download: one read per shard of each moment group). The arrays are views into those
   * downloads, owned by the caller. Fails on a model made with `trainable: false`.
   */
  readonly optimizerState: Effect.Effect<OptimizerState, RunError>
  /**
   * Replaces the AdamW state (one write per shard of each moment group). Every parameter's two moments must be
   * given with the parameter's element count and no other names; otherwise nothing is written.
   */
  readonly setOptimizerState: (state: OptimizerState) => Effect.Effect<void, Qwen3UsageError>
  /** Zeroes the moments on the device (no host data) and sets the step count: a fresh AdamW at `step` (default 0). */
  readonly resetOptimizerState: (step?: number) => Effect.Effect<void, Qwen3UsageError>
  /**
   * Saves the current weights as a Hugging Face directory, with `base`'s tokenizer and templates; with LoRA, the
   * adapter as PEFT saves it (`adapter_config.json`, `adapter_model.safetensors`; `options.dtype` "BF16" rounds it).
   */
  readonly save: (
    dir: string,
    base: Checkpoint.Model,
    options?: Checkpoint.SaveOptions
  ) => Effect.Effect<
    void,
    | Checkpoint.CheckpointError
    | LoraAdapter.AdapterFileError
    | Safetensors.SafetensorsIoError
    | GpuDeviceLost
    | GpuUncapturedError,
    FileSystem.FileSystem | Path.Path
  >
  /** The compiled generation programs (when `generation` was given). */
  readonly programs: { readonly prefill: Program.Program; readonly decode: Program.Program } | undefined
}

const usage = (problem: string) => new Qwen3UsageError({ problem })

/** Fills packed-batch inputs: ids, targets (u32, invalid → 0) and positions, plus the validity of each target. */
export const packInputs = (shape: G.TrainShape, b: TokenBatch) => {
  const n = shape.batch * shape.seq
  if (b.tokens.length > n) {
    throw new RangeError(`The batch has ${b.tokens.length} tokens; the model was made for ${shape.batch}×${shape.seq}.`)
  }
  const ids = new Uint32Array(n)
  const positions = new Uint32Array(n)
  const targets = new Uint32Array(n)
  const valid = new Uint8Array(n)
  for (let i = 0; i < n; i++) {
    ids[i] = i < b.tokens.length ? b.tokens[i] : 0
    // Padding tokens are sequences of their own (position 0), so they attend to nothing real.
    positions[i] = i >= b.tokens.length ? 0 : b.positions === undefined ? i % shape.seq : b.positions[i]
  }
  for (let i = 0; i < n; i++) {
    let t: number
    if (b.targets !== undefined) t = i < b.targets.length ? b.targets[i] : -1
    else {
      const nextInRow = (i + 1) % shape.seq !== 0 && i + 1 < b.tokens.length
      t = nextInRow && positions[i + 1] !== 0 ? ids[i + 1] : -1
    }
    if (t >= 0) {
      targets[i] = t
      valid[i] = 1
    }
  }
  return { ids, positions, targets, valid }
}

const f32Padded = (n: number, x: ArrayLike<number> | undefined, valid?: Uint8Array) => {
  const out = new Float32Array(n)
  if (x !== undefined) {
    for (let i = 0; i < Math.min(n, x.length); i++) {
      out[i] = valid === undefined || valid[i]
        ? x[i]
        : 0
    }
  }
  return out
}

/** Loads a checkpoint (as `Checkpoint.load` returns it) onto the device. */
export const make = (
  model: Pick<Checkpoint.Model, "config" | "tensors">,
  options: Qwen3Options
): Effect.Effect<Qwen3Model, MakeError, Gpu | Scope.Scope> =>
  Effect.gen(function*() {
    const gpu = yield* Gpu
    const config = model.config
    const cfg: Config = config
    const trainable = options.trainable ?? true
    const n = options.batch * options.seq
    const lora = options.lora?.config
    if (lora !== undefined) {
      const problem = L.problemOf(lora)
      if (problem !== undefined) return yield* usage(problem)
      if (options.f16Weights === true) {
        return yield* usage(
          "f16Weights casts every weight each forward, which a frozen LoRA base must not need: drop f16Weights " +
            "for a LoRA model (its forward reads the f32 base)."
        )
      }
    }
    const withLora = lora === undefined ? {} : { lora }
    const train: G.TrainShape = {
      batch: options.batch,
      seq: options.seq,
      chunk: Math.min(options.chunk ?? 256, n, G.logitRowsPerBinding(config, gpu.adapter, options.maxBindingBytes)),
      temperature: options.temperature ?? 1,
      ...(options.f16Weights === true ? { half: G.halfTier(gpu.adapter) } : {}),
      ...withLora
    }
    const gen: G.GenShape | undefined = options.generation === undefined ? undefined : {
      slots: options.generation.slots,
      capacity: options.generation.capacity,
      prefillChunk: options.generation.prefillChunk ?? 64,
      stepsPerSubmit: options.generation.stepsPerSubmit ?? 8,
      ...withLora
    }
    const limits = gpu.adapter.limits
    const maxShardBytes = Math.min(
      limits.maxStorageBufferBindingSize ?? 128 * 1024 * 1024,
      limits.maxBufferSize ?? 256 * 1024 * 1024,
      2 ** 31,
      options.maxBindingBytes ?? Infinity
    )
    const plan = yield* Effect.try({
      try: () =>
        Arena.plan({
          ...G.parameterSpecs(cfg, trainable, lora),
          ...G.trainSpecs(cfg, train, trainable),
          ...(trainable ? GrpoLoss.specs(train) : {}),
          ...(gen === undefined ? {} : G.genSpecs(cfg, gen))
        }, { maxShardBytes }),
      catch: (e) => usage(`Cannot lay out the model: ${(e as Error).message}`)
    })
    const arena = yield* Arena.allocate(plan)
    // Writes every tensor of a parameter group (checked first, so a bad set writes nothing).
    const loadGroup = (
      group: string,
      what: string,
      tensors: ReadonlyMap<string, { readonly data: ArrayLike<number> }>
    ) =>
      Effect.gen(function*() {
        const writes: Array<readonly [string, Float32Array]> = []
        for (const [name, t] of plan.tensors) {
          if (t.group !== group) continue
          const key = name.slice(Arena.PARAM.length + 1)
          const given = tensors.get(key)
          if (given === undefined) return yield* usage(`No ${what} "${key}" to load (expected ${t.size} elements).`)
          if (given.data.length !== t.size) {
            return yield* usage(`The ${what} "${key}" has ${given.data.length} elements; the model needs ${t.size}.`)
          }
          writes.push([name, given.data instanceof Float32Array ? given.data : Float32Array.from(given.data)])
        }
        for (const [name, data] of writes) arena.write(name, data)
      })
    const setWeights = (tensors: ReadonlyMap<string, { readonly data: Float32Array }>) =>
      loadGroup(Arena.PARAM, lora === undefined ? "weight" : "LoRA tensor", tensors)
    if (options.lora === undefined) yield* setWeights(model.tensors)
    else {
      // The base is written once, here: nothing writes the frozen group afterwards.
      yield* loadGroup(L.FROZEN, "weight", model.tensors)
      yield* loadGroup(Arena.PARAM, "LoRA tensor", options.lora.adapters)
    }

    const forward = G.forwardOps(plan, cfg, train)
    const score = yield* Program.compile(arena, forward, "qwen3.score")
    // The base alone (the adapter's products left out), over the same weights and activations.
    const { lora: _, ...baseShape } = train
    const baseScore = lora === undefined
      ? undefined
      : yield* Program.compile(arena, G.forwardOps(plan, cfg, baseShape), "qwen3.scoreBase")
    const stepProgram = trainable
      ? yield* StepProgram.make(arena, {
        microBatch: [...forward, ...G.lossOps(plan, train), ...G.backwardOps(plan, cfg, train)]
      })
      : undefined
    // The same forward and backward around the GRPO loss kernel (pipelines are shared; only bind groups are new).
    const grpoProgram = trainable
      ? yield* StepProgram.make(arena, {
        microBatch: [...forward, ...GrpoLoss.ops(plan, train), ...G.backwardOps(plan, cfg, train)]
      })
      : undefined
    const programs = gen === undefined ? undefined : {
      prefill: yield* Program.compile(arena, G.prefillOps(plan, cfg, gen), "qwen3.prefill"),
      decode: yield* Program.compile(arena, G.decodeOps(plan, cfg, gen), "qwen3.decode")
    }
    if (gen !== undefined) {
      arena.write("g.d.slot", Uint32Array.from({ length: gen.slots }, (_, i) => i))
    }

    // The step scalar of the last optimiser step (the bias corrections of the next one depend on it).
    let lastStep = 0

    const submitOne = (program: Program.Program) => {
      const encoder = gpu.device.createCommandEncoder({ label: "qwen3.score" })
      const pass = encoder.beginComputePass({ label: "qwen3.score" })
      program.encode(pass)
      pass.end()
      gpu.device.queue.submit([encoder.finish()])
    }
    const inputs = (b: TokenBatch) =>
      Effect.try({ try: () => packInputs(train, b), catch: (e) => usage((e as Error).message) })

    // Scoring runs without dropout; a training micro-batch switches it on with its seed.
    const dropoutOff = new Uint32Array(2)
    const dropoutOn = (b: TrainBatch): StepProgram.MicroBatch =>
      lora === undefined ? [] : [[L.SEED, Uint32Array.of(1, (b.dropoutSeed ?? 0) >>> 0)]]

    const logprobs = Effect.fn("Qwen3.logprobs")(function*(b: TokenBatch, scoring?: LogprobsOptions) {
      const program = scoring?.adapter === false ? baseScore : score
      if (program === undefined) {
        return yield* usage("logprobs with adapter: false needs a model made with lora; this one has no adapter.")
      }
      const { ids, positions, targets, valid } = yield* inputs(b)
      if (lora !== undefined) arena.write(L.SEED, dropoutOff)
      arena.write("t.ids", ids)
      arena.write("t.positions", positions)
      arena.write("t.targets", targets)
      submitOne(program)
      const lp = yield* arena.read("t.logp")
      const entropy = yield* arena.read("t.entropy")
      for (let i = 0; i < n; i++) if (!valid[i]) lp[i] = 0
      return { logprobs: lp, entropy }
    })

    const step = Effect.fn("Qwen3.step")(
      function*(
        microBatches: ReadonlyArray<TrainBatch>,
        scalars: Omit<Arena.StepScalars, "user">,
        loss: LossSettings = { mode: "weighted" }
      ) {
        if (stepProgram === undefined) return yield* usage("This model was made with trainable: false; it cannot step.")
        if (microBatches.length === 0) return yield* usage("Qwen3.step needs at least one micro-batch.")
        const mbs: Array<StepProgram.MicroBatch> = []
        if (loss.mode === "grpo") {
          const settings = loss.grpo
          if (settings === undefined) return yield* usage("The grpo loss needs its settings (LossSettings.grpo).")
          for (const b of microBatches) {
            const { ids, positions, targets, valid } = yield* inputs(b)
            if (b.grpo === undefined) return yield* usage("The grpo loss needs grpo inputs for every micro-batch.")
            const g = b.grpo
            const writes = yield* Effect.try({
              try: () => GrpoLoss.pack(train, settings, g, valid),
              catch: (e) => usage((e as Error).message)
            })
            mbs.push([["t.ids", ids], ["t.positions", positions], ["t.targets", targets], ...writes, ...dropoutOn(b)])
          }
          const r = yield* grpoProgram!.step({ ...scalars }, mbs)
          lastStep = scalars.step
          return { ...r, grpo: GrpoLoss.readResults(r.results, settings) }
        }
        for (const b of microBatches) {
          const { ids, positions, targets, valid } = yield* inputs(b)
          mbs.push([
            ["t.ids", ids],
            ["t.positions", positions],
            ["t.targets", targets],
            ["t.coef", f32Padded(n, b.coef, valid)],
            ...dropoutOn(b)
          ])
        }
        const r: TrainResult = yield* stepProgram.step({ ...scalars }, mbs)
        lastStep = scalars.step
        return r
      }
    )

    const notTrainable = usage("This model was made with trainable: false; it has no optimizer state.")
    const optimizerState = Effect.gen(function*() {
      if (stepProgram === undefined) return yield* notTrainable
      const group = (name: string) =>
        Effect.map(
          Effect.forEach(plan.groups.get(name) ?? [], (b) => gpu.read(arena.buffers[b], plan.buffers[b].bytes)),
          (shards) => O.unpackGroup(plan, name, shards)
        )
      const step = lastStep
      return { step, m: yield* group(Arena.ADAM_M), v: yield* group(Arena.ADAM_V) } satisfies OptimizerState
    })

    const checkStep = (step: number) =>
      Number.isInteger(step) && step >= 0
        ? Effect.void
        : usage(`Optimizer state step ${step} is not a step count (a non-negative integer).`)
    const setOptimizerState = Effect.fn("Qwen3.setOptimizerState")(function*(state: OptimizerState) {
      if (stepProgram === undefined) return yield* notTrainable
      yield* checkStep(state.step)
      const problem = O.checkGroup(plan, Arena.ADAM_M, "m", state.m) ?? O.checkGroup(plan, Arena.ADAM_V, "v", state.v)
      if (problem !== undefined) return yield* usage(problem)
      for (const [group, given] of [[Arena.ADAM_M, state.m], [Arena.ADAM_V, state.v]] as const) {
        for (const { buffer, data } of O.packGroup(plan, group, given)) {
          gpu.device.queue.writeBuffer(arena.buffers[buffer], 0, data.buffer, data.byteOffset, data.byteLength)
        }
      }
      lastStep = state.step
    })

    const resetOptimizerState = Effect.fn("Qwen3.resetOptimizerState")(function*(step = 0) {
      if (stepProgram === undefined) return yield* notTrainable
      yield* checkStep(step)
      const encoder = gpu.device.createCommandEncoder({ label: "qwen3.resetOptimizer" })
      for (const b of [...plan.groups.get(Arena.ADAM_M) ?? [], ...plan.groups.get(Arena.ADAM_V) ?? []]) {
        encoder.clearBuffer(arena.buffers[b])
      }
      gpu.device.queue.submit([encoder.finish()])
      lastStep = step
    })

    const weights = Effect.gen(function*() {
      const out = new Map<string, Safetensors.Tensor>()
      for (const [name, t] of plan.tensors) {
        if (t.group !== Arena.PARAM) continue
        out.set(name.slice(Arena.PARAM.length + 1), { shape: t.shape, data: yield* arena.read(name) })
      }
      return out
    })

    const save = (dir: string, base: Checkpoint.Model, saveOptions?: Checkpoint.SaveOptions) =>
      Effect.gen(function*() {
        const tensors = yield* weights
        if (lora === undefined) return yield* Checkpoint.save(dir, { ...base, config, tensors }, saveOptions)
        const dtype = saveOptions?.dtype ?? "F32"
        if (dtype !== "F32" && dtype !== "BF16") {
          return yield* new LoraAdapter.AdapterFileError({
            path: dir,
            problem: `an adapter is saved as F32 or BF16 (PEFT's dtypes here), not ${dtype}: pick one of those`
          })
        }
        yield* LoraAdapter.save(dir, { config: lora, tensors, baseModel: null }, { dtype })
      })

    return {
      config,
      arena,
      train,
      gen,
      trainable,
      lora,
      logprobs,
      step,
      weights,
      setWeights,
      optimizerState,
      setOptimizerState,
      resetOptimizerState,
      save,
      programs
    } satisfies Qwen3Model
  })
