/**
 * What every op's WGSL shares: the parameter-block header, the builtins, the linear index and a 64-lane reduction. Binding 0 of every kernel is its uniform parameter block (one 256-byte slot of
 * the program's parameter buffer); bindings 1.. are tensors, in the order the lowering lists them.
 * Large 1-D launches use a 2-D grid (the per-dimension limit is 65535 workgroups): the linear workgroup index
 * is `wid.y * nwg.x + wid.x`.
 */

export type Access = "read" | "read_write"

/** A kernel's tensor binding: its WGSL name, access and element type (default f32). */
export type Binding = readonly [name: string, access: Access, type?: "f32" | "u32"]

/** A kernel's WGSL header: the uniform parameter struct at binding 0, then one storage array per binding. */
export const header = (params: string, bindings: ReadonlyArray<Binding>) =>
  `struct P { ${params} }\n@group(0) @binding(0) var<uniform> p: P;\n` +
  bindings.map(([name, access, type], i) =>
    `@group(0) @binding(${i + 1}) var<storage, ${access}> ${name}: array<${type ?? "f32"}>;`
  ).join("\n") + "\n"

/** The compute builtins every kernel's entry point takes. */
export const builtins =
  "@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32"

/** WGSL that computes the linear element index `i` of a 1-D launch of `wg`-wide workgroups on the 2-D grid. */
export const linear = (wg: number) => `let wg = wid.y * nwg.x + wid.x;\n  let i = wg * ${wg}u + lid;`

/** WGSL that reduces the 64-lane workgroup array `arr` to `arr[0]` with `op`. */
export const reduce64 = (arr: string, op: (a: string, b: string) => string) => `
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) { ${arr}[lid] = ${op(`${arr}[lid]`, `${arr}[lid + w]`)}; }
    workgroupBarrier();
  }`
