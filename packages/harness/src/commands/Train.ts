/**
 * `envtrain train CONFIG`, `envtrain sft CONFIG`, `envtrain eval CONFIG`, each followed by `key=value` overrides:
 * the command lines of `@envtrain/grpo`'s {@link CommandFile} runs (what the file may hold is documented there),
 * and what each prints when its run ends.
 *
 * @example
 * ```ts
 * import { Command } from "@effect/cli"
 * import * as Train from "@envtrain/harness/commands/Train"
 *
 * const root = Command.make("envtrain").pipe(Command.withSubcommands([...Train.commands]))
 * // envtrain train catch.yaml maxSteps=10 learning_rate=3e-5
 * ```
 *
 * @since 0.0.0
 */
import { Args, Command } from "@effect/cli"
import { CommandFile, Evaluation } from "@envtrain/grpo"
import { Console, Effect } from "effect"

const configArg = Args.text({ name: "config" }).pipe(Args.withDescription("a YAML or JSON command file"))
const overridesArg = Args.text({ name: "key=value" }).pipe(
  Args.repeated,
  Args.withDescription("configuration overrides, e.g. maxSteps=10 learning_rate=3e-5")
)

const printRun = (result: { readonly report: string; readonly checkpoint?: string | undefined }) =>
  Console.log(`report: ${result.report}\ncheckpoint: ${result.checkpoint ?? "(none)"}`)

/** `envtrain train CONFIG` @since 0.0.0 */
export const train = Command.make(
  "train",
  { config: configArg, overrides: overridesArg },
  ({ config, overrides }) => Effect.flatMap(CommandFile.train(config, overrides), printRun)
).pipe(Command.withDescription("GRPO training on an environment (checkpoints, metrics, report, evaluation)."))

/** `envtrain sft CONFIG` @since 0.0.0 */
export const sft = Command.make(
  "sft",
  { config: configArg, overrides: overridesArg },
  ({ config, overrides }) => Effect.flatMap(CommandFile.sft(config, overrides), printRun)
).pipe(Command.withDescription("Supervised warm-up on chat / tool-calling transcripts (assistant tokens only)."))

/** `envtrain eval CONFIG` @since 0.0.0 */
export const evaluate = Command.make(
  "eval",
  { config: configArg, overrides: overridesArg },
  ({ config, overrides }) =>
    Effect.flatMap(CommandFile.evaluate(config, overrides), (result) => Console.log(Evaluation.formatTable(result)))
).pipe(Command.withDescription("Greedy evaluation on held-out rows: a metrics table and eval.json."))

/** The three commands, for the root CLI. @since 0.0.0 */
export const commands = [train, sft, evaluate] as const
