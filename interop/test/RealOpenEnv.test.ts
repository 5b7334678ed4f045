/**
 * Issue 17, check 2: envtrain against real OpenEnv servers. The servers (interop/servers/) are built with the openenv
 * package's own `create_app` around the real games: OpenSpiel's catch (pyspiel's rl_environment), TextArena's
 * Wordle-v0 (the textarena package) and an echo whose tools live on a FastMCP server (openenv's `MCPEnvironment`).
 * envtrain's client and remote environments play them, and every observation, reward and text is compared with
 * envtrain's in-process built-ins on the same actions.
 *
 * Seeds cannot be matched across the implementations (envtrain draws with its own seeded generator; OpenSpiel's
 * catch ignores a seed; TextArena seeds Python's `random`), so each comparison sets the built-in's hidden state to the
 * server's: Catch's ball column read from the first observation (a built-in seed with the same column is searched
 * for), Wordle's secret word read from the server's state (`raw_state.game_state.secret_word`) and pinned in the
 * built-in with its `secret` reset option or column. The differences that remain are documented in
 * docs/architecture.md ("Differences from the real OpenEnv servers") and asserted here exactly.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Catch, Client, Definition, Echo, Environment, Registry, Remote, Server, Wordle } from "@envtrain/env"
import { Checkpoint } from "@envtrain/gpu"
import { Config, Dataset, Metrics, Reward, Trainer } from "@envtrain/grpo"
import { Episode } from "@envtrain/rollout"
import { Duration, Effect, Option, Schema } from "effect"
import * as Python from "../src/Python.js"

const serve = (script: string) =>
  Python.serve([`interop/servers/${script}`, "--port", "{port}"], { timeout: Duration.minutes(2) })

/** A raw client (observations as the server sent them) with short timeouts: every wait is bounded. */
const rawClient = (url: string) =>
  Client.make({ url, connectTimeout: Duration.seconds(20), messageTimeout: Duration.seconds(30) })

const clientOptions = { connectTimeout: Duration.seconds(20), messageTimeout: Duration.seconds(30) } as const

/** openenv ≥ 0.10 sends the observation's `metadata` inside it (documented difference: the built-ins have none). */
const withoutMetadata = (o: Readonly<Record<string, unknown>>) => {
  const { metadata: _metadata, ...rest } = o
  return rest
}

// ---------------------------------------------------------------------------------------------------------------
// Catch
// ---------------------------------------------------------------------------------------------------------------

const ballColumn = (infoState: ReadonlyArray<number>) => infoState.slice(0, 5).indexOf(1)

/** A built-in Catch instance whose ball starts in `column` (the first seed from `from` that gives it). */
const catchWithBall = (column: number, from = 0) =>
  Effect.gen(function*() {
    for (let seed = from; seed < from + 1000; seed++) {
      const instance = yield* Catch.openEnv.make
      const first = yield* instance.reset({ seed })
      const info = (first.observation as { info_state: ReadonlyArray<number> }).info_state
      if (ballColumn(info) === column) return { instance, first, seed }
    }
    return yield* Effect.dieMessage(`no seed puts the ball in column ${column}`)
  })

const catchAction = Schema.decodeUnknownSync(Catch.Action)

// ---------------------------------------------------------------------------------------------------------------
// Wordle
// ---------------------------------------------------------------------------------------------------------------

/** The secret word, from the server's state (`raw_state.game_state.secret_word`, as OpenEnv's textarena_env has it). */
const secretOf = (client: Client.OpenEnvClient) =>
  Effect.map(client.state, (state) => {
    const raw = state.raw_state as { game_state: { secret_word: string } }
    return raw.game_state.secret_word
  })

/** The metadata OpenEnv's textarena_env puts on its observations (sent by openenv ≥ 0.10; not in the built-in). */
const textArenaMetadata = (observation: unknown, turn: number) => {
  const o = observation as { messages: ReadonlyArray<unknown>; info: { reward_signals?: unknown } }
  return {
    env_id: "Wordle-v0",
    turn,
    raw_messages: o.messages,
    ...(o.info.reward_signals !== undefined ? { reward_signals: o.info.reward_signals } : {})
  }
}

describe("envtrain against real OpenEnv servers", () => {
  it.scopedLive(
    "OpenSpiel catch: the client sees exactly the built-in's observations, rewards and state on the same moves",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("openspiel_catch.py")
        const client = yield* rawClient(server.url)
        const plays: ReadonlyArray<ReadonlyArray<number>> = [
          [1, 1, 1, 1, 1, 1, 1, 1, 1],
          [0, 0, 0, 0, 2, 2, 2, 2, 2],
          [2, 2, 2, 0, 1, 0, 2, 1, 1],
          // Stepped once after the end: rl_environment starts a new episode (initial phase, reward null).
          [0, 2, 0, 2, 0, 2, 0, 2, 0, 1]
        ]
        for (const [i, actions] of plays.entries()) {
          const real = yield* client.reset()
          const column = ballColumn((real.observation as { info_state: ReadonlyArray<number> }).info_state)
          const built = yield* catchWithBall(column, i * 1000)
          assert.deepStrictEqual(real.observation, { ...built.first.observation as object, metadata: {} })
          assert.deepStrictEqual([real.reward, real.done], [built.first.reward, built.first.done])
          for (const [n, id] of actions.entries()) {
            const r = yield* client.step({ action_id: id })
            const b = yield* built.instance.step(catchAction({ action_id: id }))
            if (n === 9) {
              // After the end a new ball is drawn on each side: only its row and the paddle can agree.
              assert.strictEqual((r.observation as { game_phase: string }).game_phase, "initial")
              assert.deepStrictEqual(withoutMetadata(r.observation).legal_actions, [0, 1, 2])
              assert.deepStrictEqual([r.reward, r.done], [b.reward, b.done])
              continue
            }
            assert.deepStrictEqual(r.observation, { ...b.observation as object, metadata: {} }, `play ${i} move ${n}`)
            assert.deepStrictEqual([r.reward, r.done], [b.reward, b.done], `play ${i} move ${n}`)
          }
          const realState = yield* client.state
          const builtState = yield* built.instance.state
          assert.deepStrictEqual(
            { ...realState, episode_id: "" },
            { ...builtState, episode_id: "" }
          )
        }
      }),
    { timeout: 240_000 }
  )

  it.scopedLive(
    "OpenSpiel catch: documented differences (seed ignored by the server; action ids outside 0..2 clamped there, refused here)",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("openspiel_catch.py")
        const client = yield* rawClient(server.url)
        // The server's reset takes no seed: the same seed does not give the same ball (5 columns: 12 tries).
        const columns = new Set<number>()
        for (let i = 0; i < 12; i++) {
          const r = yield* client.reset({ seed: 7 })
          columns.add(ballColumn((r.observation as { info_state: ReadonlyArray<number> }).info_state))
        }
        assert.isAbove(columns.size, 1)
        // Action id 4: OpenSpiel applies paddle + 4 - 1 and clamps (the paddle jumps to the right edge).
        yield* client.reset()
        const r = yield* client.step({ action_id: 4 })
        const info = (r.observation as { info_state: ReadonlyArray<number> }).info_state
        assert.strictEqual(info.slice(45).indexOf(1), 4)
        const built = yield* catchWithBall(0)
        const refused = yield* Effect.flip(built.instance.step(catchAction({ action_id: 4 })))
        assert.strictEqual(
          refused.message,
          "Invalid action_id 4 for catch: legal actions are 0 (LEFT), 1 (STAY) and 2 (RIGHT)."
        )
      }),
    { timeout: 240_000 }
  )

  it.scopedLive(
    "OpenSpiel catch: Catch.remote on the real server gives Catch.environment's texts and state",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("openspiel_catch.py")
        for (const [k, errorRate] of [[1, 0], [2, 0.4], [3, 0.4], [4, 1]] as const) {
          const player = () => Catch.solver({ errorRate, seed: k })
          const remote = yield* Environment.run(Catch.remote(server.url, clientOptions), { seed: k }, player())
          const text = Option.getOrThrow(remote.observation)
          const column = Number(/column (\d)\/5/.exec(text)?.[1]) - 1
          const { seed } = yield* catchWithBall(column, k * 1000)
          const local = yield* Environment.run(Catch.environment, { seed }, player())
          assert.deepStrictEqual(remote.observation, local.observation)
          assert.deepStrictEqual(remote.steps, local.steps)
          // The state's seed is what each side was reset with (the server ignores it).
          assert.deepStrictEqual({ ...remote.state, seed: 0 }, { ...local.state, seed: 0 })
          assert.strictEqual(remote.state.seed, k)
          assert.isTrue(remote.state.done)
          if (errorRate === 0) assert.isTrue(remote.state.caught)
        }
      }),
    { timeout: 240_000 }
  )
  it.scopedLive(
    "TextArena Wordle-v0: the client sees exactly the built-in's observations, rewards, signals and state",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("textarena_wordle.py")
        const client = yield* rawClient(server.url)
        const games: ReadonlyArray<
          { readonly seed: number; readonly moves: (secret: string) => ReadonlyArray<string> }
        > = [
          // Every invalid kind between valid guesses (each invalid one forgiven once), a bare word, then the win.
          {
            seed: 1,
            moves: (secret) => [
              "[crane]",
              "[xyzzy]",
              "[slate]",
              "no brackets here at all",
              "[moist]",
              "[crane]",
              "[pious]",
              "[abc]",
              "could",
              `I guess [${secret}] now`
            ]
          },
          // Two invalid moves in a row end the game (with the completion of the last valid guess).
          { seed: 2, moves: () => ["[crane]", "[zzzzz]", "[qqqqq]"] },
          // Six valid guesses that miss: the turn limit and the secret in the reason.
          {
            seed: 3,
            moves: (secret) => ["crane", "moist", "pudgy", "bawls", "fjord", "vetch"].filter((w) => w !== secret)
          },
          // Upper case and a guess with a repeated letter.
          { seed: 4, moves: (secret) => ["[LLAMA]", "[Eerie]", `[${secret.toUpperCase()}]`] }
        ]
        for (const game of games) {
          const real = yield* client.reset({ seed: game.seed })
          const secret = yield* secretOf(client)
          const instance = yield* Wordle.openEnv.make
          const built = yield* instance.reset({ secret })
          assert.deepStrictEqual(withoutMetadata(real.observation), built.observation)
          assert.deepStrictEqual(real.observation.metadata, textArenaMetadata(built.observation, 0))
          assert.deepStrictEqual([real.reward, real.done], [built.reward, built.done])
          for (const [n, move] of game.moves(secret).entries()) {
            const r = yield* client.step({ message: move })
            const b = yield* instance.step({ message: move })
            const where = `seed ${game.seed} (${secret}), move ${n}: ${move}`
            assert.deepStrictEqual(withoutMetadata(r.observation), b.observation, where)
            const turn = (yield* instance.state).turn as number
            assert.deepStrictEqual(r.observation.metadata, textArenaMetadata(b.observation, turn), where)
            assert.deepStrictEqual([r.reward, r.done], [b.reward, b.done], where)
            const realState = yield* client.state
            const builtState = yield* instance.state
            assert.deepStrictEqual({ ...realState, episode_id: "" }, { ...builtState, episode_id: "" }, where)
            if (r.done) break
          }
        }
      }),
    { timeout: 240_000 }
  )

  it.scopedLive(
    "TextArena Wordle-v0: Wordle.remote on the real server gives Wordle.environment's texts and state",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("textarena_wordle.py")
        const client = yield* rawClient(server.url)
        for (const [seed, errorRate] of [[11, 0], [12, 0.3], [13, 0.5], [14, 1]] as const) {
          // TextArena seeds Python's random with the reset seed: the same seed gives the same secret again.
          yield* client.reset({ seed })
          const secret = yield* secretOf(client)
          const player = () => Wordle.solver({ errorRate, seed })
          const remote = yield* Environment.run(Wordle.remote(server.url, clientOptions), { seed }, player())
          const local = yield* Environment.run(Wordle.environment, { seed, secret }, player())
          assert.deepStrictEqual(remote.observation, local.observation)
          assert.deepStrictEqual(remote.steps, local.steps, `seed ${seed} (${secret})`)
          assert.deepStrictEqual(remote.state, local.state)
          if (errorRate === 0) assert.isTrue(remote.state.won)
        }
      }),
    { timeout: 240_000 }
  )
  it.scopedLive(
    "TextArena Wordle-v0: documented differences (a seed picks another word here; the server ignores `secret`)",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("textarena_wordle.py")
        const client = yield* rawClient(server.url)
        const builtSecret = (options: Readonly<Record<string, unknown>>) =>
          Effect.gen(function*() {
            const instance = yield* Wordle.openEnv.make
            yield* instance.reset(options)
            return ((yield* instance.state).raw_state as { game_state: { secret_word: string } }).game_state.secret_word
          })
        // TextArena: random.seed(seed); random.choice(words) (the words OpenEnv PR #1127 reports for these seeds).
        for (const [seed, real, built] of [[1234, "slope", "taste"], [999, "cheap", "group"]] as const) {
          yield* client.reset({ seed })
          assert.strictEqual(yield* secretOf(client), real)
          assert.strictEqual(yield* builtSecret({ seed }), built)
        }
        // envtrain's `secret` reset option pins the word; TextArena's reset has no such option and drops it.
        yield* client.reset({ seed: 1234, secret: "crane" })
        assert.strictEqual(yield* secretOf(client), "slope")
        assert.strictEqual(yield* builtSecret({ seed: 1234, secret: "crane" }), "crane")
      }),
    { timeout: 240_000 }
  )
  it.scopedLive(
    "MCP echo on FastMCP: tools listed and called over MCP and as steps exactly as the built-in MCP echo does",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("mcp_echo.py")
        const client = yield* rawClient(server.url)
        const instance = yield* Echo.openEnvMcp.make
        const tools = instance.tools!
        const real = yield* client.reset()
        const built = yield* instance.reset({})
        assert.deepStrictEqual(real.observation, { ...built.observation as object, metadata: { status: "ready" } })
        assert.deepStrictEqual([real.reward, real.done], [built.reward, built.done])
        // MCP JSON-RPC (`{"type":"mcp"}` frames): the listing, then calls.
        assert.deepStrictEqual(yield* client.listTools, yield* tools.list)
        for (const message of ["Hi", "héllo 👋 wörld", "a\nb \"q\" \\ end"]) {
          for (const name of ["echo_message", "echo_with_length"]) {
            assert.deepStrictEqual(yield* client.callTool(name, { message }), yield* tools.call(name, { message }))
          }
        }
        // Gym-style MCP actions as steps; every step (the listing too) counts.
        const actions = [
          { type: "list_tools" },
          { type: "call_tool", tool_name: "echo_message", arguments: { message: "Hello!" } },
          { type: "call_tool", tool_name: "echo_with_length", arguments: { message: "héllo 👋" } },
          { type: "call_tool", tool_name: "no_such_tool", arguments: {} }
        ]
        for (const action of actions) {
          const r = yield* client.step(action)
          const b = yield* instance.step(Schema.decodeUnknownSync(Echo.McpAction)(action))
          assert.deepStrictEqual(r.observation, { ...b.observation as object, metadata: {} }, JSON.stringify(action))
          assert.deepStrictEqual([r.reward, r.done], [b.reward, b.done])
        }
        assert.deepStrictEqual({ ...(yield* client.state), episode_id: "" }, {
          ...(yield* instance.state),
          episode_id: ""
        })
      }),
    { timeout: 240_000 }
  )

  it.scopedLive(
    "MCP echo on FastMCP: its invalid_args, execution_error and tool_not_found answers reach the model as tool errors",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("mcp_echo.py")
        // A server of unknown kind: its tools listed, the arguments checked by FastMCP.
        const discovered = yield* Registry.load(server.url)
        const played = yield* Environment.run(discovered.environment!, {}, (ep) =>
          Effect.gen(function*() {
            yield* ep.call("echo_message", {})
            yield* ep.call("echo_message", { message: 5 })
            yield* ep.call("echo_message", { message: "still here" })
          }))
        const [missing, typed, good] = played.steps.map((s) => s.outcome)
        assert.strictEqual(missing._tag === "Failure" && missing.reason, "invalid_arguments")
        assert.match(
          missing.text,
          /^\{'error': '1 validation error for call\[echo_message\]\\nmessage\\n {2}Missing required/
        )
        assert.strictEqual(typed._tag === "Failure" && typed.reason, "failure")
        assert.match(typed.text, /Input should be a valid string/)
        assert.deepStrictEqual(good, { _tag: "Success", tool: "echo_message", text: "still here" })
        // The typed twin of a definition with a tool the server lacks: the server's tool_not_found, as the model's
        // own mistake; the session goes on.
        const newer = Definition.make({
          name: "echo",
          description: "Echo, and a tool the server does not have.",
          start: () => ({}),
          tools: {
            echo_message: { description: "Echo.", parameters: { message: Schema.String }, run: () => "" },
            shout: { description: "Shout.", parameters: { message: Schema.String }, run: () => "" }
          },
          reward: () => null
        })
        const skewed = yield* Environment.run(newer.remote(server.url, clientOptions), {}, (ep) =>
          Effect.gen(function*() {
            yield* ep.call("shout", { message: "hi" })
            yield* ep.call("echo_message", { message: "hi" })
          }))
        const [unknown, after] = skewed.steps.map((s) =>
          s.outcome
        )
        assert.strictEqual(unknown._tag === "Failure" && unknown.reason, "unknown_tool")
        assert.include(unknown.text, "shout")
        assert.notInclude(unknown.text, server.url.replace(/^http:\/\//, ""))
        assert.deepStrictEqual(after, { _tag: "Success", tool: "echo_message", text: "hi" })
        for (const run of [played, skewed]) {
          assert.strictEqual(run.counters.defects, 0)
        }
        assert.deepStrictEqual([played.counters.failures, skewed.counters.failures], [2, 1])
      }),
    { timeout: 240_000 }
  )

  it.scopedLive(
    "MCP echo on FastMCP: the generic typed remote plays it as the built-in Echo environment; documented differences",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("mcp_echo.py")
        const remoteEcho = Remote.environment({
          name: "echo",
          url: server.url,
          action: Echo.CallToolAction,
          observation: Schema.Struct({
            result: Schema.optional(Schema.NullOr(Schema.Struct({ data: Schema.Unknown })))
          }),
          columns: Environment.SeedColumns,
          tools: [Echo.Echo],
          actionFor: (_tool, params: { readonly message: string }) => ({
            type: "call_tool" as const,
            tool_name: "echo_message",
            arguments: { message: params.message },
            metadata: {}
          }),
          render: (o) => String(o.result?.data),
          client: clientOptions
        })
        const play = (episode: Environment.Episode<unknown>) =>
          Effect.forEach(["Hi", "héllo 👋", "a longer message"], (message) => episode.call("echo", { message }))
        const remote = yield* Environment.run(remoteEcho, {}, play)
        const local = yield* Environment.run(Echo.environment, {}, play)
        assert.deepStrictEqual(remote.steps, local.steps)
        assert.strictEqual(remote.state.steps, 3)
        // Arguments FastMCP refuses: pydantic's validation text there, a short text of envtrain's own here.
        const client = yield* rawClient(server.url)
        yield* client.reset()
        const missing = yield* client.step({ type: "call_tool", tool_name: "echo_message", arguments: {} })
        const instance = yield* Echo.openEnvMcp.make
        const builtMissing = yield* instance.step(
          Schema.decodeUnknownSync(Echo.McpAction)({ type: "call_tool", tool_name: "echo_message", arguments: {} })
        )
        const realError = (missing.observation as { error: { error_type: string; message: string } }).error
        const builtError = (builtMissing.observation as { error: { error_type: string; message: string } }).error
        assert.strictEqual(realError.error_type, "invalid_args")
        assert.strictEqual(builtError.error_type, "invalid_args")
        assert.match(
          realError.message,
          /^1 validation error for call\[echo_message\]\nmessage\n {2}Missing required argument \[type=missing_argument/
        )
        assert.strictEqual(
          builtError.message,
          "Invalid arguments for tool 'echo_message': 'message' is required and must be a string"
        )
        // A wrongly typed argument: FastMCP calls it an execution error, and so does the built-in.
        const typed = { type: "call_tool", tool_name: "echo_message", arguments: { message: 5 } }
        const realTyped = (yield* client.step(typed)).observation as { error: { error_type: string; message: string } }
        const builtTyped = (yield* instance.step(Schema.decodeUnknownSync(Echo.McpAction)(typed))).observation as {
          error: { error_type: string }
        }
        assert.strictEqual(realTyped.error.error_type, "execution_error")
        assert.strictEqual(builtTyped.error.error_type, "execution_error")
        assert.match(realTyped.error.message, /Input should be a valid string \[type=string_type/)
        // An unknown tool over JSON-RPC: the same text; -32603 from openenv, -32602 from envtrain's server.
        const realUnknown = yield* Effect.flip(client.callTool("no_such_tool", {}))
        const builtUnknown = yield* Effect.flip(instance.tools!.call("no_such_tool", {}))
        assert.strictEqual(realUnknown._tag, "McpError")
        if (realUnknown._tag === "McpError") {
          assert.deepStrictEqual([realUnknown.code, realUnknown.serverMessage], [-32603, builtUnknown.message])
        }
        const envtrain = yield* Server.serve(Echo.openEnvMcp, { port: 0 })
        const envtrainClient = yield* rawClient(envtrain.url)
        const envtrainUnknown = yield* Effect.flip(envtrainClient.callTool("no_such_tool", {}))
        assert.strictEqual(envtrainUnknown._tag, "McpError")
        if (envtrainUnknown._tag === "McpError") {
          assert.deepStrictEqual([envtrainUnknown.code, envtrainUnknown.serverMessage], [-32602, builtUnknown.message])
        }
      }),
    { timeout: 240_000 }
  )
  it.scopedLive(
    "GRPO trains a tiny model for 3 steps against the real OpenSpiel catch server (the examples' --env-url path)",
    () =>
      Effect.gen(function*() {
        const server = yield* serve("openspiel_catch.py")
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        // What `--env-url` gives the examples (examples/src/Recipe.ts: `remote: (url) => Catch.remote(url)`).
        const environment = Catch.remote(server.url, clientOptions)
        const open = (row: Readonly<Record<string, unknown>>) =>
          Environment.episode(environment, row).pipe(Effect.orDie, Effect.map(Episode.fromEnvironment))
        const scored: Array<Catch.State> = []
        // TRL's Catch reward from the server's episode state, and a dense one so every group has an advantage.
        const catchReward = Reward.perEpisode<Catch.State>("catch", (e) => {
          scored.push(e.environment)
          return Catch.reward(e.environment)
        })
        const evenTokens = Reward.perEpisode<Catch.State>("even_tokens", (e) => {
          const ids = e.completionIds
          return ids.length === 0 ? 0 : ids.filter((id) => id % 2 === 0).length / ids.length
        })
        const config = yield* Config.fromSources({
          outputDir: dir,
          numGenerations: 4,
          perDeviceTrainBatchSize: 4,
          maxSteps: 3,
          maxCompletionLength: 24,
          learningRate: 1e-3,
          lrSchedulerType: "constant",
          loggingSteps: 1,
          saveSteps: 1000,
          logCompletions: true,
          numCompletionsToPrint: 1,
          seed: 3
        })
        const result = yield* Trainer.train({
          config,
          model: Trainer.referenceModel(yield* Checkpoint.makeModel("tiny", 3)),
          dataset: Dataset.fromSeeds({
            prompt: [{ role: "user", content: "Catch the ball with the tools move and stay.\n" }],
            seeds: Dataset.range(0, 3)
          }),
          open,
          rewardFunctions: [catchReward, evenTokens],
          progress: false
        })
        assert.strictEqual(result.globalStep, 3)
        assert.deepStrictEqual(result.steps.map((s) => s.step), [1, 2, 3])
        for (const step of result.steps) {
          assert.isTrue(Number.isFinite(step.loss), `loss ${step.loss}`)
          assert.isAbove(step.values["grad_norm"], 0)
          assert.isAbove(step.values["num_tokens"], 0)
          assert.isTrue(Number.isFinite(step.values["reward"]))
        }
        // Every episode was reset on the server and scored from its state (none unscoreable).
        assert.strictEqual(scored.length, 12)
        const completions = yield* Metrics.read<Metrics.CompletionSample>(`${dir}/${Metrics.files.completions}`)
        assert.strictEqual(completions.length, 12)
        for (const c of completions) assert.match(c.prompt, /Ball: row 1\/10, column \d\/5\nPaddle: column 3\/5/)
      }).pipe(Effect.provide(NodeContext.layer)),
    { timeout: 600_000 }
  )
})
