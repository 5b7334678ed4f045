/**
 * The flags every example program shares (@effect/cli), mapped onto {@link Pipeline.Settings}.
 *
 * @example
 * ```ts
 * import { Recipe } from "@envtrain/grpo"
 * import * as Cli from "./Cli.js"
 * import * as Pipeline from "./Pipeline.js"
 * const command = Cli.command(Recipe.catchRecipe, Pipeline.defaults, "Train a policy to play Catch.")
 * ```
 */
import { Command, Options } from "@effect/cli"
import type { Recipe } from "@envtrain/grpo"
import { Data, Effect, Option } from "effect"
import * as Pipeline from "./Pipeline.js"

const int = (name: string, description: string) =>
  Options.integer(name).pipe(Options.withDescription(description), Options.optional)
const float = (name: string, description: string) =>
  Options.float(name).pipe(Options.withDescription(description), Options.optional)

const flags = {
  model: Options.directory("model").pipe(
    Options.withDescription("a Qwen3 checkpoint directory (default: a new model of --preset)"),
    Options.optional
  ),
  backend: Options.choice("backend", ["cpu", "gpu", "reference"]).pipe(
    Options.withDescription(
      "gpu: the Qwen3 model on WebGPU (use on a GPU machine); cpu: the CPU device (BLAS or WebAssembly SIMD " +
        "kernels in a worker thread); reference: the plain-TypeScript specification (exact, slow) " +
        "(default: gpu with --model, cpu otherwise)"
    ),
    Options.optional
  ),
  threads: Options.integer("threads").pipe(
    Options.withDescription("CPU device: threads per matmul (default every core)"),
    Options.optional
  ),
  deterministic: Options.boolean("deterministic").pipe(
    Options.withDescription("CPU device: one thread and a fixed summation order (the same bits every run)")
  ),
  preset: Options.choice("preset", ["tiny", "small"]).pipe(
    Options.withDescription("size of the new model when --model is not given"),
    Options.optional
  ),
  envUrl: Options.text("env-url").pipe(
    Options.withDescription(
      "an envtrain server or any OpenEnv server serving the example's environment (default: in-process environments)"
    ),
    Options.optional
  ),
  envConcurrency: int(
    "env-concurrency",
    "most sessions opened at once on each --env-url / --<env>-url server; more episodes wait for a session (default: " +
      "the limit the server's first CAPACITY_REACHED reports)"
  ),
  policyServer: Options.text("policy-server").pipe(
    Options.withDescription(
      "generate on this policy server (`envtrain serve-policy` URL, e.g. http://127.0.0.1:8000; repeat for several): " +
        "the weights are pushed to it after every GRPO step"
    ),
    Options.repeated
  ),
  policyServerWeights: Options.directory("policy-server-weights").pipe(
    Options.withDescription(
      "send the weights to the policy servers through this directory instead of in the request body (shared " +
        "with them; for a vLLM server, its --model directory, with VLLM_SERVER_DEV_MODE=1)"
    ),
    Options.optional
  ),
  out: Options.text("out").pipe(Options.withDescription("output directory (default runs/<example>)"), Options.optional),
  seed: int("seed", "seed of the model, data and sampling"),
  toolsInPrompt: Options.boolean("tools-in-prompt").pipe(
    Options.withDescription("render the tool definitions into the system prompt (on for --model)")
  ),
  sftFrom: Options.directory("sft-from").pipe(
    Options.withDescription(
      "skip the SFT data and warm-up: start GRPO from this checkpoint (e.g. an earlier run's runs/<example>/sft/checkpoint-N)"
    ),
    Options.optional
  ),
  sftEpisodes: int("sft-episodes", "solver episodes of SFT data"),
  errorRate: float("error-rate", "the SFT player's mistake rate"),
  sftEpochs: float("sft-epochs", "SFT epochs"),
  sftLr: float("sft-lr", "SFT learning rate"),
  steps: int("steps", "GRPO optimizer steps"),
  lr: float("lr", "GRPO learning rate"),
  beta: float("beta", "GRPO KL coefficient to the SFT weights (default 0)"),
  numGenerations: int("num-generations", "GRPO group size G"),
  numIterations: int("num-iterations", "GRPO updates per generation batch (TRL's num_iterations, μ; default 1)"),
  prompts: int("prompts", "prompts per GRPO step"),
  maxCompletionLength: int("max-completion-length", "completion budget per episode (model and tool tokens)"),
  temperature: float("temperature", "GRPO sampling temperature (evaluation is greedy)"),
  dynamicSampling: Options.choice("dynamic-sampling", ["off", "flat", "failed"]).pipe(
    Options.withDescription(
      "re-roll GRPO groups whose rewards all agree (DAPO's dynamic sampling): flat = every such group, failed = " +
        "those at the batch's lowest reward; off = TRL's behaviour"
    ),
    Options.optional
  ),
  dynamicSamplingRounds: int("dynamic-sampling-rounds", "re-rolls per flat group at most (default 2)"),
  maxStaleness: int(
    "max-staleness",
    "async GRPO: rollouts run ahead of the optimizer, trained on when at most N policy versions old (0 = the " +
      "synchronous results); with --backend cpu the update runs in a worker thread, so that generation on a " +
      "--policy-server overlaps it (default: synchronous GRPO)"
  ),
  evalEpisodes: int("eval-episodes", "held-out evaluation episodes"),
  episodesInFlight: int(
    "episodes-in-flight",
    "episodes played at once in the evaluations and each GRPO step (default: a whole batch at once)"
  )
}

type Parsed =
  & {
    readonly [K in keyof typeof flags]: (typeof flags)[K] extends Options.Options<infer A> ? A : never
  }
  & {
    /** `--rewards NAME` (recipes with several reward sets). */
    readonly rewards: Option.Option<string>
    /** `--sft-player NAME` (recipes with several scripted players). */
    readonly player: Option.Option<string>
    /** `--<name>-url URL` per environment (recipes over several environments). */
    readonly servers: Readonly<Record<string, Option.Option<string>>>
  }

/** The flags of one recipe: the shared ones, `--rewards` if it has reward sets, `--<name>-url` per environment. */
const flagsOf = <State>(recipe: Recipe.Recipe<State>) => {
  const sets = Object.keys(recipe.rewardVariants ?? {})
  const rewards: Options.Options<Option.Option<string>> = sets.length === 0
    ? Options.map(Options.none, () => Option.none())
    : Options.choice("rewards", sets as [string, ...Array<string>]).pipe(
      Options.withDescription(`the reward set (default ${sets[0]})`),
      Options.optional
    )
  const players = Object.keys(recipe.playerVariants ?? {})
  const player: Options.Options<Option.Option<string>> = players.length === 0
    ? Options.map(Options.none, () => Option.none())
    : Options.choice("sft-player", players as [string, ...Array<string>]).pipe(
      Options.withDescription(`the scripted player that writes the SFT data (default ${players[0]})`),
      Options.optional
    )
  const names = recipe.remotes?.names ?? []
  // (`Options.all` of an empty record fails.)
  const servers: Options.Options<Readonly<Record<string, Option.Option<string>>>> = names.length === 0
    ? Options.map(Options.none, () => ({}))
    : Options.all(Object.fromEntries(names.map((name) => [
      name,
      Options.text(`${name}-url`).pipe(
        Options.withDescription(
          `an envtrain server (\`envtrain serve ${name}\`) or any OpenEnv server serving ${name} (default: in-process)`
        ),
        Options.optional
      )
    ])))
  return { ...flags, rewards, player, servers }
}

/** Applies parsed flags to defaults. */
export const settingsOf = (defaults: Pipeline.Settings, f: Parsed): Pipeline.Settings => {
  const or = <A>(o: Option.Option<A>, d: A): A => Option.getOrElse(o, () => d)
  const model = Option.getOrUndefined(f.model)
  const out = Option.getOrUndefined(f.out)
  const envUrl = Option.getOrUndefined(f.envUrl)
  const rewards = Option.getOrUndefined(f.rewards)
  const player = Option.getOrElse(f.player, () => defaults.player)
  const sftFrom = Option.getOrUndefined(f.sftFrom)
  const envUrls: Record<string, string> = {}
  for (const [name, url] of Object.entries(f.servers)) if (Option.isSome(url)) envUrls[name] = url.value
  return {
    ...defaults,
    ...(model === undefined ? {} : { model }),
    ...(out === undefined ? {} : { out }),
    ...(envUrl === undefined ? {} : { envUrl }),
    ...(Option.isSome(f.envConcurrency) ? { envConcurrency: f.envConcurrency.value } : {}),
    ...(Object.keys(envUrls).length === 0 ? {} : { envUrls }),
    ...(f.policyServer.length === 0 ? {} : { policyServers: f.policyServer }),
    ...(Option.isSome(f.policyServerWeights) ? { policyServerWeights: f.policyServerWeights.value } : {}),
    ...(rewards === undefined ? {} : { rewards }),
    ...(player === undefined ? {} : { player }),
    ...(sftFrom === undefined ? {} : { sftFrom }),
    preset: or(f.preset, defaults.preset) as "tiny" | "small",
    backend: or(f.backend, model !== undefined ? "gpu" : defaults.backend) as Pipeline.Settings["backend"],
    ...(Option.isSome(f.threads) ? { threads: f.threads.value } : {}),
    ...(f.deterministic ? { deterministic: true } : {}),
    seed: or(f.seed, defaults.seed),
    toolsInPrompt: f.toolsInPrompt || model !== undefined || defaults.toolsInPrompt,
    sft: {
      ...defaults.sft,
      episodes: or(f.sftEpisodes, defaults.sft.episodes),
      errorRate: or(f.errorRate, defaults.sft.errorRate),
      epochs: or(f.sftEpochs, defaults.sft.epochs),
      learningRate: or(f.sftLr, defaults.sft.learningRate)
    },
    grpo: {
      ...defaults.grpo,
      steps: or(f.steps, defaults.grpo.steps),
      learningRate: or(f.lr, defaults.grpo.learningRate),
      ...(Option.isSome(f.beta) ? { beta: f.beta.value } : {}),
      numGenerations: or(f.numGenerations, defaults.grpo.numGenerations),
      ...(Option.isSome(f.numIterations) ? { numIterations: f.numIterations.value } : {}),
      prompts: or(f.prompts, defaults.grpo.prompts),
      maxCompletionLength: or(f.maxCompletionLength, defaults.grpo.maxCompletionLength),
      temperature: or(f.temperature, defaults.grpo.temperature),
      ...(Option.isSome(f.dynamicSampling) ? { dynamicSampling: f.dynamicSampling.value } : {}),
      ...(Option.isSome(f.dynamicSamplingRounds) ? { dynamicSamplingRounds: f.dynamicSamplingRounds.value } : {}),
      ...(Option.isSome(f.maxStaleness) ? { maxStaleness: f.maxStaleness.value } : {})
    },
    evalEpisodes: or(f.evalEpisodes, defaults.evalEpisodes),
    ...(Option.isSome(f.episodesInFlight) ? { episodesInFlight: f.episodesInFlight.value } : {})
  }
}

/** A flag's value cannot run: the message names the flag and the fix. */
export class FlagError extends Data.TaggedError("FlagError")<{ readonly flag: string; readonly problem: string }> {
  override get message() {
    return `--${this.flag}: ${this.problem}`
  }
}

/** Checks the settings the flags produced; the first problem found is reported by its flag. */
export const validate = (settings: Pipeline.Settings, f: Parsed): Effect.Effect<Pipeline.Settings, FlagError> => {
  const { grpo, sft } = settings
  const problems: Array<readonly [flag: string, ok: boolean, problem: string]> = [
    ["seed", Number.isInteger(settings.seed) && settings.seed >= 0, `${settings.seed} is not a whole number >= 0`],
    [
      "sft-episodes",
      settings.sftFrom !== undefined || (Number.isInteger(sft.episodes) && sft.episodes >= 1),
      `${sft.episodes}: the SFT warm-up needs at least 1 solver episode (${sft.batchSize} fill a batch); to skip ` +
      "the warm-up, start from a checkpoint with --sft-from DIR"
    ],
    ["error-rate", sft.errorRate >= 0 && sft.errorRate <= 1, `${sft.errorRate} is not a rate between 0 and 1`],
    ["sft-epochs", sft.epochs > 0, `${sft.epochs}: give a number of epochs > 0 (e.g. 0.5, 2)`],
    ["sft-lr", sft.learningRate > 0, `${sft.learningRate}: give a learning rate > 0 (e.g. 1e-2)`],
    ["steps", grpo.steps >= 1, `${grpo.steps}: give at least 1 GRPO step`],
    ["lr", grpo.learningRate > 0, `${grpo.learningRate}: give a learning rate > 0 (e.g. 1e-4)`],
    ["beta", (grpo.beta ?? 0) >= 0, `${grpo.beta}: the KL coefficient is >= 0 (0 = no KL term)`],
    [
      "num-generations",
      grpo.numGenerations >= 2,
      `${grpo.numGenerations}: a GRPO group needs at least 2 episodes (the advantage is relative to the group)`
    ],
    [
      "num-iterations",
      grpo.numIterations === undefined || (Number.isInteger(grpo.numIterations) && grpo.numIterations >= 1),
      `${grpo.numIterations}: give a whole number of updates per generation batch >= 1 (1 = TRL's default)`
    ],
    ["prompts", grpo.prompts >= 1, `${grpo.prompts}: give at least 1 prompt per step`],
    [
      "episodes-in-flight",
      settings.episodesInFlight === undefined ||
      (Number.isInteger(settings.episodesInFlight) && settings.episodesInFlight >= 1),
      `${settings.episodesInFlight}: give a whole number of episodes >= 1`
    ],
    ["temperature", grpo.temperature > 0, `${grpo.temperature}: give a sampling temperature > 0 (e.g. 0.4, 1)`],
    [
      "dynamic-sampling-rounds",
      grpo.dynamicSamplingRounds === undefined ||
      (Number.isInteger(grpo.dynamicSamplingRounds) && grpo.dynamicSamplingRounds >= 1),
      `${grpo.dynamicSamplingRounds}: give a whole number of re-rolls >= 1 (turn re-rolling off with --dynamic-sampling off)`
    ],
    [
      "env-concurrency",
      settings.envConcurrency === undefined ||
      (settings.envConcurrency >= 1 && (settings.envUrl !== undefined || settings.envUrls !== undefined)),
      `${settings.envConcurrency}: give at least 1 session, with --env-url (or --<env>-url) naming the server`
    ],
    [
      "max-staleness",
      grpo.maxStaleness === undefined || (Number.isInteger(grpo.maxStaleness) && grpo.maxStaleness >= 0),
      `${grpo.maxStaleness}: give a whole number of policy versions >= 0 (0 = the synchronous results)`
    ],
    [
      "policy-server",
      (settings.policyServers ?? []).every((url) => /^https?:\/\/\S+$/.test(url)),
      `${(settings.policyServers ?? []).join(", ")}: give the server's root URL, e.g. http://127.0.0.1:8000`
    ],
    [
      "max-completion-length",
      grpo.maxCompletionLength >= 16,
      `${grpo.maxCompletionLength}: an episode needs room for at least one tool call (give >= 16 tokens)`
    ],
    ["eval-episodes", settings.evalEpisodes >= 1, `${settings.evalEpisodes}: give at least 1 held-out episode`]
  ]
  const bad = problems.find(([, ok]) => !ok)
  if (bad !== undefined) return Effect.fail(new FlagError({ flag: bad[0], problem: bad[2] }))
  if (settings.sftFrom !== undefined) {
    const sftFlags = [
      ["sftEpisodes", "sft-episodes"],
      ["errorRate", "error-rate"],
      ["sftEpochs", "sft-epochs"],
      ["sftLr", "sft-lr"],
      ["player", "sft-player"]
    ] as const
    const unused = sftFlags.filter(([k]) => Option.isSome(f[k] as Option.Option<unknown>))
    if (unused.length > 0) {
      const names = unused.map(([, flag]) => `--${flag}`).join(", ")
      return Effect.fail(
        new FlagError({
          flag: "sft-from",
          problem: `skips the SFT warm-up, so ${names} would change nothing: drop ${
            unused.length === 1 ? "it" : "them"
          } or drop --sft-from`
        })
      )
    }
  }
  return Effect.succeed(settings)
}

/** The example as a command: `tsx examples/src/<name>.ts [flags]`. */
export const command = <State>(recipe: Recipe.Recipe<State>, defaults: Pipeline.Settings, description: string) =>
  Command.make(
    recipe.name,
    flagsOf(recipe),
    (f) =>
      Effect.flatMap(validate(settingsOf(defaults, f), f), (settings) => Effect.asVoid(Pipeline.run(recipe, settings)))
  ).pipe(Command.withDescription(description))

/** Parses `process.argv` and runs the example. */
export const main = <State>(recipe: Recipe.Recipe<State>, defaults: Pipeline.Settings, description: string) =>
  Effect.suspend(() =>
    Command.run(command(recipe, defaults, description), { name: recipe.name, version: "0.0.0" })(process.argv)
  )
