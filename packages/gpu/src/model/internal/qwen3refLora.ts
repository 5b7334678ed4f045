/**
 * LoRA in the plain-TypeScript Qwen3 reference: an adapted projection computes, as PEFT's `lora.Linear` does,
 * `y = x·Wᵀ + (dropout(x)·Aᵀ·Bᵀ)·scaling` — the base product, then the low-rank product of the (dropped-out)
 * input, scaled and added. Its backward gives dA and dB and the input's gradient through both paths; the base
 * weight is frozen, so its gradient is never formed. Dropout masks come from Philox4x32-10 so every executor
 * (the CPU device included) can draw the very same mask from a seed.
 */
import {
  adaptedProjections,
  LORA_TARGETS,
  type LoraConfig,
  type LoraTarget,
  scaling as loraScaling
} from "../../formats/LoraConfig.js"
import type { Config } from "../../formats/ModelConfig.js"
import type { FloatArray, Numerics } from "../../ops/Numerics.js"
import { linear, linearBackward } from "./qwen3refFast.js"
import { philox4x32 } from "./qwen3refSampling.js"

/** Philox key's second word for dropout masks (distinct from the weight init and sampling streams). */
const DROPOUT_KEY = 0xd20f

/**
 * The dropout keep-mask of one adapter's input for one forward: element i of projection `index` (its position in
 * `adaptedProjections`) is kept when its uniform `u = philox([index, ⌊i/4⌋, 0, 0], [seed, 0xd20f])[i mod 4] / 2³²`
 * is ≥ p. Kept elements are scaled by 1/(1−p) (inverted dropout, as torch).
 */
export const dropoutMask = (seed: number, index: number, n: number, p: number): Uint8Array =>
  fillDropoutMask(seed, index, p, new Uint8Array(n), n)

/** {@link dropoutMask} into the first n entries of `mask` (an executor's preallocated buffer); returns it. */
export const fillDropoutMask = (seed: number, index: number, p: number, mask: Uint8Array, n: number): Uint8Array => {
  const threshold = p * 4294967296
  for (let block = 0; block * 4 < n; block++) {
    const r = philox4x32([index, block, 0, 0], [seed >>> 0, DROPOUT_KEY])
    for (let c = 0; c < 4 && block * 4 + c < n; c++) mask[block * 4 + c] = r[c] >= threshold ? 1 : 0
  }
  return mask
}

/** One adapted projection's tensors as a forward uses them. */
export interface Adapter {
  readonly index: number
  readonly r: number
  readonly aName: string
  readonly bName: string
  readonly a: FloatArray
  readonly b: FloatArray
}

/** A forward's LoRA: scaling, dropout, and per layer the adapted projections. */
export interface LoraRun {
  readonly scaling: number
  readonly dropout: number
  /** Absent: no dropout (evaluation, generation, tests that compare numbers). */
  readonly dropoutSeed: number | undefined
  readonly byLayer: ReadonlyArray<ReadonlyMap<LoraTarget, Adapter>>
}

/** What an adapted projection keeps for its backward. */
export interface AdapterActivations {
  /** The adapter's input after dropout [rows, in] (the projection's input itself without dropout). */
  readonly x: FloatArray
  /** x·Aᵀ [rows, r]. */
  readonly u: FloatArray
  /** The keep-mask when dropout ran. */
  readonly mask: Uint8Array | undefined
}

/** Throws, naming the tensor, when an adapter tensor is missing or has the wrong size, or the config is unusable. */
export const loraRun = (
  config: Config,
  lora: LoraConfig,
  adapters: Readonly<Record<string, FloatArray>>,
  dropoutSeed: number | undefined
): LoraRun => {
  if (!Number.isInteger(lora.r) || lora.r < 1) throw new Error(`LoRA rank r = ${lora.r}: use a positive integer.`)
  if (!(lora.dropout >= 0 && lora.dropout < 1)) {
    throw new Error(`LoRA dropout ${lora.dropout}: use a probability in [0, 1).`)
  }
  for (const t of lora.targetModules) {
    if (!LORA_TARGETS.includes(t)) {
      throw new Error(`LoRA target module "${t}" is not a Qwen3 projection; use some of ${LORA_TARGETS.join(", ")}.`)
    }
  }
  const byLayer = Array.from({ length: config.num_hidden_layers }, () => new Map<LoraTarget, Adapter>())
  adaptedProjections(config, lora).forEach((p, index) => {
    const tensors = [p.a, p.b].map((spec) => {
      const w = adapters[spec.name]
      if (w === undefined) throw new Error(`Missing LoRA tensor ${spec.name} [${spec.shape.join(", ")}].`)
      if (w.length !== spec.shape[0] * spec.shape[1]) {
        throw new Error(`LoRA tensor ${spec.name} has ${w.length} elements; expected [${spec.shape.join(", ")}].`)
      }
      return w
    })
    byLayer[p.layer].set(p.target, { index, r: lora.r, aName: p.a.name, bName: p.b.name, a: tensors[0], b: tensors[1] })
  })
  return { scaling: loraScaling(lora), dropout: lora.dropout, dropoutSeed, byLayer }
}

/**
 * y = x·Wᵀ, plus the adapter's `(dropout(x)·Aᵀ·Bᵀ)·scaling` when `run` adapts this projection (its activations go
 * into `acts` under the target's name).
 */
export const project = (
  x: FloatArray,
  rows: number,
  inF: number,
  w: FloatArray,
  outF: number,
  nm: Numerics,
  run: LoraRun | undefined,
  layer: number,
  target: LoraTarget,
  acts: Map<LoraTarget, AdapterActivations> | undefined
): FloatArray => {
  const y = linear(x, rows, inF, w, outF, nm)
  const adapter = run?.byLayer[layer].get(target)
  if (adapter === undefined) return y
  let xd = x
  let mask: Uint8Array | undefined
  if (run!.dropoutSeed !== undefined && run!.dropout > 0) {
    mask = dropoutMask(run!.dropoutSeed, adapter.index, rows * inF, run!.dropout)
    const keep = nm.round(1 / (1 - run!.dropout))
    xd = nm.alloc(rows * inF)
    for (let i = 0; i < xd.length; i++) xd[i] = mask[i] === 1 ? x[i] * keep : 0
  }
  const u = linear(xd, rows, inF, adapter.a, adapter.r, nm)
  const z = linear(u, rows, adapter.r, adapter.b, outF, nm)
  const s = run!.scaling
  for (let i = 0; i < y.length; i++) y[i] = y[i] + nm.round(z[i] * s)
  acts?.set(target, { x: xd, u, mask })
  return y
}

/**
 * Backward of {@link project}: returns dx (through the base weight and the adapter), adds dW into `dW` when given
 * (undefined: frozen), and dA, dB into `grads` under the adapter's tensor names.
 */
export const projectBackward = (
  dy: FloatArray,
  x: FloatArray,
  rows: number,
  inF: number,
  w: FloatArray,
  outF: number,
  dW: Float64Array | undefined,
  nm: Numerics,
  run: LoraRun | undefined,
  layer: number,
  target: LoraTarget,
  acts: ReadonlyMap<LoraTarget, AdapterActivations> | undefined,
  grads: Readonly<Record<string, Float64Array>>
): FloatArray => {
  const dx = linearBackward(dy, x, rows, inF, w, outF, dW, nm)
  const adapter = run?.byLayer[layer].get(target)
  if (adapter === undefined) return dx
  const act = acts!.get(target)!
  const s = run!.scaling
  // z = u·Bᵀ enters y as z·s.
  const dz = nm.alloc(rows * outF)
  for (let i = 0; i < dz.length; i++) dz[i] = dy[i] * s
  const du = linearBackward(dz, act.u, rows, adapter.r, adapter.b, outF, grads[adapter.bName], nm)
  const dxd = linearBackward(du, act.x, rows, inF, adapter.a, adapter.r, grads[adapter.aName], nm)
  const keep = nm.round(1 / (1 - run!.dropout))
  const mask = act.mask
  for (let i = 0; i < dx.length; i++) {
    dx[i] = dx[i] + (mask === undefined ? dxd[i] : mask[i] === 1 ? dxd[i] * keep : 0)
  }
  return dx
}
