/**
 * Running an envtrain program as a process.
 *
 * `Main.run(program)` is `NodeRuntime.runMain` plus an explicit exit when the program ends: Dawn's background
 * threads keep Node alive after the GPU is released, so a program that uses the GPU would otherwise never exit.
 * SIGINT/SIGTERM interrupt the program, which runs every finalizer (closing sessions, writing checkpoints) first.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Main } from "@envtrain/harness"
 *
 * Main.run(Effect.log("hello"))
 * ```
 *
 * @since 0.0.0
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit } from "effect"

/** Runs `program` as the process's main fiber and exits with 0 on success, 1 on failure, 130 on interruption. */
export const run = <E>(program: Effect.Effect<void, E, NodeContext.NodeContext>): void =>
  NodeRuntime.runMain(Effect.provide(program, NodeContext.layer), {
    teardown: (exit, _onExit) => {
      const code = Exit.isSuccess(exit) ? 0 : Cause.isInterruptedOnly(exit.cause) ? 130 : 1
      // Let stdout/stderr drain before exiting.
      setImmediate(() => process.exit(code))
    }
  })
