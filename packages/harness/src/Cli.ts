/**
 * The `envtrain` command line: the commands in `commands/` (one file per noun) and `doctor`, assembled under one root.
 *
 * @since 0.0.0
 */
import { Command, Options } from "@effect/cli"
import * as Harness from "./commands/Harness.js"
import * as Model from "./commands/Model.js"
import * as Runner from "./commands/Runner.js"
import * as Serve from "./commands/Serve.js"
import * as ServePolicy from "./commands/ServePolicy.js"
import * as Train from "./commands/Train.js"
import * as Doctor from "./Doctor.js"

const requireHardware = Options.boolean("require-hardware").pipe(
  Options.withDescription("fail if the only WebGPU adapter is a software one (use on GPU machines)")
)

/** `envtrain doctor`: print the adapter, check a kernel, play an episode. */
export const doctor = Command.make(
  "doctor",
  { requireHardware },
  ({ requireHardware }) => Doctor.run({ requireHardware })
).pipe(
  Command.withDescription("Check this machine: GPU adapter, a kernel against its CPU twin, one environment episode.")
)

/** The root command. */
export const envtrain = Command.make("envtrain").pipe(
  Command.withDescription("Train language models on interactive environments (TypeScript, Effect, WebGPU)."),
  Command.withSubcommands([
    doctor,
    Serve.command,
    ServePolicy.command,
    Runner.command,
    ...Model.commands,
    ...Train.commands,
    Harness.command
  ])
)

/** Parses `argv` (as process.argv: node, script, then arguments) and runs the chosen command. */
export const cli = Command.run(envtrain, { name: "envtrain", version: "0.0.0" })
