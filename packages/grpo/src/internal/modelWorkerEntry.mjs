// The CPU model worker's entry (workerModel.ts starts it): the sources are TypeScript, so this thread registers
// tsx's ESM loader before it imports the worker's code, as the envtrain binary does for the main thread.
import { register } from "tsx/esm/api"

register()
await import("./modelWorker.ts")
