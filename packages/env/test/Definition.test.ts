import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as Client from "../src/Client.js"
import * as Definition from "../src/Definition.js"
import * as Echo from "../src/Echo.js"
import * as Environment from "../src/Environment.js"
import * as Registry from "../src/Registry.js"
import * as Server from "../src/Server.js"
import guessNumber, { bisect } from "./fixtures/GuessNumber.js"

// Plays bisection, plus a guess out of range first, a status call and a call after the end.
const player = (episode: Environment.Episode<unknown>) =>
  Effect.gen(function*() {
    yield* episode.call("guess", { number: 99 })
    yield* episode.call("status", {})
    const texts: Array<string> = []
    for (let i = 0; i < 5; i++) {
      const outcome = yield* episode.call("guess", { number: bisect(texts) })
      texts.push(outcome.text)
      if (outcome.text === "Correct!") break
    }
    yield* episode.call("guess", { number: 1 })
  })

describe("Definition", () => {
  it.effect("one definition gives the tool schemas, the episode, the reward and the success", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(guessNumber.tools.map((t) => t.name), ["guess", "status"])
      assert.deepStrictEqual(guessNumber.tools[0].definition.function.parameters, {
        type: "object",
        properties: { number: { type: "integer", description: "Your guess (1-20)." } },
        required: ["number"]
      })
      const result = yield* Environment.run(guessNumber.environment, { seed: 6 }, player)
      assert.deepStrictEqual(result.observation, Option.some("Guess a number from 1 to 20. You have 5 guesses."))
      const texts = result.steps.map((s) => s.outcome.text)
      assert.strictEqual(texts[0], "{'error': '99 is not between 1 and 20'}")
      assert.strictEqual(texts[1], "{\"left\":5}")
      assert.strictEqual(texts.at(-2), "Correct!")
      assert.strictEqual(texts.at(-1), "{'error': 'Episode is done.'}")
      assert.deepStrictEqual(result.state, { secret: 7, guesses: 3, found: true, limit: 5 })
      assert.strictEqual(guessNumber.reward(result.state), 1)
      assert.isTrue(guessNumber.success(result.state, 1))
      // Bad arguments never reach `run`: the model is told which parameter is wrong.
      const bad = yield* Environment.run(
        guessNumber.environment,
        { seed: 1 },
        (ep) => Effect.asVoid(ep.call("guess", { number: "seven" }))
      )
      assert.include(bad.steps[0].outcome.text, "parameter \\'number\\' must be a number, got \"seven\"")
      assert.strictEqual(bad.state.guesses, 0)
      // Columns are decoded with the definition's Schema.
      const missing = yield* Effect.flip(Environment.run(guessNumber.environment, {}, () => Effect.void))
      assert.strictEqual(missing._tag, "InvalidColumns")
    }))

  it.scopedLive(
    "served, the same definition plays identically through its derived remote and over MCP",
    () =>
      Effect.gen(function*() {
        const server = yield* Server.serve(guessNumber.openEnv, { port: 0 })
        for (const seed of [0, 6, 13]) {
          const local = yield* Environment.run(guessNumber.environment, { seed }, player)
          const remote = yield* Environment.run(guessNumber.remote(server.url), { seed }, player)
          assert.deepStrictEqual(remote.observation, local.observation)
          assert.deepStrictEqual(remote.steps, local.steps)
          const { episode_id, step_count, ...fields } = remote.state
          assert.deepStrictEqual(fields, local.state)
          assert.isString(episode_id)
          // The call after the end is refused before it is sent (the last step said done).
          assert.strictEqual(step_count, local.steps.length - 1)
        }
        // OpenEnv's MCP path on one session: tools/list and tools/call, before and after a reset with columns.
        const client = yield* Client.connect({ url: server.url })
        const tools = yield* client.listTools
        assert.deepStrictEqual(tools.map((t) => t.name), ["guess", "status"])
        yield* client.reset({ seed: 19, limit: 2 })
        const called = yield* client.callTool("guess", { number: 20 })
        assert.strictEqual(called.data, "Correct!")
        const state = yield* client.state
        assert.strictEqual(state.found, true)
        const unknown = yield* Effect.flip(client.callTool("shout", {}))
        assert.include(unknown.message, "Unknown tool")
        const badArgs = yield* Effect.flip(client.callTool("guess", { number: "x" }))
        assert.include(badArgs.message, "parameter 'number'")
        const badReset = yield* Effect.flip(client.reset({ limit: 3 }))
        assert.include(badReset.message, "seed")
      }),
    { timeout: 60_000 }
  )

  it("refuses a definition it cannot serve, naming the problem", () => {
    assert.throws(
      () =>
        Definition.make({
          name: "my env",
          start: () => ({}),
          tools: { t: { description: "t", run: () => "" } },
          reward: () => 0
        }),
      /name 'my env' must be letters/
    )
    assert.throws(
      () => Definition.make({ name: "empty", start: () => ({}), tools: {}, reward: () => 0 }),
      /has no tools/
    )
    assert.isTrue(Definition.isDefinition(guessNumber))
    assert.isFalse(Definition.isDefinition({ name: "x" }))
  })

  it.scopedLive(
    "a server of unknown kind, by URL: its MCP tools are listed and played, its envelope reward scored",
    () =>
      Effect.gen(function*() {
        const server = yield* Server.serve(guessNumber.openEnv, { port: 0 })
        const entry = yield* Registry.load(server.url)
        assert.strictEqual(entry.source, server.url)
        const env = entry.environment!
        assert.deepStrictEqual(env.tools.map((t) => t.definition), guessNumber.tools.map((t) => t.definition))
        for (const seed of [0, 6]) {
          const local = yield* Environment.run(guessNumber.environment, { seed }, player)
          const remote = yield* Environment.run(env, { seed }, player)
          // Arguments are checked by the server here, so a bad call's text is the server's; these calls are all good.
          assert.deepStrictEqual(remote.steps.map((s) => s.outcome.text), local.steps.map((s) => s.outcome.text))
          assert.strictEqual(entry.reward!(remote.state), guessNumber.reward(local.state))
        }
        const echo = yield* Server.serve(Echo.openEnvMcp, { port: 0 })
        const unscored = yield* Registry.load(echo.url)
        const played = yield* Environment.run(
          unscored.environment!,
          {},
          (ep) => Effect.asVoid(ep.call("echo_message", { message: "hi" }))
        )
        assert.strictEqual(played.steps[0].outcome.text, "hi")
        // OpenEnv's MCP echo sends no reward: unscoreable, never a zero.
        assert.isNull(unscored.reward!(played.state))
        const refused = yield* Effect.flip(Registry.load("http://127.0.0.1:1"))
        assert.include(refused.message, "cannot list the server's tools")
      }),
    { timeout: 60_000 }
  )
})
