/**
 * The part of the WebAssembly JS API the CPU routes use, typed here because the project's TypeScript libraries
 * (ES2023 + Node's types, no DOM) do not declare it.
 *
 * @internal
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
