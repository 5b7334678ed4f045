import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import { Effect } from "effect"
import { execFile } from "node:child_process"

// The command from its sources (node + tsx + the source condition); the built binary is what
// examples/test/Library.test.ts runs in a project outside the repository.
const bin = Launcher.nodeEntry(new URL("../src/bin.js", import.meta.url))

// The real binary in a real child process: this is what a user runs, including the explicit exit after the GPU.
const runCli = (args: ReadonlyArray<string>) =>
  Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
    const child = execFile(process.execPath, [...bin, ...args], { timeout: 90_000 }, (error, stdout, stderr) => {
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

  it.live("a bad command line exits 2 with a readable line and the usage hint, never the parser's JSON", () =>
    Effect.gen(function*() {
      for (const args of [["no-such-command"], ["serve", "catch", "--port", "abc"]]) {
        const { code, stderr, stdout } = yield* runCli(args)
        assert.strictEqual(code, 2, stdout + stderr)
        assert.include(stderr, "Run `envtrain --help`")
        assert.notInclude(stdout + stderr, "_tag")
      }
      const unknown = yield* runCli(["no-such-command"])
      assert.match(unknown.stdout + unknown.stderr, /use one of 'doctor', 'serve'/)
    }))

  it.live("a typed failure prints its message (what is wrong and the fix) and exits 1", () =>
    Effect.gen(function*() {
      const { code, stderr } = yield* runCli(["serve", "chess"])
      assert.strictEqual(code, 1)
      assert.match(
        stderr,
        /^envtrain: UnknownEnvironment: environment 'chess': no built-in has that name: give a built-in \((?:[\w-]+, )*catch, echo/
      )
      assert.include(stderr, "./my-env.ts")
    }))
})
