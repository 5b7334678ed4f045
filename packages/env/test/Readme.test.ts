// The README's "a new environment in ~60 lines" example, verbatim, so it keeps compiling and passing.
import { assert, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { Environment, Tool } from "../src/index.js"

// 1. Tools: the Schema is the single source of the function-calling definition and of argument decoding.
const Guess = Tool.make("guess", {
  description: "Guess the secret number.",
  parameters: { number: Schema.Int.annotations({ description: "Your guess (1-100)." }) },
  success: Schema.String
})

// 2. The reward state that reward functions read after the episode.
interface State {
  readonly won: boolean
  readonly guesses: number
}

// 3. The tool service and the Layer that builds one fresh instance per episode.
class HiLo extends Context.Tag("example/HiLo")<HiLo, {
  readonly reset: (seed: number) => Effect.Effect<Option.Option<string>>
  readonly guess: (p: { readonly number: number }) => Effect.Effect<string, Tool.InvalidMove | Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {
  static readonly layer = Layer.sync(HiLo, () => {
    let secret = 0
    let guesses = 0
    let won = false
    return HiLo.of({
      reset: (seed) =>
        Effect.sync(() => {
          secret = 1 + (Math.abs(seed) % 100)
          return Option.some("I picked a number between 1 and 100.")
        }),
      guess: ({ number }) =>
        Effect.gen(function*() {
          if (won) return yield* new Tool.GameOver({ message: "Game over." })
          if (number < 1 || number > 100) return yield* new Tool.InvalidMove({ message: "Guess 1 to 100." })
          guesses++
          won = number === secret
          return won ? "Correct!" : number < secret ? "Higher." : "Lower."
        }),
      state: Effect.sync(() => ({ won, guesses }))
    })
  })
}

// 4. The environment: tools, columns (typed), reset and reward state.
const HiLoEnv = Environment.make({
  name: "hilo",
  tag: HiLo,
  layer: HiLo.layer,
  columns: Schema.Struct({ seed: Schema.Int }),
  tools: [Guess],
  handlers: (hilo) => ({ guess: hilo.guess }),
  reset: (hilo, { seed }) => hilo.reset(seed),
  state: (hilo) => hilo.state
})

// 5. A property: binary search through the tool always wins within 7 guesses.
const bisect = (episode: Environment.Episode<State>) =>
  Effect.gen(function*() {
    let [lo, hi] = [1, 100]
    while (lo <= hi) {
      const mid = Math.floor((lo + hi) / 2)
      const { text } = yield* episode.call("guess", { number: mid })
      if (text === "Correct!") return
      if (text === "Higher.") lo = mid + 1
      else hi = mid - 1
    }
  })

it.effect.prop("binary search wins within 7 guesses", [Schema.Int], ([seed]) =>
  Effect.gen(function*() {
    const { state } = yield* Environment.run(HiLoEnv, { seed }, bisect)
    assert.isTrue(state.won)
    assert.isAtMost(state.guesses, 7)
  }))
