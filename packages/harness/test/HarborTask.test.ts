// Harbor task layout: the shipped suite loads (both splits, solver scripts), malformed tasks are refused with the
// part named, and the verifier's reward files are read by Harbor's rules. Real files in temp directories.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as HarborTask from "../src/HarborTask.js"

const toml = `schema_version = "1.4"
[agent]
timeout_sec = 60.0
[verifier]
timeout_sec = 10
[environment]
cpus = 1
memory_mb = 512
workdir = "/app"
`

// Writes a task directory from a {relative path: content} map.
const writeTask = (files: Readonly<Record<string, string>>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = path.join(yield* fs.makeTempDirectoryScoped(), "demo")
    for (const [file, content] of Object.entries(files)) {
      yield* fs.makeDirectory(path.dirname(path.join(dir, file)), { recursive: true })
      yield* fs.writeFileString(path.join(dir, file), content)
    }
    return dir
  })

const good = {
  "instruction.md": "Do it.\n",
  "task.toml": toml,
  "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY workspace/ /app/\n",
  "environment/workspace/a.txt": "a\n",
  "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
  "solution/solve.sh": "#!/bin/bash\n# comment\necho hi > a.txt\n\ntouch b\n"
}

const refusal = (files: Readonly<Record<string, string>>) =>
  writeTask(files).pipe(Effect.flatMap((dir) => Effect.flip(HarborTask.load(dir))))

describe("HarborTask", () => {
  it.scoped("loads the shipped suite: ≥ 12 training tasks, a held-out split, a solver for each", () =>
    Effect.gen(function*() {
      const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
      assert.isAtLeast(suite.train.length, 12)
      assert.isAtLeast(suite.heldOut.length, 4)
      const names = [...suite.train, ...suite.heldOut].map((t) => t.name)
      assert.strictEqual(new Set(names).size, names.length)
      for (const t of [...suite.train, ...suite.heldOut]) {
        assert.isAbove(t.solverCommands.length, 0, t.name)
        assert.strictEqual(t.config.workdir, "/app")
        assert.isTrue(t.instruction.length > 10)
      }
      assert.isTrue(suite.heldOut.every((t) => t.split === "held-out"))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("reads a task: config fields, workspace, solver lines", () =>
    Effect.gen(function*() {
      const task = yield* HarborTask.load(yield* writeTask(good))
      assert.deepStrictEqual(task.config, {
        agentTimeoutSec: 60,
        verifierTimeoutSec: 10,
        cpus: 1,
        memoryMb: 512,
        workdir: "/app",
        allowInternet: false
      })
      assert.deepStrictEqual(task.solverCommands, ["echo hi > a.txt", "touch b"])
      assert.strictEqual(task.instruction, "Do it.")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("refuses malformed tasks, naming the part and the fix", () =>
    Effect.gen(function*() {
      const { "instruction.md": _, ...noInstruction } = good
      assert.include((yield* refusal(noInstruction)).message, "instruction.md is missing")
      const { "tests/test.sh": __, ...noTests } = good
      assert.include((yield* refusal(noTests)).message, "tests/test.sh is missing")
      assert.include((yield* refusal({ ...good, "task.toml": "[agent\n" })).message, "line 1")
      assert.include(
        (yield* refusal({ ...good, "task.toml": "[agent]\ntimeout_sec = -3\n" })).message,
        "timeout_sec must be a positive number"
      )
      assert.include(
        (yield* refusal({ ...good, "task.toml": "[environment]\nallow_internet = true\n" })).message,
        "allow_internet"
      )
      const run = yield* refusal({ ...good, "environment/Dockerfile": "FROM debian\nRUN apt-get install -y git\n" })
      assert.include(run.message, "line 2")
      assert.include(run.message, "environment/workspace/")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("reads rewards as Harbor does; nothing written is unscored, never 0", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      assert.strictEqual((yield* HarborTask.readReward(dir))._tag, "Unscored")
      yield* fs.writeFileString(`${dir}/reward.json`, JSON.stringify({ pass: 0.5, style: 1 }))
      assert.strictEqual((yield* HarborTask.readReward(dir))._tag, "Unscored")
      yield* fs.writeFileString(`${dir}/reward.json`, JSON.stringify({ reward: 0.25, style: 1 }))
      const r = yield* HarborTask.readReward(dir)
      assert.deepStrictEqual(r, { _tag: "Scored", reward: 0.25, rewards: { reward: 0.25, style: 1 } })
      yield* fs.writeFileString(`${dir}/reward.txt`, "1\n")
      assert.deepStrictEqual(yield* HarborTask.readReward(dir), { _tag: "Scored", reward: 1, rewards: { reward: 1 } })
      yield* fs.writeFileString(`${dir}/reward.txt`, "nan")
      assert.strictEqual((yield* HarborTask.readReward(dir))._tag, "Unscored")
    }).pipe(Effect.provide(NodeContext.layer)))
})
