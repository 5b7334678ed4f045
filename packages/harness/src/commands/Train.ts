/**
 * `envtrain train CONFIG [--cluster URL]`, `envtrain sft CONFIG`, `envtrain eval CONFIG`, each followed by `key=value` overrides:
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
import { Args, Command, Options } from "@effect/cli"
import { CommandFile, Evaluation } from "@envtrain/grpo"
import { Console, Effect, Option } from "effect"
import * as Cluster from "../Cluster.js"

const configArg = Args.text({ name: "config" }).pipe(Args.withDescription("a YAML or JSON command file"))
const overridesArg = Args.text({ name: "key=value" }).pipe(
  Args.repeated,
  Args.withDescription("configuration overrides, e.g. maxSteps=10 learning_rate=3e-5")
)

const printRun = (result: { readonly report: string; readonly checkpoint?: string | undefined }) =>
  Console.log(`report: ${result.report}\ncheckpoint: ${result.checkpoint ?? "(none)"}`)

const cluster = Options.text("cluster").pipe(
  Options.optional,
  Options.withDescription(
    "roll out on `envtrain runner` processes of this Postgres (postgres://…; the file's cluster: postgres)"
  )
)

/** `envtrain train CONFIG [--cluster URL]` @since 0.0.0 */
export const train = Command.make(
  "train",
  { config: configArg, overrides: overridesArg, cluster },
  ({ cluster, config, overrides }) =>
    Effect.flatMap(Cluster.forCommandFile(config, overrides, Option.getOrUndefined(cluster)), (layer) =>
      Effect.flatMap(
        Option.match(layer, {
          onNone: () => CommandFile.train(config, overrides),
          onSome: (clustered) => Effect.provide(CommandFile.train(config, overrides), clustered)
        }),
        printRun
      ))
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
