/**
 * Assembles the WebAssembly sgemm (sgemmWat.ts) with wabt — a JavaScript build of the WebAssembly Binary Toolkit
 * from npm, so no system compiler is needed. `npm run build:wasm` writes the committed `sgemm-*.wasm` beside this
 * file; a test rebuilds them and fails when the bytes differ from the committed ones.
 *
 * @internal
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import wabt from "wabt"
import type { WasmVariant } from "./sgemmWat.js"
import { sgemmWat } from "./sgemmWat.js"

export const variants: ReadonlyArray<WasmVariant> = ["simd", "relaxed-simd"]

export const wasmFileName = (variant: WasmVariant) => `sgemm-${variant}.wasm`

/** The folder the committed .wasm files live in (this file's own). */
export const committedDir = fileURLToPath(new URL(".", import.meta.url))

export const assemble = async (variant: WasmVariant): Promise<Uint8Array> => {
  const w = await wabt()
  const features = { simd: true, threads: true, relaxed_simd: variant === "relaxed-simd" }
  const mod = w.parseWat(wasmFileName(variant).replace(".wasm", ".wat"), sgemmWat(variant), features)
  try {
    // wabt's validate takes the feature set too (its .d.ts omits the parameter); without it shared memory is refused.
    ;(mod.validate as (f: typeof features) => void).call(mod, features)
    return mod.toBinary({ log: false, write_debug_names: false }).buffer
  } finally {
    mod.destroy()
  }
}

/** Builds every variant into `dir`; returns the paths written. */
export const buildInto = async (dir: string): Promise<Array<string>> => {
  mkdirSync(dir, { recursive: true })
  const out: Array<string> = []
  for (const variant of variants) {
    const path = join(dir, wasmFileName(variant))
    writeFileSync(path, await assemble(variant))
    out.push(path)
  }
  return out
}
