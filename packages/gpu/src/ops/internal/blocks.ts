/**
 * Ops over tensors split into row blocks (a grouped tensor larger than one storage binding, see `Arena.plan`):
 * each such op becomes the same op over the blocks, so that every dispatch binds ranges of one buffer each.
 * The lowering and the CPU twin both run the expanded list, so the twin checks the per-block arithmetic too.
 *
 * - embedding: one gather per table block (the first zeroes ids that are in no block, the others skip them);
 * - embeddingBackward: one deterministic backward per dTable block (each owns its rows);
 * - matmul: a blocked operand splits the dimension its rows run along: M (A, or C), N (B stored [N, K]), or K
 *   (A stored [K, M], B stored [K, N]; later blocks accumulate with beta = 1 and no bias), through row strides;
 * - cast: pairs of blocks with the same rows (`TensorSpec.blockLike`).
 */
import { rowBlocks, type Tensor } from "../../runtime/Arena.js"
import type { Cast, Matmul, Op } from "../Ops.js"

const rowWidth = (t: Tensor) => t.size / t.shape[0]

const refuse = (what: string, t: Tensor) => {
  throw new RangeError(
    `${what}: "${t.name}" is split into ${t.blocks?.length ?? 1} row blocks (larger than one storage binding) and ` +
      `this use of it cannot be split; raise the binding limit or restructure the op`
  )
}

const splitMatmul = (op: Matmul): Array<Matmul> => {
  const natural = (t: Tensor, ld: number) => {
    if (ld !== rowWidth(t)) refuse("matmul (row stride)", t)
  }
  if (op.a.blocks !== undefined) {
    if (op.aOffset !== 0) refuse("matmul A (offset)", op.a)
    natural(op.a, op.lda)
    return rowBlocks(op.a).flatMap(({ row0, tensor }, i) =>
      op.transA
        ? splitMatmul({
          ...op,
          a: tensor,
          k: tensor.shape[0],
          bOffset: op.bOffset + (op.transB ? row0 : row0 * op.ldb),
          beta: i === 0 ? op.beta : 1,
          bias: i === 0 ? op.bias : undefined
        })
        : splitMatmul({ ...op, a: tensor, m: tensor.shape[0], cOffset: op.cOffset + row0 * op.ldc })
    )
  }
  if (op.b.blocks !== undefined) {
    if (op.bOffset !== 0) refuse("matmul B (offset)", op.b)
    natural(op.b, op.ldb)
    return rowBlocks(op.b).flatMap(({ row0, tensor }, i) =>
      op.transB
        ? splitMatmul({
          ...op,
          b: tensor,
          n: tensor.shape[0],
          cOffset: op.cOffset + row0,
          biasOffset: op.biasOffset + row0
        })
        : splitMatmul({
          ...op,
          b: tensor,
          k: tensor.shape[0],
          aOffset: op.aOffset + (op.transA ? row0 * op.lda : row0),
          beta: i === 0 ? op.beta : 1,
          bias: i === 0 ? op.bias : undefined
        })
    )
  }
  if (op.c.blocks !== undefined) {
    if (op.cOffset !== 0) refuse("matmul C (offset)", op.c)
    natural(op.c, op.ldc)
    return rowBlocks(op.c).flatMap(({ row0, tensor }) =>
      splitMatmul({
        ...op,
        c: tensor,
        m: tensor.shape[0],
        aOffset: op.aOffset + (op.transA ? row0 : row0 * op.lda)
      })
    )
  }
  return [op]
}

const splitCast = (op: Cast): Array<Cast> => {
  if (op.x.blocks === undefined && op.y.blocks === undefined) return [op]
  const xs = rowBlocks(op.x)
  const ys = rowBlocks(op.y)
  const same = xs.length === ys.length && xs.every((b, i) => b.tensor.size === ys[i].tensor.size)
  if (!same || op.n !== op.x.size) refuse("cast (blocks differ)", op.x.blocks === undefined ? op.y : op.x)
  return xs.map((b, i) => ({ ...op, x: b.tensor, y: ys[i].tensor, n: b.tensor.size }))
}

/** The op itself when it touches no blocked tensor; otherwise the per-block ops. */
export const expandBlocks = (op: Op): Array<Op> => {
  switch (op.kind) {
    case "matmul":
      return splitMatmul(op)
    case "cast":
      return splitCast(op)
    case "embedding":
      if (op.ids.blocks !== undefined || op.out.blocks !== undefined) refuse("embedding", op.out)
      return rowBlocks(op.table).map(({ row0, tensor }, i) => ({
        ...op,
        table: tensor,
        rowOffset: op.rowOffset + row0,
        zeroOthers: i === 0 ? op.zeroOthers : false
      }))
    case "embeddingBackward":
      if (op.ids.blocks !== undefined || op.dOut.blocks !== undefined) refuse("embeddingBackward", op.dOut)
      return rowBlocks(op.dTable).map(({ row0, tensor }) => ({
        ...op,
        dTable: tensor,
        rowOffset: op.rowOffset + row0
      }))
    case "gradNorm":
    case "adamw":
      return [op] // whole shards
    default: {
      for (const v of Object.values(op)) {
        if (typeof v === "object" && v !== null && "blocks" in v && (v as Tensor).blocks !== undefined) {
          refuse(op.kind, v as Tensor)
        }
      }
      return [op]
    }
  }
}
