/**
 * The CPU device's attention: causal grouped-query attention in f32 over packed batches, tiled in the manner of
 * FlashAttention (query tiles × key tiles, online softmax, the logsumexp saved for a backward that recomputes the
 * probabilities tile by tile), so memory stays O(tile) at any sequence length; plus the KV-cache (decode / extend)
 * path. The specification is `cpuAttention` / `cpuAttentionBackward` in `../ops/attention.ts`; the tests compare
 * against it at the GPU kernels' tolerances (f32 storage and order of summation differ from the spec's f64 sums).
 *
 * Layouts are row-major; row n = b·T + t of a packed batch of B rows × T tokens:
 * q, out, dOut, dq [N, H, D]; k, v, dk, dv [N, KV, D]; lse [N, H]; segmentStart [N] (the t at which row n's packed
 * sequence starts: t attends to j ∈ [segmentStart[n], t]); query head h uses KV head ⌊h / (H/KV)⌋.
 * Every output is written (overwritten), never accumulated. The caller allocates everything, scratch included
 * ({@link scratchSize}), so a call allocates nothing; argument records can be built once and reused.
 *
 * Two routes run the inner products ({@link Route}): plain JS on any arrays, and WebAssembly SIMD128 on arrays that
 * live in one shared WebAssembly memory (several times faster; see bench/results/cpu-attention.md).
 *
 * Work is split in units (one batch row × one KV head with its query heads, {@link units}): units touch disjoint
 * parts of every output, so workers may run disjoint unit ranges at once, each with its own scratch. Results do not
 * depend on how units are split.
 *
 * @since 0.0.0
 */
import type { AttentionShape } from "../ops/attention.js"
import { jsKernels, type Kernels } from "./internal/attentionKernels.js"
import { wasmKernels, type WasmMemory } from "./internal/attentionWasm.js"
import { ownMemory } from "./internal/wasmApi.js"

export type { WasmMemory }

/** Rows of a query tile and of a key tile. */
export interface Tile {
  readonly query: number
  readonly key: number
}

/**
 * The default tiles: 64×64 keeps the two score tiles (32 KiB) in L1; 32…128 rows measured within noise of it on
 * both routes at head_dim 16 and 128 (bench/cpu/attention.ts --tile=QxK).
 */
export const defaultTile: Tile = { query: 64, key: 64 }

/**
 * f32 elements of scratch one call needs: two query×key tiles (scores/probabilities and dP/dS), the running max
 * and normaliser of a query tile, and the backward's delta for one sequence row of T tokens. {@link decode} needs
 * `scratchSize({ seq: 0 }, tile)`.
 */
export const scratchSize = (shape: { readonly seq: number }, tile: Tile = defaultTile): number =>
  2 * tile.query * tile.key + 2 * tile.query + shape.seq

/** Work units of a call: B·KV (batch row b, KV head g) pairs, unit u = b·KV + g. */
export const units = (shape: AttentionShape): number => shape.batch * shape.kvHeads

/**
 * Which implementation runs the inner loops: `js` (plain TypeScript, any array, any head_dim) or `wasm-simd`
 * (WebAssembly SIMD128 over one shared memory: every tensor a kernel reads or writes must be a view of that memory,
 * and head_dim a multiple of 4; its exp is a polynomial within 2 ulp of f32's). The tiling and bookkeeping are the
 * same JS either way. A worker thread makes its own wasm-simd route over the same memory.
 */
export interface Route {
  readonly name: "js" | "wasm-simd"
  /** Whether `a` can be handed to this route (for wasm-simd: a view of its memory). */
  readonly holds: (a: Float32Array) => boolean
  readonly kernels: Kernels
}

/** The plain-TypeScript route: any arrays, any head_dim, no WebAssembly. */
export const js: Route = { name: "js", holds: () => true, kernels: jsKernels }

/** A wasm-simd route that owns its memory and hands out arrays in it. */
export interface WasmRoute extends Route {
  readonly memory: WasmMemory
  /** A zeroed f32 array in the route's memory (64-byte aligned). */
  readonly alloc: (n: number) => Float32Array
}

/**
 * The wasm-simd route over `memory`, a shared WebAssembly.Memory (e.g. the one the WebAssembly matmul route allocates
 * its tensors in). `holds` says which arrays live there; by default those on `memory.buffer` as it is now (views
 * made before the memory last grew are refused, never misread). Without arguments the route makes its own memory
 * and hands out arrays in it (`alloc`).
 */
export function wasmSimd(memory: WasmMemory, holds?: (a: Float32Array) => boolean): Route
export function wasmSimd(): WasmRoute
export function wasmSimd(memory?: WasmMemory, holds?: (a: Float32Array) => boolean): Route | WasmRoute {
  if (memory !== undefined) {
    return { name: "wasm-simd", holds: holds ?? ((a) => a.buffer === memory.buffer), kernels: wasmKernels(memory) }
  }
  const own = ownMemory("cpu attention: wasm-simd", "use the js route or shorter sequences")
  return { name: "wasm-simd", holds: own.holds, kernels: wasmKernels(own.memory), memory: own.memory, alloc: own.alloc }
}

/** Inputs and outputs of {@link forward}. */
export interface Forward {
  readonly shape: AttentionShape
  readonly q: Float32Array
  readonly k: Float32Array
  readonly v: Float32Array
  readonly segmentStart: Int32Array
  /** Written: [N, H, D]. */
  readonly out: Float32Array
  /** Written: [N, H], max + log Σ exp(s − max) of each query row (what {@link backward} reads). */
  readonly lse: Float32Array
  readonly scratch: Float32Array
  readonly tile?: Tile
  /** Default {@link js}. */
  readonly route?: Route
}

/** Inputs and outputs of {@link backward}: the forward's inputs and outputs, dOut, and the gradients it writes. */
export interface Backward {
  readonly shape: AttentionShape
  readonly q: Float32Array
  readonly k: Float32Array
  readonly v: Float32Array
  readonly segmentStart: Int32Array
  readonly out: Float32Array
  readonly lse: Float32Array
  readonly dOut: Float32Array
  /** Written: [N, H, D]. */
  readonly dq: Float32Array
  /** Written: [N, KV, D]. */
  readonly dk: Float32Array
  /** Written: [N, KV, D]. */
  readonly dv: Float32Array
  readonly scratch: Float32Array
  readonly tile?: Tile
  /** Default {@link js}. */
  readonly route?: Route
}

/**
 * One layer's KV-cache attention (decode or extend). Query rows [rows, H, D] in `q`; the cache of one sequence is
 * [KV, capacity, D] at `cacheBase` in `keys` / `values` (a pool of several sequences is several such blocks). The
 * shape's batch and seq are not read.
 */
export interface Decode {
  readonly shape: Omit<AttentionShape, "batch" | "seq">
  readonly q: Float32Array
  readonly keys: Float32Array
  readonly values: Float32Array
  readonly capacity: number
  /** Written: [rows, H, D], the rows given to each call. */
  readonly out: Float32Array
  readonly scratch: Float32Array
  readonly tile?: Tile
  /** Default {@link js}. */
  readonly route?: Route
}

const fail = (what: string): never => {
  throw new Error(`cpu attention: ${what}`)
}

const checkShape = (s: Omit<AttentionShape, "batch" | "seq">, tile: Tile) => {
  const { headDim: D, heads: H, kvHeads: KV } = s
  if (!(Number.isInteger(H) && H > 0 && Number.isInteger(KV) && KV > 0 && H % KV === 0)) {
    fail(`heads (${H}) must be a positive multiple of kvHeads (${KV})`)
  }
  if (!(Number.isInteger(D) && D > 0)) fail(`headDim must be a positive integer, got ${D}`)
  if (!Number.isFinite(s.scale)) fail(`scale must be finite, got ${s.scale}`)
  if (!(Number.isInteger(tile.query) && tile.query > 0 && Number.isInteger(tile.key) && tile.key > 0)) {
    fail(`tile sizes must be positive integers, got query ${tile.query}, key ${tile.key}`)
  }
}

const checkLength = (name: string, a: ArrayLike<number>, n: number, layout: string) => {
  if (a.length < n) fail(`${name} holds ${a.length} elements; ${layout} needs ${n}`)
}

/** The wasm-simd route needs head_dim % 4 = 0 and the arrays its kernels touch in its memory. */
const checkRoute = (route: Route, D: number, arrays: ReadonlyArray<readonly [string, Float32Array]>) => {
  if (route.name === "js") return
  if (D % 4 !== 0) fail(`the ${route.name} route needs headDim % 4 = 0, got ${D}; use the js route`)
  for (const [name, a] of arrays) {
    if (!route.holds(a)) {
      fail(`${name} is not in the ${route.name} route's memory; allocate it there or use the js route`)
    }
  }
}

/** Checks a packed call's shape, arrays, segment starts (O(N)) and unit range; throws naming the first problem. */
const checkPacked = (
  s: AttentionShape,
  tile: Tile,
  arrays: ReadonlyArray<readonly [string, ArrayLike<number>, "q" | "kv" | "lse"]>,
  segmentStart: Int32Array,
  scratch: Float32Array,
  first: number,
  end: number
) => {
  checkShape(s, tile)
  const { batch: B, headDim: D, heads: H, kvHeads: KV, seq: T } = s
  if (!(Number.isInteger(B) && B > 0 && Number.isInteger(T) && T > 0)) {
    fail(`batch and seq must be positive integers, got ${B} × ${T}`)
  }
  const N = B * T
  for (const [name, a, kind] of arrays) {
    if (kind === "q") checkLength(name, a, N * H * D, `[N=${N}, H=${H}, D=${D}]`)
    else if (kind === "kv") checkLength(name, a, N * KV * D, `[N=${N}, KV=${KV}, D=${D}]`)
    else checkLength(name, a, N * H, `[N=${N}, H=${H}]`)
  }
  checkLength("segmentStart", segmentStart, N, `[N=${N}]`)
  checkLength("scratch", scratch, scratchSize(s, tile), `scratchSize(seq ${T}, tile ${tile.query}×${tile.key})`)
  for (let n = 0; n < N; n++) {
    const t = n % T
    const st = segmentStart[n]
    if (!(st >= 0 && st <= t)) fail(`segmentStart[${n}] = ${st} is outside [0, t = ${t}]`)
  }
  const U = B * KV
  if (!(Number.isInteger(first) && Number.isInteger(end) && first >= 0 && first <= end && end <= U)) {
    fail(`unit range [${first}, ${end}) is outside [0, ${U})`)
  }
}

/**
 * Forward of `rows` query rows against one KV head: row r sits at q[q0 + r·qStride …] (out alike), has position
 * p0 + r·step (it may see keys up to that index; step 1: a sequence's consecutive tokens of one head, step 0: the
 * query heads of one token) and first key `starts[s0 + r]` (0 without starts); key j lies at k[k0 + j·kStride …]
 * (v alike). Writes out, and lse[l0 + r·lStride] when lse is given.
 */
const forwardRows = (
  q: Float32Array,
  q0: number,
  qStride: number,
  k: Float32Array,
  v: Float32Array,
  k0: number,
  kStride: number,
  rows: number,
  p0: number,
  step: number,
  starts: Int32Array | undefined,
  s0: number,
  out: Float32Array,
  lse: Float32Array | undefined,
  l0: number,
  lStride: number,
  D: number,
  scale: number,
  scratch: Float32Array,
  BQ: number,
  BK: number,
  K: Kernels
): void => {
  // Scratch: S [BQ, BK] (scores, then probabilities), then each tile row's running max m and normaliser l.
  const mAt = 2 * BQ * BK
  const lAt = mAt + BQ
  for (let qt = 0; qt < rows; qt += BQ) {
    const R = Math.min(BQ, rows - qt)
    const qa = q0 + qt * qStride
    let first = Infinity
    for (let r = 0; r < R; r++) {
      const st = starts === undefined ? 0 : starts[s0 + qt + r]
      if (st < first) first = st
      scratch[mAt + r] = -Infinity
      scratch[lAt + r] = 0
      const o = qa + r * qStride
      for (let d = 0; d < D; d++) out[o + d] = 0
    }
    const last = p0 + (qt + R - 1) * step
    for (let kt = first - (first % BK); kt <= last; kt += BK) {
      const kEnd = Math.min(kt + BK, last + 1)
      const c0 = Math.max(first, kt) - kt
      const c1 = kEnd - kt
      const ka = k0 + kt * kStride
      K.scores(q, qa, qStride, k, ka, kStride, D, R, c0, c1, p0 + qt * step - kt, step, scale, scratch, 0, BK)
      for (let r = 0; r < R; r++) {
        const st = starts === undefined ? 0 : starts[s0 + qt + r]
        const lo = Math.max(st, kt) - kt
        const hi = Math.min(p0 + (qt + r) * step, kEnd - 1) - kt
        K.softmaxRow(scratch, r * BK, c0, lo, hi, c1, scratch, mAt + r, lAt + r, out, qa + r * qStride, D)
      }
      K.accumulate(scratch, 0, BK, 1, v, ka, kStride, out, qa, qStride, D, R, c0, c1)
    }
    for (let r = 0; r < R; r++) {
      const l = scratch[lAt + r]
      const inv = 1 / l
      const o = qa + r * qStride
      for (let d = 0; d < D; d++) out[o + d] *= inv
      if (lse !== undefined) lse[l0 + (qt + r) * lStride] = scratch[mAt + r] + Math.log(l)
    }
  }
}

/**
 * Causal GQA attention forward over a packed batch: writes `out` and `lse`. Runs units [first, end) (default: all;
 * see {@link units}).
 */
export const forward = (a: Forward, first = 0, end = units(a.shape)): void => {
  const tile = a.tile ?? defaultTile
  checkPacked(
    a.shape,
    tile,
    [["q", a.q, "q"], ["k", a.k, "kv"], ["v", a.v, "kv"], ["out", a.out, "q"], ["lse", a.lse, "lse"]],
    a.segmentStart,
    a.scratch,
    first,
    end
  )
  const { headDim: D, heads: H, kvHeads: KV, scale, seq: T } = a.shape
  const route = a.route ?? js
  checkRoute(route, D, [["q", a.q], ["k", a.k], ["v", a.v], ["out", a.out], ["scratch", a.scratch]])
  const G = H / KV
  for (let u = first; u < end; u++) {
    const b = (u / KV) | 0
    const g = u % KV
    for (let h = g * G; h < (g + 1) * G; h++) {
      forwardRows(
        a.q,
        (b * T * H + h) * D,
        H * D,
        a.k,
        a.v,
        (b * T * KV + g) * D,
        KV * D,
        T,
        0,
        1,
        a.segmentStart,
        b * T,
        a.out,
        a.lse,
        b * T * H + h,
        H,
        D,
        scale,
        a.scratch,
        tile.query,
        tile.key,
        route.kernels
      )
    }
  }
}

/**
 * Backward of {@link forward}: writes dq, dk, dv from dOut and the forward's q, k, v, out and lse, recomputing the
 * probabilities per tile pair (P = exp(s − lse); dS = P·(dOut·v − delta)·scale with delta = rowsum(dOut·out)).
 * Key tiles outer, query tiles inner: dk/dv of a key tile and dq of a query tile are summed in place.
 */
export const backward = (a: Backward, first = 0, end = units(a.shape)): void => {
  const tile = a.tile ?? defaultTile
  checkPacked(
    a.shape,
    tile,
    [
      ["q", a.q, "q"],
      ["k", a.k, "kv"],
      ["v", a.v, "kv"],
      ["out", a.out, "q"],
      ["lse", a.lse, "lse"],
      ["dOut", a.dOut, "q"],
      ["dq", a.dq, "q"],
      ["dk", a.dk, "kv"],
      ["dv", a.dv, "kv"]
    ],
    a.segmentStart,
    a.scratch,
    first,
    end
  )
  const { headDim: D, heads: H, kvHeads: KV, scale, seq: T } = a.shape
  const { dk, dq, dv, scratch } = a
  const route = a.route ?? js
  checkRoute(route, D, [
    ["q", a.q],
    ["k", a.k],
    ["v", a.v],
    ["dOut", a.dOut],
    ["dq", dq],
    ["dk", dk],
    ["dv", dv],
    ["scratch", scratch]
  ])
  const K = route.kernels
  const BQ = tile.query
  const BK = tile.key
  const G = H / KV
  const pAt = 0
  const dsAt = BQ * BK
  const deltaAt = 2 * BQ * BK + 2 * BQ
  for (let u = first; u < end; u++) {
    const b = (u / KV) | 0
    const g = u % KV
    const k0 = (b * T * KV + g) * D
    const kStride = KV * D
    for (let t = 0; t < T; t++) {
      const o = k0 + t * kStride
      for (let d = 0; d < D; d++) {
        dk[o + d] = 0
        dv[o + d] = 0
      }
    }
    for (let h = g * G; h < (g + 1) * G; h++) {
      const q0 = (b * T * H + h) * D
      const qStride = H * D
      const l0 = b * T * H + h
      for (let t = 0; t < T; t++) {
        const o = q0 + t * qStride
        let s = 0
        for (let d = 0; d < D; d++) {
          s += a.dOut[o + d] * a.out[o + d]
          dq[o + d] = 0
        }
        scratch[deltaAt + t] = s
      }
      for (let kt = 0; kt < T; kt += BK) {
        const kEnd = Math.min(kt + BK, T)
        const ka = k0 + kt * kStride
        for (let qt = kt - (kt % BQ); qt < T; qt += BQ) {
          const R = Math.min(BQ, T - qt)
          let firstKey = Infinity
          for (let r = 0; r < R; r++) {
            const st = a.segmentStart[b * T + qt + r]
            if (st < firstKey) firstKey = st
          }
          // No row of this query tile sees a key of this key tile.
          if (firstKey >= kEnd) continue
          const c0 = Math.max(firstKey, kt) - kt
          const c1 = kEnd - kt
          const qa = q0 + qt * qStride
          K.scores(a.q, qa, qStride, a.k, ka, kStride, D, R, c0, c1, qt - kt, 1, scale, scratch, pAt, BK)
          K.scores(a.dOut, qa, qStride, a.v, ka, kStride, D, R, c0, c1, qt - kt, 1, 1, scratch, dsAt, BK)
          for (let r = 0; r < R; r++) {
            const n = b * T + qt + r
            const lo = Math.max(a.segmentStart[n], kt) - kt
            const hi = Math.min(qt + r, kEnd - 1) - kt
            const base = r * BK
            const L = a.lse[l0 + (qt + r) * H]
            K.gradRow(scratch, pAt + base, dsAt + base, c0, lo, hi, c1, L, scratch[deltaAt + qt + r], scale)
          }
          // dV[keys] += Pᵀ·dOut, dK[keys] += dSᵀ·q (P read transposed), dq[queries] += dS·K.
          const kc = ka + c0 * kStride
          K.accumulate(scratch, pAt + c0, 1, BK, a.dOut, qa, qStride, dv, kc, kStride, D, c1 - c0, 0, R)
          K.accumulate(scratch, dsAt + c0, 1, BK, a.q, qa, qStride, dk, kc, kStride, D, c1 - c0, 0, R)
          K.accumulate(scratch, dsAt, BK, 1, a.k, ka, kStride, dq, qa, qStride, D, R, c0, c1)
        }
      }
    }
  }
}

/**
 * KV-cache attention of one sequence: query rows row0 … row0 + rows − 1 of `q` sit at positions start … start +
 * rows − 1 and attend to cached keys 0 … their position (the caller has stored their own keys and values first,
 * e.g. with {@link storeCache}). Writes those rows of `out`.
 */
export const decode = (a: Decode, row0: number, rows: number, start: number, cacheBase = 0): void => {
  const tile = a.tile ?? defaultTile
  checkShape(a.shape, tile)
  const { headDim: D, heads: H, kvHeads: KV, scale } = a.shape
  const cap = a.capacity
  if (!(Number.isInteger(rows) && rows >= 0 && Number.isInteger(row0) && row0 >= 0)) {
    fail(`decode rows must be non-negative integers, got row0 ${row0}, rows ${rows}`)
  }
  if (!(Number.isInteger(start) && start >= 0 && start + rows <= cap)) {
    fail(`decode positions ${start}…${start + rows - 1} do not fit a cache of capacity ${cap}`)
  }
  checkLength("q", a.q, (row0 + rows) * H * D, `rows ${row0}+${rows} × [H=${H}, D=${D}]`)
  checkLength("out", a.out, (row0 + rows) * H * D, `rows ${row0}+${rows} × [H=${H}, D=${D}]`)
  const cacheLayout = `cacheBase ${cacheBase} + [KV=${KV}, capacity=${cap}, D=${D}]`
  checkLength("keys", a.keys, cacheBase + KV * cap * D, cacheLayout)
  checkLength("values", a.values, cacheBase + KV * cap * D, cacheLayout)
  checkLength("scratch", a.scratch, scratchSize({ seq: 0 }, tile), `scratchSize({ seq: 0 }, tile)`)
  const route = a.route ?? js
  checkRoute(route, D, [["q", a.q], ["keys", a.keys], ["values", a.values], ["out", a.out], ["scratch", a.scratch]])
  const G = H / KV
  const K = route.kernels
  if (rows === 1) {
    // One token: the G query heads of a KV head are G rows at one position (step 0), so each cached key and value
    // is read once per KV head, not once per query head.
    for (let g = 0; g < KV; g++) {
      const q0 = (row0 * H + g * G) * D
      const k0 = cacheBase + g * cap * D
      forwardRows(
        a.q,
        q0,
        D,
        a.keys,
        a.values,
        k0,
        D,
        G,
        start,
        0,
        undefined,
        0,
        a.out,
        undefined,
        0,
        0,
        D,
        scale,
        a.scratch,
        tile.query,
        tile.key,
        K
      )
    }
    return
  }
  for (let h = 0; h < H; h++) {
    const g = (h / G) | 0
    const q0 = (row0 * H + h) * D
    const k0 = cacheBase + g * cap * D
    forwardRows(
      a.q,
      q0,
      H * D,
      a.keys,
      a.values,
      k0,
      D,
      rows,
      start,
      1,
      undefined,
      0,
      a.out,
      undefined,
      0,
      0,
      D,
      scale,
      a.scratch,
      tile.query,
      tile.key,
      K
    )
  }
}

/**
 * Copies rows row0 … row0 + rows − 1 of k and v ([rows, KV, D]) into one sequence's cache ([KV, capacity, D] at
 * `cacheBase`) at positions start …, as Qwen3Reference's KV cache stores them.
 */
export const storeCache = (
  a: Decode,
  k: Float32Array,
  v: Float32Array,
  row0: number,
  rows: number,
  start: number,
  cacheBase = 0
): void => {
  const { headDim: D, kvHeads: KV } = a.shape
  const cap = a.capacity
  if (!(Number.isInteger(start) && start >= 0 && start + rows <= cap)) {
    fail(`cache positions ${start}…${start + rows - 1} do not fit a cache of capacity ${cap}`)
  }
  checkLength("k", k, (row0 + rows) * KV * D, `rows ${row0}+${rows} × [KV=${KV}, D=${D}]`)
  checkLength("v", v, (row0 + rows) * KV * D, `rows ${row0}+${rows} × [KV=${KV}, D=${D}]`)
  const cacheLayout = `cacheBase ${cacheBase} + [KV=${KV}, capacity=${cap}, D=${D}]`
  checkLength("keys", a.keys, cacheBase + KV * cap * D, cacheLayout)
  checkLength("values", a.values, cacheBase + KV * cap * D, cacheLayout)
  for (let i = 0; i < rows; i++) {
    for (let g = 0; g < KV; g++) {
      const from = ((row0 + i) * KV + g) * D
      const to = cacheBase + (g * cap + start + i) * D
      for (let d = 0; d < D; d++) {
        a.keys[to + d] = k[from + d]
        a.values[to + d] = v[from + d]
      }
    }
  }
}
