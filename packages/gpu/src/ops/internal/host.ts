/** Typed views of a host arena's tensors, for the CPU twins of the ops. */
import type { HostArena, Tensor } from "../../runtime/Arena.js"
import { f16ToF32 } from "../../runtime/HalfFloat.js"

export const view = (h: HostArena, t: Tensor, offset = 0, length = t.size - offset) =>
  new Float32Array(h.buffers[t.buffer], t.offset + offset * 4, length)
/** Values of a tensor range as f32, decoding f16 storage. */
export const values = (h: HostArena, t: Tensor, offset: number, length: number) =>
  t.dtype === "f16"
    ? f16ToF32(new Uint16Array(h.buffers[t.buffer], t.offset + offset * 2, length))
    : view(h, t, offset, length)
export const ids = (h: HostArena, t: Tensor) => new Uint32Array(h.buffers[t.buffer], t.offset, t.size)

/** rows × cols values of a matrix stored with row stride `ld` from element `offset`, as a packed f32 array. */
export const strided = (h: HostArena, t: Tensor, offset: number, rows: number, cols: number, ld: number) => {
  if (ld === cols) return values(h, t, offset, rows * cols)
  const out = new Float32Array(rows * cols)
  for (let r = 0; r < rows; r++) out.set(values(h, t, offset + r * ld, cols), r * cols)
  return out
}
