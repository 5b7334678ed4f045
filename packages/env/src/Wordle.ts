/**
 * Wordle (TextArena Wordle-v0, as served by OpenEnv's `textarena_env`), seedable.
 *
 * - {@link openEnv}: the OpenEnv-level environment (action `{message}`, observation `{prompt, messages,
 *   current_player_id, legal_players, info}` with the cumulative "[GAME] …" transcript, `TextArenaState`),
 *   text for text. Unlike OpenEnv, the `seed` reset kwarg is honoured (and `secret` may pin the word).
 * - {@link environment}: TRL's `WordleEnv` tool layer: `guess(guess)` returns the newly appended text; after the
 *   end, "Game over.".
 * - {@link solver}: candidate filtering with a best-split guess choice (optionally making seeded mistakes).
 *
 * The word lists (156 secrets, 10,879 valid guesses) ship in the package's `data/` folder.
 *
 * @example
 * ```ts
 * import { Catch, Environment, Wordle } from "@envtrain/env"
 *
 * const result = Environment.run(Wordle.environment, { seed: 42 }, Wordle.solver())
 * // result.state.won, result.state.num_guesses
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Environment from "./Environment.js"
import * as Prng from "./internal/prng.js"
import { textArenaClient, transcriptOf } from "./internal/textArenaClient.js"
import type { Action } from "./internal/textArenaOpenEnv.js"
import { textArenaDefinition } from "./internal/textArenaOpenEnv.js"
import type { Mark } from "./internal/wordleGame.js"
import { feedback, WordleGame } from "./internal/wordleGame.js"
import { secretWords, validGuesses, validGuessList } from "./internal/wordLists.js"
import type { OpenEnvDefinition } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

export { feedback, PROMPT } from "./internal/wordleGame.js"
export type { Mark } from "./internal/wordleGame.js"

/** The 156 secret words. */
export const secrets = (): ReadonlyArray<string> => secretWords()
/** Whether a lower-case word is in the 10,879-word dictionary. */
export const isValidGuess = (word: string): boolean => validGuesses().has(word)

/** The secret of an episode: `secret` when given, else drawn from the 156 secrets with the seed. */
const pickSecret = (seed: number, secret: string | undefined) =>
  secret !== undefined ? secret.toLowerCase() : Prng.make(seed).choice(secretWords())

// ---------------------------------------------------------------------------------------------------------------
// OpenEnv level (textarena_env with TEXTARENA_ENV_ID=Wordle-v0)
// ---------------------------------------------------------------------------------------------------------------

export { Action, Message, Observation, OpenEnvState } from "./internal/textArenaOpenEnv.js"

/** The OpenEnv definition of `textarena_env` serving Wordle-v0. Reset kwargs: `seed`, `secret`, `episode_id`. */
export const openEnv: OpenEnvDefinition<Action> = textArenaDefinition(
  "Wordle-v0",
  (options, seed) => new WordleGame(pickSecret(seed, typeof options.secret === "string" ? options.secret : undefined)),
  true
)

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's WordleEnv)
// ---------------------------------------------------------------------------------------------------------------

/** `guess(guess)`: TRL's docstring. */
export const Guess = Tool.make("guess", {
  description: "Make a guess in the Wordle environment.",
  parameters: { guess: Schema.String.annotations({ description: "The guessed word, formatted as '[abcde]'" }) },
  success: Schema.String,
  returns: "The feedback message from the environment."
})

/** The reward state: TRL reads `reward`; the rest is for shaped rewards and metrics. */
export interface State {
  readonly done: boolean
  /** TRL's rule: the last step's env reward, but 0 after an invalid move. */
  readonly reward: number
  readonly won: boolean
  /** Valid guesses made. */
  readonly num_guesses: number
  /** Most greens in any valid guess. */
  readonly best_greens: number
  readonly invalid_moves: number
  readonly guesses: ReadonlyArray<string>
  readonly seed: number
}

/** Columns: `seed` picks the secret; `secret` pins it (for evaluation over all 156 words). */
export const Columns = Schema.Struct({
  seed: Schema.optional(Schema.Int),
  secret: Schema.optional(Schema.String)
})

/** The Wordle tool service. */
export class WordleTools extends Context.Tag("@envtrain/env/Wordle/WordleTools")<WordleTools, {
  readonly reset: (columns: typeof Columns.Type) => Effect.Effect<Option.Option<string>>
  readonly guess: (params: { readonly guess: string }) => Effect.Effect<string, Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {
  static readonly layer = Layer.sync(WordleTools, () => {
    let game: WordleGame | undefined
    let last = ""
    let reward = 0
    let done = false
    let invalid = 0
    let seed = 0
    return WordleTools.of({
      // Combinators, not a `function*` per reset (see docs/architecture.md, "Hot paths and the young generation").
      reset: (columns) =>
        Effect.map(Environment.seedOf(columns.seed), (s) => {
          seed = s
          game = new WordleGame(pickSecret(seed, columns.secret))
          last = game.state.transcript()
          reward = 0
          done = false
          invalid = 0
          return Option.some(last)
        }),
      guess: ({ guess }) =>
        Effect.suspend(() => {
          if (game === undefined || done) return Effect.fail(new Tool.GameOver({ message: "Game over." }))
          done = game.step(guess)
          const full = game.state.transcript()
          const text = full.slice(last.length)
          last = full
          if (text.includes("You attempted an invalid move")) {
            reward = 0
            invalid += 1
          } else {
            reward = game.state.rewards ?? 0
            // The second consecutive invalid move ends the game without appending text.
            if (done && game.state.gameInfo.invalid_move) invalid += 1
          }
          return Effect.succeed(text)
        }),
      state: Effect.sync(() => {
        const history = game?.history ?? []
        return {
          done,
          reward,
          won: history.length > 0 && history[history.length - 1][1].every((m) => m === "G"),
          num_guesses: history.length,
          best_greens: Math.max(0, ...history.map(([, f]) => f.filter((m) => m === "G").length)),
          invalid_moves: invalid,
          guesses: history.map(([w]) => w),
          seed
        }
      })
    })
  })
}

/** The definition over a layer of its tools: in-process (`environment`) or on a server (`remote`). */
const environmentWith = (layer: Layer.Layer<WordleTools>) =>
  Environment.make({
    name: "wordle",
    description: "TextArena Wordle-v0: guess the secret 5-letter word in 6 tries with G/Y/X feedback.",
    tag: WordleTools,
    layer,
    columns: Columns,
    tools: [Guess],
    handlers: (service) => ({ guess: service.guess }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv
  })

/** Wordle as an environment (TRL's `WordleEnv`): `reset` returns the game's opening transcript. */
export const environment = environmentWith(WordleTools.layer)

// ---------------------------------------------------------------------------------------------------------------
// Solver
// ---------------------------------------------------------------------------------------------------------------

const code = (marks: ReadonlyArray<Mark>) => marks.reduce((acc, m) => acc * 3 + (m === "G" ? 2 : m === "Y" ? 1 : 0), 0)

/** Picks the guess that splits `candidates` into the most feedback classes (ties: a candidate, then smallest class). */
export const bestGuess = (candidates: ReadonlyArray<string>, exclude: ReadonlySet<string> = new Set()): string => {
  if (candidates.length <= 2) return candidates[0]
  const candidateSet = new Set(candidates)
  let best = candidates[0]
  let bestScore = -Infinity
  const counts = new Map<number, number>()
  for (const word of [...candidates, ...validGuessList()]) {
    if (exclude.has(word)) continue
    counts.clear()
    let largest = 0
    for (const secret of candidates) {
      const c = code(feedback(secret, word))
      const n = (counts.get(c) ?? 0) + 1
      counts.set(c, n)
      if (n > largest) largest = n
    }
    // Classes first; a candidate can win outright; a smaller worst case breaks remaining ties.
    const score = counts.size * 1e6 + (candidateSet.has(word) ? 5e5 : 0) - largest
    if (score > bestScore) {
      bestScore = score
      best = word
    }
  }
  return best
}

let openingCache: string | undefined

const parseMarks = (text: string): Array<Mark> | undefined => {
  const m = /Feedback:\n[^\n]*\n([GYX](?: [GYX]){4})/.exec(text)
  return m ? (m[1].split(" ") as Array<Mark>) : undefined
}

/**
 * A solver through the `guess` tool: keeps the secrets consistent with all feedback and guesses the best split.
 * With `errorRate` > 0 a guess is, with that probability, replaced (seeded) by a random dictionary word or, half of
 * the time, by a non-word (an invalid move; two in a row end the game).
 */
export const solver = (options: { readonly errorRate?: number; readonly seed?: number } = {}) => {
  const prng = Prng.make(options.seed ?? 0)
  const errorRate = options.errorRate ?? 0
  return (episode: Environment.Episode<unknown>): Effect.Effect<void> =>
    Effect.gen(function*() {
      let candidates = [...secretWords()]
      const guessed = new Set<string>()
      let turn = 0
      while (turn < 6) {
        let word = turn === 0 && candidates.length === secretWords().length
          ? (openingCache ??= bestGuess(candidates))
          : bestGuess(candidates, guessed)
        if (errorRate > 0 && prng.next() < errorRate) {
          if (prng.next() < 0.5) {
            // A non-word: an invalid move (two in a row end the game, as for a model).
            let junk = ""
            do junk = Array.from({ length: 5 }, () => "abcdefghijklmnopqrstuvwxyz"[prng.int(26)]).join("")
            while (validGuesses().has(junk))
            const outcome = yield* episode.call("guess", { guess: `[${junk}]` })
            if (outcome._tag === "Failure" || !outcome.text.includes("You attempted an invalid move")) return
            continue
          }
          const list = validGuessList()
          do word = list[prng.int(list.length)]
          while (guessed.has(word))
        }
        guessed.add(word)
        turn++
        const outcome = yield* episode.call("guess", { guess: `[${word}]` })
        if (outcome._tag === "Failure") return
        const marks = parseMarks(outcome.text)
        if (marks === undefined) return // won (nothing appended) or the game ended
        const target = code(marks)
        candidates = candidates.filter((s) => code(feedback(s, word)) === target)
        if (candidates.length === 0) return
      }
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Remote: the same tools on a served textarena_env (Wordle-v0) (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

/** `WordleTools` backed by a remote `textarena_env` (Wordle-v0) session. */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    WordleTools,
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
      return WordleTools.of({
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
function* wordleReset(s: RemoteWordle, columns: typeof Columns.Type) {
  // Always send a seed, so a remote episode is reproducible and its seed known.
  s.seed = yield* Environment.seedOf(columns.seed)
  const r = yield* Effect.orDie(
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
  const r = yield* Effect.orDie(s.client.step({ message: guess }))
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

/** Wordle as an environment whose tools run on a remote server (same tools, columns and state as `environment`). */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
