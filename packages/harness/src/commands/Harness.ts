/**
 * `envtrain harness …`: black-box agent training's commands. `envtrain harness validate FILE` checks a
 * {@link TrainingTrace} file (OpenEnv's schema and rules) and prints one line; a trace that breaks a rule exits 1
 * with the rule and the turn.
 *
 * @example
 * ```ts
 * // envtrain harness validate runs/harness/traces/rollout-0.json
 * // → rollout-0.json: valid TrainingTrace (schema_version 1): 4 turns, 812 prompt tokens, 96 completion tokens, 90 trainable
 * ```
 *
 * @since 0.0.0
 */
import { Args, Command } from "@effect/cli"
import { Console, Effect } from "effect"
import * as TrainingTrace from "../TrainingTrace.js"

/** `envtrain harness validate FILE` @since 0.0.0 */
export const validate = Command.make(
  "validate",
  { file: Args.file({ name: "file", exists: "yes" }).pipe(Args.withDescription("a TrainingTrace JSON file")) },
  ({ file }) =>
    Effect.flatMap(TrainingTrace.readFile(file), (trace) => Console.log(`${file}: ${TrainingTrace.summary(trace)}`))
).pipe(
  Command.withDescription(
    "Check a TrainingTrace file against OpenEnv's schema and rules: exit 0 with a summary, or 1 naming the rule and the turn."
  )
)

/** `envtrain harness` @since 0.0.0 */
export const command = Command.make("harness").pipe(
  Command.withDescription("Black-box agent training: captured traces (the trainer itself is not built yet)."),
  Command.withSubcommands([validate])
)
