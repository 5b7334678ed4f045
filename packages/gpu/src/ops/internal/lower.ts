/** Lowering of ops to dispatch specs: kernel source, tensor bindings, parameter words, grid, cost estimate. */
import {
  ADAM_M,
  ADAM_V,
  type ArenaPlan,
  GRAD,
  normGroups,
  PARAM,
  STEP_RESULTS,
  STEP_SCALARS,
  tensorOf
} from "../../runtime/Arena.js"
import type { Tensor } from "../../runtime/Arena.js"
import { expandBlocks } from "../../runtime/internal/blocks.js"
import type { Op } from "../Ops.js"
import * as SM from "./subgroupMatrix.js"
import * as W from "./wgsl.js"

export type Word = readonly ["u" | "f", number]
export const u = (x: number): Word => ["u", x]
export const f = (x: number): Word => ["f", x]

/**
 * A buffer range to bind: a planned tensor, a whole buffer of the plan (a group shard), or the program's
 * scratch buffer (live only within one op; the program allocates the largest any op asks for).
 */
export type Bind = Tensor | { readonly shard: number; readonly bytes: number } | { readonly scratch: number }

export interface DispatchSpec {
  readonly label: string
  readonly code: string
  readonly bindings: ReadonlyArray<Bind>
  readonly params: ReadonlyArray<Word>
  readonly groups: readonly [number, number, number]
  /** Estimated floating-point operations and bytes moved, for the profile's GFLOP/s and GB/s. */
  readonly flops: number
  readonly bytes: number
  /** Device features the kernel needs (checked by `Program.compile` before compiling). */
  readonly features?: ReadonlyArray<string>
}

const MAX_DIM = 65535
/** A 1-D launch of `count` workgroups folded into a 2-D grid. */
export const grid = (count: number): readonly [number, number, number] =>
  count <= MAX_DIM ? [Math.max(1, count), 1, 1] : [MAX_DIM, Math.ceil(count / MAX_DIM), 1]
const over = (n: number, wg: number) => grid(Math.ceil(n / wg))

/** The dispatches of an op (one op over a tensor split into row blocks lowers per block). */
export const lower = (op: Op, plan: ArenaPlan): Array<DispatchSpec> =>
  expandBlocks(op).flatMap((o) => lowerOne(o, plan))

const lowerOne = (op: Op, plan: ArenaPlan): Array<DispatchSpec> => {
  switch (op.kind) {
    case "cast": {
      const toF16 = op.y.dtype === "f16"
      return [{
        label: toF16 ? "cast_f32_f16" : "cast_f16_f32",
        code: toF16 ? W.castToF16 : W.castToF32,
        bindings: [op.x, op.y],
        params: [u(op.n)],
        groups: over(Math.ceil(op.n / 2), 256),
        flops: 0,
        bytes: 6 * op.n
      }]
    }
    case "custom":
      return [{
        label: op.label,
        code: op.code,
        bindings: op.bindings,
        params: op.params,
        groups: op.groups,
        flops: op.flops,
        bytes: op.bytes
      }]
    case "fill":
      return [{
        label: "fill",
        code: W.fill,
        bindings: [op.out],
        params: [u(op.out.size), f(op.value)],
        groups: over(op.out.size, 256),
        flops: 0,
        bytes: op.out.bytes
      }]
    case "axpy":
      return [{
        label: "axpy",
        code: W.axpy,
        bindings: [op.x, op.y],
        params: [u(op.n), f(op.alpha), f(op.beta)],
        groups: over(op.n, 256),
        flops: 2 * op.n,
        bytes: 12 * op.n
      }]
    case "matmul": {
      const flags = { transA: op.transA, transB: op.transB, bias: op.bias !== undefined }
      if (
        op.tier === "subgroupMatrix" && op.subgroupMatrix !== undefined && op.a.dtype === "f16" && op.b.dtype === "f16"
      ) {
        const sm = op.subgroupMatrix
        const tile = SM.tileOf(sm)
        return [{
          label: `matmul_${op.transA ? "T" : "N"}${op.transB ? "T" : "N"}${
            op.bias ? "_bias" : ""
          }_sgmat${sm.m}x${sm.n}x${sm.k}`,
          code: SM.matmulSubgroupMatrix(flags, sm),
          bindings: op.bias === undefined ? [op.a, op.b, op.c] : [op.a, op.b, op.c, op.bias],
          params: matmulParams(op),
          groups: [Math.ceil(op.n / tile.tn), Math.ceil(op.m / tile.tm), 1],
          flops: 2 * op.m * op.n * op.k,
          bytes: 2 * op.m * op.k + 2 * op.k * op.n + 4 * op.m * op.n * (op.beta !== 0 ? 2 : 1),
          features: ["chromium-experimental-subgroup-matrix", "shader-f16", "subgroups"]
        }]
      }
      const tiling = matmulTiling(op)
      const half = `${tiling?.f16A === true ? "_f16a" : ""}${tiling?.f16B === true ? "_f16b" : ""}`
      const shaderF16 = tiling?.shaderF16 === true
      const h = shaderF16 ? (tiling?.f16Math === true ? "hh" : "h") : ""
      const tier = tiling === undefined ? "" : `_${tiling.tm}${h}${tiling.vec4 ? "v4" : ""}${half}`
      const label = `matmul_${op.transA ? "T" : "N"}${op.transB ? "T" : "N"}${op.bias ? "_bias" : ""}${tier}`
      const tile = tiling ?? { tm: W.MM_TILE.m, tn: W.MM_TILE.n }
      return [{
        label,
        code: tiling === undefined ? W.matmul(flags) : W.matmulTiled(flags, tiling),
        bindings: op.bias === undefined ? [op.a, op.b, op.c] : [op.a, op.b, op.c, op.bias],
        params: matmulParams(op),
        groups: [Math.ceil(op.n / tile.tn), Math.ceil(op.m / tile.tm), 1],
        flops: 2 * op.m * op.n * op.k,
        bytes: op.a.bytes / op.a.size * op.m * op.k + op.b.bytes / op.b.size * op.k * op.n +
          4 * op.m * op.n * (op.beta !== 0 ? 2 : 1),
        ...(shaderF16 ? { features: ["shader-f16"] } : {})
      }]
    }
    case "embedding":
      return [{
        label: "embedding",
        code: W.embedding,
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
    case "embeddingBackward":
      return [{
        label: "embedding_backward",
        code: W.embeddingBackward,
        bindings: [op.ids, op.dOut, op.dTable],
        params: [u(op.tokens), u(op.dim), u(op.dTable.size / op.dim), u(op.rowOffset)],
        groups: grid(op.tokens),
        flops: op.tokens * op.dim,
        bytes: 12 * op.tokens * op.dim
      }]
    case "rmsNorm":
      return [{
        label: "rmsnorm",
        code: W.rmsNorm,
        bindings: [op.x, op.weight, op.y, op.rstd],
        params: [u(op.rows), u(op.dim), f(op.eps)],
        groups: grid(op.rows),
        flops: 4 * op.rows * op.dim,
        bytes: 8 * op.rows * op.dim
      }]
    case "rmsNormBackward":
      return [{
        label: "rmsnorm_backward_x",
        code: W.rmsNormBackwardX,
        bindings: [op.x, op.weight, op.rstd, op.dy, op.dx],
        params: [u(op.rows), u(op.dim), f(op.accumulate ? 1 : 0)],
        groups: grid(op.rows),
        flops: 8 * op.rows * op.dim,
        bytes: 16 * op.rows * op.dim
      }, {
        label: "rmsnorm_backward_w_partial",
        code: W.rmsNormBackwardWPartial,
        bindings: [op.x, op.rstd, op.dy, { scratch: blocks(op.rows) * op.dim * 4 }],
        params: [u(op.rows), u(op.dim), u(Math.ceil(op.rows / blocks(op.rows)))],
        groups: [Math.ceil(op.dim / 64), blocks(op.rows), 1],
        flops: 3 * op.rows * op.dim,
        bytes: 8 * op.rows * op.dim
      }, {
        label: "rmsnorm_backward_w_finish",
        code: W.rmsNormBackwardWFinish,
        bindings: [{ scratch: blocks(op.rows) * op.dim * 4 }, op.dWeight],
        params: [u(op.dim), u(blocks(op.rows))],
        groups: over(op.dim, 64),
        flops: blocks(op.rows) * op.dim,
        bytes: 4 * blocks(op.rows) * op.dim
      }]
    case "rope": {
      const n = op.tokens * op.heads * op.headDim / 2
      return [{
        label: "rope",
        code: W.rope,
        bindings: [op.x, op.positions],
        params: [u(op.tokens), u(op.heads), u(op.headDim), f(op.theta), f(op.inverse ? -1 : 1)],
        groups: over(n, 256),
        flops: 6 * 2 * n,
        bytes: 16 * n
      }]
    }
    case "attention": {
      const s = op.shape
      const rows = s.batch * s.seq * s.heads
      const pairs = s.batch * s.heads * s.seq * (s.seq + 1) / 2
      return [{
        label: `attention${op.kernel === "tiled" ? "_tiled" : ""}_hd${s.headDim}${packed(op.positions)}`,
        code: op.kernel === "tiled"
          ? W.attentionTiled(s.headDim, op.positions !== undefined)
          : W.attention(s.headDim, op.positions !== undefined),
        bindings: withPositions([op.q, op.k, op.v, op.o, op.lse], op.positions),
        params: attnParams(s),
        groups: op.kernel === "tiled"
          ? grid(s.batch * s.heads * Math.ceil(s.seq / W.ATTN_TILE))
          : over(rows, 64),
        flops: 4 * pairs * s.headDim,
        bytes: 8 * pairs * s.headDim
      }]
    }
    case "attentionBackward": {
      const s = op.shape
      const tiled = op.kernel === "tiled" ? "_tiled" : ""
      const rows = s.batch * s.seq * s.heads
      const pairs = s.batch * s.heads * s.seq * (s.seq + 1) / 2
      return [{
        label: `attention_delta_hd${s.headDim}`,
        code: W.attentionDelta(s.headDim),
        bindings: [op.o, op.dO, op.delta],
        params: [u(rows)],
        groups: over(rows, 64),
        flops: 2 * rows * s.headDim,
        bytes: 8 * rows * s.headDim
      }, {
        label: `attention_backward_q${tiled}_hd${s.headDim}${packed(op.positions)}`,
        code: op.kernel === "tiled"
          ? W.attentionBackwardQTiled(s.headDim, op.positions !== undefined)
          : W.attentionBackwardQ(s.headDim, op.positions !== undefined),
        bindings: withPositions([op.q, op.k, op.v, op.dO, op.lse, op.delta, op.dq], op.positions),
        params: attnParams(s),
        groups: op.kernel === "tiled" ? grid(s.batch * s.heads * Math.ceil(s.seq / 16)) : over(rows, 64),
        flops: 6 * pairs * s.headDim,
        bytes: 12 * pairs * s.headDim
      }, {
        label: `attention_backward_kv${tiled}_hd${s.headDim}${packed(op.positions)}`,
        code: op.kernel === "tiled"
          ? W.attentionBackwardKVTiled(s.headDim, op.positions !== undefined)
          : W.attentionBackwardKV(s.headDim, op.positions !== undefined),
        bindings: withPositions([op.q, op.k, op.v, op.dO, op.lse, op.delta, op.dk, op.dv], op.positions),
        params: attnParams(s),
        groups: op.kernel === "tiled"
          ? grid(s.batch * s.kvHeads * Math.ceil(s.seq / 16))
          : over(s.batch * s.seq * s.kvHeads, 64),
        flops: 8 * pairs * s.headDim,
        bytes: 8 * pairs * s.headDim
      }]
    }
    case "swiglu":
      return [{
        label: "swiglu",
        code: W.swiglu,
        bindings: [op.gate, op.up, op.out],
        params: [u(op.gate.size)],
        groups: over(op.gate.size, 256),
        flops: 6 * op.gate.size,
        bytes: 12 * op.gate.size
      }]
    case "swigluBackward":
      return [{
        label: "swiglu_backward",
        code: W.swigluBackward,
        bindings: [op.gate, op.up, op.dOut, op.dGate, op.dUp],
        params: [u(op.gate.size)],
        groups: over(op.gate.size, 256),
        flops: 12 * op.gate.size,
        bytes: 20 * op.gate.size
      }]
    case "tokenLogprobs":
      return [{
        label: "token_logprobs",
        code: W.tokenLogprobs,
        bindings: [op.logits, op.targets, op.logp, op.entropy, op.lse],
        params: [u(op.rows), u(op.vocab), u(op.rowOffset), f(op.invTemperature)],
        groups: grid(op.rows),
        flops: 5 * op.rows * op.vocab,
        bytes: 8 * op.rows * op.vocab
      }]
    case "tokenLogprobsBackward": {
      const entropy = op.dEntropy !== undefined
      const bindings: Array<Bind> = [op.logits, op.targets, op.lse, op.entropy, op.dLogp]
      if (op.dEntropy !== undefined) bindings.push(op.dEntropy)
      return [{
        label: `token_logprobs_backward${entropy ? "_entropy" : ""}`,
        code: W.tokenLogprobsBackward(entropy),
        bindings,
        params: [u(op.rows), u(op.vocab), u(op.rowOffset), f(op.invTemperature)],
        groups: over(op.rows * op.vocab, 256),
        flops: 8 * op.rows * op.vocab,
        bytes: 8 * op.rows * op.vocab
      }]
    }
    case "maskedMean": {
      const bindings: Array<Bind> = [op.x, op.mask, op.out]
      if (op.dx !== undefined) bindings.push(op.dx)
      return [{
        label: `masked_mean${op.dx !== undefined ? "_grad" : ""}`,
        code: W.maskedMean(op.dx !== undefined),
        bindings,
        params: [u(op.rows), u(op.cols), u(op.outIndex), u(op.accumulate ? 1 : 0), f(op.scale), f(op.gradScale)],
        groups: grid(op.rows),
        flops: 2 * op.x.size,
        bytes: 12 * op.x.size
      }]
    }
    case "gradNorm": {
      const shards = plan.groups.get(GRAD) ?? []
      if (shards.length === 0) throw new RangeError("gradNorm: the plan has no \"grad\" group (use Arena.parameters)")
      const partials = tensorOf(plan, "opt.partials")
      const out: Array<DispatchSpec> = []
      let off = 0
      for (const shard of shards) {
        const n = plan.buffers[shard].bytes / 4
        const g = normGroups(n)
        out.push({
          label: "grad_norm_partials",
          code: W.normPartials,
          bindings: [{ shard, bytes: plan.buffers[shard].bytes }, partials],
          params: [u(n), u(off)],
          groups: [g, 1, 1],
          flops: 2 * n,
          bytes: 4 * n
        })
        off += g
      }
      out.push({
        label: "grad_norm_finish",
        code: W.normFinish,
        bindings: [partials, tensorOf(plan, STEP_SCALARS), tensorOf(plan, STEP_RESULTS)],
        params: [u(off)],
        groups: [1, 1, 1],
        flops: off,
        bytes: 4 * off
      })
      return out
    }
    case "adamw": {
      const shards = [PARAM, GRAD, ADAM_M, ADAM_V].map((g) => plan.groups.get(g) ?? [])
      if (shards[0].length === 0) throw new RangeError("adamw: the plan has no \"param\" group (use Arena.parameters)")
      return shards[0].map((_, i) => {
        const n = plan.buffers[shards[0][i]].bytes / 4
        const whole = (g: number) => ({ shard: shards[g][i], bytes: plan.buffers[shards[g][i]].bytes })
        return {
          label: "adamw",
          code: W.adamw,
          bindings: [
            whole(0),
            whole(1),
            whole(2),
            whole(3),
            tensorOf(plan, `opt.decay.${i}`),
            tensorOf(plan, STEP_SCALARS),
            tensorOf(plan, STEP_RESULTS)
          ],
          params: [u(n)],
          groups: over(n, 256),
          flops: 12 * n,
          bytes: 28 * n
        }
      })
    }
  }
}

const matmulParams = (op: Extract<Op, { kind: "matmul" }>) => [
  u(op.m),
  u(op.n),
  u(op.k),
  u(op.aOffset),
  u(op.bOffset),
  u(op.cOffset),
  u(op.biasOffset),
  f(op.alpha),
  f(op.beta),
  u(op.lda),
  u(op.ldb),
  u(op.ldc)
]

/** The tiling of a matmul's tier (undefined: the original 64×64 kernel); vec4 only where alignment allows. */
const matmulTiling = (op: Extract<Op, { kind: "matmul" }>): W.MatmulTiling | undefined => {
  const f16A = op.a.dtype === "f16"
  const f16B = op.b.dtype === "f16"
  if (op.tier === "tiled64" && !f16A && !f16B) return undefined
  // vec4 applies to f32 operands; both must be aligned (one flag for the pair keeps the pipeline count down).
  const quad = (contiguous: number, ld: number, offset: number) =>
    contiguous % 4 === 0 && ld % 4 === 0 && offset % 4 === 0
  const aContiguous = op.transA ? op.m : op.k
  const bContiguous = op.transB ? op.k : op.n
  const aligned = (f16A || (quad(aContiguous, op.lda, op.aOffset) && op.a.offset % 16 === 0)) &&
    (f16B || (quad(bContiguous, op.ldb, op.bOffset) && op.b.offset % 16 === 0))
  // The subgroup-matrix tier falls back to the shader-f16 tier where it does not apply (an f32 operand).
  if (op.tier === "tiled128h" || op.tier === "tiled128hh" || op.tier === "subgroupMatrix") {
    // vec4<f16> loads: 4 halves (8 bytes) along the contiguous dim of each f16 operand.
    const half4 = (!f16A || (quad(aContiguous, op.lda, op.aOffset) && op.a.offset % 8 === 0)) &&
      (!f16B || (quad(bContiguous, op.ldb, op.bOffset) && op.b.offset % 8 === 0))
    const shaderF16 = (f16A || f16B) && half4
    const f16Math = op.tier === "tiled128hh" && shaderF16 && f16A && f16B
    return {
      tm: 128,
      tn: 128,
      tk: shaderF16 ? 16 : 8,
      vec4: aligned && !(f16A && f16B),
      f16A,
      f16B,
      shaderF16,
      ...(f16Math ? { f16Math } : {})
    }
  }
  const size = op.tier.startsWith("tiled128") ? { tm: 128, tn: 128, tk: 8 } : { tm: 64, tn: 64, tk: 16 }
  return { ...size, vec4: op.tier.endsWith("v4") && aligned, f16A, f16B }
}

/** Row blocks of the two-stage RMSNorm weight gradient: ~32 rows each, at most 256 blocks. */
const blocks = (rows: number) => Math.min(256, Math.ceil(rows / 32))

const packed = (positions: Tensor | undefined) => (positions === undefined ? "" : "_packed")
const withPositions = (bindings: Array<Bind>, positions: Tensor | undefined) =>
  positions === undefined ? bindings : [...bindings, positions]

const attnParams = (s: { batch: number; seq: number; heads: number; kvHeads: number; scale: number }) => [
  u(s.batch),
  u(s.seq),
  u(s.heads),
  u(s.kvHeads),
  f(s.scale)
]
