/**
 * Runs a list of ops on a host arena with the plain `Reference` twins: the CPU specification of a whole step
 * program. Slow (f64 math, f32 storage, like the GPU's buffers), for tests at tiny shapes only.
 *
 * @example
 * ```ts
 * const h = Arena.host(plan)
 * h.f32("param.w").set(weights)
 * CpuTwin.run(h, ops)
 * ```
 *
 * @since 0.0.0
 */
import {
  ADAM_M,
  ADAM_V,
  GRAD,
  type HostArena,
  PARAM,
  Result,
  Scalar,
  scalarWords,
  STEP_RESULTS,
  STEP_SCALARS,
  type StepScalars,
  type Tensor
} from "../runtime/Arena.js"
import { f16ToF32, f32ToF16 } from "../runtime/HalfFloat.js"
import { expandBlocks } from "../runtime/internal/blocks.js"
import type { Op } from "./Ops.js"
import * as R from "./Reference.js"

const view = (h: HostArena, t: Tensor, offset = 0, length = t.size - offset) =>
  new Float32Array(h.buffers[t.buffer], t.offset + offset * 4, length)
/** Values of a tensor range as f32, decoding f16 storage. */
const values = (h: HostArena, t: Tensor, offset: number, length: number) =>
  t.dtype === "f16"
    ? f16ToF32(new Uint16Array(h.buffers[t.buffer], t.offset + offset * 2, length))
    : view(h, t, offset, length)
const ids = (h: HostArena, t: Tensor) => new Uint32Array(h.buffers[t.buffer], t.offset, t.size)

/** rows × cols values of a matrix stored with row stride `ld` from element `offset`, as a packed f32 array. */
const strided = (h: HostArena, t: Tensor, offset: number, rows: number, cols: number, ld: number) => {
  if (ld === cols) return values(h, t, offset, rows * cols)
  const out = new Float32Array(rows * cols)
  for (let r = 0; r < rows; r++) out.set(values(h, t, offset + r * ld, cols), r * cols)
  return out
}

/** Executes `ops` in order on `h` (ops over row-blocked tensors per block, as the device does). */
export const run = (h: HostArena, ops: ReadonlyArray<Op>): void => {
  for (const op of ops) for (const o of expandBlocks(op)) step1(h, o)
}

/** A micro-batch's inputs: tensor name → data (as `StepProgram.MicroBatch`). */
export type MicroBatch = ReadonlyArray<readonly [name: string, data: Float32Array | Uint32Array]>

/**
 * One training step on the host, mirroring `StepProgram.step`: writes the scalars, clears the gradients and
 * results, runs the micro-batch ops once per micro-batch (after writing its inputs), then the optimiser ops.
 * Returns a copy of `step.results`.
 */
export const step = (
  h: HostArena,
  program: { readonly microBatch: ReadonlyArray<Op>; readonly optimizer?: ReadonlyArray<Op> },
  scalars: StepScalars,
  microBatches: ReadonlyArray<MicroBatch>
): Float32Array => {
  h.f32(STEP_SCALARS).set(scalarWords(scalars))
  h.f32(STEP_RESULTS).fill(0)
  for (const shard of h.plan.groups.get(GRAD) ?? []) h.raw(shard).fill(0)
  for (const mb of microBatches) {
    for (const [name, data] of mb) {
      const t = h.plan.tensors.get(name)
      if (t === undefined) throw new RangeError(`CpuTwin.step: no tensor named "${name}"`)
      new Uint8Array(h.buffers[t.buffer], t.offset, data.byteLength).set(
        new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
      )
    }
    run(h, program.microBatch)
  }
  run(h, program.optimizer ?? [{ kind: "gradNorm" }, { kind: "adamw" }])
  return h.f32(STEP_RESULTS).slice()
}

const step1 = (h: HostArena, op: Op): void => {
  switch (op.kind) {
    case "custom":
      if (op.cpu === undefined) throw new RangeError(`CpuTwin: custom op "${op.label}" has no CPU twin`)
      op.cpu(h)
      return
    case "fill":
      view(h, op.out).fill(op.value)
      return
    case "cast":
      if (op.y.dtype === "f16") {
        new Uint16Array(h.buffers[op.y.buffer], op.y.offset, op.n).set(f32ToF16(view(h, op.x, 0, op.n)))
      } else view(h, op.y, 0, op.n).set(values(h, op.x, 0, op.n))
      return
    case "axpy": {
      const x = view(h, op.x, 0, op.n)
      const y = view(h, op.y, 0, op.n)
      for (let i = 0; i < op.n; i++) y[i] = op.alpha * x[i] + (op.beta !== 0 ? op.beta * y[i] : 0)
      return
    }
    case "matmul": {
      const [ar, ac] = op.transA ? [op.k, op.m] : [op.m, op.k]
      const [br, bc] = op.transB ? [op.n, op.k] : [op.k, op.n]
      const c = strided(h, op.c, op.cOffset, op.m, op.n, op.ldc)
      const out = R.gemm(
        strided(h, op.a, op.aOffset, ar, ac, op.lda),
        strided(h, op.b, op.bOffset, br, bc, op.ldb),
        op,
        op.beta !== 0 ? c : undefined,
        op.bias === undefined ? undefined : view(h, op.bias, op.biasOffset, op.n)
      )
      for (let r = 0; r < op.m; r++) {
        view(h, op.c, op.cOffset + r * op.ldc, op.n).set(out.subarray(r * op.n, (r + 1) * op.n))
      }
      return
    }
    case "embedding": {
      // A table block holds vocabulary rows [rowOffset, rowOffset + rows).
      const rows = op.table.size / op.dim
      const table = view(h, op.table)
      const out = view(h, op.out, 0, op.tokens * op.dim)
      const tokenIds = ids(h, op.ids)
      for (let t = 0; t < op.tokens; t++) {
        const r = tokenIds[t] - op.rowOffset
        if (r >= 0 && r < rows) out.set(table.subarray(r * op.dim, (r + 1) * op.dim), t * op.dim)
        else if (op.zeroOthers) out.fill(0, t * op.dim, (t + 1) * op.dim)
      }
      return
    }
    case "embeddingBackward": {
      const dT = view(h, op.dTable)
      const local = Array.from(ids(h, op.ids), (id) => (id >= op.rowOffset ? id - op.rowOffset : 0xffffffff))
      const add = R.embeddingBackward(local, view(h, op.dOut), op.tokens, op.dim, op.dTable.size / op.dim)
      for (let i = 0; i < dT.length; i++) dT[i] += add[i]
      return
    }
    case "rmsNorm": {
      const { rstd, y } = R.rmsNorm(view(h, op.x), view(h, op.weight), op.rows, op.dim, op.eps)
      view(h, op.y, 0, y.length).set(y)
      view(h, op.rstd, 0, op.rows).set(rstd)
      return
    }
    case "rmsNormBackward": {
      const n = op.rows * op.dim
      const { dw, dx } = R.rmsNormBackward(
        view(h, op.x, 0, n),
        view(h, op.weight),
        view(h, op.rstd),
        view(h, op.dy, 0, n),
        op.rows,
        op.dim
      )
      const dX = view(h, op.dx, 0, n)
      for (let i = 0; i < n; i++) dX[i] = dx[i] + (op.accumulate ? dX[i] : 0)
      const dW = view(h, op.dWeight)
      for (let i = 0; i < op.dim; i++) dW[i] += dw[i]
      return
    }
    case "rope": {
      const x = view(h, op.x, 0, op.tokens * op.heads * op.headDim)
      x.set(R.rope(x, ids(h, op.positions), op.tokens, op.heads, op.headDim, op.theta, op.inverse))
      return
    }
    case "attention": {
      const pos = op.positions === undefined ? undefined : ids(h, op.positions)
      const { lse, o } = R.attention(view(h, op.q), view(h, op.k), view(h, op.v), op.shape, pos)
      view(h, op.o, 0, o.length).set(o)
      view(h, op.lse, 0, lse.length).set(lse)
      return
    }
    case "attentionBackward": {
      const s = op.shape
      const nq = s.batch * s.seq * s.heads * s.headDim
      const nk = s.batch * s.seq * s.kvHeads * s.headDim
      const { dk, dq, dv } = R.attentionBackward(
        view(h, op.q, 0, nq),
        view(h, op.k, 0, nk),
        view(h, op.v, 0, nk),
        view(h, op.o, 0, nq),
        view(h, op.lse),
        view(h, op.dO, 0, nq),
        s,
        op.positions === undefined ? undefined : ids(h, op.positions)
      )
      view(h, op.dq, 0, nq).set(dq)
      view(h, op.dk, 0, nk).set(dk)
      view(h, op.dv, 0, nk).set(dv)
      return
    }
    case "swiglu":
      view(h, op.out, 0, op.gate.size).set(R.swiglu(view(h, op.gate), view(h, op.up, 0, op.gate.size)))
      return
    case "swigluBackward": {
      const n = op.gate.size
      const { dGate, dUp } = R.swigluBackward(view(h, op.gate), view(h, op.up, 0, n), view(h, op.dOut, 0, n))
      view(h, op.dGate, 0, n).set(dGate)
      view(h, op.dUp, 0, n).set(dUp)
      return
    }
    case "tokenLogprobs": {
      const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
      const r = R.tokenLogprobs(
        view(h, op.logits, 0, op.rows * op.vocab),
        targets,
        op.rows,
        op.vocab,
        op.invTemperature
      )
      view(h, op.logp, op.rowOffset, op.rows).set(r.logp)
      view(h, op.entropy, op.rowOffset, op.rows).set(r.entropy)
      view(h, op.lse, op.rowOffset, op.rows).set(r.lse)
      return
    }
    case "tokenLogprobsBackward": {
      const z = view(h, op.logits, 0, op.rows * op.vocab)
      const targets = ids(h, op.targets).subarray(op.rowOffset, op.rowOffset + op.rows)
      z.set(R.tokenLogprobsBackward(
        z,
        targets,
        op.rows,
        op.vocab,
        op.invTemperature,
        view(h, op.dLogp, op.rowOffset, op.rows),
        op.dEntropy === undefined ? undefined : view(h, op.dEntropy, op.rowOffset, op.rows)
      ))
      return
    }
    case "maskedMean": {
      const r = R.maskedMean(view(h, op.x), view(h, op.mask), op.rows, op.cols, op.scale)
      const out = view(h, op.out, op.outIndex, op.rows)
      for (let i = 0; i < op.rows; i++) out[i] = r.out[i] + (op.accumulate ? out[i] : 0)
      if (op.dx !== undefined) {
        const dx = view(h, op.dx, 0, r.dx.length)
        for (let i = 0; i < dx.length; i++) dx[i] = op.gradScale * r.dx[i]
      }
      return
    }
    case "gradNorm": {
      const s = h.f32(STEP_SCALARS)
      const res = h.f32(STEP_RESULTS)
      const g = R.gradNorm((h.plan.groups.get(GRAD) ?? []).map((i) => h.raw(i)), s[Scalar.maxGradNorm])
      res[Result.gradNorm] = g.norm
      res[Result.clipScale] = g.clip
      res[Result.skipped] = g.skipped ? 1 : 0
      return
    }
    case "adamw": {
      const s = h.f32(STEP_SCALARS)
      const res = h.f32(STEP_RESULTS)
      if (res[Result.skipped] !== 0) return
      const hyper: R.AdamWStep = {
        lr: s[Scalar.lr],
        beta1: s[Scalar.beta1],
        beta2: s[Scalar.beta2],
        eps: s[Scalar.eps],
        weightDecay: s[Scalar.weightDecay],
        biasCorrection1: s[Scalar.biasCorrection1],
        biasCorrection2: s[Scalar.biasCorrection2]
      }
      const [ps, gs, ms, vs] = [PARAM, GRAD, ADAM_M, ADAM_V].map((g) => h.plan.groups.get(g) ?? [])
      ps.forEach((shard, i) => {
        const flags = h.u32(`opt.decay.${i}`)
        R.adamw(
          h.raw(shard),
          h.raw(gs[i]),
          h.raw(ms[i]),
          h.raw(vs[i]),
          (j) => flags[Math.floor(j / 256)] !== 0,
          hyper,
          res[Result.clipScale]
        )
      })
      return
    }
  }
}
