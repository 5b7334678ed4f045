/** OpenEnv's `textarena_env` server over a TextArena game engine (shared by Wordle-v0 and Sudoku-v0). */
import { Effect, Schema } from "effect"
import type { OpenEnvDefinition, OpenEnvInstance, StepResult } from "../OpenEnv.js"
import { actionStruct, BaseState, defaultMetadata, episodeIdFrom, seedFrom } from "./openEnvSupport.js"
import { WireSchemaId } from "./pyJson.js"
import { SyncStep } from "./syncStep.js"
import type { SinglePlayerState } from "./textArena.js"
import { observation as textArenaObservation } from "./textArena.js"
import { WordleRewardSignals } from "./wordleGame.js"

/** `TextArenaAction`. */
export const Action = actionStruct({ message: Schema.String }, "TextArenaAction")
/** A decoded `TextArenaAction` (`message`: the move as text). */
export type Action = typeof Action.Type

/** `TextArenaMessage`. */
export const Message = Schema.Struct({ sender_id: Schema.Int, content: Schema.String, category: Schema.String })

const AnyDict = Schema.Record({ key: Schema.String, value: Schema.Unknown })
const FloatDict = Schema.Record({ key: Schema.String, value: Schema.Number })
/** `Dict[str, Any]` that carries the twin's float dicts (`reward_signals`, `rewards`): floats on the wire. */
const dictWithFloats = (fields: Schema.Struct.Fields) =>
  AnyDict.annotations({ [WireSchemaId]: Schema.Struct(fields, AnyDict) })
const Info = dictWithFloats({ reward_signals: Schema.optional(FloatDict) })

/** `TextArenaObservation` (without the envelope's reward/done). */
export const Observation = Schema.Struct({
  prompt: Schema.String,
  messages: Schema.Array(Message),
  current_player_id: Schema.Int,
  legal_players: Schema.Array(Schema.Int),
  info: Info
}).annotations({ identifier: "TextArenaObservation" })

/** `TextArenaState` (note: `raw_state.game_state.secret_word` reveals the word, exactly as OpenEnv does). */
export const OpenEnvState = Schema.Struct({
  ...BaseState.fields,
  env_id: Schema.String,
  num_players: Schema.Int,
  max_turns: Schema.NullOr(Schema.Int),
  turn: Schema.Int,
  last_reward: Schema.Number,
  last_info: Info,
  raw_state: dictWithFloats({
    rewards: Schema.optional(Schema.NullOr(FloatDict)),
    reward_signals: Schema.optional(FloatDict)
  })
}).annotations({ identifier: "TextArenaState" })

/** A TextArena OpenEnv definition over a game engine (shared by Wordle and Sudoku). */
export const textArenaDefinition = <
  G extends {
    readonly state: SinglePlayerState
    step(message: string): boolean
    gameState(): Record<string, unknown>
  }
>(
  envId: string,
  newGame: (options: Readonly<Record<string, unknown>>, seed: number) => G,
  signals: boolean
): OpenEnvDefinition<Action> => ({
  name: "textarena_env",
  metadata: defaultMetadata("TextArenaEnvironment"),
  action: Action,
  observation: Observation,
  state: OpenEnvState,
  supportsConcurrentSessions: true,
  pythonFloats: true,
  defaultMaxConcurrentEnvs: 8,
  make: Effect.gen(function*() {
    let game = newGame({}, yield* seedFrom({}))
    let provider = new WordleRewardSignals()
    let episodeId: string = crypto.randomUUID()
    let stepCount = 0
    let lastReward = 0
    let lastInfo: Record<string, unknown> = {}
    let lastSignals: Record<string, number> | undefined
    const step = (action: Action): StepResult => {
      const done = game.step(action.message)
      stepCount += 1
      const content = game.state.transcript()
      const reward = game.state.rewards ?? 0
      lastReward = reward
      const info: Record<string, unknown> = {}
      lastInfo = {}
      lastSignals = undefined
      if (signals) {
        lastSignals = provider.compute(action.message, content, reward)
        info.reward_signals = lastSignals
        lastInfo = { reward_signals: lastSignals }
      }
      return { observation: textArenaObservation(content, game.state.turn, envId, info), reward, done }
    }
    const instance: OpenEnvInstance<Action> & { readonly [SyncStep]: (action: Action) => StepResult } = {
      [SyncStep]: step,
      // Combinators, not a `function*` per reset (see docs/architecture.md, "Hot paths and the young generation").
      reset: (options) =>
        Effect.flatMap(seedFrom(options), (seed) => {
          game = newGame(options, seed)
          provider = new WordleRewardSignals()
          return Effect.map(episodeIdFrom(options, true), (id): StepResult => {
            episodeId = id
            stepCount = 0
            lastReward = 0
            lastInfo = {}
            lastSignals = undefined
            const content = game.state.transcript()
            return {
              observation: textArenaObservation(content, 0, envId, {}),
              reward: 0.0,
              done: false
            }
          })
        }),
      step: (action) => Effect.sync(() => step(action)),
      state: Effect.sync(() => ({
        episode_id: episodeId,
        step_count: stepCount,
        env_id: envId,
        num_players: 1,
        max_turns: null,
        turn: game.state.turn,
        last_reward: lastReward,
        last_info: lastInfo,
        raw_state: game.state.rawState(game.gameState(), lastSignals)
      }))
    }
    return instance
  })
})
