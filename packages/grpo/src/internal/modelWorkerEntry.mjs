// The CPU model worker's entry (workerModel.ts starts it): the sources are TypeScript, so this thread registers
// tsx's ESM loader before it imports the worker's code (the build starts modelWorker.js itself; see workerModel.ts).
import { register } from "tsx/esm/api"

register()
await import("./modelWorker.ts")
