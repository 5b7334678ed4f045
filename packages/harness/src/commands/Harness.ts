/**
 * `envtrain harness …`: black-box agent training's commands. `envtrain harness validate FILE` checks a
 * {@link TrainingTrace} file (OpenEnv's schema and rules) and prints one line; a trace that breaks a rule exits 1
 * with the rule and the turn. `envtrain harness serve --llm-url URL` serves OpenEnv's Harbor MCP contract and its
 * Task API (`HarborServe`) over a task suite, a capture proxy in front of the policy server, and the agents.
 *
 * @example
 * ```ts
 * // envtrain harness validate runs/harness/traces/rollout-0.json
 * // → rollout-0.json: valid TrainingTrace (schema_version 1): 4 turns, 812 prompt tokens, 96 completion tokens, 90 trainable
 * ```
 *
 * @since 0.0.0
 */
import { Args, Command, Options } from "@effect/cli"
import { Server } from "@envtrain/env"
import { Console, Effect, HashMap, Option } from "effect"
import * as CaptureProxy from "../CaptureProxy.js"
import * as HarborServe from "../HarborServe.js"
import * as HarborTask from "../HarborTask.js"
import * as HarnessSession from "../HarnessSession.js"
import * as HarnessTrainer from "../HarnessTrainer.js"
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

/** `envtrain harness serve` @since 0.0.0 */
export const serve = Command.make(
  "serve",
  {
    llmUrl: Options.text("llm-url").pipe(
      Options.withDescription("the policy server every rollout generates on (`envtrain serve-policy`, or vLLM)")
    ),
    tasks: Options.directory("tasks").pipe(
      Options.withDescription("a suite directory with train/ and held-out/ (default: the shipped suite)"),
      Options.optional
    ),
    host: Options.text("host").pipe(Options.withDefault("127.0.0.1"), Options.withDescription("interface to bind")),
    port: Options.integer("port").pipe(Options.withDefault(8000), Options.withDescription("port (0 = any free port)")),
    maxConcurrentEnvs: Options.integer("max-concurrent-envs").pipe(
      Options.optional,
      Options.withDescription("concurrent sessions (default: MAX_CONCURRENT_ENVS, else 8)")
    ),
    agentSteps: Options.integer("agent-steps").pipe(
      Options.withDefault(10),
      Options.withDescription("model calls per rollout (bash-agent, mini-swe-agent)")
    ),
    maxTokens: Options.integer("max-tokens").pipe(
      Options.withDefault(512),
      Options.withDescription("max_tokens per call")
    ),
    harnessAlias: Options.keyValueMap("harness-alias").pipe(
      Options.optional,
      Options.withDescription(
        "NAME=HARNESS: run HARNESS when a request asks for NAME (OpenEnv's client asks for opencode unless told); " +
          "without it such a request is refused. Each result's param_fixes says what ran"
      )
    ),
    sandboxAlias: Options.keyValueMap("sandbox-alias").pipe(
      Options.optional,
      Options.withDescription(
        "NAME=bubblewrap: run a bubblewrap sandbox when a request asks for NAME (OpenEnv's client asks for e2b " +
          "unless told); without it such a request is refused. Each result's param_fixes says what ran"
      )
    ),
    venv: Options.directory("venv").pipe(
      Options.optional,
      Options.withDescription("a Python venv holding mini-swe-agent: offers the mini-swe-agent harness too")
    )
  },
  (args) =>
    Effect.gen(function*() {
      const suite = yield* HarborTask.loadSuite(Option.getOrElse(args.tasks, () => HarborTask.shippedSuiteDir))
      const model = yield* HarnessTrainer.servedModel(args.llmUrl)
      const proxy = yield* CaptureProxy.make({
        upstream: args.llmUrl,
        model,
        extraBody: { chat_template_kwargs: { enable_thinking: false } }
      })
      const agents = [
        HarnessSession.bashAgent({ maxSteps: args.agentSteps, maxTokens: args.maxTokens }),
        HarnessSession.oracleAgent(),
        ...Option.match(args.venv, {
          onNone: () => [],
          onSome: (venv) => [
            HarnessSession.miniSweAgent({ venv, stepLimit: args.agentSteps, maxTokens: args.maxTokens })
          ]
        })
      ]
      const aliases = (o: Option.Option<HashMap.HashMap<string, string>>) =>
        Option.match(o, { onNone: () => ({}), onSome: (m) => Object.fromEntries(HashMap.toEntries(m)) })
      const definition = yield* HarborServe.definition({
        suite,
        proxy,
        llmUrl: args.llmUrl,
        model,
        agents,
        aliases: { harness: aliases(args.harnessAlias), sandbox: aliases(args.sandboxAlias) }
      })
      const server = yield* Server.serve(definition, {
        host: args.host,
        port: args.port,
        ...Option.match(args.maxConcurrentEnvs, { onNone: () => ({}), onSome: (n) => ({ maxConcurrentEnvs: n }) })
      })
      yield* Console.log(
        `harbor_env on ${server.url} (MCP tools run_rollout, list_tasks, capabilities; Task API /harbor_env/splits, ` +
          `num_tasks, task, task_range; ${server.maxConcurrentEnvs} ` +
          `sessions; harnesses ${agents.map((a) => a.name).join(", ")}; generating on ${args.llmUrl} as ${model})`
      )
      return yield* Effect.never
    }).pipe(Effect.scoped)
).pipe(
  Command.withDescription(
    "Serve OpenEnv's Harbor MCP contract (run_rollout, list_tasks, capabilities) and its plain-HTTP Task API " +
      "(/harbor_env/splits, num_tasks, task, task_range) over envtrain's tasks, sandboxes and agents, so OpenEnv's " +
      "HarborEnv client drives them."
  )
)

/** `envtrain harness` @since 0.0.0 */
export const command = Command.make("harness").pipe(
  Command.withDescription(
    "Black-box agent training: captured traces (validate), and OpenEnv's Harbor MCP contract (serve)."
  ),
  Command.withSubcommands([validate, serve])
)
