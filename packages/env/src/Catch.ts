/**
 * Catch (OpenSpiel `catch`, as served by OpenEnv's `openspiel_env`), seedable.
 *
 * - {@link openEnv}: the OpenEnv-level environment (action `{action_id, game_name, game_params}`, observation
 *   `{info_state, legal_actions, game_phase, current_player_id, opponent_last_action}`), rule for rule.
 *   Unlike OpenEnv, the `seed` reset kwarg is honoured, and action ids outside {0,1,2} are rejected.
 * - {@link environment}: TRL's `CatchEnv` tool layer: `move(direction)` and `stay()`, each returning the formatted
 *   observation; after the end, "Episode is done.".
 * - {@link solver}: a perfect player (optionally making seeded random mistakes).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Catch, Environment } from "@envtrain/env"
 *
 * const result = Environment.run(Catch.environment, { seed: 3 }, Catch.solver())
 * // Effect<EpisodeResult<Catch.State>>: result.state.caught === true
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Client from "./Client.js"
import * as Environment from "./Environment.js"
import { CatchGame, formatObservation, TERMINAL_PLAYER_ID } from "./internal/catchGame.js"
import { actionStruct, BaseState, defaultMetadata, episodeIdFrom, seedFrom } from "./internal/openEnvSupport.js"
import * as Prng from "./internal/prng.js"
import { stepOrToolError } from "./internal/serverToolErrors.js"
import type { OpenEnvDefinition, StepResult } from "./OpenEnv.js"
import { OpenEnvExecutionError } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

// ---------------------------------------------------------------------------------------------------------------
// OpenEnv level
// ---------------------------------------------------------------------------------------------------------------

/** `OpenSpielAction`: `game_name` and `game_params` are accepted and ignored, as in OpenEnv. */
export const Action = actionStruct({
  action_id: Schema.Int,
  game_name: Schema.optionalWith(Schema.String, { default: () => "catch" }),
  game_params: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}, "OpenSpielAction")
/** A decoded OpenSpiel action (`action_id`, `game_name`). */
export type Action = typeof Action.Type

/** `OpenSpielObservation` (without the envelope's reward/done). */
export const Observation = Schema.Struct({
  info_state: Schema.Array(Schema.Number),
  legal_actions: Schema.Array(Schema.Int),
  game_phase: Schema.Literal("initial", "playing", "terminal"),
  current_player_id: Schema.Int,
  opponent_last_action: Schema.NullOr(Schema.Int)
}).annotations({ identifier: "OpenSpielObservation" })
/** A decoded OpenSpiel observation. */
export type Observation = typeof Observation.Type

/** `OpenSpielState`. */
export const OpenEnvState = Schema.Struct({
  ...BaseState.fields,
  game_name: Schema.String,
  agent_player: Schema.Int,
  opponent_policy: Schema.String,
  game_params: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  num_players: Schema.Int
}).annotations({ identifier: "OpenSpielState" })

const observe = (game: CatchGame, phase: "initial" | "playing" | "terminal"): Observation => ({
  info_state: game.infoState(),
  legal_actions: phase === "terminal" ? [] : [0, 1, 2],
  game_phase: phase,
  current_player_id: phase === "terminal" ? TERMINAL_PLAYER_ID : 0,
  opponent_last_action: null
})

/** Rejects ids OpenSpiel would silently clamp (e.g. 4 would jump right). */
const checkActionId = (id: number) =>
  id === 0 || id === 1 || id === 2
    ? Effect.void
    : Effect.fail(
      new OpenEnvExecutionError({
        message: `Invalid action_id ${id} for catch: legal actions are 0 (LEFT), 1 (STAY) and 2 (RIGHT).`
      })
    )

/** The OpenEnv definition of `openspiel_env` with game `catch`. */
export const openEnv: OpenEnvDefinition<Action> = {
  name: "openspiel_env",
  metadata: defaultMetadata("OpenSpielEnvironment"),
  action: Action,
  observation: Observation,
  state: OpenEnvState,
  supportsConcurrentSessions: true,
  pythonFloats: true,
  defaultMaxConcurrentEnvs: 8,
  make: Effect.gen(function*() {
    let game = new CatchGame(Prng.make(yield* seedFrom({})))
    let episodeId: string = crypto.randomUUID()
    let stepCount = 0
    return {
      // Combinators, not a `function*` per call (see docs/architecture.md, "Hot paths and the young generation").
      reset: (options) =>
        Effect.flatMap(seedFrom(options), (seed) => {
          game = new CatchGame(Prng.make(seed))
          // OpenSpiel's reset takes no kwargs: a given episode_id is dropped.
          return Effect.map(episodeIdFrom(options, false), (id): StepResult => {
            episodeId = id
            stepCount = 0
            return { observation: observe(game, "initial"), reward: null, done: false }
          })
        }),
      step: (action) =>
        Effect.map(checkActionId(action.action_id), (): StepResult => {
          stepCount += 1
          if (game.terminal) {
            // rl_environment starts a new episode when stepped after the end, ignoring the action.
            game.newEpisode()
            return { observation: observe(game, "initial"), reward: null, done: false }
          }
          game.apply(action.action_id)
          const done = game.terminal
          return { observation: observe(game, done ? "terminal" : "playing"), reward: game.reward, done }
        }),
      state: Effect.sync(() => ({
        episode_id: episodeId,
        step_count: stepCount,
        game_name: "catch",
        agent_player: 0,
        opponent_policy: "random",
        game_params: {},
        num_players: 1
      }))
    }
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's CatchEnv)
// ---------------------------------------------------------------------------------------------------------------

/** `move(direction)`: TRL's docstring, with the directions as an enum. */
export const Move = Tool.make("move", {
  description: "Move the paddle left or right.",
  parameters: {
    direction: Schema.Literal("left", "right").annotations({
      description: "Direction to move, either \"left\" or \"right\"."
    })
  },
  success: Schema.String,
  returns: "The observation after moving."
})

/** `stay()`. */
export const Stay = Tool.make("stay", {
  description: "Do nothing and let the ball fall one step.",
  success: Schema.String,
  returns: "The observation after staying."
})

/** The reward state TRL's `reward_from_env` reads (`done`, `reward`), plus `caught` and `steps`. */
export interface State {
  readonly done: boolean
  /** The last step's env reward: 0 until the end, then +1 or -1. */
  readonly reward: number
  readonly caught: boolean
  readonly steps: number
  readonly seed: number
}

/** The Catch tool service. */
export class CatchTools extends Context.Tag("@envtrain/env/Catch/CatchTools")<CatchTools, {
  readonly reset: (columns: { readonly seed?: number | undefined }) => Effect.Effect<Option.Option<string>>
  /** Fails with GameOver after the end; a remote's ToolError is what its server answered (TRL's tool error). */
  readonly move: (
    params: { readonly direction: "left" | "right" }
  ) => Effect.Effect<string, Tool.GameOver | Tool.ToolError>
  readonly stay: () => Effect.Effect<string, Tool.GameOver | Tool.ToolError>
  readonly state: Effect.Effect<State>
}>() {
  /** A fresh game per build; `reset` seeds it from the row's `seed` column. */
  static readonly layer = Layer.sync(CatchTools, () => {
    let game: CatchGame | undefined
    let seed = 0
    let reward = 0
    let done = false
    let steps = 0
    const act = (actionId: number) =>
      Effect.suspend(() => {
        if (game === undefined || done) return Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
        game.apply(actionId)
        steps += 1
        reward = game.reward
        done = game.terminal
        return Effect.succeed(formatObservation(game.infoState()))
      })
    return CatchTools.of({
      reset: (columns) =>
        Effect.map(Environment.seedOf(columns.seed), (s) => {
          seed = s
          game = new CatchGame(Prng.make(seed))
          reward = 0
          done = false
          steps = 0
          return Option.some(formatObservation(game.infoState()))
        }),
      move: ({ direction }) => act(direction === "left" ? 0 : 2),
      stay: () => act(1),
      state: Effect.sync(() => ({ done, reward, caught: done && reward > 0, steps, seed }))
    })
  })
}

/** The definition over a layer of its tools: in-process (`environment`) or on a server (`remote`). */
const environmentWith = (layer: Layer.Layer<CatchTools>) =>
  Environment.make({
    name: "catch",
    description: "OpenSpiel Catch: move the paddle to catch the falling ball (10x5 grid, 9 steps, +1/-1).",
    tag: CatchTools,
    layer,
    columns: Environment.SeedColumns,
    tools: [Move, Stay],
    handlers: (service) => ({ move: service.move, stay: () => service.stay() }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv
  })

/** Catch as an environment (TRL's `CatchEnv`): tools `move` and `stay`, columns `{seed?}`. */
export const environment = environmentWith(CatchTools.layer)

/** TRL's reward: `max(reward, 0)` when done, else 0. */
export const reward = (state: State): number => state.done ? Math.max(state.reward, 0) : 0

const parse = (text: string) => {
  const ball = /Ball: row (\d+)\/10, column (\d+)\/5/.exec(text)
  const paddle = /Paddle: column (\d+)\/5/.exec(text)
  return { ballCol: ball ? Number(ball[2]) : undefined, paddleCol: paddle ? Number(paddle[1]) : undefined }
}

/**
 * A perfect player through the tools: moves the paddle under the ball. With `errorRate` > 0 each move is,
 * with that probability, replaced by a uniformly random one (seeded by `seed`), for imperfect SFT data. With
 * `waitFar` > 0 it hesitates: while the ball is two or more columns away it stays with that probability (before any
 * random mistake), so a policy that imitates its most likely move never sets off toward a far ball.
 */
export const solver = (
  options: {
    readonly errorRate?: number
    readonly seed?: number
    readonly waitFar?: number
  } = {}
) => {
  const prng = Prng.make(options.seed ?? 0)
  const errorRate = options.errorRate ?? 0
  const waitFar = options.waitFar ?? 0
  return (episode: Environment.Episode<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      let text = Option.getOrElse(episode.observation, () => "")
      // The ball is reported until it reaches the last row, i.e. until the episode is done.
      while (text.includes("Ball:")) {
        const { ballCol, paddleCol } = parse(text)
        let choice: "left" | "right" | "stay" =
          ballCol === undefined || paddleCol === undefined || ballCol === paddleCol
            ? "stay"
            : ballCol < paddleCol
            ? "left"
            : "right"
        if (
          waitFar > 0 && ballCol !== undefined && paddleCol !== undefined && Math.abs(ballCol - paddleCol) >= 2 &&
          prng.next() < waitFar
        ) choice = "stay"
        if (errorRate > 0 && prng.next() < errorRate) choice = prng.choice(["left", "right", "stay"] as const)
        const outcome = choice === "stay"
          ? yield* episode.call("stay", {})
          : yield* episode.call("move", { direction: choice })
        if (outcome._tag === "Failure") return
        text = outcome.text
      }
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Remote: the same tools on a served openspiel_env (catch) (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

const OpenSpielObservation = Schema.Struct({ info_state: Schema.Array(Schema.Number) })

/** `CatchTools` backed by a remote `openspiel_env` (catch) session. */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    CatchTools,
    Effect.gen(function*() {
      const client = yield* Client.make({
        ...options,
        url,
        action: Schema.Struct({ action_id: Schema.Int }),
        observation: OpenSpielObservation
      })
      let seed = 0
      let reward = 0
      let done = false
      let steps = 0
      // Combinators, not a `function*` per call (see `Wordle.remoteLayer`).
      const act = (actionId: number) =>
        Effect.suspend((): Effect.Effect<string, Tool.GameOver | Tool.ToolError> =>
          done
            ? Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
            : Effect.map(stepOrToolError(client.step({ action_id: actionId })), (r) => {
              steps += 1
              reward = typeof r.reward === "number" ? r.reward : 0
              done = r.done
              return formatObservation(r.observation.info_state)
            })
        )
      return CatchTools.of({
        reset: (columns) =>
          Effect.flatMap(Environment.seedOf(columns.seed), (s) => {
            seed = s
            return Effect.map(Effect.orDie(client.reset({ seed })), (r) => {
              reward = 0
              done = false
              steps = 0
              return Option.some(formatObservation(r.observation.info_state))
            })
          }),
        move: ({ direction }) => act(direction === "left" ? 0 : 2),
        stay: () => act(1),
        state: Effect.sync(() => ({ done, reward, caught: done && reward > 0, steps, seed }))
      })
    })
  )

/** Catch as an environment whose tools run on a remote server. */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
