import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Schema } from "effect"
import * as Definition from "../src/Definition.js"
import * as Environment from "../src/Environment.js"
import * as Registry from "../src/Registry.js"
import * as Server from "../src/Server.js"

// A dice game whose parameter carries a description written for the model's prompt and a rule (1 to 3).
const roll = {
  description: "Roll some dice.",
  parameters: {
    count: Schema.Int.pipe(Schema.between(1, 3)).annotations({ description: "How many dice to roll" })
  },
  run: (state: { rolls: number }, { count }: { readonly count: number }) => {
    if (count === 3) throw new Error("the cup holds two dice at a time")
    state.rolls += count
    return `rolled ${count}`
  }
}
const dice = Definition.make({
  name: "dice",
  description: "Roll dice.",
  start: () => ({ rolls: 0 }),
  tools: { roll },
  reward: (state) => state.rolls
})
// A newer version of the same environment with one more tool: its client, pointed at the older server, calls a tool
// the server does not have.
const diceV2 = Definition.make({
  name: "dice",
  description: "Roll dice, or flip a coin.",
  start: () => ({ rolls: 0 }),
  tools: { roll, flip: { description: "Flip a coin.", parameters: {}, run: () => "heads" } },
  reward: (state) => state.rolls
})

const rollError = "Invalid arguments for tool 'roll': parameter 'count' must be between 1 and 3, got 7"

/** Log lines at warning or above, kept to check that a server's answer is not logged as a crash; and the rest. */
const warnings: Array<string> = []
const infos: Array<string> = []
const keepWarnings = Logger.replace(
  Logger.defaultLogger,
  Logger.make(({ logLevel, message }) => {
    const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
    if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) warnings.push(text)
    else infos.push(text)
  })
)

describe("what an OpenEnv server says about a tool call reaches the model as TRL shows it", () => {
  it.scopedLive(
    "invalid_args, tool_not_found and execution_error: tool failures with the server's text, not defects",
    () =>
      Effect.gen(function*() {
        const server = yield* Server.serve(dice.openEnv, { port: 0 })
        // In process: the rule the argument broke, not the parameter's description.
        const local = yield* Environment.run(dice.environment, {}, (ep) => Effect.asVoid(ep.call("roll", { count: 7 })))
        assert.deepStrictEqual(local.steps[0].outcome, {
          _tag: "Failure",
          tool: "roll",
          reason: "invalid_arguments",
          error: rollError,
          text: Environment.errorText(rollError)
        })
        // A server of unknown kind (its tools found by listing them): the server checks the arguments.
        const discovered = yield* Registry.load(server.url)
        // The tools found at the URL are named in the log (a new user's first check that the right server answered).
        assert.deepStrictEqual(infos, [
          `environment at ${server.url}: 1 MCP tool (roll); each episode's reward is the last step's envelope reward`
        ])
        const played = yield* Environment.run(
          discovered.environment!,
          {},
          (ep) =>
            Effect.gen(function*() {
              yield* ep.call("roll", { count: 7 })
              yield* ep.call("roll", { count: 3 })
              yield* ep.call("roll", { count: 2 })
            })
        )
        const [bad, thrown, good] = played.steps.map((s) => s.outcome)
        assert.deepStrictEqual(bad, local.steps[0].outcome)
        assert.deepStrictEqual(thrown, {
          _tag: "Failure",
          tool: "roll",
          reason: "failure",
          error: "the cup holds two dice at a time",
          text: "{'error': 'the cup holds two dice at a time'}"
        })
        assert.deepStrictEqual(good, { _tag: "Success", tool: "roll", text: "rolled 2" })
        assert.deepStrictEqual(
          { calls: played.counters.calls, failures: played.counters.failures, defects: played.counters.defects },
          { calls: 3, failures: 2, defects: 0 }
        )
        // The typed twin of a newer version: the server answers tool_not_found, which the model reads as its mistake.
        const skewed = yield* Environment.run(
          diceV2.remote(server.url),
          {},
          (ep) => Effect.asVoid(ep.call("flip", {}))
        )
        const flip = skewed.steps[0].outcome
        assert.strictEqual(flip._tag, "Failure")
        if (flip._tag === "Failure") {
          assert.strictEqual(flip.reason, "unknown_tool")
          assert.strictEqual(flip.text, Environment.errorText(flip.error))
          assert.include(flip.error, "flip")
          // Nothing of the transport reaches the model: no URL, no stack.
          assert.notInclude(flip.text, "127.0.0.1")
          assert.notInclude(flip.text, "    at ")
        }
        assert.strictEqual(skewed.counters.defects, 0)
        assert.deepStrictEqual(warnings, [])
      }).pipe(Effect.provide(keepWarnings)),
    { timeout: 60_000 }
  )
})
