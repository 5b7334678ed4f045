/**
 * `envtrain serve-policy` as a child process: started on a free loopback port (or the one given), ready once
 * `GET /health` answers, stopped with its scope (SIGTERM, then SIGKILL). Built on env's `Launcher`, which starts
 * environment servers the same way; a trainer, a test or a benchmark that wants the policy server in its own
 * process starts it here.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { PolicyServerProcess } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const server = yield* PolicyServerProcess.launch({ model: "models/tiny", backend: "cpu" })
 *   console.log(server.url) // e.g. http://127.0.0.1:41234 — give it to `policyServers`
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Launcher } from "@envtrain/env"
import type { Duration } from "effect"

/** What to serve and how. */
export interface LaunchOptions {
  /** The checkpoint directory (`--model`). */
  readonly model: string
  /** Default: the command's own (gpu). */
  readonly backend?: "cpu" | "gpu" | "reference"
  /** Default: a free loopback port. */
  readonly port?: number
  readonly servedModelName?: string
  readonly maxBatch?: number
  /** `--max-model-len` (default the command's). */
  readonly maxModelLen?: number
  /** `--batching`; default the command's (continuous where the backend can). */
  readonly batching?: "continuous" | "window"
  /** `--enable-lora`: serve LoRA adapters loaded at run time (vLLM's routes). */
  readonly enableLora?: boolean
  /** `--max-loras` (with `enableLora`). */
  readonly maxLoras?: number
  /** `--weights-from`: follow this weight store. */
  readonly weightsFrom?: string
  /** `--weights-poll-ms` (with `weightsFrom`). */
  readonly weightsPollMs?: number
  /** How long to wait for `/health`. Default 120 s (the model loads first). */
  readonly healthTimeout?: Duration.DurationInput
}

const flag = (name: string, value: string | number | undefined): ReadonlyArray<string> =>
  value === undefined ? [] : [`--${name}`, String(value)]

/**
 * Starts `envtrain serve-policy` in its own process; the scope stops it. Fails with env's `LaunchError` (what the
 * process printed) when it exits or is not healthy in time.
 *
 * @since 0.0.0
 */
export const launch = (options: LaunchOptions) =>
  Launcher.launch({
    command: process.execPath,
    args: [
      // The command's own entry: dist/bin.js from the build, src/bin.ts under tsx from the sources.
      ...Launcher.nodeEntry(new URL("./bin.js", import.meta.url)),
      "serve-policy",
      "--model",
      options.model,
      "--port",
      "{port}",
      ...flag("backend", options.backend),
      ...flag("served-model-name", options.servedModelName),
      ...flag("max-batch", options.maxBatch),
      ...flag("max-model-len", options.maxModelLen),
      ...flag("batching", options.batching),
      ...(options.enableLora === true ? ["--enable-lora"] : []),
      ...flag("max-loras", options.maxLoras),
      ...flag("weights-from", options.weightsFrom),
      ...flag("weights-poll-ms", options.weightsPollMs)
    ],
    ...(options.port === undefined ? {} : { port: options.port }),
    healthTimeout: options.healthTimeout ?? "120 seconds"
  })
