// The child process Launcher.envtrain starts: `node serveMain.js <env> --port N [--max-concurrent-envs N]
// [--session-timeout S] [--task T] [--scenario NAME]` (from the sources, serveMain.ts under tsx). Its flags are
// read with node:util's parseArgs so that this library needs no command-line package; `envtrain serve`
// (packages/harness) is the user's form of the same Registry.serve.
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Duration, Effect } from "effect"
import { parseArgs } from "node:util"
import * as Registry from "../Registry.js"

const { positionals, values } = parseArgs({
  args: process.argv.slice(2),
  allowPositionals: true,
  options: {
    port: { type: "string" },
    "max-concurrent-envs": { type: "string" },
    "session-timeout": { type: "string" },
    task: { type: "string" },
    scenario: { type: "string" }
  }
})
const maxConcurrentEnvs = values["max-concurrent-envs"]
const sessionTimeout = values["session-timeout"]

Registry.serve(positionals[0], {
  port: Number(values.port ?? 8000),
  ...(maxConcurrentEnvs === undefined ? {} : { maxConcurrentEnvs: Number(maxConcurrentEnvs) }),
  ...(sessionTimeout === undefined ? {} : { sessionTimeout: Duration.millis(Number(sessionTimeout) * 1000) })
}, {
  ...(values.task === undefined ? {} : { task: values.task }),
  ...(values.scenario === undefined ? {} : { scenario: values.scenario })
}).pipe(
  Effect.zipRight(Effect.never),
  Effect.scoped,
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain
)
