/**
 * BrowserGym on a real Chromium (OpenEnv's `browsergym_env`), with MiniWoB++-style tasks written by envtrain, and the
 * real MiniWoB++ suite as `miniwob.<name>` when the `miniwob` PyPI package is installed (or `MINIWOB_HTML_DIR` names
 * its html folder): the package's own pages, started by their own `core.startEpisodeReal()` with the seed, goal =
 * the page's utterance, reward = BrowserGym's binary reward on the page's raw reward, done = the page's done flag.
 *
 * - {@link openEnvFor} / {@link openEnv}: the OpenEnv-level environment: action `BrowserGymAction{action_str}` in
 *   BrowserGym's action language (`click('13')`, `fill('5', 'text')`, `select_option`, `press`, `hover`, `scroll`,
 *   `goto`, `go_back`, `noop`, `send_msg_to_user`, …); observation `{text, url, screenshot, goal, axtree_txt,
 *   pruned_html, error, last_action_error}`; state `{episode_id, step_count, benchmark, task_name, task_id, goal,
 *   current_url, max_steps, cum_reward}`. A bad action string is an observation with `last_action_error` (reward 0),
 *   as in OpenEnv. Unlike OpenEnv, the `task_name` reset kwarg switches the task (OpenEnv only relabels the state)
 *   and `seed` picks the instance.
 * - A lost browser session (crashed page, killed browser, hung page) is never scored: the step fails with an
 *   `EXECUTION_ERROR` naming the loss, and the tool layer's state has `reward: null`. The next reset opens a fresh
 *   context (relaunching the browser if it died).
 * - {@link environment}: TRL's browsergym tool layer: `click(bid)`, `fill(bid, text)`, `send_keys(text)`,
 *   `scroll(direction)`, `noop()`; reward 1 when the episode ends with a positive step reward; 10 actions at most.
 * - {@link solver}: scripted solvers for every task, reading only the observation text.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { BrowserGym, Environment } from "@envtrain/env"
 *
 * const result = Environment.run(BrowserGym.environment, { seed: 1, task: "click-button" }, BrowserGym.solver())
 * // Effect<EpisodeResult<BrowserGym.State>>: result.state.success === true
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Browser from "./Browser.js"
import * as Client from "./Client.js"
import * as Environment from "./Environment.js"
import {
  makeRunner,
  type Observation as RunnerObservation,
  taskNames,
  UnknownTask
} from "./internal/browserGymEpisode.js"
import * as Suite from "./internal/miniwobSuite.js"
import { tasks } from "./internal/miniwobTasks.js"
import { actionStruct, BaseState, defaultMetadata, episodeIdFrom, seedFrom } from "./internal/openEnvSupport.js"
import * as Prng from "./internal/prng.js"
import type { OpenEnvDefinition, StepResult } from "./OpenEnv.js"
import { OpenEnvExecutionError, OpenEnvFactoryError } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

/** The task names envtrain ships (MiniWoB++'s names). */
export const TASKS: ReadonlyArray<string> = taskNames()

/**
 * Can `name` be played here: a task envtrain ships, or `miniwob.<name>` of the real MiniWoB++ suite when its pages
 * are found (`MINIWOB_HTML_DIR`, else the `miniwob` package in the project's `.venv`)? If not, the message says why
 * and names the fix.
 */
export const checkTask = (name: string): { readonly ok: true } | { readonly ok: false; readonly message: string } => {
  if (tasks.has(name)) return { ok: true }
  if (Suite.isSuiteName(name)) {
    const found = Suite.resolve(name)
    return found.ok ? { ok: true } : { ok: false, message: found.message }
  }
  return { ok: false, message: new UnknownTask(name).message }
}

/** Is `name` a task that can be played here (see {@link checkTask})? */
export const isTask = (name: string): boolean => checkTask(name).ok

/**
 * The real MiniWoB++ suite's task names (`miniwob.click-test`, …) found here, or the message naming the fix when the
 * `miniwob` package is not installed.
 */
export const suiteTasks = (): { readonly ok: true; readonly tasks: ReadonlyArray<string> } | {
  readonly ok: false
  readonly message: string
} => {
  const found = Suite.locate()
  return found.ok ? { ok: true, tasks: Suite.suiteTasks(found.dir) } : found
}

// ---------------------------------------------------------------------------------------------------------------
// OpenEnv level
// ---------------------------------------------------------------------------------------------------------------

/** `BrowserGymAction`. */
export const Action = actionStruct({ action_str: Schema.String }, "BrowserGymAction")
/** A decoded `BrowserGymAction` (`action_str`: one BrowserGym action call as text). */
export type Action = typeof Action.Type

/** `BrowserGymObservation` (without the envelope's reward/done). */
export const Observation = Schema.Struct({
  text: Schema.String,
  url: Schema.String,
  screenshot: Schema.NullOr(Schema.Array(Schema.Array(Schema.Array(Schema.Int)))),
  goal: Schema.String,
  axtree_txt: Schema.String,
  pruned_html: Schema.String,
  error: Schema.String,
  last_action_error: Schema.Boolean
}).annotations({ identifier: "BrowserGymObservation" })
/** A decoded BrowserGym observation. */
export type Observation = typeof Observation.Type

/** `BrowserGymState`. */
export const OpenEnvState = Schema.Struct({
  ...BaseState.fields,
  benchmark: Schema.String,
  task_name: Schema.String,
  task_id: Schema.NullOr(Schema.String),
  goal: Schema.String,
  current_url: Schema.String,
  max_steps: Schema.NullOr(Schema.Int),
  cum_reward: Schema.Number
}).annotations({ identifier: "BrowserGymState" })

/** How a served BrowserGym environment runs. */
export interface Options {
  /** The task a reset without `task_name` plays (default `click-test`, as OpenEnv's `BROWSERGYM_TASK_NAME`). */
  readonly task?: string | undefined
  /** Steps after which the episode is truncated (done, reward 0). Default 10, TRL's limit. */
  readonly maxSteps?: number | undefined
  /** Send the screenshot (H×W×3 ints: about 2.8 M numbers at 1280×720). Default off. */
  readonly screenshot?: boolean | undefined
  /** The browser (default: {@link Browser.shared}). */
  readonly browser?: Browser.Service | undefined
}

const lostError = (e: Browser.SessionLost) => new OpenEnvExecutionError({ message: e.message })

/** The OpenEnv definition of `browsergym_env` (benchmark `miniwob`) for the given options. */
export const openEnvFor = (options: Options = {}): OpenEnvDefinition<Action> => {
  const defaultTask = options.task ?? "click-test"
  const maxSteps = options.maxSteps ?? 10
  return {
    name: "browsergym_env",
    metadata: defaultMetadata("BrowserGymEnvironment"),
    action: Action,
    observation: Observation,
    state: OpenEnvState,
    supportsConcurrentSessions: true,
    defaultMaxConcurrentEnvs: 8,
    make: Effect.gen(function*() {
      const browser = options.browser ?? Browser.shared()
      const runner = yield* makeRunner(browser, { maxSteps, screenshot: options.screenshot ?? false })
      let episodeId: string | null = null
      let stepCount = 0
      let taskName = defaultTask
      const reset = (kwargs: Readonly<Record<string, unknown>>) =>
        Effect.gen(function*() {
          const seed = yield* seedFrom(kwargs)
          const name = typeof kwargs.task_name === "string" ? kwargs.task_name : defaultTask
          const outcome = yield* runner.reset(name, seed).pipe(
            Effect.mapError((e) =>
              e instanceof UnknownTask
                ? new OpenEnvExecutionError({ message: e.message })
                : e._tag === "SessionLost"
                ? lostError(e)
                : new OpenEnvExecutionError({ message: `cannot load the task page: ${e.message}` })
            )
          )
          taskName = name
          episodeId = yield* episodeIdFrom(kwargs, true)
          stepCount = 0
          return { observation: outcome.observation, reward: null, done: false } satisfies StepResult
        })
      return {
        reset,
        step: (action: Action) =>
          Effect.map(Effect.mapError(runner.step(action.action_str), lostError), (outcome): StepResult => {
            stepCount += 1
            return { observation: outcome.observation, reward: outcome.reward, done: outcome.done }
          }),
        state: Effect.sync(() => {
          const info = runner.info()
          return {
            episode_id: episodeId,
            step_count: stepCount,
            benchmark: "miniwob",
            task_name: taskName,
            task_id: Suite.isSuiteName(taskName) ? `browsergym/${taskName}` : `browsergym/miniwob.${taskName}`,
            goal: info.goal,
            current_url: info.url,
            max_steps: maxSteps,
            cum_reward: info.cumReward
          }
        })
      }
    }).pipe(
      Effect.catchAllDefect((cause) => Effect.fail(new OpenEnvFactoryError({ factoryName: "browsergym_env", cause })))
    )
  }
}

/** `browsergym_env` serving `click-test` by default. */
export const openEnv: OpenEnvDefinition<Action> = openEnvFor()

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's browsergym example)
// ---------------------------------------------------------------------------------------------------------------

/** The longest accessibility tree shown to the model, as TRL's wrapper truncates it. */
const AXTREE_LIMIT = 2000

/** The text a tool returns: goal, error, and the page's accessibility tree (TRL's text-only wrapper). */
export const format = (o: Pick<RunnerObservation, "goal" | "axtree_txt" | "error" | "last_action_error">): string =>
  [
    `Goal: ${o.goal}`,
    ...(o.last_action_error ? [`Last action error: ${o.error}`] : []),
    `Page structure:\n${o.axtree_txt.slice(0, AXTREE_LIMIT)}`
  ].join("\n\n")

const Bid = Schema.String.annotations({ description: "The element id shown in brackets, e.g. \"13\"." })

/** The `click(bid)` tool. */
export const Click = Tool.make("click", {
  description: "Click an element of the page.",
  parameters: { bid: Bid },
  success: Schema.String,
  returns: "The page after the click."
})
/** The `fill(bid, text)` tool. */
export const Fill = Tool.make("fill", {
  description: "Fill a text field with text (replacing what it holds).",
  parameters: { bid: Bid, text: Schema.String.annotations({ description: "The text to enter." }) },
  success: Schema.String,
  returns: "The page after filling."
})
/** The `send_keys(text)` tool. */
export const SendKeys = Tool.make("send_keys", {
  description: "Type text or press a key (e.g. \"Enter\") on the focused element.",
  parameters: { text: Schema.String.annotations({ description: "Text to type, or a key name such as Enter." }) },
  success: Schema.String,
  returns: "The page after the keys."
})
/** The `scroll(direction)` tool. */
export const Scroll = Tool.make("scroll", {
  description: "Scroll the page up or down.",
  parameters: { direction: Schema.Literal("up", "down").annotations({ description: "\"up\" or \"down\"." }) },
  success: Schema.String,
  returns: "The page after scrolling."
})
/** The `noop()` tool: look at the page again. */
export const Noop = Tool.make("noop", {
  description: "Do nothing and look at the page again.",
  success: Schema.String,
  returns: "The page."
})

/** The reward state: `reward` is null when the browser session was lost (unscoreable). */
export interface State {
  readonly done: boolean
  readonly reward: number | null
  readonly success: boolean
  readonly steps: number
  readonly task: string
  readonly seed: number
  /** Why the session was lost, or null. */
  readonly lost: string | null
}

/** The columns an episode reads: `seed` (the instance) and `task` (default: the environment's task). */
export const Columns = Schema.Struct({ seed: Schema.optional(Schema.Int), task: Schema.optional(Schema.String) })
/** The dataset columns a BrowserGym episode reads: the seed and the task name (both optional). */
export type Columns = typeof Columns.Type

/** The BrowserGym tool service. */
export class BrowserGymTools extends Context.Tag("@envtrain/env/BrowserGym/BrowserGymTools")<BrowserGymTools, {
  readonly reset: (columns: Columns) => Effect.Effect<Option.Option<string>>
  readonly act: (actionStr: string) => Effect.Effect<string, Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {
  /** A fresh episode per build, on the given browser (default: the shared one). */
  static readonly layer = (options: Options = {}) =>
    Layer.scoped(
      BrowserGymTools,
      Effect.gen(function*() {
        const maxSteps = options.maxSteps ?? 10
        const runner = yield* makeRunner(options.browser ?? Browser.shared(), { maxSteps, screenshot: false })
        let state: State = {
          done: true,
          reward: 0,
          success: false,
          steps: 0,
          task: options.task ?? "click-test",
          seed: 0,
          lost: null
        }
        const lose = (reason: string) => {
          state = { ...state, done: true, reward: null, success: false, lost: reason }
        }
        return BrowserGymTools.of({
          reset: (columns) =>
            Effect.gen(function*() {
              const seed = yield* Environment.seedOf(columns.seed)
              const task = columns.task ?? options.task ?? "click-test"
              state = { done: false, reward: 0, success: false, steps: 0, task, seed, lost: null }
              const outcome = yield* runner.reset(task, seed).pipe(Effect.either)
              if (outcome._tag === "Left") {
                const e = outcome.left
                if (e instanceof UnknownTask) return yield* Effect.die(e)
                lose(e.message)
                return Option.some(`The browser failed: ${e.message}`)
              }
              return Option.some(format(outcome.right.observation))
            }),
          act: (actionStr) =>
            Effect.gen(function*() {
              if (state.done) return yield* new Tool.GameOver({ message: "Episode is done." })
              const outcome = yield* runner.step(actionStr).pipe(Effect.either)
              if (outcome._tag === "Left") {
                lose(outcome.left.reason)
                return yield* new Tool.GameOver({ message: outcome.left.message })
              }
              const { done, observation, reward } = outcome.right
              // TRL: on the final step 1.0 if its reward is positive, else 0.0; before that, the raw step reward.
              const scored = done ? (reward > 0 ? 1 : 0) : reward
              state = { ...state, done, reward: scored, success: done && scored > 0, steps: state.steps + 1 }
              return format(observation)
            }),
          state: Effect.sync(() => state)
        })
      })
    )
}

const q = (s: string) => `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`

/** TRL's mapping from tools to action strings. */
export const actionFor = {
  click: (p: { readonly bid: string }) => `click(${q(p.bid)})`,
  fill: (p: { readonly bid: string; readonly text: string }) => `fill(${q(p.bid)}, ${q(p.text)})`,
  send_keys: (p: { readonly text: string }) => `send_keys(${q(p.text)})`,
  scroll: (p: { readonly direction: "up" | "down" }) => `scroll(0, ${p.direction === "up" ? -300 : 300})`,
  noop: () => "noop(0)"
} as const

/** The definition over a layer of its tools: in-process (`environment`) or on a server (`remote`). */
const environmentWith = (layer: Layer.Layer<BrowserGymTools>, openEnvDefinition?: OpenEnvDefinition) =>
  Environment.make({
    name: "browsergym",
    description: "BrowserGym MiniWoB++-style web tasks in a real Chromium: click, fill, send_keys, scroll, noop.",
    tag: BrowserGymTools,
    layer,
    columns: Columns,
    tools: [Click, Fill, SendKeys, Scroll, Noop],
    handlers: (service) => ({
      click: (p: Tool.Params<typeof Click>) => service.act(actionFor.click(p)),
      fill: (p: Tool.Params<typeof Fill>) => service.act(actionFor.fill(p)),
      send_keys: (p: Tool.Params<typeof SendKeys>) => service.act(actionFor.send_keys(p)),
      scroll: (p: Tool.Params<typeof Scroll>) => service.act(actionFor.scroll(p)),
      noop: () => service.act(actionFor.noop())
    }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    ...(openEnvDefinition === undefined ? {} : { openEnv: openEnvDefinition })
  })

/** BrowserGym as an environment (TRL's browsergym tools), on the shared browser; columns `{seed?, task?}`. */
export const environment = environmentWith(BrowserGymTools.layer(), openEnv)

/** The same environment with other options (a task, a browser of one's own). */
export const environmentFor = (options: Options) => environmentWith(BrowserGymTools.layer(options), openEnvFor(options))

/** The environment's reward: null when the session was lost (unscoreable), else TRL's binary reward. */
export const reward = (
  state: State
): number | null => (state.lost !== null ? null : state.done ? (state.reward ?? 0) : 0)

// ---------------------------------------------------------------------------------------------------------------
// Solver
// ---------------------------------------------------------------------------------------------------------------

/** The scripted solver's next action string for an observation of `task` (undefined when it has none). */
export const solveStep = (task: string, view: { readonly goal: string; readonly axtree: string }): string | undefined =>
  tasks.get(task)?.solve(view)

/** A deliberately wrong action for an observation of `task` (for tests and negative examples). */
export const wrongStep = (task: string, view: { readonly goal: string; readonly axtree: string }): string | undefined =>
  tasks.get(task)?.wrong?.(view)

const viewOf = (text: string) => ({
  goal: /^Goal: (.*)$/m.exec(text)?.[1] ?? "",
  axtree: text.split("Page structure:\n")[1] ?? ""
})

/** Tool calls for an action string the solver chose (only the TRL tools' subset). */
const toolCallOf = (action: string): { readonly name: string; readonly args: Record<string, unknown> } | undefined => {
  const click = /^click\('([^']*)'\)$/.exec(action)
  if (click) return { name: "click", args: { bid: click[1] } }
  const fill = /^fill\('([^']*)', '((?:[^'\\]|\\.)*)'\)$/.exec(action)
  if (fill) return { name: "fill", args: { bid: fill[1], text: fill[2].replace(/\\(.)/g, "$1") } }
  return undefined
}

/** The task an observation shows: the page title (`RootWebArea '<task>'`) is the task's name. */
export const taskOf = (text: string): string | undefined => /RootWebArea '([\w-]+)'/.exec(text)?.[1]

/**
 * A solver through the tools: reads the goal and the tree from each tool result and clicks/fills its way through
 * the task (`task`, else the one the page title names). With `errorRate` > 0 each move is, with that probability
 * (seeded by `seed`), replaced by the task's wrong move where it has one, for imperfect SFT data; `taskErrorRates`
 * sets that probability for the tasks it names instead (a player whose most likely move is wrong on some tasks).
 * Tasks needing actions the tools lack (select_option) are solved by clicking where possible and otherwise stop.
 */
export const solver = (
  options: {
    readonly task?: string
    readonly errorRate?: number
    readonly seed?: number
    readonly taskErrorRates?: Readonly<Record<string, number>>
  } = {}
) => {
  const prng = Prng.make(options.seed ?? 0)
  const rates = options.taskErrorRates ?? {}
  for (const [name, rate] of Object.entries(rates)) {
    if (!tasks.has(name)) throw new UnknownTask(name)
    if (!(rate >= 0 && rate <= 1)) throw new RangeError(`taskErrorRates["${name}"] = ${rate}: give a rate in [0, 1]`)
  }
  return (episode: Environment.Episode<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      let text = Option.getOrElse(episode.observation, () => "")
      const task = options.task ?? taskOf(text) ?? "click-test"
      const errorRate = rates[task] ?? options.errorRate ?? 0
      for (let i = 0; i < 10; i++) {
        const view = viewOf(text)
        const wrong = errorRate > 0 && prng.next() < errorRate ? wrongStep(task, view) : undefined
        const action = wrong ?? solveStep(task, view)
        const call = action === undefined ? undefined : toolCallOf(action)
        if (call === undefined) return
        const outcome = yield* episode.call(call.name, call.args)
        if (outcome._tag === "Failure") return
        text = outcome.text
        const state = (yield* episode.state) as State
        if (state.done) return
      }
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Remote: the same tools on a served browsergym_env (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

const RemoteObservation = Schema.Struct({
  goal: Schema.String,
  axtree_txt: Schema.String,
  error: Schema.String,
  last_action_error: Schema.Boolean
})

/** `BrowserGymTools` backed by a remote `browsergym_env` session. */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    BrowserGymTools,
    Effect.gen(function*() {
      const client = yield* Client.make({
        ...options,
        url,
        action: Schema.Struct({ action_str: Schema.String }),
        observation: RemoteObservation
      })
      let state: State = { done: true, reward: 0, success: false, steps: 0, task: "click-test", seed: 0, lost: null }
      return BrowserGymTools.of({
        reset: (columns) =>
          Effect.flatMap(Environment.seedOf(columns.seed), (seed) => {
            const task = columns.task ?? "click-test"
            state = { done: false, reward: 0, success: false, steps: 0, task, seed, lost: null }
            return Effect.map(
              Effect.orDie(client.reset({ seed, task_name: task })),
              (r) => Option.some(format(r.observation))
            )
          }),
        act: (actionStr) =>
          Effect.suspend(() =>
            state.done
              ? Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
              : Effect.map(Effect.orDie(client.step({ action_str: actionStr })), (r) => {
                const reward = typeof r.reward === "number" ? r.reward : r.reward === true ? 1 : 0
                const scored = r.done ? (reward > 0 ? 1 : 0) : reward
                state = {
                  ...state,
                  done: r.done,
                  reward: scored,
                  success: r.done && scored > 0,
                  steps: state.steps + 1
                }
                return format(r.observation)
              })
          ),
        state: Effect.sync(() => state)
      })
    })
  )

/** BrowserGym as an environment whose tools run on a remote `browsergym_env` server. */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
