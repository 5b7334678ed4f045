/**
 * A command file: one YAML/JSON file that holds the GRPO configuration (TRL's knobs, camelCase or snake_case) plus
 * the run's ingredients, and the three runs it describes ({@link train}, {@link sft}, {@link evaluate}: what
 * `envtrain train CONFIG`, `envtrain sft CONFIG` and `envtrain eval CONFIG` run; the commands themselves are in
 * `@envtrain/harness`):
 *
 * ```yaml
 * model: models/tiny-sft        # a Hugging Face model directory
 * backend: gpu                  # gpu (WebGPU/Dawn), cpu (the CPU device: BLAS or WebAssembly SIMD kernels in a
 *                               # worker thread, Trainer.cpuModel) or reference (the plain-TypeScript spec: slow)
 * threads: 2                    # cpu only: threads per matmul (default every core)
 * deterministic: true           # cpu only: one thread, fixed summation order (the same bits every run)
 * frozenDtype: f32              # cpu only: a frozen base (LoRA's) in f32 or bf16 (default bf16 for a bf16
 *                               # checkpoint: half the memory, slower decoding)
 * environment: catch            # a built-in (catch | echo | wordle | sudoku) or ./my-env.ts (Definition.make)
 * envUrl: http://127.0.0.1:8000 # optional: play the environment on that OpenEnv server instead of in-process; a list
 *                               # of URLs spreads the sessions over them (ServerPool: most free sessions first, a
 *                               # CAPACITY_REACHED refusal moves the episode to the next)
 * envConcurrency: 2             # optional: most sessions opened at once per envUrl server (default: the limit its
 *                               # first CAPACITY_REACHED reports; extra episodes wait for a session, bounded)
 * recipe: wordle                # instead of environment: a built-in recipe (environment, prompts, rewards, success)
 * rewards: shaped               # the recipe's named reward set
 * rewardFuncs: [./my-rewards.ts] # TRL's reward_funcs: modules whose default export is a reward function (Reward.make,
 *                               # Reward.perEpisode, a plain (args) => numbers, or an array), added to the
 *                               # environment's own reward; paths as environment's, anywhere on disk
 * # several environments, routed per row by a dataset column (routeColumn, default `env`), one URL each if served:
 * #   environment: { wordle: wordle, catch: catch }   envUrl: { catch: http://127.0.0.1:8001 }
 * strictColumns: false          # true: refuse dataset columns the environment's columns Schema does not declare
 *                               # (default: a warning once per column; reward functions receive every column)
 * toolsInPrompt: true           # render the tool schemas into the system prompt (false: the model learnt without)
 * policyServers: [http://127.0.0.1:8000]   # optional: generate on `envtrain serve-policy` (weights pushed each step)
 * policyServerWeightStore: /shared/weights   # optional: publish the weights there once per step; the servers pull
 *                               # (`serve-policy --weights-from DIR`); policyServerDiscover: true finds them there
 * dataset: { seeds: [0, 1000], prompt: "Catch the ball." }   # or a JSONL path of rows
 * evalDataset: { seeds: [10000, 10032], prompt: "Catch the ball." }
 * sftData: data/catch-solver.jsonl   # `sft` only: JSONL of {messages, tools}, or the transcripts of a recipe's
 *                                   # solver (or of a module environment's Definition `solver`, with the
 *                                   # dataset's prompt): { seeds: [0, 400], errorRate: 0.2 }
 * maxLength: 300                # `sft` only: longest sequence kept (tokens)
 * resume: true                  # continue from the newest checkpoint in outputDir
 * cluster: { postgres: postgres://u@db:5432/envtrain }   # optional: rollout groups on `envtrain runner` processes
 *                               # (with policyServers; `envtrain train` only, or `--cluster URL`)
 * outputDir: runs/catch
 * maxSteps: 200
 * learningRate: 1.0e-5
 * ```
 *
 * Run keys, like the GRPO keys, may be written in snake_case (`sft_data`, `env_url`, `reward_funcs`).
 * Overrides follow the file as `key=value` (e.g. `envtrain train catch.yaml maxSteps=10 learning_rate=3e-5`).
 * SIGINT/SIGTERM interrupt the run and write a checkpoint of the last completed step (with `Main.run`).
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { CommandFile } from "@envtrain/grpo"
 * import { Effect } from "effect"
 *
 * // What `envtrain train catch.yaml maxSteps=10` runs.
 * const program = CommandFile.train("catch.yaml", ["maxSteps=10"]).pipe(Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Client, Environment, MultiEnv, Registry, ServerPool } from "@envtrain/env"
import { Checkpoint, Gpu } from "@envtrain/gpu"
import * as Episode from "@envtrain/rollout/Episode"
import { Data, Effect, Option, Schema } from "effect"
import * as nodePath from "node:path"
import * as Config from "./Config.js"
import * as Dataset from "./Dataset.js"
import * as Evaluation from "./Evaluation.js"
import * as PolicyServers from "./PolicyServers.js"
import * as Recipe from "./Recipe.js"
import * as Reward from "./Reward.js"
import * as RolloutGroups from "./RolloutGroups.js"
import * as SftData from "./SftData.js"
import * as SftTrainer from "./SftTrainer.js"
import * as Trainer from "./Trainer.js"

const DatasetSpec = Schema.Union(
  Schema.String,
  Schema.Struct({
    seeds: Schema.Tuple(Schema.Int, Schema.Int),
    // Optional with a recipe, which gives each seed's prompt and columns.
    prompt: Schema.optional(Schema.String),
    columns: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
  })
)

/**
 * The run keys of a command file (everything that is not a GRPO configuration key).
 *
 * @since 0.0.0
 */
export const RunSpec = Schema.Struct({
  model: Schema.String,
  backend: Schema.optionalWith(Schema.Literal("gpu", "cpu", "reference"), { default: () => "gpu" as const }),
  threads: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))),
  deterministic: Schema.optional(Schema.Boolean),
  frozenDtype: Schema.optional(Schema.Literal("f32", "bf16")),
  environment: Schema.optional(
    Schema.Union(Schema.String, Schema.Record({ key: Schema.String, value: Schema.String }))
  ),
  envUrl: Schema.optional(
    Schema.Union(
      Schema.String,
      Schema.Array(Schema.String),
      Schema.Record({ key: Schema.String, value: Schema.String })
    )
  ),
  // Most sessions this process opens at once on each envUrl server (Client.limitSessions).
  envConcurrency: Schema.optional(Schema.Int.pipe(Schema.positive())),
  routeColumn: Schema.optionalWith(Schema.String, { default: () => "env" }),
  // A built-in recipe (catch | wordle | sudoku | echo | multi-env): its environment, prompts, rewards and success.
  recipe: Schema.optional(Schema.String),
  // The recipe's named reward set (e.g. wordle's seed | shaped).
  rewards: Schema.optional(Schema.String),
  // TRL's reward_funcs: modules of reward functions, added to the environment's (or recipe's) own reward.
  rewardFuncs: Schema.optional(Schema.Union(Schema.String, Schema.Array(Schema.String))),
  // Refuse rows with columns the environment's columns Schema does not declare (default: warn once per column).
  strictColumns: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  // Render the tool schemas into the system prompt (TRL does); false for a model trained without them.
  toolsInPrompt: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  dataset: Schema.optional(DatasetSpec),
  evalDataset: Schema.optional(DatasetSpec),
  sftData: Schema.optional(
    Schema.Union(
      Schema.String,
      Schema.Struct({
        seeds: Schema.Tuple(Schema.Int, Schema.Int),
        errorRate: Schema.Number.pipe(Schema.between(0, 1)),
        playerSeed: Schema.optional(Schema.Int)
      })
    )
  ),
  maxLength: Schema.optional(Schema.Int.pipe(Schema.positive())),
  resume: Schema.optionalWith(Schema.Union(Schema.Boolean, Schema.String), { default: () => false }),
  // Default false (or the GRPO key chat_template_kwargs: {enable_thinking: ...}).
  enableThinking: Schema.optional(Schema.Boolean),
  title: Schema.optional(Schema.String),
  // Rollout groups on cluster runners (`envtrain train` provides their client; see @envtrain/harness/Cluster).
  cluster: Schema.optional(Schema.Struct({
    postgres: Schema.String,
    runId: Schema.optional(Schema.String),
    fastFailover: Schema.optional(Schema.Boolean),
    // A group started this many times without finishing fails the run (the livelock watchdog; default: the harness's
    // Cluster.defaultMaxAttempts).
    maxAttempts: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(2)))
  }))
})
/** @since 0.0.0 */
export type RunSpec = typeof RunSpec.Type

const runKeys = new Set(Object.keys(RunSpec.fields))

/** The run key a file's key names (`sftData` or `sft_data`, as the GRPO keys take either), if any. */
const runKey = (key: string): string | undefined => {
  if (runKeys.has(key)) return key
  const camel = key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())
  return runKeys.has(camel) ? camel : undefined
}

/**
 * The command file is missing something the command needs.
 *
 * @since 0.0.0
 */
export class CommandFileError extends Data.TaggedError("CommandFileError")<{
  readonly path: string
  readonly problem: string
}> {
  override get message() {
    return `${this.path}: ${this.problem}`
  }
}

/**
 * Reads a command file: the run keys and the GRPO configuration (with `key=value` overrides applied).
 *
 * @since 0.0.0
 */
export const load = Effect.fn("CommandFile.load")(function*(path: string, overrides: ReadonlyArray<string>) {
  const fs = yield* FileSystem.FileSystem
  const text = yield* fs.readFileString(path).pipe(
    Effect.mapError((e) => new CommandFileError({ path, problem: `cannot read (${e.message})` }))
  )
  const raw = yield* Config.parseText(text, path)
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return yield* new CommandFileError({ path, problem: "the file must hold a mapping of keys to values" })
  }
  const run: Record<string, unknown> = {}
  const grpo: Record<string, unknown> = {}
  const given: Record<string, string> = {}
  for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
    const key = runKey(k)
    if (key === undefined) {
      // A misspelt run key would otherwise reach the GRPO keys, whose error names only GRPO keys.
      const nearest = Config.suggest(k, [...runKeys])
      const run = nearest === undefined ? undefined : runKey(nearest)
      if (run !== undefined) {
        return yield* new CommandFileError({ path, problem: `unknown key "${k}": did you mean "${nearest}"?` })
      }
      grpo[k] = v
    } else if (key in given) {
      return yield* new CommandFileError({ path, problem: `"${given[key]}" and "${k}" both set ${key}: keep only one` })
    } else {
      given[key] = k
      run[key] = v
    }
  }
  const spec = yield* Schema.decodeUnknown(RunSpec)(run).pipe(
    Effect.mapError((e) => new CommandFileError({ path, problem: `run keys: ${e.message}` }))
  )
  const argv = overrides.map((o) => (o.startsWith("--") ? o : `--${o}`))
  const config = yield* Config.fromSources(grpo, argv, path)
  const thinking = config.chatTemplateKwargs.enable_thinking
  if (spec.enableThinking !== undefined && thinking !== undefined && thinking !== spec.enableThinking) {
    return yield* new CommandFileError({
      path,
      problem: `enableThinking (${spec.enableThinking}) and chat_template_kwargs.enable_thinking (${
        JSON.stringify(thinking)
      }) disagree: keep one of them`
    })
  }
  return { spec, config }
})

const datasetOf = (path: string, run: RunSpec, spec: typeof DatasetSpec.Type, label: string) =>
  Effect.gen(function*() {
    if (typeof spec === "string") return yield* Dataset.fromJsonl(spec)
    const seeds = Dataset.range(spec.seeds[0], spec.seeds[1])
    const recipe = run.recipe === undefined ? undefined : yield* recipeNamed(path, run.recipe)
    if (recipe !== undefined) {
      if (spec.prompt !== undefined || spec.columns !== undefined) {
        return yield* new CommandFileError({
          path,
          problem: `${label}: the recipe ${recipe.name} gives each seed's prompt and columns: drop prompt and columns`
        })
      }
      return Recipe.rows(recipe, seeds)
    }
    if (spec.prompt === undefined) {
      return yield* new CommandFileError({ path, problem: `${label}: give prompt (or a recipe, which gives it)` })
    }
    return Dataset.fromSeeds({
      prompt: [{ role: "user", content: spec.prompt }],
      seeds,
      ...(spec.columns === undefined ? {} : { columns: spec.columns }),
      name: label
    })
  })

interface Trainable {
  readonly name: string
  /** The environment a row's columns go to, when there is one (not routed), to check them before the run. */
  readonly environment?: Environment.Environment<any, any>
  readonly open: Trainer.OpenSession<any, never, never>
  readonly rewards: ReadonlyArray<Reward.RewardFunction<any, any, any, any, any>>
  readonly success: (episode: Episode.EpisodeRecord<any>, reward: number) => boolean
}

const native = <S, C>(
  env: Environment.Environment<S, C>,
  toolsInPrompt: boolean
): Trainer.OpenSession<S, never, never> =>
(row) =>
  Effect.map(Effect.orDie(Environment.episode(env, row)), (e) => {
    const session = Episode.fromEnvironment(e)
    return toolsInPrompt ? session : Episode.withoutToolDefinitions(session)
  })

/**
 * What `train` and `eval` run: the registry's environment (a built-in or a module's definition), in process or on
 * the server at `envUrl`, scored by the environment's own reward and success rule.
 *
 * @since 0.0.0
 */
export const trainable = (path: string, spec: RunSpec): Effect.Effect<Trainable, CommandFileError> =>
  Effect.gen(function*() {
    const base = yield* environmentTrainable(path, spec)
    const modules = spec.rewardFuncs === undefined
      ? []
      : typeof spec.rewardFuncs === "string"
      ? [spec.rewardFuncs]
      : spec.rewardFuncs
    const extra: Array<Reward.RewardFunction<any, any, any, any, any>> = []
    for (const module of modules) extra.push(...(yield* rewardModule(path, module)))
    return extra.length === 0 ? base : { ...base, rewards: [...base.rewards, ...extra] }
  })

const rewardUsage = "give the path of a module whose default export is a reward function: " +
  "Reward.make(\"name\", (args) => numbers), Reward.perEpisode(\"name\", (episode) => number | null), " +
  "a plain (args) => numbers function, or an array of them"

const isRewardFunction = (u: unknown): u is Reward.RewardFunction<any, any, any, any, any> =>
  typeof u === "object" && u !== null && typeof (u as { name?: unknown }).name === "string" &&
  typeof (u as { score?: unknown }).score === "function" &&
  typeof (u as { environmentOwned?: unknown }).environmentOwned === "boolean"

/**
 * The reward functions a `rewardFuncs` module exports: its default export (a reward function, a plain function of
 * TRL's keyword arguments named by its own name, or an array of them), else every exported reward function.
 */
const rewardModule = (path: string, module: string) =>
  Effect.gen(function*() {
    const fail = (problem: string) => new CommandFileError({ path, problem: `rewardFuncs: ${problem}` })
    const exports = yield* Effect.mapError(
      Registry.importModule(module),
      (e) => fail(e.missing ? `${e.problem}: ${rewardUsage}` : e.problem)
    )
    const asReward = (u: unknown, name: string): Reward.RewardFunction<any, any, any, any, any> | undefined =>
      isRewardFunction(u)
        ? u
        : typeof u === "function"
        ? Reward.make(u.name === "" || u.name === "default" ? name : u.name, u as (args: any) => any)
        : undefined
    const base = nodePath.basename(module).replace(/\.[^.]*$/, "")
    const chosen = exports.default !== undefined
      ? (Array.isArray(exports.default) ? exports.default : [exports.default]).map((u, i) =>
        asReward(u, Array.isArray(exports.default) ? `${base}_${i}` : base)
      )
      : Object.values(exports).filter(isRewardFunction)
    if (chosen.length === 0 || chosen.some((r) => r === undefined)) {
      return yield* fail(
        `${module} exports no reward function (its default export is ${
          exports.default === undefined ? "missing" : "not one"
        }): ${rewardUsage}`
      )
    }
    return chosen as Array<Reward.RewardFunction<any, any, any, any, any>>
  })

// envUrl as a list: the servers of one environment (`Array.isArray` does not narrow a readonly array).
const isUrlList = (u: unknown): u is ReadonlyArray<string> => Array.isArray(u)

/** The environment's (or recipe's) trainable part, scored by its own reward. */
const environmentTrainable = (path: string, spec: RunSpec): Effect.Effect<Trainable, CommandFileError> =>
  Effect.gen(function*() {
    if (spec.envConcurrency !== undefined) {
      if (spec.envUrl === undefined) {
        return yield* new CommandFileError({
          path,
          problem: "envConcurrency limits the sessions opened on envUrl's server: set envUrl, or drop envConcurrency"
        })
      }
      const urls = typeof spec.envUrl === "string"
        ? [spec.envUrl]
        : isUrlList(spec.envUrl)
        ? spec.envUrl
        : Object.values(spec.envUrl)
      for (const url of urls) yield* Client.limitSessions(url, spec.envConcurrency)
    }
    if (spec.recipe !== undefined) return yield* fromRecipe(path, spec, spec.recipe)
    if (spec.rewards !== undefined) {
      return yield* new CommandFileError({ path, problem: "rewards names a recipe's reward set: set recipe too" })
    }
    const environment = spec.environment
    if (environment === undefined) {
      return yield* new CommandFileError({
        path,
        problem: `set environment: a built-in (${Object.keys(Registry.builtins).join(", ")}) or ./my-env.ts`
      })
    }
    const problem = (e: Registry.UnknownEnvironment) => new CommandFileError({ path, problem: e.message })
    const scored = (entry: Registry.Entry) =>
      entry.reward === undefined
        ? Effect.fail(new CommandFileError({ path, problem: `environment '${entry.name}' defines no reward` }))
        : Effect.succeed({ reward: entry.reward, success: entry.success ?? ((_s: unknown, r: number) => r > 0) })
    if (typeof environment === "string") {
      if (spec.envUrl !== undefined && typeof spec.envUrl !== "string" && !isUrlList(spec.envUrl)) {
        return yield* new CommandFileError({
          path,
          problem: "envUrl is a mapping, but environment is one name: give envUrl as one URL (or a list of its " +
            "servers), or environment as a mapping of names to environments"
        })
      }
      const entry = yield* Effect.mapError(Registry.load(environment), problem)
      const env = yield* Effect.mapError(Registry.environmentOf(entry, spec.envUrl), problem)
      const { reward, success } = yield* scored(entry)
      return {
        name: entry.name,
        environment: env,
        open: native(env, spec.toolsInPrompt),
        rewards: [Reward.fromEnvironment(entry.name, (_s: unknown): _s is unknown => true, reward)],
        // The environment's rule reads the environment's own reward, not a sum that rewardFuncs may add to.
        success: (e) => e.state !== undefined && success(e.state, reward(e.state) ?? Number.NaN)
      }
    }
    return yield* routed(path, spec, environment, problem, scored)
  })

const recipeNames = () => Object.keys(Recipe.builtins).join(" | ")

/** The built-in recipe of that name, or the command file's error listing them. */
const recipeNamed = (path: string, name: string): Effect.Effect<Recipe.Recipe<any>, CommandFileError> => {
  const recipe = Recipe.builtins[name]
  return recipe === undefined
    ? Effect.fail(new CommandFileError({ path, problem: `no recipe named '${name}': choose one of ${recipeNames()}` }))
    : Effect.succeed(recipe)
}

/** A built-in recipe: its environment (or its remote at envUrl), reward set and success rule. */
const fromRecipe = (path: string, spec: RunSpec, name: string): Effect.Effect<Trainable, CommandFileError> =>
  Effect.gen(function*() {
    const chosen = yield* recipeNamed(path, name)
    if (spec.environment !== undefined) {
      return yield* new CommandFileError({
        path,
        problem: `the recipe ${name} gives the environment: drop environment (envUrl plays the recipe's on a server)`
      })
    }
    const problem = (e: Recipe.RecipeError) =>
      new CommandFileError({
        path,
        problem: e.message.replace(/--(\w+)-url/g, "envUrl.$1").replace("--env-url", "envUrl")
      })
    const recipe = yield* Effect.mapError(Recipe.withRewards(chosen, spec.rewards), problem)
    const envUrl = spec.envUrl
    const env = yield* Effect.mapError(
      isUrlList(envUrl)
        // Several servers of the recipe's environment: one remote per URL, spread (ServerPool).
        ? Effect.map(
          Effect.forEach(envUrl, (url) => Recipe.environmentOf(recipe, { envUrl: url })),
          (remotes) => ServerPool.spread(remotes.map((environment, i) => ({ url: envUrl[i], environment })))
        )
        : Recipe.environmentOf(
          recipe,
          envUrl === undefined ? {} : typeof envUrl === "string" ? { envUrl } : { envUrls: envUrl }
        ),
      problem
    )
    return {
      name: recipe.name,
      environment: env,
      open: native(env, spec.toolsInPrompt),
      rewards: recipe.rewardFunctions,
      success: (e, _r) => e.state !== undefined && recipe.success(e.state)
    }
  })

/** Several environments routed per row by a dataset column, each scored by its own reward (null elsewhere). */
const routed = (
  path: string,
  spec: RunSpec,
  environments: Readonly<Record<string, string>>,
  problem: (e: Registry.UnknownEnvironment) => CommandFileError,
  scored: (entry: Registry.Entry) => Effect.Effect<
    { readonly reward: (s: any) => number | null; readonly success: (s: any, r: number) => boolean },
    CommandFileError
  >
): Effect.Effect<Trainable, CommandFileError> =>
  Effect.gen(function*() {
    const names = Object.keys(environments)
    if (names.length === 0) {
      return yield* new CommandFileError({ path, problem: "environment is an empty mapping: name at least one" })
    }
    const urls = typeof spec.envUrl === "string" || isUrlList(spec.envUrl) ? undefined : spec.envUrl ?? {}
    if (urls === undefined) {
      return yield* new CommandFileError({
        path,
        problem: "environment is a mapping but envUrl is not: a server serves one environment, so give envUrl " +
          `as a mapping of the names (${names.join(", ")}) to URLs`
      })
    }
    const unknownUrls = Object.keys(urls).filter((k) => !names.includes(k))
    if (unknownUrls.length > 0) {
      return yield* new CommandFileError({
        path,
        problem: `envUrl names ${unknownUrls.join(", ")}, which environment does not (it has ${names.join(", ")})`
      })
    }
    const envs: Record<string, Environment.Environment<any, any>> = {}
    const scoring: Record<string, { reward: (s: any) => number | null; success: (s: any, r: number) => boolean }> = {}
    for (const name of names) {
      const entry = yield* Effect.mapError(Registry.load(environments[name]), problem)
      envs[name] = yield* Effect.mapError(Registry.environmentOf(entry, urls[name]), problem)
      scoring[name] = yield* scored(entry)
    }
    const router = yield* Effect.try({
      try: () => MultiEnv.make({ name: "multi-env", column: spec.routeColumn, default: names[0], environments: envs }),
      catch: (e) => new CommandFileError({ path, problem: e instanceof Error ? e.message : String(e) })
    })
    type Routed = { readonly active: string; readonly state: unknown }
    return {
      name: "multi-env",
      open: native(router, spec.toolsInPrompt),
      rewards: names.map((name) =>
        Reward.fromEnvironment(
          name,
          (s: unknown): s is Routed => (s as Routed).active === name,
          (s: Routed) => scoring[name].reward(s.state)
        )
      ),
      success: (e) => {
        const s = e.state as Routed | undefined
        const scorer = s === undefined ? undefined : scoring[s.active]
        return s !== undefined && scorer !== undefined && scorer.success(s.state, scorer.reward(s.state) ?? Number.NaN)
      }
    }
  })

/** The run's enable_thinking: the run key, else the config's chat_template_kwargs, else false. */
const thinkingOf = (spec: RunSpec, config: Config.GRPOConfig) => ({
  enableThinking: spec.enableThinking ?? Config.templateOptions(config).enableThinking
})

const modelFor = (spec: RunSpec, config: Config.GRPOConfig, seq: number) =>
  Effect.gen(function*() {
    const checkpoint = yield* Checkpoint.load(spec.model)
    // The CPU device runs in a worker thread (for the run's scope), so that rollouts (on policy servers, or in the
    // worker between updates) are served while an update runs.
    // LoRA: the adapter's initialisation and dropout come from the run's seed.
    const lora = config.lora === undefined ? undefined : { config: config.lora, seed: config.seed }
    if (spec.backend === "cpu") {
      const model = yield* Trainer.cpuModel(checkpoint, {
        lora,
        gradientCheckpointing: config.gradientCheckpointing,
        ...(spec.threads === undefined ? {} : { threads: spec.threads }),
        ...(spec.deterministic === undefined ? {} : { deterministic: spec.deterministic }),
        frozenDtype: spec.frozenDtype
      })
      yield* Effect.logInfo(`CPU device: ${model.device}`)
      return model
    }
    if (spec.backend === "reference") {
      return config.async === true
        ? yield* Trainer.workerModel(checkpoint, { lora })
        : Trainer.referenceModel(checkpoint, { lora })
    }
    return yield* Trainer.gpuModel(checkpoint, {
      batch: config.perDeviceTrainBatchSize,
      seq,
      temperature: config.temperature,
      reference: config.beta !== 0,
      lora
    })
  })

const withDevice = <A, E, R>(spec: RunSpec, effect: Effect.Effect<A, E, R>) => {
  const strict = Effect.provideService(effect, Environment.StrictColumns, spec.strictColumns)
  // The CPU device and the reference model need no GPU (a machine without WebGPU runs them).
  if (spec.backend !== "gpu") return Effect.scoped(strict)
  // Which adapter `backend: gpu` got is said: on a machine without a GPU driver it is a software one (lavapipe).
  const adapter = Effect.flatMap(Gpu.Gpu, ({ adapter }) =>
    adapter.isSoftware
      ? Effect.logWarning(
        `backend gpu: the only WebGPU adapter is a software one (${Gpu.describe(adapter)}), so the run is on ` +
          "the CPU through it: install the GPU's Vulkan driver for a hardware adapter (envtrain doctor " +
          "--require-hardware checks)"
      )
      : Effect.logInfo(`backend gpu: ${Gpu.describe(adapter)}`))
  return Effect.provide(Effect.scoped(Effect.zipRight(adapter, strict)), Gpu.layer())
}

// Context length for the GPU model: the rendered prompt (with tools) plus the completion budget.
const sequenceLength = (config: Config.GRPOConfig) => Math.min(4096, config.maxCompletionLength + 1024)

/** `train CONFIG [key=value ...]`: GRPO training as the file says. */
export const train = Effect.fn("CommandFile.train")(function*(path: string, overrides: ReadonlyArray<string>) {
  const { config, spec } = yield* load(path, overrides)
  if (spec.cluster !== undefined && Option.isNone(yield* Effect.serviceOption(RolloutGroups.RolloutGroups))) {
    return yield* new CommandFileError({
      path,
      problem: "cluster: the runners' client is envtrain's command line (`envtrain train`), which provides it; in a " +
        "program, provide @envtrain/harness's Cluster.client, or drop cluster"
    })
  }
  const env = yield* trainable(path, spec)
  if (spec.dataset === undefined) return yield* new CommandFileError({ path, problem: "set dataset" })
  const dataset = yield* datasetOf(path, spec, spec.dataset, "dataset")
  yield* checkColumns(path, spec, env, dataset, "dataset")
  const evalDataset = spec.evalDataset === undefined
    ? undefined
    : yield* datasetOf(path, spec, spec.evalDataset, "evalDataset")
  const p = yield* Path.Path
  return yield* withDevice(
    spec,
    Effect.gen(function*() {
      const model = yield* PolicyServers.forConfig(yield* modelFor(spec, config, sequenceLength(config)), config)
      return yield* Trainer.train({
        config,
        model,
        dataset,
        open: env.open,
        rewardFunctions: env.rewards,
        evalSuccess: env.success,
        ...thinkingOf(spec, config),
        resume: spec.resume,
        title: spec.title ?? p.basename(path),
        ...(evalDataset === undefined ? {} : { evalDataset })
      })
    })
  )
})

/**
 * strictColumns, before the run: a dataset column the environment's columns Schema does not declare is named here,
 * as the command file's error (the episodes would refuse it too, as a failure of the run).
 */
const checkColumns = (
  path: string,
  spec: RunSpec,
  env: Trainable,
  dataset: Dataset.Dataset,
  label: string
) =>
  Effect.gen(function*() {
    if (!spec.strictColumns || env.environment === undefined) return
    const extra = new Set<string>()
    for (const { prompt: _prompt, ...columns } of dataset.rows) {
      for (const c of Environment.undeclaredColumns(env.environment, columns)) extra.add(c)
    }
    if (extra.size > 0) {
      return yield* new CommandFileError({
        path,
        problem: `strictColumns: the ${label}'s columns ${
          [...extra].join(", ")
        } are not in environment '${env.environment.name}''s columns Schema: declare them in its columns, or remove them from the ${label}`
      })
    }
  })

/**
 * What `sft` trains on: the transcripts of a JSONL file, or of a solver playing the given seeds (a recipe's, as the
 * examples make them, or a module environment's Definition `solver`).
 *
 * @since 0.0.0
 */
export const sftTranscripts = (path: string, spec: RunSpec) =>
  Effect.gen(function*() {
    const data = spec.sftData
    if (data === undefined) {
      return yield* new CommandFileError({
        path,
        problem: "set sftData: a JSONL path, or with a recipe { seeds: [a, b], errorRate: 0.2 } for its solver's games"
      })
    }
    if (typeof data === "string") return yield* SftTrainer.fromJsonl(data)
    const recipe = spec.recipe === undefined
      ? yield* solverRecipe(path, spec)
      : yield* recipeNamed(path, spec.recipe)
    const transcripts = yield* SftData.collect(recipe, {
      seeds: Dataset.range(data.seeds[0], data.seeds[1]),
      errorRate: data.errorRate,
      playerSeed: data.playerSeed ?? 0
    })
    // As the examples train: without tool schemas in the prompt unless toolsInPrompt.
    return spec.toolsInPrompt ? transcripts : transcripts.map((t) => ({ messages: t.messages }))
  })

/**
 * A one-environment recipe around a definition's `solver` (a module's `environment:`), so `sftData: { seeds,
 * errorRate }` warms up one's own environment as the built-in recipes do: the dataset's prompt, the solver's calls,
 * no reasoning line, and "Done." to close.
 */
const solverRecipe = (path: string, spec: RunSpec) =>
  Effect.gen(function*() {
    const usage = "sftData { seeds, errorRate } plays a solver's games"
    if (typeof spec.environment !== "string") {
      return yield* new CommandFileError({
        path,
        problem: `${usage}: set recipe (${recipeNames()}), or environment (one module whose definition has a solver)`
      })
    }
    const entry = yield* Effect.mapError(
      Registry.load(spec.environment),
      (e) => new CommandFileError({ path, problem: e.message })
    )
    const solver = entry.solver
    if (solver === undefined || entry.environment === undefined) {
      return yield* new CommandFileError({
        path,
        problem: `${usage}, and environment '${entry.name}' has no solver: give its Definition.make a solver ` +
          `((options) => (episode) => …), set recipe (${recipeNames()}) for a built-in's, or give sftData as a ` +
          "JSONL path of {messages, tools} transcripts"
      })
    }
    const dataset = spec.dataset
    if (dataset === undefined || typeof dataset === "string" || dataset.prompt === undefined) {
      return yield* new CommandFileError({
        path,
        problem: `${usage}: set dataset: { seeds: [a, b], prompt: "…" } (the prompt the transcripts begin with)`
      })
    }
    const prompt = dataset.prompt
    const columns = dataset.columns
    const recipe: Recipe.Recipe<any> = {
      name: entry.name,
      environment: entry.environment,
      prompt: () => [{ role: "user", content: prompt }],
      ...(columns === undefined ? {} : { columns: () => columns }),
      rewardFunctions: [],
      success: () => false,
      player: solver,
      reasoning: () => "",
      closing: () => "Done."
    }
    return recipe
  })

/** `sft CONFIG [key=value ...]`: the supervised warm-up on the file's transcripts. */
export const sft = Effect.fn("CommandFile.sft")(function*(path: string, overrides: ReadonlyArray<string>) {
  const { config, spec } = yield* load(path, overrides)
  const transcripts = yield* sftTranscripts(path, spec)
  const p = yield* Path.Path
  return yield* withDevice(
    spec,
    Effect.gen(function*() {
      const model = yield* modelFor(spec, config, 2048)
      return yield* SftTrainer.train({
        config,
        model,
        transcripts,
        ...(spec.maxLength === undefined ? {} : { maxLength: spec.maxLength }),
        ...thinkingOf(spec, config),
        resume: spec.resume,
        title: spec.title ?? `${p.basename(path)} (SFT)`
      })
    })
  )
})

/** `eval CONFIG [key=value ...]`: greedy evaluation on the file's held-out rows, written to its outputDir. */
export const evaluate = Effect.fn("CommandFile.evaluate")(function*(path: string, overrides: ReadonlyArray<string>) {
  const { config, spec } = yield* load(path, overrides)
  const env = yield* trainable(path, spec)
  const source = spec.evalDataset ?? spec.dataset
  if (source === undefined) return yield* new CommandFileError({ path, problem: "set evalDataset" })
  const dataset = yield* datasetOf(path, spec, source, "evalDataset")
  yield* checkColumns(path, spec, env, dataset, "evalDataset")
  return yield* withDevice(
    spec,
    Effect.gen(function*() {
      const model = yield* modelFor(spec, { ...config, temperature: 1 }, sequenceLength(config))
      const result = yield* Evaluation.evaluate({
        model,
        dataset,
        open: env.open,
        rewardFunctions: env.rewards,
        maxCompletionLength: config.maxCompletionLength,
        maxToolCallingIterations: config.maxToolCallingIterations,
        numGenerations: config.numGenerationsEval ?? 1,
        ...thinkingOf(spec, config),
        chatTemplateKwargs: Config.templateOptions(config).extra,
        keepModelTemplate: config.keepModelTemplate,
        success: env.success,
        step: 0,
        label: spec.model
      })
      yield* Evaluation.write(config.outputDir, result)
      return result
    })
  )
})
