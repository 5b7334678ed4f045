/**
 * The AdamW moments of a Qwen3 arena as host data. A moment group ("adam.m", "adam.v") is a few shard buffers, so
 * it moves as whole shards (one read or one write per shard) and is cut into per-parameter views on the host.
 * A parameter split into row blocks (larger than one binding) has its blocks in several shards; its moment is
 * their rows in order.
 */
import * as Arena from "../../runtime/Arena.js"

/** The parameters of a moment group, by Hugging Face name, with where each lives. */
export const groupTensors = (plan: Arena.ArenaPlan, group: string): ReadonlyMap<string, Arena.Tensor> => {
  const out = new Map<string, Arena.Tensor>()
  for (const [name, t] of plan.tensors) if (t.group === group) out.set(name.slice(group.length + 1), t)
  return out
}

/**
 * Cuts downloaded shards (`shards[i]` is the i-th shard of the group) into per-parameter arrays: views (no copy),
 * or for a parameter split into row blocks, its blocks' rows copied into one array.
 */
export const unpackGroup = (
  plan: Arena.ArenaPlan,
  group: string,
  shards: ReadonlyArray<ArrayBuffer>
): Map<string, Float32Array> => {
  const order = plan.groups.get(group) ?? []
  const out = new Map<string, Float32Array>()
  const view = (b: Arena.Tensor) => new Float32Array(shards[order.indexOf(b.buffer)], b.offset, b.size)
  for (const [name, t] of groupTensors(plan, group)) {
    if (t.blocks === undefined) {
      out.set(name, view(t))
      continue
    }
    const whole = new Float32Array(t.size)
    let at = 0
    for (const { tensor: b } of Arena.rowBlocks(t)) {
      whole.set(view(b), at)
      at += b.size
    }
    out.set(name, whole)
  }
  return out
}

/**
 * Checks `given` against the group's parameters: every parameter present with its element count, nothing else.
 * Returns the first problem (naming the parameter, the expected shape and what was given), or undefined.
 */
export const checkGroup = (
  plan: Arena.ArenaPlan,
  group: string,
  label: string,
  given: ReadonlyMap<string, Float32Array>
): string | undefined => {
  const expected = groupTensors(plan, group)
  for (const name of given.keys()) {
    if (!expected.has(name)) {
      const known = [...expected.keys()].slice(0, 6).join(", ")
      return `Optimizer state ${label} has a moment "${name}", but the model has no such parameter (it has ${known}, …).`
    }
  }
  for (const [name, t] of expected) {
    const data = given.get(name)
    if (data === undefined) {
      return `Optimizer state ${label} lacks the moment of "${name}" (shape [${t.shape.join(", ")}]); ` +
        `pass every parameter's moment, as optimizerState returns them.`
    }
    if (data.length !== t.size) {
      return `Optimizer state ${label} "${name}" has ${data.length} elements; the model's parameter "${name}" ` +
        `has shape [${t.shape.join(", ")}] (${t.size} elements).`
    }
  }
  return undefined
}

/** Lays a checked group out as shard images (zero padding between tensors), ready for one write per shard. */
export const packGroup = (
  plan: Arena.ArenaPlan,
  group: string,
  given: ReadonlyMap<string, Float32Array>
): Array<{ readonly buffer: number; readonly data: Float32Array }> => {
  const order = plan.groups.get(group) ?? []
  const images = order.map((b) => ({ buffer: b, data: new Float32Array(plan.buffers[b].bytes / 4) }))
  for (const [name, t] of groupTensors(plan, group)) {
    const data = given.get(name)!
    let at = 0
    for (const { tensor: b } of Arena.rowBlocks(t)) {
      images[order.indexOf(b.buffer)].data.set(data.subarray(at, at + b.size), b.offset / 4)
      at += b.size
    }
  }
  return images
}
