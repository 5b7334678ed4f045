/**
 * `serve <env> [--host] [--port] [--max-concurrent-envs] [--session-timeout] [--task] [--scenario]`: serves a built-in environment, or a
 * module's definition (`Definition.make`) (`envtrain serve ./my-env.ts`), over OpenEnv's protocol until SIGINT/SIGTERM, then
 * closes every session. The serving itself is `Registry.serve` in `@envtrain/env`; this module is its command line.
 *
 * @example
 * ```ts
 * import { Command } from "@effect/cli"
 * import * as Serve from "@envtrain/harness/commands/Serve"
 *
 * const cli = Command.make("envtrain").pipe(Command.withSubcommands([Serve.command]))
 * // envtrain serve catch --port 8000 --max-concurrent-envs 64
 * ```
 *
 * @since 0.0.0
 */
import { Args, Command, Options } from "@effect/cli"
import { Registry } from "@envtrain/env"
import { Duration, Effect, Option } from "effect"

const environment = Args.text({ name: "env" }).pipe(
  Args.withDescription(
    `a built-in (${Object.keys(Registry.builtins).join(", ")}) or a module exporting Definition.make({...})`
  )
)
const host = Options.text("host").pipe(Options.withDefault("127.0.0.1"), Options.withDescription("interface to bind"))
const port = Options.integer("port").pipe(
  Options.withDefault(8000),
  Options.withDescription("port (0 = any free port)")
)
const maxConcurrentEnvs = Options.integer("max-concurrent-envs").pipe(
  Options.optional,
  Options.withDescription("concurrent sessions (default: MAX_CONCURRENT_ENVS, else 8 for the built-ins)")
)
const sessionTimeout = Options.float("session-timeout").pipe(
  Options.optional,
  Options.withDescription("seconds of inactivity after which a session is closed and its slot freed")
)

const task = Options.text("task").pipe(
  Options.optional,
  Options.withDescription(
    "browsergym only: the task served (default click-test), e.g. click-button, enter-text, login-user"
  )
)

const scenario = Options.text("scenario").pipe(
  Options.optional,
  Options.withDescription("carla only: the scenario served (default trolley_saves; e.g. trolley_micro_escape_exists)")
)

/** `serve <env>`; runs until interrupted (NodeRuntime.runMain turns SIGINT/SIGTERM into interruption). */
export const command = Command.make(
  "serve",
  { environment, host, port, maxConcurrentEnvs, sessionTimeout, task, scenario },
  (args) =>
    Registry.serve(args.environment, {
      host: args.host,
      port: args.port,
      ...Option.match(args.maxConcurrentEnvs, { onNone: () => ({}), onSome: (n) => ({ maxConcurrentEnvs: n }) }),
      ...Option.match(args.sessionTimeout, {
        onNone: () => ({}),
        onSome: (s) => ({ sessionTimeout: Duration.millis(s * 1000) })
      })
    }, {
      ...Option.match(args.task, { onNone: () => ({}), onSome: (t) => ({ task: t }) }),
      ...Option.match(args.scenario, { onNone: () => ({}), onSome: (name) => ({ scenario: name }) })
    }).pipe(
      Effect.zipRight(Effect.never),
      Effect.scoped
    )
).pipe(
  Command.withDescription("Serve an environment (a built-in or ./my-env.ts) over OpenEnv's HTTP/WebSocket protocol.")
)
