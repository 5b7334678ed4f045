// The careless solver's wrong solutions (examples/src/SolverMistakes.ts) in a real sandbox: each runs without error
// and its task's verifier gives 0, where the task's own solution gives 1 — so `--sft-mistakes` mixes a right and a
// really wrong transcript, not two right ones.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { HarborTask, Sandbox } from "@envtrain/harness"
import { Effect } from "effect"
import * as SolverMistakes from "../src/SolverMistakes.js"

const runAndVerify = (task: HarborTask.HarborTask, commands: ReadonlyArray<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const box = yield* Sandbox.make({ task })
    for (const command of commands) {
      const r = yield* box.exec(command)
      assert.strictEqual(r.exitCode, 0, `${task.name}: ${command}: ${r.stderr}`)
    }
    return (yield* box.verify).reward
  }))

describe("SolverMistakes", () => {
  it.scopedLive(
    "every shipped training task has a wrong solution; it runs cleanly and fails the verifier, the right one passes",
    () =>
      Effect.gen(function*() {
        const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
        assert.deepStrictEqual(
          Object.keys(SolverMistakes.shipped).sort(),
          suite.train.map((t) => t.name).sort(),
          "one mistake per training task, and none for a task that is not there"
        )
        for (const task of suite.train) {
          const wrong = yield* runAndVerify(task, SolverMistakes.shipped[task.name].commands)
          assert.deepStrictEqual(wrong, { _tag: "Scored", reward: 0, rewards: { reward: 0 } }, `${task.name} (wrong)`)
          const right = yield* runAndVerify(task, task.solverCommands)
          assert.deepStrictEqual(right, { _tag: "Scored", reward: 1, rewards: { reward: 1 } }, `${task.name} (right)`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
