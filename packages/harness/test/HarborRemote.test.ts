// envtrain's trainer driving a Harbor server: `envtrain harness serve`'s definition on env's real OpenEnv server
// (loopback, 2 sessions), generating through a capture proxy on a `serve-policy` child over a tiny model. A session
// limit below maxConcurrentRollouts (+ 1 for the task list on a server without the Task API, where it falls back to
// `list_tasks`) is refused before anything runs, naming the fix; an unknown split is refused; one GRPO step runs its
// rollouts remotely (oracle harness) and trains on rows made from the returned turns' tokens; a returned result
// breaking a TrainingTrace rule is a CaptureContractError, and `ok: false` is unscoreable. Live clock.
import { Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Server } from "@envtrain/env"
import * as Config from "@envtrain/grpo/Config"
import * as Trainer from "@envtrain/grpo/Trainer"
import { Effect } from "effect"
import * as HarborRemote from "../src/HarborRemote.js"
import * as HarborServe from "../src/HarborServe.js"
import * as HarnessSession from "../src/HarnessSession.js"
import * as HarnessTrainer from "../src/HarnessTrainer.js"
import { traceRows } from "../src/internal/traceRows.js"
import { tinyHarness } from "./fixtures.js"

describe("HarborRemote", () => {
  it.scopedLive(
    "the trainer runs its rollouts on a Harbor server, after checking its session limit",
    () =>
      Effect.gen(function*() {
        const path = yield* Path.Path
        const { dir, model, proxy, server: policy, suite } = yield* tinyHarness(2)
        const definition = yield* HarborServe.definition({
          suite,
          proxy,
          llmUrl: policy.url,
          model: "tiny",
          agents: [HarnessSession.oracleAgent()]
        })
        const harbor = yield* Server.serve(definition, { port: 0, maxConcurrentEnvs: 2 })

        // The Task API lists the tasks without a session: 2 sessions carry 2 rollouts, not 3.
        const connected = yield* Effect.scoped(HarborRemote.connect({ url: harbor.url }, 2))
        assert.deepStrictEqual(connected.tasks.map((t) => t.index), suite.train.map((_, i) => i))
        const refused = yield* Effect.flip(Effect.scoped(HarborRemote.connect({ url: harbor.url }, 3)))
        assert.strictEqual(refused._tag, "HarborServerError")
        assert.include(refused.message, "fewer than 3 sessions")
        assert.include(refused.message, "MAX_CONCURRENT_ENVS=3")
        const unknown = yield* Effect.flip(Effect.scoped(HarborRemote.connect({ url: harbor.url, split: "test" }, 1)))
        assert.include(unknown.message, "unknown split \"test\"; this server has train, held-out")

        // Without the Task API, list_tasks on a session of its own: 2 sessions cannot carry 2 rollouts and the list.
        const { tasks: _tasks, ...withoutTasks } = definition
        const plain = yield* Server.serve(withoutTasks, { port: 0, maxConcurrentEnvs: 2 })
        const refusedPlain = yield* Effect.flip(Effect.scoped(HarborRemote.connect({ url: plain.url }, 2)))
        assert.include(refusedPlain.message, "fewer than 3 sessions")
        assert.include(refusedPlain.message, "+ 1 for the task list")
        const listed = yield* Effect.scoped(HarborRemote.connect({ url: plain.url, split: "held-out" }, 1))
        assert.deepStrictEqual(listed.tasks.map((t) => t.task_name), suite.heldOut.map((t) => t.name))

        const seen: Array<{ outcome: HarnessSession.HarnessRolloutOutcome; segments: unknown }> = []
        const result = yield* HarnessTrainer.train({
          config: yield* Config.fromSources({
            outputDir: path.join(dir, "out"),
            policyServers: [policy.url],
            numGenerations: 2,
            perDeviceTrainBatchSize: 4,
            maxCompletionLength: 8,
            loggingSteps: 1,
            saveSteps: 1000,
            maxSteps: 1
          }),
          model: Trainer.referenceModel(model),
          harborServer: { url: harbor.url, split: "train", harness: "oracle", llmUrl: policy.url },
          maxConcurrentRollouts: 1,
          progress: false,
          onRollout: (outcome, record) => Effect.sync(() => seen.push({ outcome, segments: record.segments }))
        })
        assert.strictEqual(result.globalStep, 1)
        assert.strictEqual(seen.length, 4)
        for (const { outcome, segments } of seen) {
          assert.strictEqual(outcome.envReward, 1)
          assert.strictEqual(outcome.trace.turns.length, 1)
          assert.isAbove(outcome.trace.turns[0].prompt_token_ids.length, 10)
          assert.deepStrictEqual(segments, traceRows(outcome.trace.turns))
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    180_000
  )

  it.effect("a returned result breaking a rule is a CaptureContractError; ok: false is unscoreable", () =>
    Effect.gen(function*() {
      const turn = {
        node_id: "0",
        prompt_token_ids: [1, 2],
        completion_token_ids: [3],
        per_token_logps: [0.5],
        loss_mask: [0, 0, 1]
      }
      const bad = yield* Effect.flip(HarborRemote.outcomeOf({ ok: true, reward: 1, turns: [turn] }, "t"))
      assert.strictEqual(bad.rule, "positive_logprob")
      assert.strictEqual(bad.turn, 0)
      const good = yield* HarborRemote.outcomeOf(
        { ok: true, reward: 0, turns: [{ ...turn, per_token_logps: [-0.5] }] },
        "t"
      )
      assert.strictEqual(good.envReward, 0)
      assert.deepStrictEqual(good.trace.turns[0].loss_mask, [0, 0, 1])
      const failed = yield* HarborRemote.outcomeOf({ ok: false, reward: null, error: "boom", exception_type: "X" }, "t")
      assert.isNull(failed.envReward)
      assert.include(failed.unscoreable ?? "", "boom")
    }))
})
