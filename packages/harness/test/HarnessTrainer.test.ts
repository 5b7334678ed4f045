// Harness GRPO end to end with real parts: `envtrain serve-policy` as a child over a tiny model (the trainer pushes
// its weights there each step), a capture proxy, bubblewrap sandboxes, two shipped tasks, async GRPO. The agent
// asks the model once through the proxy and runs the task's solution only when the reply's text has even length,
// so rewards depend on what the policy sampled. Checked: every record's rows are the captured trace's tokens and
// masks (never re-tokenised), its reward the rollout's, a null rolloutRewardFn leaves rollouts unscoreable,
// harness.jsonl beside metrics.jsonl, a checkpoint and resume; `evaluate` on a held-out task. And a malformed
// capture (an engine answering a positive "logprob") stops a run with the rule and the turn before any step trains.
// Live clock.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as Config from "@envtrain/grpo/Config"
import * as Metrics from "@envtrain/grpo/Metrics"
import * as Trainer from "@envtrain/grpo/Trainer"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import { Effect, Exit } from "effect"
import * as BashAgent from "../src/BashAgent.js"
import * as HarnessSession from "../src/HarnessSession.js"
import * as HarnessTrainer from "../src/HarnessTrainer.js"
import { traceRows } from "../src/internal/traceRows.js"
import { positiveLogprobEngine, shippedSuite, tinyPolicy } from "./fixtures.js"

// Solves the task when the model's one reply has even length: a reward the policy's samples decide.
const parityAgent: HarnessSession.Agent = {
  name: "parity-oracle",
  run: (c) =>
    Effect.gen(function*() {
      const asked = yield* BashAgent.run(c.sandbox, {
        baseUrl: c.baseUrl,
        apiKey: c.apiKey,
        model: c.model,
        instruction: c.task.instruction,
        maxSteps: 1,
        maxTokens: 6
      }).pipe(Effect.mapError((e) => new HarnessSession.AgentFailed({ message: e.message })))
      const reply = asked.messages.at(-1)?.content ?? ""
      if (reply.length % 2 === 0) {
        for (const command of c.task.solverCommands) yield* Effect.orDie(c.sandbox.exec(command))
      }
      return { messages: asked.messages as unknown as ReadonlyArray<HarnessSession.Message> }
    })
}

describe("HarnessTrainer", () => {
  it.scopedLive(
    "a malformed capture stops the run with CaptureContractError (rule, turn); nothing is trained",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const engine = yield* positiveLogprobEngine
        const suite = yield* shippedSuite
        const initial = yield* Checkpoint.makeModel("tiny", 5)
        const model = Trainer.referenceModel(initial)
        const out = path.join(dir, "out")
        const exit = yield* Effect.exit(HarnessTrainer.train({
          config: yield* Config.fromSources({
            outputDir: out,
            policyServers: [engine],
            numGenerations: 2,
            perDeviceTrainBatchSize: 4,
            maxCompletionLength: 8,
            learningRate: 0.01,
            loggingSteps: 1,
            // A checkpoint after every step: a step that trained would leave one.
            saveSteps: 1,
            maxSteps: 2,
            async: true,
            maxStaleness: 1
          }),
          model,
          tasks: suite.train.slice(0, 2),
          agent: HarnessSession.bashAgent({ maxSteps: 1 }),
          maxConcurrentRollouts: 2,
          progress: false
        }))
        if (Exit.isFailure(exit) && exit.cause._tag === "Fail") {
          const error = exit.cause.error as HarnessSession.CaptureContractError
          assert.strictEqual(error._tag, "CaptureContractError")
          assert.strictEqual(error.rule, "positive_logprob")
          assert.strictEqual(error.turn, 0)
          assert.include(error.message, "at turn 0 (rule positive_logprob)")
        } else {
          assert.fail(`expected the run to fail with a CaptureContractError, got ${String(exit)}`)
        }
        // Nothing trained: the optimizer never stepped, the weights are the initial ones, no step was logged or saved.
        const state = yield* model.exportState
        assert.strictEqual(state.optimizerStep, 0)
        assert.strictEqual(state.weights.size, initial.tensors.size)
        for (const [name, tensor] of initial.tensors) {
          assert.deepStrictEqual(state.weights.get(name)?.data, tensor.data, name)
        }
        const written = (yield* fs.exists(out)) ? yield* fs.readDirectory(out) : []
        assert.deepStrictEqual(written.filter((f) => f.startsWith("checkpoint-")), [])
        for (const file of [Metrics.files.metrics, HarnessTrainer.harnessMetricsFile]) {
          const records = (yield* fs.exists(path.join(out, file))) ? yield* Metrics.read(path.join(out, file)) : []
          assert.deepStrictEqual(records, [], file)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive(
    "async harness GRPO on two tasks: rows are the trace's tokens, rewards the rollouts', harness.jsonl, resume",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const { dir, model, server } = yield* tinyPolicy(5)
        const suite = yield* shippedSuite
        const tasks = suite.train.filter((t) => t.name === "copy-file" || t.name === "create-file")
        const out = path.join(dir, "out")
        const config = (maxSteps: number) =>
          Config.fromSources({
            outputDir: out,
            policyServers: [server.url],
            numGenerations: 2,
            perDeviceTrainBatchSize: 4,
            maxCompletionLength: 8,
            learningRate: 0.01,
            loggingSteps: 1,
            saveSteps: 2,
            maxSteps,
            async: true,
            maxStaleness: 1
          })

        // No policy server: refused before anything runs.
        const refused = yield* Effect.flip(HarnessTrainer.train({
          config: yield* Config.fromSources({ outputDir: path.join(dir, "none") }),
          model: Trainer.referenceModel(model),
          tasks,
          agent: parityAgent,
          progress: false
        }))
        assert.strictEqual(refused._tag, "HarnessConfigError")
        assert.include(refused.message, "policyServers")

        const seen: Array<
          { outcome: HarnessSession.HarnessRolloutOutcome; record: EpisodeRecord<HarnessTrainer.HarnessState> }
        > = []
        const result = yield* HarnessTrainer.train({
          config: yield* config(2),
          model: Trainer.referenceModel(model),
          tasks,
          agent: parityAgent,
          // create-file's rollouts are declared unscoreable: they leave the baseline and the gradient.
          rolloutRewardFn: (o) => (o.task === "create-file" ? null : o.envReward),
          maxConcurrentRollouts: 2,
          progress: false,
          onRollout: (outcome, record) => Effect.sync(() => seen.push({ outcome, record }))
        })
        assert.strictEqual(result.globalStep, 2)
        assert.isAtLeast(seen.length, 8)
        for (const { outcome, record } of seen) {
          // Rows from the captured tokens and masks only.
          assert.isAtLeast(outcome.trace.turns.length, 1)
          assert.deepStrictEqual(record.segments, traceRows(outcome.trace.turns))
          const turn = outcome.trace.turns[0]
          const row = record.segments![0]
          assert.deepStrictEqual(row.promptIds, turn.prompt_token_ids)
          assert.deepStrictEqual(row.completionIds, turn.completion_token_ids)
          assert.deepStrictEqual(row.logprobs, turn.per_token_logps)
          // The reward is the rollout's; unscoreable ones are flagged, never scored 0.
          assert.include([0, 1], outcome.envReward)
          if (outcome.task === "create-file") {
            assert.isNull(record.state!.reward)
            assert.strictEqual(record.unscoreable?.tag, "Unscoreable")
          } else {
            assert.strictEqual(record.state!.reward, outcome.envReward)
            assert.isUndefined(record.unscoreable)
          }
          assert.strictEqual(record.environment, outcome.task)
        }
        // Both rewards occur, so some groups carry a gradient.
        const copy = seen.filter((s) => s.outcome.task === "copy-file").map((s) => s.outcome.envReward)
        assert.isTrue(copy.length > 0)

        const harness = yield* Metrics.read<HarnessTrainer.HarnessStepRecord>(path.join(out, "harness.jsonl"))
        assert.deepStrictEqual(harness.map((h) => h.step), [1, 2])
        const counted = harness.reduce((s, h) => s + h.rollouts, 0)
        assert.isAtLeast(counted, 4)
        assert.isAtMost(counted, seen.length)
        for (const h of harness) {
          assert.strictEqual(h.timeouts, 0)
          assert.strictEqual(h.unscoreable_frac, h.rollouts === 0 ? 0 : h.unscoreable / h.rollouts)
          assert.isAtLeast(h.rows, h.rollouts)
        }
        assert.isAbove(harness.reduce((s, h) => s + h.unscoreable, 0), 0)
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(out, Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1, 2])
        for (const m of metrics) {
          assert.isTrue(Number.isFinite(m.loss as number))
          assert.strictEqual(m.unscoreable_frac, 0.5)
          assert.isTrue("rewards/harness_reward/mean" in m)
          // The trainer's own scoring of the rows gives the logprobs the server sampled with: the rows are the
          // sampled tokens themselves (a re-tokenised or shifted row would differ by whole nats).
          assert.isBelow(m["sampling/sampling_logp_difference/max"] as number, 0.05)
        }
        assert.isTrue(yield* fs.exists(path.join(out, "checkpoint-2", "model.safetensors")))

        // Resume from checkpoint-2 for one more step, with the default reward (the verifier's).
        const resumed = yield* HarnessTrainer.train({
          config: yield* config(3),
          model: Trainer.referenceModel(model),
          tasks,
          agent: parityAgent,
          resume: true,
          progress: false
        })
        assert.strictEqual(resumed.globalStep, 3)
        const after = yield* Metrics.read<HarnessTrainer.HarnessStepRecord>(path.join(out, "harness.jsonl"))
        assert.deepStrictEqual(after.map((h) => h.step), [1, 2, 3])
        assert.strictEqual(after[2].unscoreable, 0)

        // Held-out success with the oracle (the task's own solution): 1 of 1, its trace written.
        const traces = path.join(dir, "traces")
        const evaluation = yield* HarnessTrainer.evaluate({
          tasks: suite.heldOut.slice(0, 1),
          agent: HarnessSession.oracleAgent(),
          policyServer: server.url,
          tracesDir: traces
        })
        assert.strictEqual(evaluation.successRate, 1)
        assert.strictEqual(evaluation.episodes, 1)
        assert.deepStrictEqual(yield* fs.readDirectory(traces), [`${suite.heldOut[0].name}-0.json`])
      }).pipe(Effect.provide(NodeContext.layer)),
    240_000
  )
})
