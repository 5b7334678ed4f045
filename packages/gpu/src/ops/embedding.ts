/**
 * Embedding: rows of a table gathered by token id, and the scatter-add of its backward.
 *
 * @since 0.0.0
 */
import { type HostArena, type Tensor } from "../runtime/Arena.js"
import { atLeast, isU32 } from "./internal/check.js"
import { type DispatchSpec, grid, over, u } from "./internal/dispatch.js"
import { ids, view } from "./internal/host.js"
import { builtins, header, linear } from "./Wgsl.js"

/** Looks up token embeddings (forward). */
export interface Embedding {
  readonly kind: "embedding"
  readonly table: Tensor
  readonly ids: Tensor
  readonly out: Tensor
  readonly tokens: number
  readonly dim: number
  /** The table holds rows [rowOffset, rowOffset + rows) of the vocabulary (a row block; 0 for a whole table). */
  readonly rowOffset: number
  /** Tokens whose id is outside the table get zeros (true), or are left as they are (false: a later block's). */
  readonly zeroOthers: boolean
}

/** Accumulates the embedding's gradient rows (the backward of {@link Embedding}). */
export interface EmbeddingBackward {
  readonly kind: "embeddingBackward"
  readonly ids: Tensor
  readonly dOut: Tensor
  readonly dTable: Tensor
  readonly tokens: number
  readonly dim: number
  /** As for {@link Embedding}: dTable holds rows [rowOffset, rowOffset + rows). */
  readonly rowOffset: number
}

/**
 * What both directions check and derive: the row width of the table (or its gradient), the token count (all of
 * `ids` unless given), u32 ids, and token rows [tokens, dim] (`rows`, named as the op names it) that fit.
 */
const tokenRows = (
  what: string,
  table: Tensor,
  ids: Tensor,
  rows: readonly [name: string, tensor: Tensor],
  tokens: number | undefined
) => {
  const dim = table.shape[table.shape.length - 1]
  const n = tokens ?? ids.size
  isU32(ids, `${what} ids`)
  atLeast(rows[1], n * dim, `${what} ${rows[0]}`)
  return { tokens: n, dim }
}

/** out[t] = table[ids[t]]; a table split into row blocks runs one dispatch per block. */
export const embedding = (
  o: { table: Tensor; ids: Tensor; out: Tensor; tokens?: number; rowOffset?: number; zeroOthers?: boolean }
): Embedding => {
  const { dim, tokens } = tokenRows("embedding", o.table, o.ids, ["out", o.out], o.tokens)
  return {
    kind: "embedding",
    table: o.table,
    ids: o.ids,
    out: o.out,
    tokens,
    dim,
    rowOffset: o.rowOffset ?? 0,
    zeroOthers: o.zeroOthers ?? true
  }
}

/** dTable[ids[t]] += dOut[t], deterministic; a dTable split into row blocks runs one dispatch per block. */
export const embeddingBackward = (
  o: { ids: Tensor; dOut: Tensor; dTable: Tensor; tokens?: number; rowOffset?: number }
): EmbeddingBackward => {
  const { dim, tokens } = tokenRows("embeddingBackward", o.dTable, o.ids, ["dOut", o.dOut], o.tokens)
  return {
    kind: "embeddingBackward",
    ids: o.ids,
    dOut: o.dOut,
    dTable: o.dTable,
    tokens,
    dim,
    rowOffset: o.rowOffset ?? 0
  }
}

// WGSL

/**
 * Gather of table rows; the table may be a row block holding vocabulary rows [row0, row0 + vocab): other ids
 * get zeros when `zero` is set, and are left alone otherwise (another block writes them).
 */
export const embeddingShader = header("n: u32, dim: u32, vocab: u32, row0: u32, zero: u32", [
  ["Table", "read"],
  ["Ids", "read", "u32"],
  ["Out", "read_write"]
]) + `
@compute @workgroup_size(256) fn main(${builtins}) {
  ${linear(256)}
  if (i >= p.n) { return; }
  let t = i / p.dim;
  let id = Ids[t];
  if (id >= p.row0 && id - p.row0 < p.vocab) {
    Out[i] = Table[(id - p.row0) * p.dim + i % p.dim];
  } else if (p.zero != 0u) {
    Out[i] = 0.0;
  }
}`

/**
 * Deterministic embedding backward without float atomics: one workgroup per token position; only the first
 * occurrence of each id does work, summing dOut over every later position with the same id in increasing
 * order, so each table row has exactly one writer and a fixed summation order.
 */
export const embeddingBackwardShader = header("tokens: u32, dim: u32, vocab: u32, row0: u32", [["Ids", "read", "u32"], [
  "DOut",
  "read"
], ["DTable", "read_write"]]) + `
var<workgroup> flag: array<u32, 64>;
@compute @workgroup_size(64) fn main(${builtins}) {
  let t = wid.y * nwg.x + wid.x;
  if (t >= p.tokens) { return; }
  let id = Ids[t];
  if (id < p.row0 || id - p.row0 >= p.vocab) { return; }
  let row = id - p.row0;
  var seen = 0u;
  for (var s = lid; s < t; s += 64u) { if (Ids[s] == id) { seen = 1u; } }
  flag[lid] = seen;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) { flag[lid] = flag[lid] | flag[lid + w]; }
    workgroupBarrier();
  }
  let earlier = workgroupUniformLoad(&flag[0]);
  if (earlier != 0u) { return; }
  for (var t0 = t; t0 < p.tokens; t0 += 64u) {
    let s = t0 + lid;
    var hit = 0u;
    if (s < p.tokens) { if (Ids[s] == id) { hit = 1u; } }
    workgroupBarrier();
    flag[lid] = hit;
    workgroupBarrier();
    for (var d = lid; d < p.dim; d += 64u) {
      var acc = DTable[row * p.dim + d];
      for (var j = 0u; j < 64u; j++) {
        if (flag[j] != 0u) { acc += DOut[(t0 + j) * p.dim + d]; }
      }
      DTable[row * p.dim + d] = acc;
    }
  }
}`

// Lowering

/** The dispatches of a `embedding` op. */
export const lowerEmbedding = (op: Embedding): Array<DispatchSpec> => {
  return [{
    label: "embedding",
    code: embeddingShader,
    bindings: [op.table, op.ids, op.out],
    params: [
      u(op.tokens * op.dim),
      u(op.dim),
      u(op.table.size / op.dim),
      u(op.rowOffset),
      u(op.zeroOthers ? 1 : 0)
    ],
    groups: over(op.tokens * op.dim, 256),
    flops: 0,
    bytes: 8 * op.tokens * op.dim
  }]
}

/** The dispatches of a `embeddingBackward` op. */
export const lowerEmbeddingBackward = (op: EmbeddingBackward): Array<DispatchSpec> => {
  return [{
    label: "embedding_backward",
    code: embeddingBackwardShader,
    bindings: [op.ids, op.dOut, op.dTable],
    params: [u(op.tokens), u(op.dim), u(op.dTable.size / op.dim), u(op.rowOffset)],
    groups: grid(op.tokens),
    flops: op.tokens * op.dim,
    bytes: 12 * op.tokens * op.dim
  }]
}

// CPU specification

type Num = ArrayLike<number>

/** out[t] = table[ids[t]] (rows of width d); ids outside the table give zeros. */
export const cpuEmbedding = (table: Num, ids: ArrayLike<number>, tokens: number, d: number): Float64Array => {
  const out = new Float64Array(tokens * d)
  const vocab = table.length / d
  for (let t = 0; t < tokens; t++) {
    if (ids[t] >= vocab) continue
    for (let j = 0; j < d; j++) out[t * d + j] = table[ids[t] * d + j]
  }
  return out
}

/**
 * dTable (+)= Σ_t onehot(ids[t]) ⊗ dOut[t], summed per row in increasing t (the GPU's order); into `dTable` when
 * given (the reference model adds onto the tied head's gradient), else into a new array.
 */
export const cpuEmbeddingBackward = (
  ids: ArrayLike<number>,
  dOut: Num,
  tokens: number,
  d: number,
  vocab: number,
  dTable: Float64Array = new Float64Array(vocab * d)
): Float64Array => {
  for (let t = 0; t < tokens; t++) {
    if (ids[t] >= vocab) continue
    for (let j = 0; j < d; j++) dTable[ids[t] * d + j] += dOut[t * d + j]
  }
  return dTable
}

// CPU twin

/** Runs a `embedding` op on a host arena with the CPU specification. */
export const twinEmbedding = (h: HostArena, op: Embedding): void => {
  // A table block holds vocabulary rows [rowOffset, rowOffset + rows).
  const rows = op.table.size / op.dim
  const table = view(h, op.table)
  const out = view(h, op.out, 0, op.tokens * op.dim)
  const local = Array.from(ids(h, op.ids).subarray(0, op.tokens), (id) => id >= op.rowOffset ? id - op.rowOffset : rows)
  const rowsOf = cpuEmbedding(table, local, op.tokens, op.dim)
  // Ids outside this block leave their rows to the other blocks unless the op zeroes them.
  for (let t = 0; t < op.tokens; t++) {
    if (local[t] < rows || op.zeroOthers) out.set(rowsOf.subarray(t * op.dim, (t + 1) * op.dim), t * op.dim)
  }
}

/** Runs a `embeddingBackward` op on a host arena with the CPU specification. */
export const twinEmbeddingBackward = (h: HostArena, op: EmbeddingBackward): void => {
  const dT = view(h, op.dTable)
  const local = Array.from(ids(h, op.ids), (id) => (id >= op.rowOffset ? id - op.rowOffset : 0xffffffff))
  const add = cpuEmbeddingBackward(local, view(h, op.dOut), op.tokens, op.dim, op.dTable.size / op.dim)
  for (let i = 0; i < dT.length; i++) dT[i] += add[i]
}
