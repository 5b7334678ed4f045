import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

// Flags a command cannot honour are refused with the fix, not ignored: the real binary in a child process.
// From its sources (node + tsx + the source condition); examples/test/Library.test.ts runs the built binary.
const bin = Launcher.nodeEntry(new URL("../src/bin.js", import.meta.url))

const run = (args: ReadonlyArray<string>) =>
  Effect.async<{ code: number; out: string }>((resume) => {
    const child = execFile(process.execPath, [...bin, ...args], { timeout: 90_000 }, (error, stdout, stderr) => {
      resume(
        Effect.succeed({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, out: stdout + stderr })
      )
    })
    return Effect.sync(() => child.kill())
  })

describe("envtrain refuses what it cannot do", () => {
  it.live(
    "serve-policy --backend cpu --steps-per-submit (a GPU-only setting), --weights-poll-ms without --weights-from: named, " +
      "not ignored",
    () =>
      Effect.gen(function*() {
        const model = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "envtrain-refusals-")), "tiny")
        const init = yield* run(["init-model", "--preset", "tiny", "--out", model])
        assert.strictEqual(init.code, 0, init.out)
        const refused = yield* run(["serve-policy", "--model", model, "--backend", "cpu", "--steps-per-submit", "4"])
        assert.strictEqual(refused.code, 1, refused.out)
        assert.include(
          refused.out,
          "envtrain: ServePolicyUsageError: --steps-per-submit sets the gpu backend's decode steps per GPU submit: " +
            "drop it with --backend cpu"
        )
        // Settings of following a weight store, without a store to follow.
        const unfollowed = yield* run(["serve-policy", "--model", model, "--backend", "cpu", "--weights-poll-ms", "50"])
        assert.strictEqual(unfollowed.code, 1, unfollowed.out)
        assert.include(
          unfollowed.out,
          "envtrain: ServePolicyUsageError: --weights-poll-ms and --advertise-url configure following a weight store: " +
            "give --weights-from DIR"
        )
        fs.rmSync(path.dirname(model), { recursive: true, force: true })
      }),
    { timeout: 120_000 }
  )
})
