import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Schema, Scope } from "effect"
import { SessionLostError } from "../src/Client.js"
import { Catch, Echo, Environment, MultiEnv, Tool, Wordle } from "../src/index.js"

// A tiny environment whose tool can fail, die, or block, and whose layer records acquire/release.
const Boom = Tool.make("boom", {
  description: "Misbehave.",
  parameters: { how: Schema.Literal("fail", "die", "ok", "block", "lost").annotations({ description: "How." }) }
})

class Probe extends Context.Tag("test/Probe")<Probe, {
  readonly boom: (
    p: { readonly how: "fail" | "die" | "ok" | "block" | "lost" }
  ) => Effect.Effect<string, Tool.InvalidMove>
  readonly id: number
}>() {}

const make = (log: Ref.Ref<Array<string>>, blocked?: Deferred.Deferred<void>) => {
  let next = 0
  const layer = Layer.scoped(
    Probe,
    Effect.gen(function*() {
      const id = ++next
      yield* Ref.update(log, (l) => [...l, `acquire ${id}`])
      yield* Effect.addFinalizer(() => Ref.update(log, (l) => [...l, `release ${id}`]))
      return Probe.of({
        id,
        boom: ({ how }) =>
          how === "fail"
            ? Effect.fail(new Tool.InvalidMove({ message: "Not like that." }))
            : how === "die"
            ? Effect.die(new Error("kaput"))
            : how === "lost"
            ? Effect.die(new SessionLostError({ url: "ws://127.0.0.1:1/ws", reason: "socket closed" }))
            : how === "block"
            ? Effect.zipRight(blocked ? Deferred.succeed(blocked, void 0) : Effect.void, Effect.never)
            : Effect.succeed(`ok from ${id}`)
      })
    })
  )
  return Environment.make({
    name: "probe",
    tag: Probe,
    layer,
    columns: Schema.Struct({ greeting: Schema.optional(Schema.String) }),
    tools: [Boom],
    handlers: (s) => ({ boom: s.boom }),
    reset: (_s, columns) => Effect.succeed(Option.fromNullable(columns.greeting)),
    state: (s) => Effect.succeed({ id: s.id })
  })
}

describe("Environment", () => {
  it.effect("typed failures, defects, unknown tools and bad arguments become texts and are counted", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const env = make(log)
      const result = yield* Environment.run(env, { greeting: "hi" }, (episode) =>
        Effect.gen(function*() {
          yield* episode.call("boom", { how: "ok" })
          yield* episode.call("boom", { how: "fail" })
          yield* episode.call("boom", { how: "die" })
          yield* episode.call("nope", {})
          yield* episode.call("boom", { how: 3 })
        }))
      assert.deepStrictEqual(result.observation, Option.some("hi"))
      const [ok, fail, die, unknown, bad] = result.steps.map((s) => s.outcome)
      assert.deepStrictEqual(ok, { _tag: "Success", tool: "boom", text: "ok from 1" })
      assert.strictEqual(fail.text, "{'error': 'Not like that.'}")
      assert.isTrue(die._tag === "Failure" && die.reason === "defect" && die.error.includes("kaput"))
      assert.strictEqual(unknown.text, "{'error': 'Tool nope not found.'}")
      assert.isTrue(bad._tag === "Failure" && bad.reason === "invalid_arguments" && bad.error.includes("'how'"))
      assert.deepStrictEqual(result.counters, {
        calls: 5,
        failures: 4,
        defects: 1,
        byTool: { boom: { calls: 4, failures: 3, defects: 1 }, nope: { calls: 1, failures: 1, defects: 0 } }
      })
      assert.deepStrictEqual(yield* Ref.get(log), ["acquire 1", "release 1"])
    }))

  it.effect("a remote session's client error is not a tool failure: it propagates and is not counted", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        const episode = yield* Environment.episode(make(log), {})
        yield* episode.call("boom", { how: "ok" })
        const lost = yield* Effect.exit(episode.call("boom", { how: "lost" }))
        assert.deepStrictEqual((yield* episode.counters).calls, 1)
        return yield* lost
      })))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const defect = Cause.squash(exit.cause)
        assert.instanceOf(defect, SessionLostError)
      }
      // The instance is still released.
      assert.deepStrictEqual(yield* Ref.get(log), ["acquire 1", "release 1"])
    }))

  it.effect("each episode gets a fresh instance, released at episode end", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const env = make(log)
      const a = yield* Environment.run(env, {}, (e) => Effect.asVoid(e.call("boom", { how: "ok" })))
      const b = yield* Environment.run(env, {}, (e) => Effect.asVoid(e.call("boom", { how: "ok" })))
      assert.deepStrictEqual([a.state.id, b.state.id], [1, 2])
      assert.deepStrictEqual(yield* Ref.get(log), ["acquire 1", "release 1", "acquire 2", "release 2"])
    }))

  it.effect("interrupting an episode inside a tool call releases its instance", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const blocked = yield* Deferred.make<void>()
      const env = make(log, blocked)
      const fiber = yield* Effect.fork(Environment.run(env, {}, (e) => Effect.asVoid(e.call("boom", { how: "block" }))))
      yield* Deferred.await(blocked)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(yield* Ref.get(log), ["acquire 1", "release 1"])
    }))

  it.effect("columns are decoded with the environment's Schema", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(Environment.episode(Catch.environment, { seed: "x" })))
      assert.strictEqual(error._tag, "InvalidColumns")
      assert.include(error.message, "seed")
    }))

  it("tool definitions for the chat template", () => {
    assert.deepStrictEqual(Environment.toolDefinitions(Catch.environment).map((d) => d.function.name), ["move", "stay"])
  })

  it("Python repr of error texts", () => {
    assert.strictEqual(Environment.errorText("Game over."), "{'error': 'Game over.'}")
    assert.strictEqual(Environment.errorText("can't"), `{'error': "can't"}`)
    assert.strictEqual(Environment.errorText("a'b\"c\n"), `{'error': 'a\\'b"c\\n'}`)
  })
})

describe("MultiEnv", () => {
  const games = MultiEnv.make({
    column: "env",
    default: "wordle",
    environments: { wordle: Wordle.environment, catch: Catch.environment }
  })

  it("exposes the union of tools, sorted by name like TRL", () => {
    assert.deepStrictEqual(games.tools.map((t) => t.name), ["guess", "move", "stay"])
  })

  it.effect("routes by column, rejects the inactive environment's tools, and scopes rewards", () =>
    Effect.gen(function*() {
      const c = yield* Environment.run(games, { env: "catch", seed: 3 }, (episode) =>
        Effect.gen(function*() {
          const wrong = yield* episode.call("guess", { guess: "[crane]" })
          assert.strictEqual(
            wrong.text,
            "{'error': \"Tool 'guess' belongs to the 'wordle' environment, but this episode plays 'catch'.\"}"
          )
          yield* Catch.solver()(episode)
        }))
      assert.strictEqual(c.state.active, "catch")
      assert.strictEqual(MultiEnv.rewardFor("catch", Catch.reward)(c.state), 1)
      assert.strictEqual(MultiEnv.rewardFor("wordle", (s: Wordle.State) => s.reward)(c.state), null)

      const w = yield* Environment.run(games, { seed: 3 }, Wordle.solver())
      assert.strictEqual(w.state.active, "wordle")
      assert.isTrue(Option.getOrThrow(w.observation).includes("You are Playing Wordle."))
      assert.isTrue(w.state.active === "wordle" && w.state.state.won)

      const bad = yield* Effect.flip(Effect.scoped(Environment.episode(games, { env: "chess" })))
      assert.include(bad.message, "column 'env' must be one of 'wordle', 'catch'")
    }))

  it.effect("a second reset releases the previous sub-environment", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const multi = MultiEnv.make({ environments: { probe: make(log), echo: Echo.environment } })
      const scope = yield* Scope.make()
      const instance = yield* Scope.extend(multi.instance, scope)
      yield* instance.reset({ env: "probe" })
      yield* instance.reset({ env: "echo" })
      assert.deepStrictEqual(yield* Ref.get(log), ["acquire 1", "release 1"])
      yield* Scope.close(scope, Exit.void)
    }))
})
