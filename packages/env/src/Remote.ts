/**
 * Remote environments: the same tool services and environments as the in-process built-ins, backed by an OpenEnv
 * session on a server (an envtrain server, a local uvicorn, a Docker image or an HF Space), so training code cannot
 * tell the difference.
 *
 * - {@link environment}: a generic typed remote environment from action/observation Schemas and a mapping from
 *   tool calls to actions.
 * - {@link wordle}, {@link sudoku}, {@link catchGame}, {@link echo}: the built-ins' environments with their tool
 *   services ({@link wordleLayer}, {@link sudokuLayer}, {@link catchLayer}, {@link echoLayer}) backed by a remote
 *   session.
 *
 * Every episode builds its layer afresh, so it opens its own socket (one socket per episode). Infrastructure
 * failures (session lost, timeouts, capacity, connect) are not the model's fault: they are raised as defects
 * carrying the typed `Client` error (never as tool text that could be scored).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Environment, Remote } from "@envtrain/env"
 *
 * const env = Remote.wordle("https://openenv-wordle.hf.space")
 * const program = Environment.run(env, { seed: 1 }, (episode) => Effect.asVoid(episode.call("guess", { guess: "[crane]" })))
 * ```
 *
 * @since 0.0.0
 */
import { Effect, Layer, Option, Schema } from "effect"
import * as Catch from "./Catch.js"
import * as Client from "./Client.js"
import * as Echo from "./Echo.js"
import * as Environment from "./Environment.js"
import { formatObservation } from "./internal/catchGame.js"
import { makeSudokuTools } from "./internal/sudokuTools.js"
import * as Sudoku from "./Sudoku.js"
import * as Tool from "./Tool.js"
import * as Wordle from "./Wordle.js"

/** Client options shared by the remote layers (the URL is given separately). */
export type RemoteOptions = Omit<Client.ClientOptions, "url" | "action" | "observation">

const orDie = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A> => Effect.orDie(effect)

// ---------------------------------------------------------------------------------------------------------------
// Generic
// ---------------------------------------------------------------------------------------------------------------

/** The reward state of a generic remote environment. */
export interface RemoteState<O> {
  readonly done: boolean
  /** The last envelope's reward (null until the first step, or when the server sends none). */
  readonly reward: number | boolean | null
  readonly steps: number
  readonly observation: O | undefined
}

/** Options of {@link environment}. */
export interface RemoteEnvironmentOptions<A, AI, O, OI, Columns, CI> {
  readonly name: string
  readonly description?: string
  readonly url: string
  readonly action: Schema.Schema<A, AI>
  readonly observation: Schema.Schema<O, OI>
  readonly columns: Schema.Schema<Columns, CI>
  /** Tools whose success is the text `render` returns. */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The reset kwargs for a row (default: none). */
  readonly resetOptions?: (columns: Columns) => Readonly<Record<string, unknown>>
  /** The action a tool call sends. */
  readonly actionFor: (tool: string, params: any) => A
  /** What the model sees of an observation. */
  readonly render: (observation: O) => string
  readonly client?: RemoteOptions
}

/** A typed remote environment: each episode opens a session, `reset` with the row, and one step per tool call. */
export const environment = <A, AI, O, OI, Columns, CI>(
  options: RemoteEnvironmentOptions<A, AI, O, OI, Columns, CI>
): Environment.Environment<RemoteState<O>, Columns> => ({
  name: options.name,
  description: options.description ?? options.name,
  tools: options.tools,
  columns: options.columns,
  supportsConcurrentSessions: true,
  instance: Effect.gen(function*() {
    const client = yield* Client.make({
      ...options.client,
      url: options.url,
      action: options.action,
      observation: options.observation
    })
    let state: RemoteState<O> = { done: false, reward: null, steps: 0, observation: undefined }
    const instance: Environment.Instance<RemoteState<O>> = {
      reset: (columns) =>
        client.reset(options.resetOptions?.(columns as Columns) ?? {}).pipe(
          orDie,
          Effect.map((r) => {
            state = { done: r.done, reward: r.reward, steps: 0, observation: r.observation }
            return Option.some(options.render(r.observation))
          })
        ),
      invoke: (tool, params) =>
        state.done
          ? Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
          : client.step(options.actionFor(tool, params)).pipe(
            orDie,
            Effect.map((r) => {
              state = { done: r.done, reward: r.reward, steps: state.steps + 1, observation: r.observation }
              return options.render(r.observation)
            })
          ),
      state: Effect.sync(() => state)
    }
    return instance
  })
})

// ---------------------------------------------------------------------------------------------------------------
// Wordle (textarena_env)
// ---------------------------------------------------------------------------------------------------------------

const TextArenaObservation = Schema.Struct({
  prompt: Schema.String,
  messages: Schema.Array(Schema.Struct({ sender_id: Schema.Number, content: Schema.String, category: Schema.String }))
})

/** A client for one `textarena_env` session (action `{message}`, the TextArena observation). */
const textArenaClient = (url: string, options: RemoteOptions) =>
  Client.make({ ...options, url, action: Schema.Struct({ message: Schema.String }), observation: TextArenaObservation })

const transcriptOf = (o: typeof TextArenaObservation.Type) => o.messages[0]?.content ?? ""

/** `Wordle.WordleTools` backed by a remote `textarena_env` (Wordle-v0) session. */
export const wordleLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    Wordle.WordleTools,
    Effect.map(textArenaClient(url, options), (client) => {
      const session: RemoteWordle = {
        client,
        last: "",
        reward: 0,
        done: false,
        invalid: 0,
        seed: 0,
        won: false,
        guesses: [],
        bestGreens: 0
      }
      return Wordle.WordleTools.of({
        reset: (columns) => Effect.gen(() => wordleReset(session, columns)),
        guess: ({ guess }) => Effect.gen(() => wordleGuess(session, guess)),
        state: Effect.sync(() => ({
          done: session.done,
          reward: session.reward,
          won: session.won,
          num_guesses: session.guesses.length,
          best_greens: session.bestGreens,
          invalid_moves: session.invalid,
          guesses: [...session.guesses],
          seed: session.seed
        }))
      })
    })
  )

/** One remote Wordle episode's client and what it has seen. */
interface RemoteWordle {
  readonly client: Effect.Effect.Success<ReturnType<typeof textArenaClient>>
  last: string
  reward: number
  done: boolean
  invalid: number
  seed: number
  won: boolean
  readonly guesses: Array<string>
  bestGreens: number
}

// Module-level generator functions, not a `function*` per call (see docs/architecture.md, "Hot paths and the young generation").
function* wordleReset(s: RemoteWordle, columns: typeof Wordle.Columns.Type) {
  // Always send a seed, so a remote episode is reproducible and its seed known.
  s.seed = yield* Environment.seedOf(columns.seed)
  const r = yield* orDie(
    s.client.reset({ seed: s.seed, ...(columns.secret !== undefined ? { secret: columns.secret } : {}) })
  )
  s.last = transcriptOf(r.observation)
  s.reward = 0
  s.done = false
  s.invalid = 0
  s.won = false
  s.guesses.length = 0
  s.bestGreens = 0
  return Option.some(s.last)
}

function* wordleGuess(s: RemoteWordle, guess: string) {
  if (s.done) return yield* new Tool.GameOver({ message: "Game over." })
  const r = yield* orDie(s.client.step({ message: guess }))
  const full = transcriptOf(r.observation)
  const text = full.slice(s.last.length)
  s.last = full
  s.done = r.done
  if (text.includes("You attempted an invalid move")) {
    s.reward = 0
    s.invalid += 1
  } else {
    s.reward = typeof r.reward === "number" ? r.reward : 0
    const feedback = /You submitted \[(\w+)\]\.\nFeedback:\n[^\n]*\n([GYX ]+)/.exec(text)
    if (feedback !== null) {
      s.guesses.push(feedback[1])
      s.bestGreens = Math.max(s.bestGreens, feedback[2].split(" ").filter((m) => m === "G").length)
    } else if (s.done && s.reward === 1) {
      // A win appends only the action line `[GAME] [word]`.
      const word = /\[(\w+)\]\s*$/.exec(text)
      if (word !== null) s.guesses.push(word[1].toLowerCase())
      s.won = true
      s.bestGreens = 5
    } else if (s.done) {
      // The second consecutive invalid move ends the game without appending text.
      s.invalid += 1
    }
  }
  return text
}

/** Wordle as an environment whose tools run on a remote server (same tools, columns and state as `Wordle.environment`). */
export const wordle = (url: string, options: RemoteOptions = {}) =>
  Environment.make({
    name: "wordle",
    description: Wordle.environment.description,
    tag: Wordle.WordleTools,
    layer: wordleLayer(url, options),
    columns: Wordle.Columns,
    tools: [Wordle.Guess],
    handlers: (service) => ({ guess: service.guess }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv: Wordle.openEnv
  })

// ---------------------------------------------------------------------------------------------------------------
// Sudoku (textarena_env with Sudoku-v0)
// ---------------------------------------------------------------------------------------------------------------

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** `Sudoku.SudokuTools` backed by a remote `textarena_env` (Sudoku-v0) session: TRL's `SudokuEnv` logic over it. */
export const sudokuLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    Sudoku.SudokuTools,
    Effect.gen(function*() {
      const client = yield* textArenaClient(url, options)
      const tools = makeSudokuTools({
        reset: (seed) => Effect.map(orDie(client.reset({ seed })), (r) => transcriptOf(r.observation)),
        step: (move) =>
          Effect.map(orDie(client.step({ message: move })), (r) => ({
            transcript: transcriptOf(r.observation),
            reward: typeof r.reward === "number" ? r.reward : 0,
            done: r.done
          })),
        // How the game ended is only in the state (`raw_state.game_info` and `raw_state.game_state`).
        ending: Effect.map(orDie(client.state), (state) => {
          const raw = isRecord(state.raw_state) ? state.raw_state : {}
          const info = isRecord(raw.game_info) && isRecord(raw.game_info["0"]) ? raw.game_info["0"] : {}
          const game = isRecord(raw.game_state) ? raw.game_state : {}
          return { invalidMove: info.invalid_move === true, completed: game.completed === true }
        })
      }, Environment.seedOf)
      return Sudoku.SudokuTools.of(tools)
    })
  )

/** Sudoku as an environment whose tools run on a remote server (same tools, columns and state as `Sudoku.environment`). */
export const sudoku = (url: string, options: RemoteOptions = {}) =>
  Environment.make({
    name: "sudoku",
    description: Sudoku.environment.description,
    tag: Sudoku.SudokuTools,
    layer: sudokuLayer(url, options),
    columns: Sudoku.Columns,
    tools: [Sudoku.Place],
    handlers: (service) => ({ place: service.place }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv: Sudoku.openEnv
  })

// ---------------------------------------------------------------------------------------------------------------
// Catch (openspiel_env)
// ---------------------------------------------------------------------------------------------------------------

const OpenSpielObservation = Schema.Struct({ info_state: Schema.Array(Schema.Number) })

/** `Catch.CatchTools` backed by a remote `openspiel_env` (catch) session. */
export const catchLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    Catch.CatchTools,
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
      // Combinators, not a `function*` per call (see `wordleReset`).
      const act = (actionId: number) =>
        Effect.suspend(() =>
          done
            ? Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
            : Effect.map(orDie(client.step({ action_id: actionId })), (r) => {
              steps += 1
              reward = typeof r.reward === "number" ? r.reward : 0
              done = r.done
              return formatObservation(r.observation.info_state)
            })
        )
      return Catch.CatchTools.of({
        reset: (columns) =>
          Effect.flatMap(Environment.seedOf(columns.seed), (s) => {
            seed = s
            return Effect.map(orDie(client.reset({ seed })), (r) => {
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
export const catchGame = (url: string, options: RemoteOptions = {}) =>
  Environment.make({
    name: "catch",
    description: Catch.environment.description,
    tag: Catch.CatchTools,
    layer: catchLayer(url, options),
    columns: Environment.SeedColumns,
    tools: [Catch.Move, Catch.Stay],
    handlers: (service) => ({ move: service.move, stay: () => service.stay() }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv: Catch.openEnv
  })

// ---------------------------------------------------------------------------------------------------------------
// Echo (legacy echo_env)
// ---------------------------------------------------------------------------------------------------------------

/** `Echo.EchoTools` backed by a remote legacy `echo_env` session (`EchoAction{message}`). */
export const echoLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    Echo.EchoTools,
    Effect.gen(function*() {
      const client = yield* Client.make({
        ...options,
        url,
        action: Schema.Struct({ message: Schema.String }),
        observation: Schema.Struct({ echoed_message: Schema.String, message_length: Schema.Number })
      })
      yield* orDie(client.reset())
      let reward = 0
      let echoes = 0
      return Echo.EchoTools.of({
        // Combinators, not a `function*` per call (see `wordleReset`).
        echo: ({ message }) =>
          client.step({ message }).pipe(
            Effect.catchTag("ServerError", (e) =>
              e.code === "VALIDATION_ERROR"
                ? Effect.fail(new Tool.InvalidMove({ message: "message: String should have at least 1 character" }))
                : Effect.die(e)),
            Effect.catchIf((e) => e._tag !== "InvalidMove", (e) => Effect.die(e)),
            Effect.map((r) => {
              reward = typeof r.reward === "number" ? r.reward : 0
              echoes += 1
              return r.observation.echoed_message
            })
          ),
        state: Effect.sync(() => ({ reward, echoes }))
      })
    })
  )

/** Echo as an environment whose tool runs on a remote (legacy echo) server. */
export const echo = (url: string, options: RemoteOptions = {}) =>
  Environment.make({
    name: "echo",
    description: Echo.environment.description,
    tag: Echo.EchoTools,
    layer: echoLayer(url, options),
    columns: Environment.SeedColumns,
    tools: [Echo.Echo],
    handlers: (service) => ({ echo: service.echo }),
    reset: () => Effect.succeed(Option.none()),
    state: (service) => service.state,
    openEnv: Echo.openEnv
  })
