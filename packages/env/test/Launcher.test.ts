import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { fileURLToPath } from "node:url"
import * as Client from "../src/Client.js"
import * as Docker from "../src/Docker.js"
import * as Launcher from "../src/Launcher.js"
import { http, raw } from "./fixtures/Raw.js"

const fixture = fileURLToPath(new URL("./fixtures/serveCounter.ts", import.meta.url))

describe("Launcher", () => {
  it.scopedLive(
    "killing the server process mid-episode yields SessionLostError within the timeout",
    () =>
      Effect.gen(function*() {
        const server = yield* Launcher.tsx(fixture, ["{port}"])
        const env = yield* Client.make({ url: server.url, messageTimeout: "3 seconds" })
        yield* env.reset()
        yield* env.step({ delta: 1 })
        yield* server.kill("SIGKILL")
        yield* server.exited
        const started = Date.now()
        const lost = yield* Effect.flip(env.step({ delta: 1 }))
        assert.strictEqual(lost._tag, "SessionLostError")
        assert.isBelow(Date.now() - started, 3000 + 500)
      }),
    { timeout: 60_000 }
  )

  it.scopedLive(
    "envtrain serve runs a built-in in a child process and stops with the scope",
    () =>
      Effect.gen(function*() {
        const server = yield* Launcher.envtrain("catch", { maxConcurrentEnvs: 2 })
        assert.deepStrictEqual((yield* http(`${server.url}/health`)).body, { status: "healthy" })
        const env = yield* Client.make({ url: server.url })
        const first = yield* env.reset()
        assert.deepStrictEqual((first.observation as any).legal_actions, [0, 1, 2])
        yield* env.close
        // SIGTERM: every session is closed (1001, going away) before the process exits.
        const socket = yield* raw(server.url.replace("http://", "ws://") + "/ws")
        yield* socket.send({ type: "reset" })
        yield* socket.next
        yield* server.kill("SIGTERM")
        assert.strictEqual(yield* socket.closed, 1001)
        yield* server.exited
      }),
    { timeout: 60_000 }
  )

  it.scopedLive("a command that exits early fails with its output", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Launcher.launch({ command: process.execPath, args: ["-e", "console.error('bad config'); process.exit(3)"] })
      )
      assert.strictEqual(error._tag, "LaunchError")
      assert.include(error.message, "exited (code 3)")
      assert.include(error.message, "bad config")
    }))

  it.scopedLive("Docker fails clearly without a docker engine (or CLI)", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Docker.run({ image: "openenv/echo-env:latest", healthTimeout: "5 seconds" }))
      assert.strictEqual(error._tag, "DockerUnavailableError")
      assert.include(error.message, "Docker")
      const missing = yield* Effect.flip(Docker.check("/nonexistent/docker"))
      assert.strictEqual(missing.reason, "cli_missing")
      assert.include(missing.message, "not found on PATH")
    }), { timeout: 60_000 })
})
