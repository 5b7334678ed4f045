/**
 * The one registry of environments that `envtrain serve`, `train`, `eval` and the examples read: the built-ins by
 * name, a user's {@link Definition} by module path (`./my-env.ts`, default export or the module's one definition),
 * and either played on a server by URL.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Registry } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const catchGame = yield* Registry.load("catch")
 *   const mine = yield* Registry.load("./my-env.ts")          // a module exporting Definition.make({...})
 *   const remote = yield* Registry.environmentOf(mine, "http://127.0.0.1:8000")
 * })
 * ```
 *
 * @since 0.0.0
 */
import { Data, Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as BrowserGym from "./BrowserGym.js"
import * as Carla from "./Carla.js"
import * as Catch from "./Catch.js"
import * as Client from "./Client.js"
import * as Definition from "./Definition.js"
import * as Echo from "./Echo.js"
import type * as Environment from "./Environment.js"
import { mcpRemote } from "./internal/mcpRemote.js"
import * as userModule from "./internal/userModule.js"
import type { McpToolDescriptor, OpenEnvDefinition } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Server from "./Server.js"
import type * as ServerOptions from "./ServerOptions.js"
import * as ServerPool from "./ServerPool.js"
import * as Sudoku from "./Sudoku.js"
import type * as Tool from "./Tool.js"
import * as Wordle from "./Wordle.js"

/** A served environment's variant: BrowserGym's task, CARLA's scenario (`envtrain serve … --task/--scenario`). */
export interface Variant {
  readonly task?: string | undefined
  readonly scenario?: string | undefined
}

/** One registered environment: what each command needs of it. */
export interface Entry<State = any> {
  readonly name: string
  readonly description: string
  /** The in-process environment (absent for a wire-only entry such as `echo-mcp`). */
  readonly environment?: Environment.Environment<State, any> | undefined
  /** What `envtrain serve` serves (absent for a server found by URL: it is served already). */
  readonly openEnv?: OpenEnvDefinition | undefined
  /** What `envtrain serve` serves for a variant (`--task`, `--scenario`); absent when the entry has no variants. */
  readonly served?: ((variant: Variant) => Effect.Effect<OpenEnvDefinition, UnknownEnvironment>) | undefined
  /** The same tools played on a server at `url` (absent when there is no typed client). */
  readonly remote?: ((url: string) => Environment.Environment<State, any>) | undefined
  /** The environment's own reward of a finished episode's state (`null` = unscoreable). */
  readonly reward?: ((state: State) => number | null) | undefined
  /** Held-out success of a finished episode. */
  readonly success?: ((state: State, reward: number) => boolean) | undefined
  /** A module definition's scripted player, for SFT transcripts (`Definition`'s `solver`). */
  readonly solver?: Definition.Solver<State> | undefined
  /** Where it came from: `built-in`, or the module path. */
  readonly source: string
}

/** The environment named cannot be found or loaded; the message names the fix. */
export class UnknownEnvironment extends Data.TaggedError("UnknownEnvironment")<{
  readonly spec: string
  readonly problem: string
}> {
  override get message() {
    return `environment '${this.spec}': ${this.problem}`
  }
}

const sudokuReward = (s: Sudoku.State) =>
  s.correct_reward + s.valid_move_reward + s.empty_cell_reward + s.repetition_reward + s.progress_reward

/**
 * A built-in game module's entry: its environment, served definition and typed client, with the game's scoring.
 * Generic so that `builtins.catch.environment` and the rest keep the module's own types.
 */
const game = <
  Env extends Environment.Environment<any, any>,
  Remote extends Environment.Environment<any, any>,
  Scoring extends Pick<Entry, "reward" | "success">
>(
  name: string,
  module: {
    readonly environment: Env
    readonly openEnv: OpenEnvDefinition
    readonly remote: (url: string) => Remote
  },
  scoring: Scoring
) => ({
  name,
  description: module.environment.description,
  environment: module.environment,
  openEnv: module.openEnv,
  remote: (url: string) => module.remote(url),
  ...scoring,
  source: "built-in"
})

/** `browsergym_env` serving the task `--task` names (default `click-test`). */
const browserGymServed = (variant: Variant): Effect.Effect<OpenEnvDefinition, UnknownEnvironment> => {
  if (variant.scenario !== undefined) {
    return Effect.fail(
      new UnknownEnvironment({ spec: "browsergym", problem: "has no --scenario (that is carla's): give --task" })
    )
  }
  const task = variant.task ?? "click-test"
  const check = BrowserGym.checkTask(task)
  return check.ok
    ? Effect.succeed(BrowserGym.openEnvFor({ task }))
    : Effect.fail(
      new UnknownEnvironment({
        spec: "browsergym",
        problem: task.startsWith("miniwob.")
          ? check.message
          : `no task '${task}': give --task one of ${BrowserGym.TASKS.join(", ")} (or miniwob.<name>, the real suite)`
      })
    )
}

/** carla_env with the scenario `--scenario` names (default `trolley_saves`); `--task` is not one of its flags. */
const carlaServed = (variant: Variant): Effect.Effect<OpenEnvDefinition, UnknownEnvironment> => {
  if (variant.task !== undefined) {
    return Effect.fail(
      new UnknownEnvironment({ spec: "carla", problem: "takes --scenario, not --task (e.g. --scenario trolley_saves)" })
    )
  }
  const scenario = variant.scenario ?? Carla.defaultScenario
  const check = Carla.checkScenario(scenario)
  return check.ok
    ? Effect.succeed(Carla.openEnvFor(scenario))
    : Effect.fail(
      new UnknownEnvironment({
        spec: "carla",
        problem: `--scenario ${scenario}: ${check.message}; known: ${Carla.scenarioNames.join(", ")}`
      })
    )
}

/** The built-in environments by name. */
export const builtins = {
  browsergym: {
    ...game("browsergym", BrowserGym, {
      reward: BrowserGym.reward,
      success: (s: BrowserGym.State) => s.success
    }),
    served: browserGymServed
  } satisfies Entry<BrowserGym.State>,
  carla: {
    ...game("carla", Carla, { reward: Carla.reward, success: (s: Carla.State) => Carla.success(s) }),
    served: carlaServed
  } satisfies Entry<Carla.State>,
  catch: game("catch", Catch, {
    reward: Catch.reward,
    success: (s: Catch.State) => s.caught
  }) satisfies Entry<Catch.State>,
  echo: game("echo", Echo, {
    reward: (s: Echo.State) => s.reward,
    success: (_s: Echo.State, reward: number) => reward > 0
  }) satisfies Entry<Echo.State>,
  "echo-mcp": {
    name: "echo-mcp",
    description: "OpenEnv's current echo_env (pure MCP: echo_message, echo_with_length); served only",
    openEnv: Echo.openEnvMcp,
    source: "built-in"
  } satisfies Entry<unknown>,
  sudoku: game("sudoku", Sudoku, {
    reward: sudokuReward,
    success: (s: Sudoku.State) => s.won
  }) satisfies Entry<Sudoku.State>,
  wordle: game("wordle", Wordle, {
    reward: (s: Wordle.State) => s.reward,
    success: (s: Wordle.State) => s.won
  }) satisfies Entry<Wordle.State>
} as const satisfies Readonly<Record<string, Entry>>

/** The built-in of that name, if there is one. */
export const builtin = (name: string): Entry | undefined => (builtins as Readonly<Record<string, Entry>>)[name]

/** A definition as a registry entry. */
export const fromDefinition = (definition: Definition.Definition, source: string): Entry => ({
  name: definition.name,
  description: definition.description,
  environment: definition.environment,
  openEnv: definition.openEnv,
  remote: (url) => definition.remote(url),
  reward: definition.reward,
  success: definition.success,
  solver: definition.solver,
  source
})

/** Does `spec` name a server (`http://…`, `https://…`, `ws://…`)? */
export const isUrl = (spec: string): boolean => /^(https?|wss?):\/\//.test(spec)

/** Does `spec` name a module rather than a built-in? */
export const isModulePath = (spec: string): boolean =>
  spec.startsWith(".") || spec.startsWith("/") || /\.(m|c)?(t|j)s$/.test(spec)

const usage = () =>
  `give a built-in (${Object.keys(builtins).join(", ")}) or the path of a module whose default export is ` +
  `Definition.make({...}) (e.g. ./my-env.ts)`

/** The definition a module exports: its default export, else its only exported definition. */
const definitionIn = (spec: string, module: Readonly<Record<string, unknown>>) => {
  if (Definition.isDefinition(module.default)) return Effect.succeed(module.default)
  const found = Object.values(module).filter(Definition.isDefinition)
  if (found.length === 1) return Effect.succeed(found[0])
  return Effect.fail(
    new UnknownEnvironment({
      spec,
      problem: found.length === 0
        ? "the module exports no environment definition: `export default Definition.make({...})`"
        : `the module exports ${found.length} definitions (${
          found.map((d) => d.name).join(", ")
        }): make the one to use its default export`
    })
  )
}

/** A user's module did not load; `problem` says why and names the fix. */
export class ModuleLoadError extends Data.TaggedError("ModuleLoadError")<{
  readonly path: string
  /** The file itself does not exist (as opposed to failing to load). */
  readonly missing: boolean
  readonly problem: string
}> {
  override get message() {
    return `${this.path}: ${this.problem}`
  }
}

/**
 * The exports of a user's module (an environment, reward functions): a path relative to the working directory or
 * absolute, anywhere on disk, TypeScript (compiled by tsx, whether or not the process runs under it) or JavaScript,
 * ESM or CommonJS. Its imports resolve from where it is, as Node resolves them: a module outside this repository
 * imports `@envtrain/env` and `effect` from its own project's `node_modules`.
 */
export const importModule = (path: string): Effect.Effect<Readonly<Record<string, unknown>>, ModuleLoadError> => {
  const file = nodePath.resolve(path)
  return Effect.tryPromise({
    try: () => userModule.importModule(file),
    catch: (e) => new ModuleLoadError({ path, missing: !fs.existsSync(file), problem: userModule.loadProblem(file, e) })
  })
}

/**
 * A built-in by name, the definition a module exports ({@link importModule}), or a server by URL
 * ({@link discover}).
 */
export const load = (spec: string): Effect.Effect<Entry, UnknownEnvironment> => {
  const known = builtin(spec)
  if (known !== undefined) return Effect.succeed(known)
  if (isUrl(spec)) return discover(spec)
  if (!isModulePath(spec)) {
    return Effect.fail(new UnknownEnvironment({ spec, problem: `no built-in has that name: ${usage()}` }))
  }
  return importModule(spec).pipe(
    Effect.mapError((e) =>
      new UnknownEnvironment({ spec, problem: e.missing ? `${e.problem}: ${usage()}` : e.problem })
    ),
    Effect.flatMap((module) => definitionIn(spec, module)),
    Effect.map((definition) => fromDefinition(definition, spec))
  )
}

/**
 * The entry's environment, in process or (with `url`) played on a server, or spread over several (`ServerPool`);
 * fails naming what is missing.
 */
export const environmentOf = (
  entry: Entry,
  url?: string | ReadonlyArray<string>
): Effect.Effect<Environment.Environment<any, any>, UnknownEnvironment> => {
  if (url !== undefined) {
    const remote = entry.remote
    if (remote === undefined) {
      return Effect.fail(new UnknownEnvironment({ spec: entry.name, problem: "has no client to play it on a server" }))
    }
    if (typeof url === "string") return Effect.succeed(remote(url))
    return url.length === 0
      ? Effect.fail(new UnknownEnvironment({ spec: entry.name, problem: "its list of server URLs is empty" }))
      : Effect.succeed(ServerPool.of(url, remote))
  }
  return entry.environment === undefined
    ? Effect.fail(
      new UnknownEnvironment({
        spec: entry.name,
        problem: `${entry.description}: it has no in-process environment to train`
      })
    )
    : Effect.succeed(entry.environment)
}

const anyArguments = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** A tool as a server lists it: its JSON schema is shown to the model as is; the server checks the arguments. */
const listedTool = (d: McpToolDescriptor): Tool.Any => {
  const schema = d.inputSchema as {
    readonly properties?: Record<string, Tool.JsonSchema>
    readonly required?: Array<string>
  }
  return {
    name: d.name,
    description: d.description,
    parameters: anyArguments,
    success: Schema.String,
    definition: {
      type: "function",
      function: {
        name: d.name,
        description: d.description,
        parameters: {
          type: "object",
          properties: schema.properties ?? {},
          ...(schema.required === undefined ? {} : { required: schema.required })
        }
      }
    }
  }
}

/** The state of an environment played on a server of unknown kind: its `/state` and the last step's envelope. */
export interface DiscoveredState {
  readonly [key: string]: unknown
  readonly envelope: { readonly reward: number | boolean | null; readonly done: boolean }
}

/**
 * A server whose kind is not known, by URL: its MCP tools are listed once (each episode then plays them with
 * `call_tool` steps, the row's columns as reset kwargs), and the reward is the last step's envelope reward (`null`,
 * as MCP servers that do not score send, leaves the episode unscoreable).
 */
export const discover = (
  url: string,
  options: RemoteOptions = {}
): Effect.Effect<Entry<DiscoveredState>, UnknownEnvironment> =>
  Effect.scoped(
    Effect.gen(function*() {
      const client = yield* Client.connect({ ...options, url })
      return yield* client.listTools
    })
  ).pipe(
    Effect.mapError((e) =>
      new UnknownEnvironment({
        spec: url,
        problem: `cannot list the server's tools (${e.message}); a server of unknown kind is played through its MCP ` +
          `tools: start it, or name its kind (a built-in, or the module that defines it) with envUrl`
      })
    ),
    Effect.flatMap((listed) =>
      listed.length === 0
        ? Effect.fail(
          new UnknownEnvironment({
            spec: url,
            problem: "the server lists no MCP tools, so a model has nothing to call"
          })
        )
        : Effect.succeed(listed)
    ),
    // What the model will be shown, said once: a server of unknown kind is trusted for its tool list.
    Effect.tap((listed) =>
      Effect.logInfo(
        `environment at ${url}: ${listed.length} MCP tool${listed.length === 1 ? "" : "s"} (${
          listed.map((t) => t.name).join(", ")
        }); each episode's reward is the last step's envelope reward`
      )
    ),
    Effect.map((listed): Entry<DiscoveredState> => {
      const tools = listed.map(listedTool)
      const environment = mcpRemote<DiscoveredState, Readonly<Record<string, unknown>>>({
        name: "remote",
        description: `the environment served at ${url}`,
        tools,
        columns: anyArguments,
        url,
        clientOptions: options,
        envelope: true
      })
      const reward = (s: DiscoveredState) => {
        const r = s.envelope.reward
        return typeof r === "boolean" ? (r ? 1 : 0) : r
      }
      return {
        name: "remote",
        description: environment.description,
        environment,
        reward,
        success: (_s, r) => r > 0,
        source: url
      }
    })
  )

/** The flags a variant sets, as the command line spells them. */
const variantFlags = (variant: Variant) => [
  ...(variant.task === undefined ? [] : ["--task"]),
  ...(variant.scenario === undefined ? [] : ["--scenario"])
]

/** The definition an entry serves for a variant; a variant given to an entry without variants is refused. */
const servedDefinition = (
  entry: Entry,
  variant: Variant
): Effect.Effect<OpenEnvDefinition | undefined, UnknownEnvironment> => {
  if (entry.served !== undefined) return entry.served(variant)
  const flags = variantFlags(variant)
  return flags.length === 0 ? Effect.succeed(entry.openEnv) : Effect.fail(
    new UnknownEnvironment({
      spec: entry.name,
      problem: `has no variants: drop ${flags.join(" and ")} (only browsergym takes --task, carla --scenario)`
    })
  )
}

/**
 * Serves the environment `spec` names (a built-in, or a module's definition) over OpenEnv's protocol until the scope
 * closes, and logs where it listens: what `envtrain serve` and `Launcher.envtrain`'s child run. A URL is refused: it
 * names a server already running, so there is nothing to serve. `variant` picks BrowserGym's task or CARLA's
 * scenario; an entry without variants refuses one.
 */
export const serve = (spec: string, options: ServerOptions.ServerOptions = {}, variant: Variant = {}) =>
  Effect.gen(function*() {
    const entry = isUrl(spec) ? undefined : yield* load(spec)
    const definition = entry === undefined ? undefined : yield* servedDefinition(entry, variant)
    if (definition === undefined) {
      return yield* new UnknownEnvironment({
        spec,
        problem: "is a server already; serve a built-in or a module that defines the environment"
      })
    }
    const server = yield* Server.serve(definition, options)
    yield* Effect.logInfo(
      `${definition.name} listening on ${server.url} (max ${server.maxConcurrentEnvs} concurrent sessions)`
    )
    return server
  })
