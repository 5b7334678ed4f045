// The loop-owning session contract with real parts: `envtrain serve-policy` as a child process over a tiny model, a
// real capture proxy, real bubblewrap sandboxes and the shipped tasks. The oracle agent (one captured model call,
// then the task's solution) solves a task: reward 1 and a valid trace of the server's own ids. An agent that
// outlives its wall-time limit is killed and marked timed out. A policy server that cannot be reached makes the
// rollout unscoreable (null, never 0). An engine answering positive "logprobs" is a malformed capture: a tagged
// error naming the rule and the turn. Live clock throughout.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as BashAgent from "../src/BashAgent.js"
import * as HarnessSession from "../src/HarnessSession.js"
import { captureProxy, NO_THINKING, positiveLogprobEngine, shippedSuite, tinyHarness } from "./fixtures.js"

describe("HarnessSession", () => {
  it.scopedLive(
    "the oracle solves a task through a real serve-policy child: reward 1, a valid trace of the server's ids",
    () =>
      Effect.gen(function*() {
        const { proxy, suite } = yield* tinyHarness(3, NO_THINKING)
        const factory = HarnessSession.makeFactory({
          tasks: suite.train,
          agent: HarnessSession.oracleAgent(),
          proxy,
          model: "tiny"
        })
        const row = factory.promptRows().find((r) => r.task === "copy-file")!
        // The contract step by step.
        const outcome = yield* Effect.scoped(Effect.gen(function*() {
          const session = yield* factory.create(row.prompt, 7, "episode-a")
          assert.strictEqual(session.task.name, "copy-file")
          assert.deepStrictEqual(session.initialMessages, [{ role: "user", content: session.task.instruction }])
          const done = yield* session.waitForCompletion()
          assert.deepStrictEqual(done, { exitCode: 0, timedOut: false })
          const trace = yield* session.fetchTrainingTrace
          const verified = yield* session.verify
          return { trace, verified }
        }))
        assert.strictEqual(outcome.verified.envReward, 1)
        assert.isTrue(outcome.verified.done)
        assert.strictEqual(outcome.trace.turns.length, 1)
        const turn = outcome.trace.turns[0]
        assert.isAbove(turn.prompt_token_ids.length, 10)
        assert.isAtLeast(turn.completion_token_ids.length, 1)
        assert.isAtMost(turn.completion_token_ids.length, 8)
        assert.deepStrictEqual(turn.loss_mask, [
          ...turn.prompt_token_ids.map(() => 0),
          ...turn.completion_token_ids.map(() => 1)
        ])
        // The whole rollout in one call, on another task.
        const other = factory.promptRows().find((r) => r.task === "create-file")!
        const whole = yield* HarnessSession.rollout(factory, other.prompt, 8, "episode-b")
        assert.strictEqual(whole.envReward, 1)
        assert.isFalse(whole.timedOut)
        assert.strictEqual(whole.task, "create-file")
        assert.isUndefined(whole.unscoreable)
        // A prompt naming no task of the suite.
        const unknown = yield* Effect.flip(HarnessSession.rollout(factory, "Write a novel.", 0, "x"))
        assert.strictEqual(unknown._tag, "UnknownTask")
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.scopedLive(
    "an agent that outlives its wall-time limit is killed and the rollout marked timed out",
    () =>
      Effect.gen(function*() {
        const { proxy, suite } = yield* tinyHarness(3, NO_THINKING)
        const sleeper: HarnessSession.Agent = {
          name: "sleeper",
          run: (c) =>
            Effect.gen(function*() {
              // One captured model call, then a command that would run for a minute.
              yield* BashAgent.run(c.sandbox, {
                baseUrl: c.baseUrl,
                apiKey: c.apiKey,
                model: c.model,
                instruction: c.task.instruction,
                maxSteps: 1,
                maxTokens: 4
              }).pipe(Effect.orDie)
              yield* c.sandbox.exec("sleep 60").pipe(Effect.orDie)
              return {}
            })
        }
        const factory = HarnessSession.makeFactory({
          tasks: suite.train,
          agent: sleeper,
          proxy,
          model: "tiny",
          agentTimeout: "8 seconds"
        })
        const started = Date.now()
        const outcome = yield* HarnessSession.rollout(factory, factory.promptRows()[0].prompt, 0, "slow")
        assert.isTrue(outcome.timedOut)
        assert.isBelow(Date.now() - started, 40_000)
        // The turns captured before the limit are kept, and the verifier still scores what the agent left.
        assert.strictEqual(outcome.trace.turns.length, 1)
        assert.strictEqual(outcome.envReward, 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive(
    "a policy server that cannot be reached makes the rollout unscoreable: null, never 0",
    () =>
      Effect.gen(function*() {
        const suite = yield* shippedSuite
        // Port 9 (discard) on loopback: nothing listens, the connection is refused.
        const proxy = yield* captureProxy("http://127.0.0.1:9")
        const factory = HarnessSession.makeFactory({
          tasks: suite.train,
          agent: HarnessSession.bashAgent({ requestTimeout: "10 seconds" }),
          proxy,
          model: "tiny"
        })
        const outcome = yield* HarnessSession.rollout(factory, factory.promptRows()[1].prompt, 0, "dead")
        assert.isNull(outcome.envReward)
        assert.include(outcome.unscoreable ?? "", "transport failure")
        assert.strictEqual(outcome.trace.turns.length, 0)
        assert.isFalse(outcome.timedOut)
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive(
    "a malformed capture is a CaptureContractError naming the rule and the turn",
    () =>
      Effect.gen(function*() {
        const suite = yield* shippedSuite
        const proxy = yield* captureProxy(yield* positiveLogprobEngine)
        const factory = HarnessSession.makeFactory({
          tasks: suite.train,
          agent: HarnessSession.bashAgent(),
          proxy,
          model: "tiny"
        })
        const exit = yield* Effect.exit(HarnessSession.rollout(factory, factory.promptRows()[2].prompt, 0, "bad"))
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit) && exit.cause._tag === "Fail") {
          const error = exit.cause.error as HarnessSession.CaptureContractError
          assert.strictEqual(error._tag, "CaptureContractError")
          assert.strictEqual(error.rule, "positive_logprob")
          assert.strictEqual(error.turn, 0)
          assert.include(error.message, "rule positive_logprob")
        } else {
          assert.fail(`expected a CaptureContractError, got ${String(exit)}`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )
})
