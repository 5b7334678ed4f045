// The careless solver's wrong solutions (examples/src/SolverMistakes.ts) in a real sandbox: each runs without error
// and its task's verifier gives 0, where the task's own solution gives 1 — so `--sft-mistakes` mixes a right and a
// really wrong transcript, not two right ones.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { HarborTask, Sandbox } from "@envtrain/harness"
import { Effect, Exit } from "effect"
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

  it.scoped("mix: --sft-mistakes 0.5 is one right and one wrong transcript per task, 0 one right, 0.25 one wrong of four", () =>
    Effect.gen(function*() {
      const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
      const kinds = (solutions: ReadonlyArray<SolverMistakes.Solution>, name: string) =>
        solutions.filter((s) => s.task.name === name).map((s) => s.kind)
      const half = yield* SolverMistakes.mix(suite.train, 0.5)
      assert.strictEqual(half.length, 2 * suite.train.length)
      for (const task of suite.train) {
        assert.deepStrictEqual(kinds(half, task.name), ["wrong", "right"], task.name)
        const [wrong, right] = half.filter((s) => s.task.name === task.name)
        assert.deepStrictEqual(wrong.commands, SolverMistakes.shipped[task.name].commands)
        assert.deepStrictEqual(right.commands, task.solverCommands)
      }
      const none = yield* SolverMistakes.mix(suite.train, 0)
      assert.deepStrictEqual(none.map((s) => [s.task.name, s.kind]), suite.train.map((t) => [t.name, "right"]))
      const quarter = yield* SolverMistakes.mix(suite.train, 0.25)
      assert.deepStrictEqual(kinds(quarter, "count-lines"), ["wrong", "right", "right", "right"])
      // A task SolverMistakes does not know keeps only right transcripts.
      const unknown = yield* SolverMistakes.mix([{ ...suite.train[0], name: "no-such-task" }], 0.5)
      assert.deepStrictEqual(unknown.map((s) => s.kind), ["right", "right"])
      for (const bad of [0.1, 1.5, -0.5]) {
        assert.isTrue(Exit.isFailure(yield* Effect.exit(SolverMistakes.mix(suite.train, bad))), String(bad))
      }
    }).pipe(Effect.provide(NodeContext.layer)))
})
