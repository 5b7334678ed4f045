import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Registry, Server } from "@envtrain/env"
import { Checkpoint } from "@envtrain/gpu"
import { Cause, Effect, Exit } from "effect"
import * as CommandFile from "../src/CommandFile.js"
import * as Metrics from "../src/Metrics.js"

/** A temporary directory with a new tiny model in it (what every command file here points at). */
const tinyModelDir = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  const model = path.join(dir, "model")
  yield* Checkpoint.initModel({ preset: "tiny", out: model, seed: 3 })
  return { dir, fs, model, path }
})

describe("CommandFile", () => {
  it.scoped(
    "envtrain train / eval a user's environment by module path (the README's Definition form), and name bad ones",
    () =>
      Effect.gen(function*() {
        const { dir, fs, model, path } = yield* tinyModelDir
        const envModule = path.resolve(__dirname, "../../../examples/src/environments/echo.ts")
        const file = path.join(dir, "echo.yaml")
        const lines = (environment: string) =>
          [
            `model: ${model}`,
            "backend: cpu",
            `environment: ${environment}`,
            "dataset: { seeds: [0, 4], prompt: \"Say something.\" }",
            `output_dir: ${path.join(dir, "out")}`,
            "num_generations: 2",
            "perDeviceTrainBatchSize: 2",
            "maxCompletionLength: 8",
            "maxSteps: 1",
            "loggingSteps: 1"
          ].join("\n") + "\n"
        yield* fs.writeFileString(file, lines(envModule))
        yield* CommandFile.train(file, [])
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1])
        assert.isTrue("rewards/echo-defined/mean" in metrics[0])
        yield* CommandFile.evaluate(file, [])
        const evaluation = JSON.parse(yield* fs.readFileString(path.join(dir, "out", "eval.json")))
        assert.strictEqual(evaluation.rows[0].environment, "echo-defined")

        const problemWith = (environment: string) =>
          Effect.gen(function*() {
            yield* fs.writeFileString(file, lines(environment))
            const exit = yield* Effect.exit(CommandFile.train(file, []))
            assert.isTrue(Exit.isFailure(exit))
            return Exit.isFailure(exit) ? String(Cause.squash(exit.cause)) : ""
          })
        assert.include(yield* problemWith("chess"), "environment 'chess': no built-in has that name")
        assert.include(yield* problemWith("./no-such-env.ts"), "no such file")
        assert.include(
          yield* problemWith(path.resolve(__dirname, "../src/Loss.ts")),
          "exports no environment definition"
        )
        assert.include(yield* problemWith("echo-mcp"), "no in-process environment to train")
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped(
    "several environments routed by a dataset column, one served by URL: each scored by its own reward",
    () =>
      Effect.gen(function*() {
        const { dir, fs, model, path } = yield* tinyModelDir
        const envModule = path.resolve(__dirname, "../../../examples/src/environments/echo.ts")
        const served = yield* Registry.load(envModule)
        let made = 0
        const wire = served.openEnv!
        const server = yield* Server.serve({
          ...wire,
          make: Effect.tap(wire.make, () => Effect.sync(() => made++))
        }, { port: 0 })
        const rows = Array.from({ length: 4 }, (_, i) =>
          JSON.stringify({
            prompt: [{ role: "user", content: i % 2 === 0 ? "Catch the ball." : "Say something." }],
            game: i % 2 === 0 ? "catch" : "echo",
            seed: i
          }))
        yield* fs.writeFileString(path.join(dir, "rows.jsonl"), rows.join("\n") + "\n")
        const file = path.join(dir, "multi.yaml")
        const config = (extra: ReadonlyArray<string>) =>
          fs.writeFileString(
            file,
            [
              `model: ${model}`,
              "backend: cpu",
              `environment: { catch: catch, echo: ${JSON.stringify(envModule)} }`,
              "routeColumn: game",
              `dataset: ${JSON.stringify(path.join(dir, "rows.jsonl"))}`,
              `output_dir: ${path.join(dir, "out")}`,
              "num_generations: 2",
              "perDeviceTrainBatchSize: 4",
              "maxCompletionLength: 8",
              "maxSteps: 1",
              "loggingSteps: 1",
              "shuffle_dataset: false",
              ...extra
            ].join("\n") + "\n"
          )
        yield* config([`envUrl: { echo: ${server.url} }`])
        yield* CommandFile.train(file, [])
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        assert.isTrue("rewards/catch/mean" in metrics[0], Object.keys(metrics[0]).join())
        assert.isTrue("rewards/echo/mean" in metrics[0], Object.keys(metrics[0]).join())
        // The echo episodes were played on the server: it made their sessions.
        assert.isAtLeast(made, 2)
        yield* config(["envUrl: http://127.0.0.1:1"])
        const wrong = yield* Effect.flip(CommandFile.train(file, []))
        assert.include(wrong.message, "a server serves one environment")
        yield* config(["envUrl: { wordle: http://127.0.0.1:1 }"])
        const unknown = yield* Effect.flip(CommandFile.train(file, []))
        assert.include(unknown.message, "envUrl names wordle, which environment does not")
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped(
    "recipe: a built-in recipe gives the environment, prompts, reward set and success; misuse is named",
    () =>
      Effect.gen(function*() {
        const { dir, fs, model, path } = yield* tinyModelDir
        const file = path.join(dir, "wordle.yaml")
        const write = (lines: ReadonlyArray<string>) =>
          fs.writeFileString(
            file,
            [
              `model: ${model}`,
              "backend: cpu",
              `output_dir: ${path.join(dir, "out")}`,
              "num_generations: 2",
              "perDeviceTrainBatchSize: 2",
              "maxCompletionLength: 8",
              "maxSteps: 1",
              "loggingSteps: 1",
              ...lines
            ].join("\n") + "\n"
          )
        yield* write([
          "recipe: wordle",
          "rewards: shaped",
          "dataset: { seeds: [0, 4] }",
          "evalDataset: { seeds: [9, 11] }"
        ])
        yield* CommandFile.train(file, [])
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        // The shaped set's three functions, by name.
        for (const name of ["wordle_win_shaped", "wordle_greens_shaped", "wordle_invalid_shaped"]) {
          assert.isTrue(`rewards/${name}/mean` in metrics[0], name)
        }
        // SFT on the recipe's solver games, as the examples make them (no tool schemas in the prompt).
        yield* write([
          "recipe: catch",
          "toolsInPrompt: false",
          "sftData: { seeds: [0, 4], errorRate: 0.2 }",
          "maxLength: 200"
        ])
        yield* CommandFile.sft(file, [])
        const sft = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        assert.deepStrictEqual(sft.map((m) => m.step), [1])
        assert.isAbove(sft[0]["num_tokens"] as number, 0)
        const failure = (lines: ReadonlyArray<string>) =>
          Effect.gen(function*() {
            yield* write(lines)
            return (yield* Effect.flip(CommandFile.train(file, []))).message
          })
        assert.include(yield* failure(["recipe: chess", "dataset: { seeds: [0, 4] }"]), "no recipe named 'chess'")
        assert.include(
          yield* failure(["recipe: wordle", "rewards: fancy", "dataset: { seeds: [0, 4] }"]),
          "no reward set named \"fancy\""
        )
        assert.include(
          yield* failure(["recipe: wordle", "environment: catch", "dataset: { seeds: [0, 4] }"]),
          "the recipe wordle gives the environment"
        )
        assert.include(
          yield* failure(["recipe: wordle", "dataset: { seeds: [0, 4], prompt: \"hi\" }"]),
          "gives each seed's prompt and columns: drop prompt"
        )
        assert.include(
          yield* failure(["environment: catch", "rewards: shaped", "dataset: { seeds: [0, 4], prompt: \"hi\" }"]),
          "rewards names a recipe's reward set: set recipe too"
        )
        assert.include(
          yield* failure(["recipe: multi-env", "envUrl: http://127.0.0.1:1", "dataset: { seeds: [0, 4] }"]),
          "envUrl.wordle and envUrl.catch"
        )
        yield* write(["sftData: { seeds: [0, 4], errorRate: 0.2 }"])
        const noRecipe = yield* Effect.flip(CommandFile.sft(file, []))
        assert.include(noRecipe.message, "plays a solver's games: set recipe")
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
  // Live clock: waiting for a session backs off in real time.
  it.scopedLive(
    "envtrain eval on a server with fewer sessions than held-out episodes: same results as in process",
    () =>
      Effect.gen(function*() {
        const { dir, fs, model, path } = yield* tinyModelDir
        // Real OpenEnv servers default to 1 session; the evaluation plays all 6 episodes at once.
        const server = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        const file = path.join(dir, "catch.yaml")
        const evalOf = (extra: ReadonlyArray<string>, out: string) =>
          Effect.gen(function*() {
            yield* fs.writeFileString(
              file,
              [
                `model: ${model}`,
                "backend: cpu",
                "recipe: catch",
                "toolsInPrompt: false",
                "evalDataset: { seeds: [40, 46] }",
                `output_dir: ${path.join(dir, out)}`,
                "maxCompletionLength: 8",
                "seed: 5",
                ...extra
              ].join("\n") + "\n"
            )
            yield* CommandFile.evaluate(file, [])
            const evaluation = JSON.parse(yield* fs.readFileString(path.join(dir, out, "eval.json")))
            return { overall: evaluation.overall, rows: evaluation.rows }
          })
        const local = yield* evalOf([], "local")
        assert.strictEqual(local.overall.episodes, 6)
        assert.strictEqual(local.overall.unscoreable, 0)
        const remote = yield* evalOf([`envUrl: ${server.url}`], "remote")
        assert.deepStrictEqual(remote, local)
        const limited = yield* evalOf([`envUrl: ${server.url}`, "envConcurrency: 1"], "limited")
        assert.deepStrictEqual(limited, local)
        // A list of servers of one environment: the sessions spread over them (ServerPool), the results unchanged.
        const second = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        const spread = yield* evalOf([`envUrl: [${server.url}, ${second.url}]`], "spread")
        assert.deepStrictEqual(spread, local)
        assert.strictEqual(yield* second.activeSessions, 0)
        // A GRPO step's group (2 generations of 2 prompts) on the same 1-session server.
        const trainFile = path.join(dir, "train.yaml")
        yield* fs.writeFileString(
          trainFile,
          [
            `model: ${model}`,
            "backend: cpu",
            "recipe: catch",
            "toolsInPrompt: false",
            `envUrl: ${server.url}`,
            "dataset: { seeds: [0, 2] }",
            `output_dir: ${path.join(dir, "train")}`,
            "num_generations: 2",
            "perDeviceTrainBatchSize: 4",
            "maxCompletionLength: 8",
            "maxSteps: 1",
            "loggingSteps: 1"
          ].join("\n") + "\n"
        )
        yield* CommandFile.train(trainFile, [])
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "train", Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1])
        yield* fs.writeFileString(file, [`model: ${model}`, "recipe: catch", "envConcurrency: 1"].join("\n") + "\n")
        const misuse = yield* Effect.flip(CommandFile.evaluate(file, []))
        assert.include(misuse.message, "envConcurrency limits the sessions opened on envUrl's server: set envUrl")
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )
})
