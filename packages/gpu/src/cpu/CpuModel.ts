/**
 * The Qwen3 model on the CPU device: the op list of `Qwen3Reference` (the specification) executed in f32 over one
 * preallocated workspace, with every matmul on a {@link Gemm} route (the platform BLAS or WebAssembly SIMD).
 *
 * - LoRA ({@link Options.lora}): the base weights are frozen — no gradient or AdamW moments exist for them, only for
 *   the adapter tensors (PEFT's `lora_A` [r, in], `lora_B` [out, r]) — and each adapted projection adds
 *   `(dropout(x)·Aᵀ·Bᵀ)·scaling` with its two low-rank products on the Gemm route, as `Qwen3Reference` specifies.
 * - Activation recomputation ({@link Options.gradientCheckpointing}): only each layer's input is kept between the
 *   forward and the backward, which reruns one layer at a time.
 * - Memory: weights, gradients and AdamW moments are allocated once; the activations of a forward live in a
 *   workspace planned for the largest token count seen so far (it grows, never shrinks), so a steady-state step
 *   allocates nothing but its small result arrays.
 * - Packed batches: a forward takes B rows of T tokens with position ids; a position 0 at t > 0 starts a new
 *   sequence inside the row and attention never crosses it (as the specification). Trainers pack every sequence
 *   of a micro-batch into one row, so each projection is one large matmul.
 * - Attention is tiled (`attention.ts`): no T×T probabilities; the forward keeps each row's logsumexp and the
 *   backward recomputes, so long sequences (1–4k tokens) stay within bounded memory.
 * - Element-wise kernels (norms, SwiGLU, residual adds, the softmax over logits, grad norm, AdamW): WebAssembly
 *   SIMD128 (`elementwise.ts`) over one shared WebAssembly memory that holds every tensor they touch — weights,
 *   gradients, moments and workspace — shared with the tiled attention (and with the matmul route when that is
 *   WebAssembly, so its operands stay in place); or the plain-TypeScript kernels where that memory cannot hold the
 *   model ({@link Options.elementwise}, {@link CpuModel.kernels}).
 * - bf16 storage of a frozen base ({@link Options.frozenDtype}): with LoRA or `frozen: true`, the base's matrices can
 *   be held as bf16 (u16 arrays, half the bytes), each widened exactly into one reused f32 scratch just before its
 *   matmul (the LM head a tile of vocabulary rows at a time, embedding rows one by one); all arithmetic stays f32,
 *   and the trained tensors (the adapter) are f32 masters.
 * - Numerics: f32 storage (or bf16 storage widened to f32, above); the JS kernels sum in f64, the SIMD kernels in f32 or f64 lanes (see elementwise.ts); the
 *   Gemm route's own summation order for matmuls. Results match the specification at the GPU kernels' tolerances,
 *   not bit for bit; with a deterministic route (one thread) the same inputs give the same bits every run.
 *
 * @since 0.0.0
 */
import { adaptedProjections, type LoraConfig, type LoraTarget, scaling as loraScaling } from "../formats/LoraConfig.js"
import {
  type Config,
  decays,
  EMBED_TOKENS,
  expectedTensors,
  FINAL_NORM,
  layerTensorNames,
  LM_HEAD
} from "../formats/ModelConfig.js"
import { fillDropoutMask } from "../model/internal/qwen3refLora.js"
import { ropeTables } from "../ops/rope.js"
import * as Attn from "./attention.js"
import * as Elementwise from "./elementwise.js"
import type { Gemm } from "./Gemm.js"
import * as Bf16 from "./internal/bf16.js"
import * as GemmAttention from "./internal/gemmAttention.js"
import * as Kernels from "./internal/kernels.js"
import type { WasmGemm } from "./WasmGemm.js"

/** @since 0.0.0 */
export type Weights = Record<string, Float32Array>

/** A per-sequence KV cache: per layer, keys (after k_norm and RoPE) and values [kv_heads, capacity, head_dim]. */
export interface KvCache {
  readonly capacity: number
  /** Tokens cached so far; the next token gets this position id. */
  length: number
  readonly keys: ReadonlyArray<Float32Array>
  readonly values: ReadonlyArray<Float32Array>
}

/** AdamW's settings for one update (torch's defaults where absent). */
export interface AdamWConfig {
  readonly lr: number
  readonly beta1?: number
  readonly beta2?: number
  readonly eps?: number
  readonly weightDecay?: number
}

/** @since 0.0.0 */
export interface CpuModel {
  readonly config: Config
  readonly gemm: Gemm
  /** Which element-wise kernels run: WebAssembly SIMD over one shared memory, or the plain-TypeScript ones. */
  readonly kernels: "wasm-simd" | "js"
  /** The live weights (in the route's memory), keyed by Hugging Face tensor name; with LoRA the adapter's too. */
  readonly weights: Weights
  /** The LoRA run's settings, or undefined when every weight is trained. */
  readonly lora: LoraConfig | undefined
  /** How the frozen base's matrices are held ({@link Options.frozenDtype}). */
  readonly frozenDtype: "f32" | "bf16"
  /**
   * With `frozenDtype: "bf16"`: the base's matrices (embedding, projections, LM head) as bf16 bits, keyed by name;
   * they are then absent from {@link CpuModel.weights}, which holds the f32 tensors (norms, adapter).
   */
  readonly bf16Weights: Readonly<Record<string, Uint16Array>>
  /** The tensors trained: the adapter's with LoRA, else every weight. Gradients and moments exist for these only. */
  readonly trained: ReadonlyArray<string>
  /** Accumulated gradients, keyed like {@link CpuModel.trained}. */
  readonly grads: Weights
  readonly moments: { readonly m: Weights; readonly v: Weights }
  /** AdamW updates applied. */
  step: number
  /**
   * Forward over a packed batch (tokens [B·T], position ids default 0…T−1 per row); returns the logits [B·T, vocab]
   * (a view into the workspace, valid until the next forward or backward). With LoRA and a `dropoutSeed`, the
   * adapters' inputs get dropout with `Qwen3Reference.dropoutMask`'s masks (training); without one, none.
   */
  readonly forward: (
    tokens: ArrayLike<number>,
    B: number,
    T: number,
    positions?: ArrayLike<number>,
    dropoutSeed?: number
  ) => Float32Array
  /** Per row of the last forward: log_softmax(logits/T)[target] (0 for target < 0) and the entropy. */
  readonly tokenLogprobs: (
    targets: ArrayLike<number>,
    temperature: number
  ) => { readonly logprobs: Float64Array; readonly entropy: Float64Array }
  /**
   * Backward of L = Σ w·logprob + Σ e·entropy over the last forward, added to {@link CpuModel.grads}; returns L and
   * the logprobs. Consumes the forward (its logits are overwritten).
   */
  readonly backward: (
    targets: ArrayLike<number>,
    lossWeights: ArrayLike<number>,
    temperature: number,
    entropyWeights?: ArrayLike<number>
  ) => { readonly loss: number; readonly logprobs: Float64Array; readonly entropy: Float64Array }
  readonly zeroGrads: () => void
  /** The gradients' global L2 norm (f64 sum). */
  readonly gradNorm: () => number
  /** Scales the gradients by `clip`, applies one AdamW update, and zeroes the gradients. */
  readonly adamW: (clip: number, config: AdamWConfig) => void
  readonly makeKvCache: (capacity: number) => KvCache
  /**
   * Runs each sequence's new tokens through its cache (all sequences' rows in one pass) and returns the logits of
   * each sequence's last new token ([sequences, vocab], a workspace view).
   */
  readonly extendBatch: (caches: ReadonlyArray<KvCache>, chunks: ReadonlyArray<ArrayLike<number>>) => Float32Array
  /** Copies weights in (every tensor of the config, and the adapter's with LoRA, checked by name and size). */
  readonly setWeights: (weights: Readonly<Record<string, ArrayLike<number>>>) => void
  /** Copies the trained tensors in ({@link CpuModel.trained}: the adapter's with LoRA), checked by name and size. */
  readonly setTrained: (weights: Readonly<Record<string, ArrayLike<number>>>) => void
  /** With `profile: true`: milliseconds spent per op since the start or {@link CpuModel.resetProfile}. */
  readonly profile: ReadonlyMap<string, number>
  readonly resetProfile: () => void
  /** Whether the backward recomputes each layer's activations ({@link Options.gradientCheckpointing}). */
  readonly gradientCheckpointing: boolean
  /** Bytes of the activation workspace as now planned (it grows with the largest pass; 0 before the first). */
  readonly workspaceBytes: () => number
}

/** Options of {@link make}. */
export interface Options {
  /**
   * Training's attention: `tiled` (the tiled kernel of `attention.ts` on WebAssembly SIMD, its tensors in that
   * route's memory; head_dim a multiple of 4) or `matmul` (its products on the Gemm route). Default: tiled for
   * head_dim ≤ 64, where it measured faster, matmul above (bench/results/cpu-attention.md).
   */
  readonly attention?: "tiled" | "matmul"
  /**
   * The element-wise kernels: `wasm-simd` (every tensor they touch in one WebAssembly memory; needs the weights,
   * gradients and AdamW moments within {@link wasmModelBytes}, the rest of the 4 GiB for activations) or `js`.
   * Default: wasm-simd where the model fits, else js. Asking for wasm-simd where it does not fit is an error.
   */
  readonly elementwise?: "wasm-simd" | "js"
  /** Time every op (matmul, attention, each element-wise kernel) into {@link CpuModel.profile}. Default false. */
  readonly profile?: boolean
  /**
   * Train LoRA adapters on the frozen base: the settings and the adapter's initial tensors (`Qwen3Reference
   * .initAdapters` gives PEFT's initialisation), keyed as `LoraConfig.adaptedProjections` names them.
   */
  readonly lora?: { readonly config: LoraConfig; readonly adapters: Readonly<Record<string, ArrayLike<number>>> }
  /**
   * Activation recomputation (TRL's `gradient_checkpointing`): the forward keeps only each decoder layer's input,
   * and the backward runs that layer's forward again before differentiating it. The same arithmetic in the same
   * order, so gradients are the same bits; the workspace holds one layer's activations instead of all of them, for
   * about one more forward per backward. Default false.
   */
  readonly gradientCheckpointing?: boolean
  /**
   * A model that is never trained (a KL reference): no gradients or AdamW moments at all, so it costs its weights
   * and workspace only. Its backward still gives the loss and logprobs. Default false.
   */
  readonly frozen?: boolean
  /**
   * How a frozen base's matrices (embedding, q/k/v/o/gate/up/down, LM head) are held: `f32`, or `bf16` — half the
   * memory, rounded to nearest even as they are copied in (exact for weights that are bf16 already, as a bf16
   * checkpoint's are), widened back to f32 per matrix into a reused scratch where a matmul reads them. The norms'
   * weights stay f32 arrays (rounded to bf16 values too, so the whole base is bf16). Only for a frozen base (with
   * {@link Options.lora} or {@link Options.frozen}): trained weights need f32 masters. Default f32.
   */
  readonly frozenDtype?: "f32" | "bf16"
}

/** One adapted projection as the model runs it: its tensors, their gradients, and its dropout stream. */
interface Adapter {
  readonly index: number
  readonly a: Float32Array
  readonly b: Float32Array
  readonly ga: Float32Array
  readonly gb: Float32Array
}

/** What an adapted projection keeps from the forward: x·Aᵀ (after dropout) and the dropout mask. */
interface AdapterSlot {
  readonly u: Float32Array
  readonly mask: Uint8Array | undefined
  /** Whether the last forward applied the mask (it ran with a dropout seed). */
  dropped: boolean
}

interface Layer {
  readonly input: Float32Array
  readonly attnNormed: Float32Array
  readonly attnRstd: Float32Array
  readonly qProj: Float32Array
  readonly kProj: Float32Array
  readonly v: Float32Array
  readonly qRstd: Float32Array
  readonly kRstd: Float32Array
  readonly q: Float32Array
  readonly k: Float32Array
  readonly attnOut: Float32Array
  readonly lse: Float32Array
  readonly afterAttn: Float32Array
  readonly mlpNormed: Float32Array
  readonly mlpRstd: Float32Array
  readonly gate: Float32Array
  readonly up: Float32Array
  readonly act: Float32Array
  readonly adapters: ReadonlyMap<LoraTarget, AdapterSlot>
}

interface Workspace {
  readonly rows: number
  /** Bytes of the activation buffers (f32 tensors and dropout masks). */
  readonly bytes: number
  readonly layers: ReadonlyArray<Layer>
  readonly output: Float32Array
  readonly finalNormed: Float32Array
  readonly finalRstd: Float32Array
  readonly logits: Float32Array
  readonly tokens: Int32Array
  readonly positions: Int32Array
  readonly segmentStart: Int32Array
  // Backward scratch.
  readonly dx: Float32Array
  readonly dh: Float32Array
  readonly dI1: Float32Array
  readonly dI2: Float32Array
  readonly dI3: Float32Array
  readonly dAttn: Float32Array
  readonly dq: Float32Array
  readonly dk: Float32Array
  readonly dv: Float32Array
  // LoRA scratch: a dropped-out input (or its gradient) and x·Aᵀ's gradient.
  readonly loraX: Float32Array
  readonly loraU: Float32Array
}

/**
 * The most bytes of weights, gradients and both AdamW moments that go into the element-wise kernels' WebAssembly
 * memory (wasm32 addresses 4 GiB; the last GiB is left for the workspace, which grows with the token count).
 */
export const wasmModelBytes = 3 * 2 ** 30

const checkConfig = (config: Config) => {
  if (config.num_attention_heads % config.num_key_value_heads !== 0 || config.head_dim % 2 !== 0) {
    throw new Error(
      `Qwen3 config with ${config.num_attention_heads} heads, ${config.num_key_value_heads} kv heads, head_dim ` +
        `${config.head_dim}: heads must be a multiple of kv heads and head_dim even.`
    )
  }
}

/**
 * Makes the model on a Gemm route with the given weights (copied into the route's memory).
 *
 * @since 0.0.0
 */
export const make = (
  config: Config,
  weights: Readonly<Record<string, ArrayLike<number>>>,
  gemm: Gemm,
  options: Options = {}
): CpuModel => {
  checkConfig(config)
  const profile = new Map<string, number>()
  const timed = <F extends (...args: Array<any>) => any>(name: string, f: F): F =>
    options.profile !== true ? f : ((...args: Parameters<F>) => {
      const t0 = performance.now()
      try {
        return f(...args)
      } finally {
        profile.set(name, (profile.get(name) ?? 0) + performance.now() - t0)
      }
    }) as F
  const specs = expectedTensors(config)
  const lora = options.lora
  const projections = lora === undefined ? [] : adaptedProjections(config, lora.config)
  const adapterSpecs = projections.flatMap((p) => [p.a, p.b])
  const allSpecs = [...specs, ...adapterSpecs]
  const trainedSpecs = options.frozen === true ? [] : lora === undefined ? specs : adapterSpecs
  const frozenDtype = options.frozenDtype ?? "f32"
  if (frozenDtype === "bf16" && trainedSpecs === specs) {
    throw new Error(
      `frozenDtype: "bf16" stores a frozen base, but every weight of this model is trained (f32 masters): ` +
        `use it with lora or frozen: true, or leave frozenDtype "f32".`
    )
  }
  // bf16 matrices live outside the kernels' memory (plain u16 arrays); the norms stay f32 there.
  const halfSpecs = frozenDtype === "bf16" ? specs.filter((spec) => spec.shape.length === 2) : []
  const f32Specs = allSpecs.filter((spec) => !halfSpecs.includes(spec))
  const count = (list: typeof specs) => list.reduce((n, spec) => n + spec.shape.reduce((a, b) => a * b, 1), 0)
  // A frozen f32 weight takes 4 bytes; a trained tensor 16 (weight, gradient, two moments).
  const modelBytes = 4 * count(f32Specs) + 12 * count(trainedSpecs)
  // The default is chosen as for an f32 base: a base too big for the memory in f32 comes with passes whose
  // workspace (which grows by doubling, the old one left behind in that memory) would not fit beside it either.
  const f32Bytes = 4 * count(allSpecs) + 12 * count(trainedSpecs)
  const kernels = options.elementwise ?? (f32Bytes <= wasmModelBytes ? "wasm-simd" : "js")
  if (kernels === "wasm-simd" && modelBytes > wasmModelBytes) {
    throw new Error(
      `elementwise: "wasm-simd" needs the weights, gradients and AdamW moments (${
        (modelBytes / 2 ** 30).toFixed(2)
      } GiB) within ${wasmModelBytes / 2 ** 30} GiB of one WebAssembly memory; use elementwise: "js".`
    )
  }
  // One memory for everything the SIMD kernels touch: a WebAssembly matmul route's own (its operands stay in place),
  // else a new one (OpenBLAS reads views of it as they are).
  const wasmGemm = "memory" in gemm ? (gemm as WasmGemm) : undefined
  const ew = kernels === "js" ? undefined : Elementwise.wasmSimd(wasmGemm?.memory, wasmGemm?.alloc)
  const K: typeof Kernels = Object.fromEntries(
    Object.entries(ew?.kernels ?? Kernels).map(([name, f]) => [name, timed(name, f)])
  ) as unknown as typeof Kernels
  const Attention = {
    decode: timed("attentionDecode", Attn.decode),
    forward: timed("attention", Attn.forward),
    backward: timed("attentionBackward", Attn.backward),
    scratchSize: Attn.scratchSize
  }
  const attentionForward = timed("attention", GemmAttention.forward)
  const attentionBackward = timed("attentionBackward", GemmAttention.backward)
  const sgemm = timed("matmul", gemm.sgemm)
  const {
    head_dim: D,
    hidden_size: h,
    intermediate_size: I,
    num_attention_heads: H,
    num_hidden_layers: L,
    num_key_value_heads: KV,
    vocab_size: V
  } = config
  const eps = config.rms_norm_eps
  const attentionKind = options.attention ?? (D % 4 === 0 && D <= 64 ? "tiled" : "matmul")
  if (attentionKind === "tiled" && D % 4 !== 0) {
    throw new Error(`attention: "tiled" needs head_dim a multiple of 4 (got ${D}); use attention: "matmul".`)
  }
  // The tiled kernel's WebAssembly route reads its tensors from its memory (the element-wise kernels' when they run
  // there, else its own): they are allocated there.
  const ownAttention = attentionKind === "tiled" && ew === undefined ? Attn.wasmSimd() : undefined
  const tiled = attentionKind !== "tiled" ? undefined : ownAttention ?? Attn.wasmSimd(ew!.memory, ew!.holds)
  const alloc = ew?.alloc ?? gemm.alloc
  const attnAlloc = ownAttention?.alloc ?? alloc
  const momentAlloc = ew?.alloc ?? ((n: number) => new Float32Array(n))
  const ids = (n: number) => {
    const a = alloc(n)
    return new Int32Array(a.buffer, a.byteOffset, n)
  }
  const scale = 1 / Math.sqrt(D)
  const gradientCheckpointing = options.gradientCheckpointing ?? false
  const W: Weights = {}
  const G: Weights = {}
  const M: Weights = {}
  const S: Weights = {}
  const W16: Record<string, Uint16Array> = {}
  for (const spec of f32Specs) W[spec.name] = alloc(spec.shape.reduce((a, b) => a * b, 1))
  const W16pairs: Record<string, Uint32Array> = {}
  for (const spec of halfSpecs) {
    W16[spec.name] = new Uint16Array(spec.shape[0] * spec.shape[1])
    W16pairs[spec.name] = Bf16.pairsOf(W16[spec.name])
  }
  for (const spec of trainedSpecs) {
    const n = W[spec.name].length
    G[spec.name] = alloc(n)
    M[spec.name] = momentAlloc(n)
    S[spec.name] = momentAlloc(n)
  }
  const names = Array.from({ length: L }, (_, l) => layerTensorNames(l))
  const headName = config.tie_word_embeddings ? EMBED_TOKENS : LM_HEAD
  // A bf16 base: one f32 scratch in the kernels' memory, sized for the largest projection, that each matrix is
  // widened into just before its matmul (the head and embedding go through it in tiles of vocabulary rows).
  const widenedSize = halfSpecs
    .filter((spec) => spec.name !== EMBED_TOKENS && spec.name !== LM_HEAD)
    .reduce((n, spec) => Math.max(n, spec.shape[0] * spec.shape[1], h), 0)
  const widened = widenedSize === 0 ? new Float32Array(0) : alloc(widenedSize)
  const widenedBits = new Uint32Array(widened.buffer, widened.byteOffset, widened.length)
  const headRows = Math.max(1, Math.floor(widened.length / h))
  const widen = timed("bf16Widen", Bf16.widen)
  // The f32 matrix a matmul reads: the stored one, or a bf16 one widened into the scratch (valid until the next).
  const matrix = (name: string): Float32Array => {
    const half = W16[name]
    if (half === undefined) return W[name]
    widen(half, W16pairs[name], 0, half.length, widenedBits, 0)
    return widened
  }
  // Per layer, the adapted projections; the frozen norms' gradient terms go to a scratch that is dropped.
  const adapters = Array.from({ length: L }, () => new Map<LoraTarget, Adapter>())
  projections.forEach((p, index) => {
    const { a, b } = p
    adapters[p.layer].set(p.target, { index, a: W[a.name], b: W[b.name], ga: G[a.name], gb: G[b.name] })
  })
  const rank = lora?.config.r ?? 0
  const loraScale = lora === undefined ? 0 : loraScaling(lora.config)
  const dropout = lora?.config.dropout ?? 0
  const keep = Math.fround(1 / (1 - dropout))
  const normSink = lora === undefined && options.frozen !== true ? undefined : alloc(Math.max(h, D))

  const copyIn = (list: typeof specs, what: string, source: Readonly<Record<string, ArrayLike<number>>>) => {
    for (const spec of list) {
      const w = source[spec.name]
      if (w === undefined) throw new Error(`Missing ${what} ${spec.name} [${spec.shape.join(", ")}].`)
      if (w.length !== (W[spec.name] ?? W16[spec.name]).length) {
        throw new Error(`${what} ${spec.name} has ${w.length} elements; expected [${spec.shape.join(", ")}].`)
      }
    }
    for (const spec of list) {
      const half = W16[spec.name]
      if (half !== undefined) Bf16.roundInto(source[spec.name], half)
      else if (frozenDtype === "bf16" && !adapterSpecs.includes(spec)) {
        // A bf16 base's norms: f32 arrays holding bf16 values.
        const w = W[spec.name]
        w.set(source[spec.name])
        const bits = new Uint32Array(w.buffer, w.byteOffset, w.length)
        for (let i = 0; i < bits.length; i++) bits[i] = Bf16.roundBits(bits[i]) << 16
      } else W[spec.name].set(source[spec.name])
    }
  }
  const setWeights = (source: Readonly<Record<string, ArrayLike<number>>>) => copyIn(specs, "weight", source)
  setWeights(weights)
  if (lora !== undefined) {
    if (!(dropout >= 0 && dropout < 1)) throw new Error(`LoRA dropout ${dropout}: use a probability in [0, 1).`)
    if (!Number.isInteger(rank) || rank < 1) throw new Error(`LoRA rank r = ${rank}: use a positive integer.`)
    copyIn(adapterSpecs, "LoRA tensor", lora.adapters)
  }

  // RoPE tables for positions 0…P−1 (transformers' f32 angles), grown on demand.
  let ropeCos: Float32Array = new Float32Array(0)
  let ropeSin: Float32Array = new Float32Array(0)
  let ropePositions = 0
  const ensureRope = (maxPosition: number) => {
    if (maxPosition < ropePositions) return
    const P = Math.max(maxPosition + 1, ropePositions * 2, 256)
    const t = ropeTables(Int32Array.from({ length: P }, (_, i) => i), D, config.rope_theta)
    // In the kernels' memory, so the SIMD RoPE reads them in place.
    ropeCos = alloc(t.cos.length)
    ropeCos.set(t.cos)
    ropeSin = alloc(t.sin.length)
    ropeSin.set(t.sin)
    ropePositions = P
  }

  let ws: Workspace | undefined
  let scratch = new Float32Array(0)
  // One row of scaled logits and their exponentials (the softmax's scratch).
  const rowZ = new Float64Array(V)
  const rowE = new Float64Array(V)
  const workspace = (rows: number): Workspace => {
    if (ws !== undefined && ws.rows >= rows) return ws
    const N = Math.max(rows, ws === undefined ? 0 : ws.rows * 2)
    let bytes = 0
    const a = (n: number) => {
      bytes += 4 * n
      return alloc(n)
    }
    const at = (n: number) => {
      bytes += 4 * n
      return attnAlloc(n)
    }
    const mask = (n: number) => {
      bytes += n
      return new Uint8Array(n)
    }
    const makeLayer = (l: number, input: Float32Array): Layer => ({
      input,
      attnNormed: a(N * h),
      attnRstd: a(N),
      qProj: a(N * H * D),
      kProj: a(N * KV * D),
      v: at(N * KV * D),
      qRstd: a(N * H),
      kRstd: a(N * KV),
      q: at(N * H * D),
      k: at(N * KV * D),
      attnOut: at(N * H * D),
      lse: at(N * H),
      afterAttn: a(N * h),
      mlpNormed: a(N * h),
      mlpRstd: a(N),
      gate: a(N * I),
      up: a(N * I),
      act: a(N * I),
      adapters: new Map(
        [...adapters[l].keys()].map((target) => [target, {
          u: a(N * rank),
          mask: dropout > 0 ? mask(N * inDimOf(target)) : undefined,
          dropped: false
        }])
      )
    })
    // Recomputation keeps each layer's input only; the rest is one set of buffers the backward refills per layer.
    const shared = gradientCheckpointing ? makeLayer(0, new Float32Array(0)) : undefined
    const layers = Array.from(
      { length: L },
      (_, l) => shared === undefined ? makeLayer(l, a(N * h)) : { ...shared, input: a(N * h) }
    )
    ws = {
      rows: N,
      bytes,
      layers,
      output: a(N * h),
      finalNormed: a(N * h),
      finalRstd: a(N),
      logits: a(N * V),
      tokens: new Int32Array(N),
      positions: ids(N),
      segmentStart: new Int32Array(N),
      dx: a(N * h),
      dh: a(N * h),
      dI1: a(N * I),
      dI2: a(N * I),
      dI3: a(N * I),
      dAttn: at(N * H * D),
      dq: at(N * H * D),
      dk: at(N * KV * D),
      dv: at(N * KV * D),
      loraX: lora === undefined ? new Float32Array(0) : a(N * Math.max(h, H * D, I)),
      loraU: a(N * rank)
    }
    // The object literal's allocations ran after `bytes` was read: record the total.
    ws = { ...ws, bytes }
    return ws
  }

  // y[rows × out] = x[rows × in] · Wᵀ (torch's Linear, W [out, in]).
  const linear = (x: Float32Array, rows: number, inDim: number, w: Float32Array, outDim: number, y: Float32Array) =>
    sgemm(false, true, rows, outDim, inDim, 1, x, inDim, w, inDim, 0, y, outDim)
  // dx (= or +=) dy · W; dW += dyᵀ · x.
  const linearBackward = (
    dy: Float32Array,
    x: Float32Array,
    rows: number,
    inDim: number,
    w: Float32Array,
    outDim: number,
    dW: Float32Array,
    dx: Float32Array | undefined,
    accumulate: boolean
  ) => {
    if (dx !== undefined) {
      sgemm(false, false, rows, inDim, outDim, 1, dy, outDim, w, inDim, accumulate ? 1 : 0, dx, inDim)
    }
    sgemm(true, false, outDim, inDim, rows, 1, dy, outDim, x, inDim, 1, dW, inDim)
  }

  const inDimOf = (target: LoraTarget) => target === "o_proj" ? H * D : target === "down_proj" ? I : h

  // y = x·Wᵀ, plus the adapter's (dropout(x)·Aᵀ·Bᵀ)·scaling when this projection is adapted. `seed`: dropout's.
  const project = (
    l: number,
    target: LoraTarget,
    lay: Layer,
    x: Float32Array,
    n: number,
    inDim: number,
    name: string,
    outDim: number,
    y: Float32Array,
    seed: number | undefined
  ) => {
    linear(x, n, inDim, matrix(name), outDim, y)
    const adapter = adapters[l].get(target)
    if (adapter === undefined) return
    const slot = lay.adapters.get(target)!
    let xd = x
    slot.dropped = slot.mask !== undefined && seed !== undefined
    if (slot.dropped) {
      fillDropoutMask(seed!, adapter.index, dropout, slot.mask!, n * inDim)
      xd = dropped(x, slot.mask!, n * inDim)
    }
    sgemm(false, true, n, rank, inDim, 1, xd, inDim, adapter.a, inDim, 0, slot.u, rank)
    sgemm(false, true, n, outDim, rank, loraScale, slot.u, rank, adapter.b, rank, 1, y, outDim)
  }
  // x with dropout's mask and 1/(1−p) applied, in the LoRA scratch.
  const dropped = (x: Float32Array, mask: Uint8Array, n: number) => {
    const out = ws!.loraX
    for (let i = 0; i < n; i++) out[i] = mask[i] === 1 ? x[i] * keep : 0
    return out
  }
  // linearBackward, or only dx = dy·W for a frozen weight (dW undefined).
  const baseBackward = (
    dy: Float32Array,
    x: Float32Array,
    n: number,
    inDim: number,
    w: Float32Array,
    outDim: number,
    dW: Float32Array | undefined,
    dx: Float32Array,
    accumulate: boolean
  ) => {
    if (dW !== undefined) linearBackward(dy, x, n, inDim, w, outDim, dW, dx, accumulate)
    else sgemm(false, false, n, inDim, outDim, 1, dy, outDim, w, inDim, accumulate ? 1 : 0, dx, inDim)
  }
  // Backward of project: dx (= or +=) dy·W (+ the adapter's path); dW += dyᵀ·x when the base is trained, else dA, dB.
  // Explicit parameters, not a rest array: this runs seven times per layer per backward and must not allocate.
  const projectBackward = (
    l: number,
    target: LoraTarget,
    lay: Layer,
    dy: Float32Array,
    x: Float32Array,
    n: number,
    inDim: number,
    name: string,
    outDim: number,
    dx: Float32Array,
    accumulate: boolean
  ) => {
    baseBackward(dy, x, n, inDim, matrix(name), outDim, G[name], dx, accumulate)
    const adapter = adapters[l].get(target)
    if (adapter === undefined) return
    const slot = lay.adapters.get(target)!
    const u = slot.u
    const mask = slot.dropped ? slot.mask : undefined
    const du = ws!.loraU
    // dB += s·dyᵀ·u; du = s·dy·B; dA += duᵀ·dropout(x); d dropout(x) = du·A, through the mask into dx.
    sgemm(true, false, outDim, rank, n, loraScale, dy, outDim, u, rank, 1, adapter.gb, rank)
    sgemm(false, false, n, rank, outDim, loraScale, dy, outDim, adapter.b, rank, 0, du, rank)
    const xd = mask === undefined ? x : dropped(x, mask, n * inDim)
    sgemm(true, false, rank, inDim, n, 1, du, rank, xd, inDim, 1, adapter.ga, inDim)
    if (mask === undefined) sgemm(false, false, n, inDim, rank, 1, du, rank, adapter.a, inDim, 1, dx, inDim)
    else {
      const d = ws!.loraX
      sgemm(false, false, n, inDim, rank, 1, du, rank, adapter.a, inDim, 0, d, inDim)
      for (let i = 0; i < n * inDim; i++) if (mask[i] === 1) dx[i] += d[i] * keep
    }
  }

  const embed = timed("embedding", (tokens: ArrayLike<number>, n: number, x: Float32Array) => {
    const table = W[EMBED_TOKENS]
    const half = W16[EMBED_TOKENS]
    const bits = half === undefined ? undefined : new Uint32Array(x.buffer, x.byteOffset, n * h)
    for (let i = 0; i < n; i++) {
      const t = tokens[i]
      if (!Number.isInteger(t) || t < 0 || t >= V) {
        throw new Error(`Token id ${t} at index ${i} is outside the vocabulary [0, ${V}).`)
      }
      if (bits !== undefined) Bf16.widen(half!, W16pairs[EMBED_TOKENS], t * h, h, bits, i * h)
      else x.set(table.subarray(t * h, t * h + h), i * h)
    }
  })

  // logits[rows × V] = x · headᵀ; a bf16 head widened a tile of vocabulary rows at a time.
  const headForward = (x: Float32Array, rows: number, logits: Float32Array) => {
    const half = W16[headName]
    if (half === undefined) return linear(x, rows, h, W[headName], V, logits)
    for (let v0 = 0; v0 < V; v0 += headRows) {
      const tv = Math.min(headRows, V - v0)
      widen(half, W16pairs[headName], v0 * h, tv * h, widenedBits, 0)
      sgemm(false, true, rows, tv, h, 1, x, h, widened, h, 0, logits.subarray(v0), V)
    }
  }
  // dx = dLogits · head (dHead += dLogitsᵀ · x when the head is trained); a bf16 head is frozen, tile by tile.
  const headBackward = (dLogits: Float32Array, x: Float32Array, rows: number, dx: Float32Array) => {
    const half = W16[headName]
    if (half === undefined) return baseBackward(dLogits, x, rows, h, W[headName], V, G[headName], dx, false)
    for (let v0 = 0; v0 < V; v0 += headRows) {
      const tv = Math.min(headRows, V - v0)
      widen(half, W16pairs[headName], v0 * h, tv * h, widenedBits, 0)
      sgemm(false, false, rows, h, tv, 1, dLogits.subarray(v0), V, widened, h, v0 === 0 ? 0 : 1, dx, h)
    }
  }

  // Projections, q/k norms and RoPE of rows 0…n−1 of `lay` from lay.input.
  const attentionInputs = (l: number, lay: Layer, n: number, positions: Int32Array, seed: number | undefined) => {
    const nm = names[l]
    K.rmsNorm(lay.input, n, h, W[nm.inputLayernorm], eps, lay.attnNormed, lay.attnRstd)
    project(l, "q_proj", lay, lay.attnNormed, n, h, nm.q, H * D, lay.qProj, seed)
    project(l, "k_proj", lay, lay.attnNormed, n, h, nm.k, KV * D, lay.kProj, seed)
    project(l, "v_proj", lay, lay.attnNormed, n, h, nm.v, KV * D, lay.v, seed)
    K.rmsNorm(lay.qProj, n * H, D, W[nm.qNorm], eps, lay.q, lay.qRstd)
    K.rmsNorm(lay.kProj, n * KV, D, W[nm.kNorm], eps, lay.k, lay.kRstd)
    K.rope(lay.q, n, H, D, positions, ropeCos, ropeSin, 1, lay.q)
    K.rope(lay.k, n, KV, D, positions, ropeCos, ropeSin, 1, lay.k)
  }

  // o_proj, residual and the MLP of rows 0…n−1; writes `out`.
  const outputAndMlp = (l: number, lay: Layer, n: number, out: Float32Array, seed: number | undefined) => {
    const nm = names[l]
    project(l, "o_proj", lay, lay.attnOut, n, H * D, nm.o, h, lay.afterAttn, seed)
    K.add(lay.afterAttn, lay.input, n * h, lay.afterAttn)
    K.rmsNorm(lay.afterAttn, n, h, W[nm.postAttentionLayernorm], eps, lay.mlpNormed, lay.mlpRstd)
    project(l, "gate_proj", lay, lay.mlpNormed, n, h, nm.gate, I, lay.gate, seed)
    project(l, "up_proj", lay, lay.mlpNormed, n, h, nm.up, I, lay.up, seed)
    K.swiglu(lay.gate, lay.up, n * I, lay.act)
    project(l, "down_proj", lay, lay.act, n, I, nm.down, h, out, seed)
    K.add(out, lay.afterAttn, n * h, out)
  }

  let blocks: Float32Array = new Float32Array(0)
  const blockScratch = (T: number) => {
    const n = GemmAttention.scratchSize(T)
    if (blocks.length < n) blocks = gemm.alloc(Math.max(n, blocks.length * 2))
    return blocks
  }
  let tiledBlocks: Float32Array = new Float32Array(0)
  const tiledScratch = (T: number) => {
    const n = Attention.scratchSize({ seq: T })
    if (tiledBlocks.length < n) tiledBlocks = attnAlloc(Math.max(n, tiledBlocks.length * 2))
    return tiledBlocks
  }
  // The decode attention's scratch for sequences of T tokens (grown, never shrunk).
  const scratchFor = (T: number) => {
    const n = Attention.scratchSize({ seq: T })
    if (scratch.length < n) scratch = new Float32Array(Math.max(n, scratch.length * 2))
    return scratch
  }

  // One decoder layer of a packed forward, from w.layers[l].input into `out`.
  const layerForward = (w: Workspace, l: number, B: number, T: number, seed: number | undefined, out: Float32Array) => {
    const N = B * T
    const lay = w.layers[l]
    attentionInputs(l, lay, N, w.positions, seed)
    const shape = { batch: B, seq: T, heads: H, kvHeads: KV, headDim: D, scale }
    const io = { shape, q: lay.q, k: lay.k, v: lay.v, segmentStart: w.segmentStart, out: lay.attnOut, lse: lay.lse }
    if (tiled !== undefined) Attention.forward({ ...io, scratch: tiledScratch(T), route: tiled })
    else attentionForward(gemm, { ...io, scratch: blockScratch(T) })
    outputAndMlp(l, lay, N, out, seed)
  }

  let forwardRows = 0
  // The last forward's dropout seed: recomputation redraws the same masks.
  let lastSeed: number | undefined
  const forward = (
    tokens: ArrayLike<number>,
    B: number,
    T: number,
    positions?: ArrayLike<number>,
    dropoutSeed?: number
  ) => {
    const N = B * T
    if (tokens.length !== N) throw new Error(`Batch has ${tokens.length} tokens; expected ${B}×${T}.`)
    if (positions !== undefined && positions.length !== N) {
      throw new Error(`Batch has ${positions.length} position ids; expected ${B}×${T}.`)
    }
    const w = workspace(N)
    let maxPos = 0
    for (let n = 0; n < N; n++) {
      const p = positions === undefined ? n % T : positions[n]
      w.positions[n] = p
      if (p > maxPos) maxPos = p
    }
    for (let b = 0; b < B; b++) {
      let start = 0
      for (let t = 0; t < T; t++) {
        if (t > 0 && w.positions[b * T + t] === 0) start = t
        w.segmentStart[b * T + t] = start
      }
    }
    ensureRope(maxPos)
    embed(tokens, N, w.layers[0].input)
    for (let n = 0; n < N; n++) w.tokens[n] = tokens[n]
    for (let l = 0; l < L; l++) layerForward(w, l, B, T, dropoutSeed, l + 1 < L ? w.layers[l + 1].input : w.output)
    lastSeed = dropoutSeed
    K.rmsNorm(w.output, N, h, W[FINAL_NORM], eps, w.finalNormed, w.finalRstd)
    headForward(w.finalNormed, N, w.logits)
    forwardRows = N
    lastShape = { B, T }
    return w.logits.subarray(0, N * V)
  }
  let lastShape = { B: 0, T: 0 }

  const tokenLogprobs = (targets: ArrayLike<number>, temperature: number) => {
    const N = forwardRows
    if (ws === undefined || N === 0) throw new Error("tokenLogprobs needs a forward first.")
    if (targets.length !== N) throw new Error(`targets has ${targets.length} entries; the forward had ${N} rows.`)
    const logprobs = new Float64Array(N)
    const entropy = new Float64Array(N)
    K.tokenLogprobs(ws.logits, N, V, targets, temperature, logprobs, entropy, rowZ, rowE)
    return { logprobs, entropy }
  }

  const backward = (
    targets: ArrayLike<number>,
    lossWeights: ArrayLike<number>,
    temperature: number,
    entropyWeights?: ArrayLike<number>
  ) => {
    const N = forwardRows
    if (ws === undefined || N === 0) {
      throw new Error("backward needs a forward first (each forward serves one backward).")
    }
    if (targets.length !== N || lossWeights.length !== N) {
      throw new Error(`targets (${targets.length}) and lossWeights (${lossWeights.length}) must have ${N} entries.`)
    }
    const w = ws
    const { B, T } = lastShape
    const logprobs = new Float64Array(N)
    const entropy = new Float64Array(N)
    const loss = K.tokenLogprobs(
      w.logits,
      N,
      V,
      targets,
      temperature,
      logprobs,
      entropy,
      rowZ,
      rowE,
      lossWeights,
      entropyWeights
    )
    forwardRows = 0
    const dLogits = w.logits
    // Frozen norms' gradients land in the sink (cleared so it stays finite); trained ones in G.
    normSink?.fill(0)
    const gNorm = (name: string) => G[name] ?? normSink!
    // dh = dLogits · head; gHead += dLogitsᵀ · finalNormed.
    headBackward(dLogits, w.finalNormed, N, w.dh)
    K.rmsNormBackward(w.dh, w.output, w.finalRstd, N, h, W[FINAL_NORM], gNorm(FINAL_NORM), w.dx, false)
    for (let l = L - 1; l >= 0; l--) {
      // Recomputation: this layer's activations again (into the shared buffers); its output goes to dh, free here.
      if (gradientCheckpointing) layerForward(w, l, B, T, lastSeed, w.dh)
      const a = w.layers[l]
      const nm = names[l]
      const proj = (
        target: LoraTarget,
        dy: Float32Array,
        x: Float32Array,
        inDim: number,
        name: string,
        outDim: number,
        dx: Float32Array,
        accumulate: boolean
      ) => projectBackward(l, target, a, dy, x, N, inDim, name, outDim, dx, accumulate)
      // MLP: out = afterAttn + down(silu(gate)·up). dx is d out.
      proj("down_proj", w.dx, a.act, I, nm.down, h, w.dI1, false)
      K.swigluBackward(w.dI1, a.gate, a.up, N * I, w.dI2, w.dI3)
      proj("gate_proj", w.dI2, a.mlpNormed, h, nm.gate, I, w.dh, false)
      proj("up_proj", w.dI3, a.mlpNormed, h, nm.up, I, w.dh, true)
      // d afterAttn = dx + rmsnorm'(dh), into dx.
      K.rmsNormBackward(
        w.dh,
        a.afterAttn,
        a.mlpRstd,
        N,
        h,
        W[nm.postAttentionLayernorm],
        gNorm(nm.postAttentionLayernorm),
        w.dx,
        true
      )
      // Attention: afterAttn = input + o_proj(attnOut).
      proj("o_proj", w.dx, a.attnOut, H * D, nm.o, h, w.dAttn, false)
      const io = {
        shape: { batch: B, seq: T, heads: H, kvHeads: KV, headDim: D, scale },
        q: a.q,
        k: a.k,
        v: a.v,
        segmentStart: w.segmentStart,
        out: a.attnOut,
        lse: a.lse,
        dOut: w.dAttn,
        dq: w.dq,
        dk: w.dk,
        dv: w.dv
      }
      if (tiled !== undefined) Attention.backward({ ...io, scratch: tiledScratch(T), route: tiled })
      else attentionBackward(gemm, { ...io, scratch: blockScratch(T) })
      K.rope(w.dq, N, H, D, w.positions, ropeCos, ropeSin, -1, w.dq)
      K.rope(w.dk, N, KV, D, w.positions, ropeCos, ropeSin, -1, w.dk)
      // q/k norms: the rope output buffers (a.q, a.k) are not needed any more, so the projections' gradients go there.
      K.rmsNormBackward(w.dq, a.qProj, a.qRstd, N * H, D, W[nm.qNorm], gNorm(nm.qNorm), a.q, false)
      K.rmsNormBackward(w.dk, a.kProj, a.kRstd, N * KV, D, W[nm.kNorm], gNorm(nm.kNorm), a.k, false)
      proj("q_proj", a.q, a.attnNormed, h, nm.q, H * D, w.dh, false)
      proj("k_proj", a.k, a.attnNormed, h, nm.k, KV * D, w.dh, true)
      proj("v_proj", w.dv, a.attnNormed, h, nm.v, KV * D, w.dh, true)
      K.rmsNormBackward(w.dh, a.input, a.attnRstd, N, h, W[nm.inputLayernorm], gNorm(nm.inputLayernorm), w.dx, true)
    }
    const gE = G[EMBED_TOKENS]
    // A frozen embedding (LoRA) gets no gradient.
    for (let n = 0; gE !== undefined && n < N; n++) {
      const o = w.tokens[n] * h
      for (let i = 0; i < h; i++) gE[o + i] += w.dx[n * h + i]
    }
    return { loss, logprobs, entropy }
  }

  const setTrained = (source: Readonly<Record<string, ArrayLike<number>>>) => copyIn(trainedSpecs, "tensor", source)

  const zeroGrads = () => {
    for (const name in G) G[name].fill(0)
  }

  const self: CpuModel = {
    config,
    gemm,
    kernels,
    weights: W,
    lora: lora?.config,
    frozenDtype,
    bf16Weights: W16,
    trained: trainedSpecs.map((spec) => spec.name),
    grads: G,
    moments: { m: M, v: S },
    step: 0,
    forward,
    tokenLogprobs,
    backward,
    zeroGrads,
    gradNorm: () => Math.sqrt(K.sumSquares(Object.values(G))),
    adamW: (clip, c) => {
      const b1 = c.beta1 ?? 0.9
      const b2 = c.beta2 ?? 0.999
      const e = c.eps ?? 1e-8
      const wd = c.weightDecay ?? 0
      self.step += 1
      const stepSize = c.lr / (1 - Math.pow(b1, self.step))
      const bc2Sqrt = Math.sqrt(1 - Math.pow(b2, self.step))
      for (const spec of trainedSpecs) {
        const name = spec.name
        const decay = decays(name) ? 1 - c.lr * wd : 1
        K.adamW(W[name], G[name], M[name], S[name], clip, b1, b2, e, decay, stepSize, bc2Sqrt)
      }
      zeroGrads()
    },
    makeKvCache: (capacity) => ({
      capacity,
      length: 0,
      keys: Array.from({ length: L }, () => new Float32Array(KV * capacity * D)),
      values: Array.from({ length: L }, () => new Float32Array(KV * capacity * D))
    }),
    extendBatch: (caches, chunks) => {
      if (caches.length !== chunks.length) {
        throw new Error(
          `extendBatch got ${caches.length} caches and ${chunks.length} token chunks; pass one per sequence.`
        )
      }
      let rows = 0
      let maxPos = 0
      caches.forEach((cache, s) => {
        const n = chunks[s].length
        if (n === 0) throw new Error(`Sequence ${s} has no new tokens: nothing to take the last logits of.`)
        if (cache.length + n > cache.capacity) {
          throw new Error(
            `KV cache holds ${cache.capacity} tokens; ${cache.length} cached + ${n} new do not fit. Make a larger cache.`
          )
        }
        if (caches.indexOf(cache) !== s) throw new Error("extendBatch needs one distinct cache per sequence.")
        rows += n
        maxPos = Math.max(maxPos, cache.length + n - 1)
      })
      const w = workspace(Math.max(rows, caches.length))
      forwardRows = 0
      ensureRope(maxPos)
      let r = 0
      const starts: Array<number> = []
      caches.forEach((cache, s) => {
        starts.push(r)
        const chunk = chunks[s]
        for (let i = 0; i < chunk.length; i++) {
          w.tokens[r] = chunk[i]
          w.positions[r] = cache.length + i
          r++
        }
      })
      embed(w.tokens, rows, w.layers[0].input)
      for (let l = 0; l < L; l++) {
        const lay = w.layers[l]
        attentionInputs(l, lay, rows, w.positions, undefined)
        caches.forEach((cache, s) => {
          const n = chunks[s].length
          const decode = {
            shape: { heads: H, kvHeads: KV, headDim: D, scale },
            q: lay.q,
            keys: cache.keys[l],
            values: cache.values[l],
            capacity: cache.capacity,
            out: lay.attnOut,
            scratch: scratchFor(0)
          }
          // The new rows' keys and values go into the cache first; then they attend to it.
          Attn.storeCache(decode, lay.k, lay.v, starts[s], n, cache.length)
          Attention.decode(decode, starts[s], n, cache.length)
        })
        outputAndMlp(l, lay, rows, l + 1 < L ? w.layers[l + 1].input : w.output, undefined)
      }
      caches.forEach((cache, s) => cache.length += chunks[s].length)
      // Final norm and head on each sequence's last row only.
      caches.forEach((_, s) => {
        const last = starts[s] + chunks[s].length - 1
        w.dh.set(w.output.subarray(last * h, last * h + h), s * h)
      })
      const S = caches.length
      K.rmsNorm(w.dh, S, h, W[FINAL_NORM], eps, w.finalNormed, w.finalRstd)
      headForward(w.finalNormed, S, w.logits)
      return w.logits.subarray(0, S * V)
    },
    setWeights,
    setTrained,
    profile,
    resetProfile: () => profile.clear(),
    gradientCheckpointing,
    workspaceBytes: () => ws?.bytes ?? 0
  }
  return self
}
