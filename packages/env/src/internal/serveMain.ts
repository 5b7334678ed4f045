// Stand-alone entry for `serve` (used by Launcher.envtrain): `tsx serveMain.ts serve <env> --port N`.
import { Command } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as ServeCommand from "../ServeCommand.js"

const root = Command.make("envtrain-env").pipe(Command.withSubcommands([ServeCommand.command]))

Command.run(root, { name: "envtrain-env", version: "0.0.0" })(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain
)
