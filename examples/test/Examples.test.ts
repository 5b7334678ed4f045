import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import type { PlatformError } from "@effect/platform/Error"
import { assert, describe, it } from "@effect/vitest"
import { CommandFile, Dataset, type Evaluation, Recipe, SftData, SftTrainer } from "@envtrain/grpo"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Effect, type Scope } from "effect"
import * as Pipeline from "../src/Pipeline.js"

/** A few steps at tiny sizes: the point is that every stage runs and writes what it should. */
const tinySettings = (out: string): Pipeline.Settings => ({
  ...Pipeline.defaults,
  out,
  verbose: false,
  // Long enough for every recipe's first assistant turn (Sudoku's prompt holds the whole grid: ~550 tokens).
  sft: { episodes: 2, errorRate: 0.2, epochs: 1, learningRate: 1e-2, batchSize: 2, maxLength: 640 },
  grpo: { steps: 1, learningRate: 1e-3, numGenerations: 2, prompts: 1, maxCompletionLength: 24, temperature: 1 },
  evalEpisodes: 2
})

/** A pipeline test: the Node platform, scratch directories removed after, and time for a few tiny trainings. */
const pipelineTest = <E>(
  name: string,
  body: (
    scratch: Effect.Effect<string, PlatformError, FileSystem.FileSystem | Scope.Scope>
  ) => Effect.Effect<void, E, FileSystem.FileSystem | Path.Path | Scope.Scope>
) =>
  it.scoped(
    name,
    () =>
      body(Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped())).pipe(
        Effect.provide(NodeContext.layer)
      ),
    180_000
  )

const checkOutputs = (dir: string, result: Pipeline.RunResult) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const jsonl = (name: string) =>
      Effect.map(fs.readFileString(path.join(dir, name)), (t) =>
        t.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Record<string, unknown>))
    const metrics = yield* jsonl("metrics.jsonl")
    assert.deepStrictEqual(
      metrics.map((m) =>
        m.step
      ),
      [1]
    )
    assert.isTrue(typeof metrics[0]["reward"] === "number" && typeof metrics[0]["loss"] === "number")
    const evals = yield* jsonl("eval.jsonl")
    assert.deepStrictEqual(evals.map((e) => e.label), ["SFT start", "after GRPO"])
    const saved = JSON.parse(yield* fs.readFileString(path.join(dir, "eval.json"))) as Pipeline.RunResult
    assert.strictEqual(saved.example, result.example)
    assert.strictEqual(saved.before.episodes, 2)
    assert.strictEqual(saved.solver.episodes, 2)
    const html = yield* fs.readFileString(path.join(dir, "report.html"))
    assert.include(html, "<svg")
    assert.isTrue(yield* fs.exists(path.join(dir, "checkpoint-1", "model.safetensors")))
    assert.isTrue(yield* fs.exists(path.join(dir, "sft", "metrics.jsonl")))
    const sft = yield* SftTrainer.fromJsonl(path.join(dir, "sft.jsonl"))
    assert.strictEqual(sft.length, 2)
    assert.include(Pipeline.formatTable(saved), "after GRPO")
  })

/** The printed `envtrain eval` command re-evaluates the checkpoint and gets the table's "after GRPO" numbers. */
const checkEvalCommand = (result: Pipeline.RunResult) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const command = result.evalCommand
    assert.isDefined(command)
    const match = /^npm run envtrain -- eval (\S+)$/.exec(command ?? "")
    assert.isNotNull(match, command)
    const file = match![1]
    yield* CommandFile.evaluate(file, [])
    const again = JSON.parse(yield* fs.readFileString(path.join(result.outputDir, "reeval", "eval.json")))
    const row = again.rows[0] as Evaluation.EnvironmentRow
    const round = (x: number | null) => (x === null ? null : Math.round(x * 1000) / 1000)
    assert.deepStrictEqual(
      {
        episodes: row.episodes,
        successRate: round(row.successRate),
        meanReward: round(row.meanReward),
        toolCallsPerEpisode: round(row.toolCallsPerEpisode),
        toolFailureFrequency: round(row.toolFailureFrequency)
      },
      {
        episodes: result.after.episodes,
        successRate: result.after.successRate,
        meanReward: result.after.meanReward,
        toolCallsPerEpisode: result.after.toolCallsPerEpisode,
        toolFailureFrequency: result.after.toolFailureFrequency
      }
    )
  })

describe("examples", () => {
  for (
    const recipe of [
      Recipe.carlaRecipe,
      Recipe.catchRecipe,
      Recipe.echoRecipe,
      Recipe.wordleRecipe,
      Recipe.sudokuRecipe,
      Recipe.multiRecipe
    ]
  ) {
    pipelineTest(
      `${recipe.name}: SFT, evaluation, GRPO, evaluation; outputs exist and parse`,
      (scratch) =>
        Effect.gen(function*() {
          const dir = yield* scratch
          const result = yield* Pipeline.run(recipe as Recipe.Recipe<unknown>, tinySettings(dir))
          yield* checkOutputs(dir, result)
          // The solver is the ceiling: it wins every held-out Carla, Catch and Echo episode.
          if (["carla", "catch", "echo"].includes(recipe.name)) assert.strictEqual(result.solver.successRate, 1)
          yield* checkEvalCommand(result)
        })
    )
  }
})

describe("Pipeline.run with sftFrom", () => {
  pipelineTest(
    "starts GRPO from an earlier run's SFT checkpoint: no SFT data, no warm-up, the same start",
    (scratch) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const first = yield* scratch
        const a = yield* Pipeline.run(Recipe.catchRecipe, tinySettings(first))
        const sftCheckpoint = path.join(first, "sft", "checkpoint-1")
        assert.isTrue(yield* fs.exists(path.join(sftCheckpoint, "model.safetensors")))
        const second = yield* scratch
        const b = yield* Pipeline.run(Recipe.catchRecipe, { ...tinySettings(second), sftFrom: sftCheckpoint })
        assert.isFalse(yield* fs.exists(path.join(second, "sft.jsonl")))
        assert.isFalse(yield* fs.exists(path.join(second, "sft")))
        // The same weights and held-out seeds: the SFT start evaluates the same.
        assert.deepStrictEqual(b.before, { ...a.before, seconds: b.before.seconds })
      })
  )
})

describe("Pipeline.run with a whole-episode SFT pass", () => {
  pipelineTest(
    "runs a second SFT pass over the whole transcripts after the first, from its weights",
    (scratch) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* scratch
        const base = tinySettings(dir)
        // Catch's first assistant turn starts ~80 tokens in: a 160-token cut keeps it and drops the later turns.
        yield* Pipeline.run(Recipe.catchRecipe, {
          ...base,
          sft: { ...base.sft, maxLength: 160, whole: { epochs: 1, batchSize: 2 } }
        })
        const steps = (name: string) =>
          Effect.map(
            fs.readFileString(path.join(dir, name, "metrics.jsonl")),
            (t) => t.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as { num_tokens: number })
          )
        const [first, whole] = [yield* steps("sft"), yield* steps("sft-whole")]
        assert.strictEqual(first.length, 1)
        assert.strictEqual(whole.length, 1)
        // The first pass cuts the transcripts at maxLength (160); the second takes them whole.
        assert.isAtMost(first[0].num_tokens, 2 * 160)
        assert.isAbove(whole[0].num_tokens, 2 * 160)
      })
  )
})

describe("stratified GRPO prompts", () => {
  it.effect("take Catch's five ball starts in turn: every block of five holds each once", () =>
    Effect.gen(function*() {
      const recipe = Recipe.catchRecipe
      const seeds = yield* Pipeline.stratifiedSeeds(recipe, recipe.environment, 500, 15)
      assert.strictEqual(new Set(seeds).size, 15)
      for (let block = 0; block < 15; block += 5) {
        const strata = yield* Effect.forEach(
          seeds.slice(block, block + 5),
          (seed) => Effect.map(Recipe.observationOf(recipe, { seed }), recipe.stratum!)
        )
        assert.strictEqual(new Set(strata).size, 5, strata.join(" | "))
      }
    }))
})

describe("SftData", () => {
  it.effect("a Catch transcript is the prompt with the observation, then reasoning + one call per move, then a closing line", () =>
    Effect.gen(function*() {
      const [t] = yield* SftData.collect(Recipe.catchRecipe, { seeds: [3], errorRate: 0 })
      const m = t.messages
      assert.strictEqual(m[0].role, "system")
      assert.include(m[1].content, "Catch the ball.\nBall: row 1/10")
      const assistant = m.filter((x) => x.role === "assistant")
      const tools = m.filter((x) => x.role === "tool")
      assert.strictEqual(tools.length, 9)
      assert.strictEqual(assistant.length, 10)
      for (const a of assistant.slice(0, -1)) {
        assert.match(
          a.content,
          /^The ball is (\d column\(s\) to the (LEFT|RIGHT) of|directly above) the paddle\. Move: (left|right|stay)\.$/
        )
        // The line names the move the call makes.
        const call = a.tool_calls![0].function
        const args = call.arguments as Readonly<Record<string, unknown>>
        assert.include(a.content, `Move: ${call.name === "stay" ? "stay" : String(args.direction)}.`)
        assert.strictEqual(a.tool_calls?.length, 1)
      }
      assert.isUndefined(assistant[assistant.length - 1].tool_calls)
      // The reasoning line copies the observation's sentence the move answers.
      assert.include(m[1].content, assistant[0].content.split(" Move:")[0])
    }))

  it.effect("the shaped Catch reward pays for reasoning lines that read the board, and only for those", () =>
    Effect.gen(function*() {
      const [t] = yield* SftData.collect(Recipe.catchRecipe, { seeds: [3], errorRate: 0.3, playerSeed: 2 })
      const k = t.messages.findIndex((m) => m.role === "assistant")
      const score = (messages: ReadonlyArray<ChatMessage>) =>
        Effect.map(
          Recipe.catchReadsBoard.score({
            prompts: [messages.slice(0, k)],
            completions: [messages.slice(k)],
            completionIds: [[]],
            environments: [{ done: true, reward: 1, caught: true, steps: 9, seed: 3 }],
            columns: [{}],
            trainerState: { globalStep: 0, maxSteps: 1, epoch: 0 }
          }),
          (v) => v[0]
        )
      // The player's lines read the board even where its move is a mistake.
      assert.strictEqual(yield* score(t.messages), 0.5)
      const misread = t.messages.map((m, i) =>
        i === k ? { ...m, content: "The ball is 4 column(s) to the RIGHT of the paddle. Move: left." } : m
      )
      assert.closeTo((yield* score(misread)) ?? NaN, 0.5 * 8 / 9, 1e-12)
      assert.deepStrictEqual(Object.keys(Recipe.catchRecipe.rewardVariants ?? {}), ["seed", "shaped"])
    }))

  it.effect("the imperfect player loses where the solver wins (room for GRPO)", () =>
    Effect.gen(function*() {
      const seeds = Dataset.range(0, 40)
      const perfect = yield* Pipeline.playerScore(Recipe.catchRecipe, seeds, 0)
      const sloppy = yield* Pipeline.playerScore(Recipe.catchRecipe, seeds, 0.6)
      assert.strictEqual(perfect.successRate, 1)
      assert.isBelow(sloppy.successRate ?? 1, 0.95)
      const results = yield* Effect.forEach(seeds, (seed) =>
        Effect.map(SftData.collect(Recipe.catchRecipe, { seeds: [seed], errorRate: 0.6, playerSeed: 1 }), ([t]) =>
          t))
      // Every transcript still ends with the closing line and has only known tools.
      for (const t of results) {
        for (const msg of t.messages) {
          if (msg.tool_calls) {
            assert.include(["move", "stay"], msg.tool_calls[0].function.name)
          }
        }
      }
    }))
})
