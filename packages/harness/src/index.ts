/**
 * @envtrain/harness — the `envtrain` command line and process entry points; for black-box agent training the
 * capture proxy and OpenEnv's TrainingTrace, Harbor tasks, bubblewrap sandboxes and agents (the built-in bash loop,
 * mini-swe-agent), and a scripted model endpoint (solver transcripts in an agent's own format).
 *
 * @since 0.0.0
 */
export * as BashAgent from "./BashAgent.js"
export * as CaptureProxy from "./CaptureProxy.js"
export * as Cli from "./Cli.js"
export * as Cluster from "./Cluster.js"
export * as Doctor from "./Doctor.js"
export * as HarborRemote from "./HarborRemote.js"
export * as HarborServe from "./HarborServe.js"
export * as HarborTask from "./HarborTask.js"
export * as HarnessSession from "./HarnessSession.js"
export * as HarnessTrainer from "./HarnessTrainer.js"
export * as Main from "./Main.js"
export * as MiniSweAgent from "./MiniSweAgent.js"
export * as PolicyBackend from "./PolicyBackend.js"
export * as PolicyServerProcess from "./PolicyServerProcess.js"
export * as PostgresProcess from "./PostgresProcess.js"
export * as RunnerProcess from "./RunnerProcess.js"
export * as Sandbox from "./Sandbox.js"
export * as ScriptedEndpoint from "./ScriptedEndpoint.js"
export * as TaskFamily from "./TaskFamily.js"
export * as TrainingTrace from "./TrainingTrace.js"
