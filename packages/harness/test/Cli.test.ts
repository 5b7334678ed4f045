import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"

const bin = fileURLToPath(new URL("../bin/envtrain.mjs", import.meta.url))

// The real binary in a real child process: this is what a user runs, including the explicit exit after the GPU.
const runCli = (args: ReadonlyArray<string>) =>
  Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
    const child = execFile(process.execPath, [bin, ...args], { timeout: 90_000 }, (error, stdout, stderr) => {
      resume(Effect.succeed({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, stdout, stderr }))
    })
    return Effect.sync(() => child.kill())
  })

describe("envtrain CLI", () => {
  it.live("doctor prints the adapter, checks the kernel and exits 0", () =>
    Effect.gen(function*() {
      const { code, stdout } = yield* runCli(["doctor"])
      assert.strictEqual(code, 0, stdout)
      assert.match(stdout, /GPU adapter/)
      assert.match(stdout, /vendor\s+\S+/)
      assert.match(stdout, /maxStorageBufferBindingSize\s+[\d,]+/)
      assert.match(stdout, /kernel {2}matmul .* \(ok,/)
      assert.match(stdout, /episode catch \(seed 7\): 9 tool calls .* caught, reward 1, 0 tool failures/)
    }))

  it.live("an unknown command fails with a non-zero exit and says what is available", () =>
    Effect.gen(function*() {
      const { code, stdout, stderr } = yield* runCli(["no-such-command"])
      assert.notStrictEqual(code, 0)
      assert.match(stdout + stderr, /doctor/)
    }))
})
