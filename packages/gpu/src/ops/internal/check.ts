/** Shape checks the op constructors share (a wrong op fails where it is built, not on the device). */
import type { Tensor } from "../../runtime/Arena.js"

export const need = (cond: boolean, message: string) => {
  if (!cond) throw new RangeError(message)
}
export const atLeast = (t: Tensor, n: number, what: string) =>
  need(t.size >= n, `${what}: tensor "${t.name}" has ${t.size} elements, needs at least ${n}`)
export const isU32 = (t: Tensor, what: string) => need(t.dtype === "u32", `${what}: "${t.name}" must be u32`)
