import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import { Environment, Sudoku } from "../src/index.js"
import * as Prng from "../src/internal/prng.js"

const Seed = Schema.Int.pipe(Schema.between(0, 2 ** 31 - 2))
const content = (r: { observation: Readonly<Record<string, unknown>> }) =>
  (r.observation.messages as ReadonlyArray<{ content: string }>)[0].content

const SOLVED = [
  [5, 3, 4, 6, 7, 8, 9, 1, 2],
  [6, 7, 2, 1, 9, 5, 3, 4, 8],
  [1, 9, 8, 3, 4, 2, 5, 6, 7],
  [8, 5, 9, 7, 6, 1, 4, 2, 3],
  [4, 2, 6, 8, 5, 3, 7, 9, 1],
  [7, 1, 3, 9, 2, 4, 8, 5, 6],
  [9, 6, 1, 5, 3, 7, 2, 8, 4],
  [2, 8, 7, 4, 1, 9, 6, 3, 5],
  [3, 4, 5, 2, 8, 6, 1, 7, 9]
]

describe("Sudoku generation", () => {
  it.prop(
    "every board has exactly one solution, at least 60 clues, and the solution agrees with the clues",
    [Seed],
    ([seed]) => {
      const { puzzle, solution } = Sudoku.generate(Prng.make(seed))
      const clues = puzzle.flat().filter((v) => v !== 0).length
      assert.isAtLeast(clues, 60)
      assert.isTrue(Sudoku.isUnique(puzzle))
      puzzle.forEach((row, r) => row.forEach((v, c) => v !== 0 && assert.strictEqual(v, solution[r][c])))
      const solved = puzzle.map((r) => [...r])
      assert.isTrue(Sudoku.solve(solved))
      assert.deepStrictEqual(solved, solution)
    },
    { fastCheck: { numRuns: 150 } }
  )

  it("nearly all boards have exactly 60 clues (TextArena reverts, and does not retry, a removal that breaks uniqueness)", () => {
    let exactly60 = 0
    for (let seed = 0; seed < 300; seed++) {
      const { puzzle } = Sudoku.generate(Prng.make(seed))
      if (puzzle.flat().filter((v) => v !== 0).length === 60) exactly60++
    }
    assert.isAtLeast(exactly60, 285)
  })

  it("renders the board exactly as TextArena", () => {
    const grid = SOLVED.map((r) => [...r])
    grid[0][4] = 0
    grid[0][5] = 0
    assert.strictEqual(
      Sudoku.render(grid).split("\n").slice(0, 5).join("\n"),
      "   C1 C2 C3   C4 C5 C6   C7 C8 C9  \n" +
        "R1  5  3  4 |  6  .  . |  9  1  2\n" +
        "R2  6  7  2 |  1  9  5 |  3  4  8\n" +
        "R3  1  9  8 |  3  4  2 |  5  6  7\n" +
        "   - - - - - - - - - - - - - - - - "
    )
  })
})

describe("Sudoku (OpenEnv level)", () => {
  it.effect("transcript grammar, the four invalid reasons, and the two-strike rule", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Sudoku.openEnv.make
      const r0 = yield* env.reset({ seed: 3 })
      const c0 = content(r0)
      assert.isTrue(c0.startsWith("\n[GAME] You are Player 0. You are playing Sudoku.\nHere is the current state"))
      assert.include(c0, "Good luck!\n\n\n[GAME] Game Board:\n   C1 C2 C3   C4 C5 C6   C7 C8 C9  \nR1 ")
      const puzzle = Sudoku.parseBoard(c0)
      const solution = puzzle.map((r) => [...r])
      Sudoku.solve(solution)
      let empty: [number, number] = [0, 0]
      let filled: [number, number] = [0, 0]
      puzzle.forEach((row, r) => row.forEach((v, c) => (v === 0 ? (empty = [r, c]) : (filled = [r, c]))))
      const [er, ec] = empty
      const steps: Array<[string, string]> = [
        ["hello", "Invalid move format. Player 0 did not respond with valid 'row column number'."],
        [`[${er + 1} ${ec + 1} ${solution[er][ec]}]`, ""],
        ["[10 1 1]", "Invalid move. Player 0 attempted to place 1 at (10, 1), which is out of bounds."],
        [`[${er + 1} ${ec + 1} ${solution[er][ec]}]`, "Invalid move. Player 0 attempted to overwrite a pre-filled cell"]
      ]
      let prev = c0
      const move = (msg: string) => env.step({ message: msg })
      let r = yield* move(steps[0][0])
      assert.strictEqual(
        content(r).slice(prev.length),
        "\n[Player] [hello]\n[GAME] You attempted an invalid move. Reason: " + steps[0][1] +
          " Please resubmit a valid move and remember to follow the game rules to avoid penalties."
      )
      prev = content(r)
      r = yield* move(steps[1][0])
      assert.isTrue(
        content(r).slice(prev.length).startsWith(`\n[Player] ${steps[1][0]}\n[GAME] Board state: \n   C1 C2`)
      )
      prev = content(r)
      r = yield* move(steps[2][0])
      assert.include(content(r).slice(prev.length), steps[2][1])
      prev = content(r)
      const [fr, fc] = filled
      r = yield* move(`[${fr + 1} ${fc + 1} ${puzzle[fr][fc]}]`)
      assert.isTrue(r.done)
      // Game over on the second consecutive invalid move, nothing appended but the action.
      assert.strictEqual(content(r).slice(prev.length), `\n[Player] [${fr + 1} ${fc + 1} ${puzzle[fr][fc]}]`)
      assert.closeTo(r.reward as number, 1 / 21, 1e-12)
      const state = yield* env.state
      assert.strictEqual(state.env_id, "Sudoku-v0")
      assert.strictEqual(state.step_count, 4)
    })))

  it.effect("a wrong number 'violates Sudoku rules'", () =>
    Effect.scoped(Effect.gen(function*() {
      const env = yield* Sudoku.openEnv.make
      const c0 = content(yield* env.reset({ seed: 9 }))
      const puzzle = Sudoku.parseBoard(c0)
      const solution = puzzle.map((r) => [...r])
      Sudoku.solve(solution)
      const r = puzzle.findIndex((row) => row.includes(0))
      const c = puzzle[r].indexOf(0)
      const wrong = (solution[r][c] % 9) + 1
      const out = yield* env.step({ message: `I play [${r + 1} ${c + 1} ${wrong}]` })
      assert.include(
        content(out),
        `Invalid move. Player 0 attempted to place ${wrong} at (${r + 1}, ${c + 1}), which violates Sudoku rules.`
      )
    })))
})

describe("Sudoku (tools)", () => {
  it.effect.prop("the exact solver always completes the puzzle", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Sudoku.environment, { seed }, Sudoku.solver())
      assert.isTrue(result.state.won)
      assert.isTrue(result.state.done)
      assert.strictEqual(result.state.correct_reward, 1)
      assert.strictEqual(result.state.progress_reward, 1)
      assert.strictEqual(result.state.invalid_moves, 0)
      assert.strictEqual(result.state.valid_move_reward, 1)
      assert.include(result.steps[result.steps.length - 1].outcome.text, "Game over.")
    }), { fastCheck: { numRuns: 25 } })

  it.effect("reset text, move text, and 'Game is over.' after the end", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Sudoku.environment, { seed: 4 }, (episode) =>
        Effect.gen(function*() {
          yield* Sudoku.solver()(episode)
          yield* episode.call("place", { row: 1, col: 1, number: 1 })
          yield* episode.call("place", { row: "1", col: 1, number: 1 })
        }))
      const first = Option.getOrThrow(result.observation)
      assert.isTrue(
        first.startsWith("Step 0. Progress: 0 cells filled.\n\nBoard:\n   C1 C2 C3   C4 C5 C6   C7 C8 C9  \nR1")
      )
      assert.include(first, "\nGUARANTEED MOVES: [")
      assert.match(
        result.steps[0].outcome.text,
        /^Move \[\d \d \d\]: valid\nStep 1\. Progress: 1 cells filled\.\n\nBoard:\n/
      )
      const n = result.steps.length
      assert.strictEqual(result.steps[n - 2].outcome.text, "{'error': 'Game is over. No more moves allowed.'}")
      const bad = result.steps[n - 1].outcome
      assert.isTrue(bad._tag === "Failure" && bad.reason === "invalid_arguments" && bad.error.includes("'row'"))
    }))

  it.effect.prop("the hint player completes the puzzle, each move the first guaranteed move it was shown", [Seed], ([
    seed
  ]) =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Sudoku.environment, { seed }, Sudoku.hintPlayer())
      assert.isTrue(result.state.won)
      assert.strictEqual(result.state.invalid_moves, 0)
      let seen = Option.getOrThrow(result.observation)
      for (const step of result.steps) {
        const shown = /GUARANTEED MOVES: \[(\d) (\d) (\d)\]/.exec(seen)
        assert.isNotNull(shown)
        assert.deepStrictEqual(step.args, { row: Number(shown![1]), col: Number(shown![2]), number: Number(shown![3]) })
        seen = step.outcome.text
      }
    }), { fastCheck: { numRuns: 10 } })

  it.effect("the hint player's mistakes are wrong numbers on the hinted cell, seeded", () =>
    Effect.gen(function*() {
      const play = () => Sudoku.hintPlayer({ errorRate: 0.3, seed: 2 })
      const a = yield* Environment.run(Sudoku.environment, { seed: 5 }, play())
      const b = yield* Environment.run(Sudoku.environment, { seed: 5 }, play())
      assert.deepStrictEqual(a, b)
      assert.isAbove(a.state.invalid_moves, 0)
    }))

  it.effect.prop("same seed, same episode (imperfect solver included)", [Seed], ([seed]) =>
    Effect.gen(function*() {
      const a = yield* Environment.run(Sudoku.environment, { seed }, Sudoku.solver({ errorRate: 0.2, seed }))
      const b = yield* Environment.run(Sudoku.environment, { seed }, Sudoku.solver({ errorRate: 0.2, seed }))
      assert.deepStrictEqual(a, b)
    }), { fastCheck: { numRuns: 10 } })
})
