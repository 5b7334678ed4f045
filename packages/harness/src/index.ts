/**
 * @envtrain/harness — the `envtrain` command line and process entry points; for black-box agent training so far the
 * capture proxy and OpenEnv's TrainingTrace (the harness trainer itself is not built yet).
 *
 * @since 0.0.0
 */
export * as CaptureProxy from "./CaptureProxy.js"
export * as Cli from "./Cli.js"
export * as Doctor from "./Doctor.js"
export * as Main from "./Main.js"
export * as PolicyBackend from "./PolicyBackend.js"
export * as PolicyServerProcess from "./PolicyServerProcess.js"
export * as TrainingTrace from "./TrainingTrace.js"
