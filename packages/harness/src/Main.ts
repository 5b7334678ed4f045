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
import { ValidationError } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Option } from "effect"

const usageHint = "Run `envtrain --help` (or `envtrain COMMAND --help`) for the usage."

/** The parser refused the command line (it has printed what was wrong). */
const isBadCommandLine = (cause: Cause.Cause<unknown>): boolean =>
  Option.exists(Cause.failureOption(cause), ValidationError.isValidationError)

/** A typed failure's own message (tagged errors name the problem and the fix), else nothing. */
const messageOf = (error: unknown): string | undefined => {
  if (typeof error !== "object" || error === null) return undefined
  const message = (error as { message?: unknown }).message
  return typeof message === "string" && message.length > 0 ? message : undefined
}

/**
 * What the user reads when the program fails: a bad command line is one line and the usage hint (the parser has
 * already printed what was wrong); a typed failure is its message; a defect keeps its full cause and stack.
 */
const report = (cause: Cause.Cause<unknown>): Effect.Effect<void> => {
  if (Cause.isInterruptedOnly(cause)) return Effect.void
  if (isBadCommandLine(cause)) return Console.error(usageHint)
  const failure = Cause.failureOption(cause)
  const message = Option.isSome(failure) ? messageOf(failure.value) : undefined
  if (message !== undefined) {
    const tag = (failure as Option.Some<{ _tag?: unknown }>).value._tag
    return Console.error(`envtrain: ${typeof tag === "string" ? `${tag}: ` : ""}${message}`)
  }
  return Console.error(Cause.pretty(cause))
}

const exitCode = (exit: Exit.Exit<unknown, unknown>): number =>
  Exit.isSuccess(exit) ? 0 : Cause.isInterruptedOnly(exit.cause) ? 130 : isBadCommandLine(exit.cause) ? 2 : 1

/**
 * Runs `program` as the process's main fiber and exits with 0 on success, 1 on failure, 2 on a bad command line,
 * 130 on interruption.
 */
export const run = <E>(program: Effect.Effect<void, E, NodeContext.NodeContext>): void =>
  NodeRuntime.runMain(Effect.provide(Effect.tapErrorCause(program, report), NodeContext.layer), {
    disableErrorReporting: true,
    teardown: (exit, _onExit) => {
      const code = exitCode(exit)
      // Let stdout/stderr drain before exiting.
      setImmediate(() => process.exit(code))
    }
  })
