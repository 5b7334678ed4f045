// Generated task instances: deterministic per seed, varied across seeds, written in Harbor's layout so HarborTask
// loads them, and each family's solver earns 1 in a real bubblewrap sandbox while another instance's solver earns 0.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as HarborTask from "../src/HarborTask.js"
import * as Sandbox from "../src/Sandbox.js"
import * as TaskFamily from "../src/TaskFamily.js"

const names = TaskFamily.all.map((f) => f.name)

describe("TaskFamily", () => {
  it.effect("same seed, same instance; other seeds, other instances", () =>
    Effect.gen(function*() {
      for (const family of names) {
        assert.deepStrictEqual(yield* TaskFamily.make(family, 3), yield* TaskFamily.make(family, 3), family)
        const instructions = new Set<string>()
        for (let seed = 0; seed < 6; seed++) instructions.add((yield* TaskFamily.make(family, seed)).instruction)
        assert.isAtLeast(instructions.size, 5, family)
      }
      // A smaller vocabulary draws only from the first names and words of each list.
      const small = new Set<string>()
      for (let seed = 0; seed < 40; seed++) {
        for (const m of (yield* TaskFamily.make("write-text", seed, 4)).instruction.matchAll(/`(\w+)/g)) small.add(m[1])
      }
      assert.isAtMost(small.size, 8)
      assert.isAtLeast(small.size, 5)
      const unknown = yield* Effect.flip(TaskFamily.make("no-such-family", 0))
      assert.include(unknown.message, "write-text")
    }))

  it.scoped("writes a suite HarborTask loads: both splits, solvers, held-out instances all new", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const written = yield* TaskFamily.writeSuite({
        dir: yield* fs.makeTempDirectoryScoped(),
        train: 15,
        heldOut: 9,
        perHeldOutFamily: 2
      })
      const suite = yield* HarborTask.loadSuite(written.root)
      assert.strictEqual(suite.train.length, 15)
      assert.strictEqual(suite.heldOut.length, 9 + 2 * TaskFamily.defaultHeldOutFamilies.length)
      const trainFamilies = new Set(written.train.map((t) => t.family))
      assert.deepStrictEqual([...trainFamilies].sort(), [...TaskFamily.defaultTrainFamilies].sort())
      const trainInstructions = new Set(suite.train.map((t) => t.instruction))
      for (const t of suite.heldOut) assert.isFalse(trainInstructions.has(t.instruction), t.name)
      for (const t of [...written.train, ...written.heldOut, ...written.heldOutFamilies]) {
        const loaded = [...suite.train, ...suite.heldOut].find((l) => l.name === t.name)
        assert.isDefined(loaded, t.name)
        assert.strictEqual(loaded!.instruction, t.instruction)
        assert.deepStrictEqual(loaded!.solverCommands, t.solution)
      }
      assert.isTrue(written.heldOutFamilies.every((t) => !trainFamilies.has(t.family)))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scopedLive(
    "every family: the solver earns 1 in a sandbox, another instance's solver earns 0",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        const score = (task: HarborTask.HarborTask, commands: ReadonlyArray<string>) =>
          Effect.scoped(Effect.gen(function*() {
            const box = yield* Sandbox.make({ task })
            for (const command of commands) yield* box.exec(command)
            return (yield* box.verify).reward
          }))
        for (const family of names) {
          const instance = yield* TaskFamily.make(family, 7)
          const other = yield* TaskFamily.make(family, 8)
          assert.notStrictEqual(other.instruction, instance.instruction)
          const task = yield* HarborTask.load(yield* TaskFamily.write(dir, instance))
          assert.deepStrictEqual(yield* score(task, task.solverCommands), {
            _tag: "Scored",
            reward: 1,
            rewards: { reward: 1 }
          }, family)
          assert.deepStrictEqual(yield* score(task, other.solution), {
            _tag: "Scored",
            reward: 0,
            rewards: { reward: 0 }
          }, `${family}: ${other.solution.join("; ")}`)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
