/**
 * Helper threads for the WebAssembly sgemm: each instantiates the same module over the same shared memory, waits on
 * its slot of a shared control block, runs one part of a call (a band of C's rows or columns) and signals done.
 * The calling thread runs the first part itself and then waits (Atomics.wait) for the others — the CPU device calls
 * from its own worker, so blocking it is fine; Node also allows it on the main thread.
 *
 * Each element of C is summed in the same order whatever the split (a part is a whole sub-problem with the same
 * blocking), so results are bit-identical for every thread count.
 *
 * @internal
 */
import { Worker } from "node:worker_threads"
import type { WasmMemory, WasmModule } from "./wasmApi.js"

/** Int32 slots per helper in the control block: seq, done, failed, then the 14 sgemm arguments. */
const SLOT = 20
const SEQ = 0
const DONE = 1
const FAILED = 2
const ARGS = 3

// The helper's code, plain JavaScript so the thread needs no TypeScript loader. Arguments are read as i32 except
// alpha (ARGS+5) and beta (ARGS+10), stored as f32 bits. A negative seq asks the thread to end.
const helperSource = `
const { workerData } = require("node:worker_threads")
const { module, memory, control, slot } = workerData
const sgemm = new WebAssembly.Instance(module, { env: { memory } }).exports.sgemm
const i32 = new Int32Array(control), f32 = new Float32Array(control)
const b = slot * ${SLOT}
let seen = 0
for (;;) {
  Atomics.wait(i32, b + ${SEQ}, seen)
  const seq = Atomics.load(i32, b + ${SEQ})
  if (seq < 0) break
  seen = seq
  const a = b + ${ARGS}
  try {
    sgemm(i32[a], i32[a + 1], i32[a + 2], i32[a + 3], i32[a + 4], f32[a + 5], i32[a + 6], i32[a + 7], i32[a + 8],
      i32[a + 9], f32[a + 10], i32[a + 11], i32[a + 12], i32[a + 13])
  } catch (e) {
    Atomics.store(i32, b + ${FAILED}, 1)
  }
  Atomics.store(i32, b + ${DONE}, seq)
  Atomics.notify(i32, b + ${DONE})
}
`

export type SgemmArgs = [
  ta: number,
  tb: number,
  M: number,
  N: number,
  K: number,
  alpha: number,
  a: number,
  lda: number,
  b: number,
  ldb: number,
  beta: number,
  c: number,
  ldc: number,
  work: number
]

export interface Helpers {
  /** Runs `parts[0]` with `self` on this thread and the rest on helpers 1…; returns when all are done. */
  readonly run: (parts: ReadonlyArray<SgemmArgs>, self: (args: SgemmArgs) => void) => void
  readonly close: () => void
}

/** Starts `count` helper threads over `memory`. They are unref'd: they never keep the process alive. */
export const start = (mod: WasmModule, memory: WasmMemory, count: number, name: string): Helpers => {
  const control = new SharedArrayBuffer(4 * SLOT * count)
  const i32 = new Int32Array(control), f32 = new Float32Array(control)
  const workers = Array.from({ length: count }, (_, slot) => {
    const w = new Worker(helperSource, { eval: true, workerData: { module: mod, memory, control, slot } })
    w.unref()
    return w
  })
  let seq = 0
  let closed = false
  return {
    run: (parts, self) => {
      if (closed) throw new Error(`${name}: used after close()`)
      seq++
      for (let p = 1; p < parts.length; p++) {
        const b = (p - 1) * SLOT
        const args = parts[p]
        for (let i = 0; i < args.length; i++) {
          if (i === 5 || i === 10) f32[b + ARGS + i] = args[i]
          else i32[b + ARGS + i] = args[i]
        }
        Atomics.store(i32, b + SEQ, seq)
        Atomics.notify(i32, b + SEQ)
      }
      self(parts[0])
      for (let p = 1; p < parts.length; p++) {
        const b = (p - 1) * SLOT
        const deadline = Date.now() + 120_000
        for (let d = Atomics.load(i32, b + DONE); d !== seq; d = Atomics.load(i32, b + DONE)) {
          // A helper that never answers (its thread died) must not hang the caller for ever.
          if (Date.now() > deadline) throw new Error(`${name}: helper thread ${p} did not finish its part in 120 s`)
          Atomics.wait(i32, b + DONE, d, 1000)
        }
        if (Atomics.exchange(i32, b + FAILED, 0) !== 0) {
          throw new Error(`${name}: helper thread ${p} trapped in sgemm (its part: ${parts[p].join(", ")})`)
        }
      }
    },
    close: () => {
      if (closed) return
      closed = true
      for (let p = 0; p < count; p++) {
        Atomics.store(i32, p * SLOT + SEQ, -1)
        Atomics.notify(i32, p * SLOT + SEQ)
      }
      for (const w of workers) void w.terminate()
    }
  }
}
