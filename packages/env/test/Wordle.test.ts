import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck, Option, Schema } from "effect"
import { Environment, Wordle } from "../src/index.js"

/** An independent brute-force formulation: per letter, yellows = min(count in secret, count in guess) - greens. */
const bruteForce = (secret: string, guess: string): Array<string> => {
  const out: Array<string> = [...guess].map((c, i) => (secret[i] === c ? "G" : "X"))
  for (const letter of new Set(guess)) {
    const inSecret = [...secret].filter((c) => c === letter).length
    const greens = [...guess].filter((c, i) => c === letter && secret[i] === c).length
    let yellows = Math.max(0, inSecret - greens)
    for (let i = 0; i < 5 && yellows > 0; i++) {
      if (guess[i] === letter && out[i] === "X") {
        out[i] = "Y"
        yellows--
      }
    }
  }
  return out
}

// A small alphabet makes duplicate letters frequent.
const word = FastCheck.array(FastCheck.constantFrom("a", "b", "c", "e", "l"), { minLength: 5, maxLength: 5 }).map((a) =>
  a.join("")
)
const Seed = Schema.Int.pipe(Schema.between(0, 2 ** 31 - 2))

const PROMPT = "You are Playing Wordle.\nA secret 5-letter word has been chosen. You have 6 attempts to guess it.\n" +
  "For each guess, wrap your word in square brackets (e.g., '[apple]').\nFeedback for each letter will be given as follows:\n" +
  "  - G (green): correct letter in the correct position\n  - Y (yellow): letter exists in the word but in the wrong position\n" +
  "  - X (wrong): letter is not in the word\nEnter your guess to begin.\n"

const content = (r: { observation: Readonly<Record<string, unknown>> }) =>
  (r.observation.messages as ReadonlyArray<{ content: string }>)[0].content

describe("Wordle feedback", () => {
  it.prop("equals a brute-force reference, duplicate letters included", [word, word], ([secret, guess]) => {
    assert.deepStrictEqual(Wordle.feedback(secret, guess), bruteForce(secret, guess))
  }, { fastCheck: { numRuns: 2000 } })

  it("TextArena's examples", () => {
    assert.strictEqual(Wordle.feedback("jewel", "crane").join(" "), "X X X X Y")
    assert.strictEqual(Wordle.feedback("apple", "papal").join(" "), "Y Y G X Y")
    assert.strictEqual(Wordle.feedback("abbey", "bobby").join(" "), "Y X G X G")
  })
})

describe("Wordle (OpenEnv level)", () => {
  it.effect("reproduces the reference transcript byte for byte (secret 'jewel')", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Wordle.openEnv.make
      const r0 = yield* env.reset({ seed: 1, secret: "jewel", episode_id: "ep-1" })
      assert.strictEqual(content(r0), "\n[GAME] " + PROMPT)
      assert.strictEqual(r0.observation.prompt, ("[GAME] " + PROMPT).trim())
      assert.deepStrictEqual(r0.observation.messages, [{
        sender_id: -1,
        content: "\n[GAME] " + PROMPT,
        category: "MESSAGE"
      }])
      assert.deepStrictEqual(r0.observation.legal_players, [0])
      assert.strictEqual(r0.reward, 0)

      const r1 = yield* env.step({ message: "crane" })
      assert.strictEqual(
        content(r1),
        "\n[GAME] " + PROMPT +
          "\n[GAME] [crane]\n[GAME] You submitted [crane].\nFeedback:\nC R A N E\nX X X X Y\nYou have 5 guesses left."
      )
      assert.strictEqual(r1.reward, 0)
      assert.isFalse(r1.done)
      assert.strictEqual(r1.observation.prompt, "Wordle-v0")
      assert.deepStrictEqual(r1.observation.info, {
        reward_signals: { "wordle.greens": 0, "wordle.yellows": 0.2, "wordle.repetitions": 1, "wordle.correct": 0 }
      })

      const r2 = yield* env.step({ message: "[xyzzy]" })
      assert.strictEqual(
        content(r2).slice(content(r1).length),
        "\n[GAME] [xyzzy]\n[GAME] You attempted an invalid move. Reason: 'xyzzy' is not an English word. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      )
      assert.isFalse(r2.done)

      const r3 = yield* env.step({ message: "hello there" })
      assert.strictEqual(content(r3).slice(content(r2).length), "\n[GAME] [hello there]")
      assert.isTrue(r3.done)
      assert.strictEqual(r3.reward, 0.1)
      const state = yield* env.state
      assert.strictEqual(state.episode_id, "ep-1")
      assert.strictEqual(state.step_count, 3)
      // As in TextArena, the game-ending invalid move is not flagged as "made_invalid_move", so the turn advances.
      assert.strictEqual(state.turn, 2)
    })))

  it.effect("the other invalid reasons, a win, and the sixth-guess partial reward", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Wordle.openEnv.make
      yield* env.reset({ secret: "jewel" })
      const tail = (before: string, after: string) => after.slice(before.length)
      let prev = content(yield* env.step({ message: "[abc]" }))
      assert.isTrue(
        prev.endsWith(
          "Reason: Your word must be exactly 5 letters. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
        )
      )
      let next = content(yield* env.step({ message: "[crane]" }))
      prev = next
      next = content(yield* env.step({ message: "I guess [CRANE]" }))
      assert.strictEqual(
        tail(prev, next),
        "\n[GAME] I guess [CRANE]\n[GAME] You attempted an invalid move. Reason: You have already guessed 'crane' before. Please try a different word. Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      )
      // A valid move resets the error count, so the next invalid one is again only a warning.
      prev = content(yield* env.step({ message: "[bread]" }))
      next = content(yield* env.step({ message: "no brackets [" }))
      assert.include(
        tail(prev, next),
        "Reason: You tried submitting a word in the wrong format. Please make sure to use squared brackets."
      )
      const win = yield* env.step({ message: "jewel" })
      assert.isTrue(win.done)
      assert.strictEqual(win.reward, 1)
      assert.strictEqual(tail(next, content(win)), "\n[GAME] [jewel]")

      yield* env.reset({ secret: "jewel" })
      let last = yield* env.step({ message: "angle" })
      for (const w of ["apple", "awake", "basin", "berry"]) last = yield* env.step({ message: w })
      assert.include(content(last), "You have 1 guesses left.")
      const sixth = yield* env.step({ message: "bread" })
      assert.isTrue(sixth.done)
      // "bread" vs "jewel": e is yellow -> (0 + 0.5) / 5.
      assert.strictEqual(sixth.reward, 0.1)
      assert.isTrue(content(sixth).endsWith("\nB R E A D\nX X Y X X\nYou have 0 guesses left."))
    })))
})

describe("Wordle (tools)", () => {
  it.effect("guess returns only the new text; invalid moves score 0; 'Game over.' after the end", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(
        Wordle.environment,
        { secret: "jewel" },
        (episode) =>
          Effect.gen(function*() {
            yield* episode.call("guess", { guess: "[crane]" })
            yield* episode.call("guess", { guess: "[jewel]" })
            yield* episode.call("guess", { guess: "[jewel]" })
            yield* episode.call("guess", { word: "jewel" })
          })
      )
      assert.strictEqual(Option.getOrThrow(result.observation), "\n[GAME] " + PROMPT)
      assert.strictEqual(
        result.steps[0].outcome.text,
        "\n[GAME] [crane]\n[GAME] You submitted [crane].\nFeedback:\nC R A N E\nX X X X Y\nYou have 5 guesses left."
      )
      assert.strictEqual(result.steps[1].outcome.text, "\n[GAME] [jewel]")
      assert.strictEqual(result.steps[2].outcome.text, "{'error': 'Game over.'}")
      const bad = result.steps[3].outcome
      assert.strictEqual(bad._tag === "Failure" && bad.reason, "invalid_arguments")
      assert.include(bad.text, "guess")
      assert.deepStrictEqual(result.state, {
        done: true,
        reward: 1,
        won: true,
        num_guesses: 2,
        best_greens: 5,
        invalid_moves: 0,
        guesses: ["crane", "jewel"],
        seed: result.state.seed
      })
      assert.strictEqual(result.counters.failures, 2)
    }))

  it.effect("the solver wins at least 99% of the 156 secrets within 6 guesses", () =>
    Effect.gen(function*() {
      let wins = 0
      let total = 0
      for (const secret of Wordle.secrets()) {
        const r = yield* Environment.run(Wordle.environment, { secret }, Wordle.solver())
        if (r.state.won && r.state.num_guesses <= 6) wins++
        total += r.state.num_guesses
      }
      assert.strictEqual(Wordle.secrets().length, 156)
      assert.isAtLeast(wins / 156, 0.99)
      assert.isBelow(total / 156, 4.5)
    }))

  it.effect("an imperfect solver makes invalid moves and sometimes loses", () =>
    Effect.gen(function*() {
      let invalid = 0
      let lost = 0
      for (let seed = 0; seed < 40; seed++) {
        const r = yield* Environment.run(Wordle.environment, { seed }, Wordle.solver({ errorRate: 0.6, seed }))
        invalid += r.state.invalid_moves
        if (!r.state.won) lost++
      }
      assert.isAbove(invalid, 0)
      assert.isAbove(lost, 0)
      assert.isBelow(lost, 40)
    }))

  it.effect.prop("same seed, same episode (imperfect solver included)", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const a = yield* Environment.run(Wordle.environment, { seed }, Wordle.solver({ errorRate: 0.3, seed }))
      const b = yield* Environment.run(Wordle.environment, { seed }, Wordle.solver({ errorRate: 0.3, seed }))
      assert.deepStrictEqual(a, b)
    }), { fastCheck: { numRuns: 10 } })
})
