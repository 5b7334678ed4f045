/**
 * The part of the WebAssembly JS API the CPU routes use, typed here because the project's TypeScript libraries
 * (ES2023 + Node's types, no DOM) do not declare it.
 *
 * @internal
 */
import { readFileSync } from "node:fs"

/**
 * A shared `WebAssembly.Memory`: the buffer the routes' tensors are views of, and `grow` (in 64 KiB pages).
 *
 * @since 0.0.0
 */
export interface WasmMemory {
  readonly buffer: SharedArrayBuffer
  grow(pages: number): number
}

export interface WasmModule {
  readonly _brand?: "WebAssembly.Module"
}

export interface WasmApi {
  validate(bytes: Uint8Array): boolean
  readonly Module: new(bytes: Uint8Array) => WasmModule
  readonly Instance: new(mod: WasmModule, imports: object) => { readonly exports: Record<string, unknown> }
  readonly Memory: new(descriptor: { initial: number; maximum: number; shared: true }) => WasmMemory
}

export const Wasm = (globalThis as unknown as { readonly WebAssembly: WasmApi }).WebAssembly

const compiled = new Map<string, WasmModule>()

/**
 * Compiles the committed kernel file `file` (beside this module) once per process; `what` names the kernels in the
 * error where this Node cannot run it.
 */
export const compileKernelFile = (file: string, what: string): WasmModule => {
  const cached = compiled.get(file)
  if (cached !== undefined) return cached
  const bytes = readFileSync(new URL(`./${file}`, import.meta.url))
  if (!Wasm.validate(bytes)) {
    throw new Error(
      `${what}: this Node (${process.version}) cannot compile WebAssembly SIMD128 with shared memory; use the js route`
    )
  }
  const mod = new Wasm.Module(bytes)
  compiled.set(file, mod)
  return mod
}

const PAGE = 65536
const MAX_PAGES = 65536

/** A shared memory of its own that hands out 64-byte aligned, zeroed f32 arrays and knows which arrays it holds. */
export interface OwnMemory {
  readonly memory: WasmMemory
  readonly alloc: (n: number) => Float32Array
  readonly holds: (a: ArrayBufferView) => boolean
}

/**
 * A new shared memory (grown on demand up to 4 GiB; past that an error names it (`what`) and says `fix`). A grow gives
 * `memory.buffer` a new object, and so can a garbage collection (V8 may drop a shared memory's buffer object that
 * nothing holds), while earlier views keep theirs (still valid: the memory is shared); so each view's own buffer is
 * recorded as it is made, and `holds` asks that record.
 */
export const ownMemory = (what: string, fix: string): OwnMemory => {
  const memory = new Wasm.Memory({ initial: 1, maximum: MAX_PAGES, shared: true })
  const buffers = new WeakSet<ArrayBufferLike>()
  let top = 64
  const alloc = (n: number) => {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`${what}: alloc(${n}) needs a whole number of elements ≥ 0`)
    const at = top
    top += Math.ceil((4 * n) / 64) * 64
    if (top > memory.buffer.byteLength) {
      if (top > MAX_PAGES * PAGE) throw new Error(`${what}: memory would pass 4 GiB (${top} bytes); ${fix}`)
      memory.grow(Math.ceil((top - memory.buffer.byteLength) / PAGE))
    }
    const buffer = memory.buffer
    buffers.add(buffer)
    return new Float32Array(buffer, at, n)
  }
  return { memory, alloc, holds: (a) => buffers.has(a.buffer) }
}
