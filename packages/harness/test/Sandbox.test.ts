// Sandboxes under real bubblewrap: every shipped task's solver earns reward 1 and doing nothing earns 0; then the
// escapes, each of which must fail — another sandbox's files, the host's /work and /root, a host loopback port
// other than the endpoint, a process left behind after close, too much memory, CPU or time.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Net from "node:net"
import * as HarborTask from "../src/HarborTask.js"
import * as Sandbox from "../src/Sandbox.js"

const suite = HarborTask.loadSuite(HarborTask.shippedSuiteDir)
const firstTask = suite.pipe(Effect.map((s) => s.train[0]))

// A real HTTP server on the host's loopback, and a plain TCP listener that counts the connections it gets.
const httpServer = Effect.acquireRelease(
  Effect.async<Http.Server & { port: number }>((resume) => {
    const server = Http.createServer((_req, res) => res.end("hello from the endpoint"))
    server.listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed(Object.assign(server, { port: (server.address() as Net.AddressInfo).port })))
    )
  }),
  (s) =>
    Effect.async<void>((resume) => {
      s.close(() => resume(Effect.void))
    })
)
const listener = Effect.acquireRelease(
  Effect.async<{ server: Net.Server; port: number; connections: () => number }>((resume) => {
    let n = 0
    const server = Net.createServer((s) => {
      n++
      s.end("secret\n")
    })
    server.listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed({ server, port: (server.address() as Net.AddressInfo).port, connections: () => n }))
    )
  }),
  (l) =>
    Effect.async<void>((resume) => {
      l.server.close(() => resume(Effect.void))
    })
)

// Host processes whose command line holds `marker`.
const hostProcesses = (marker: string) =>
  Fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return Fs.readFileSync(`/proc/${p}/cmdline`, "utf8").includes(marker)
    } catch {
      return false
    }
  })

describe("Sandbox", () => {
  it.scopedLive(
    "every shipped task: the solver's commands earn 1, doing nothing earns 0",
    () =>
      Effect.gen(function*() {
        const s = yield* suite
        for (const task of [...s.train, ...s.heldOut]) {
          const idle = yield* Effect.scoped(Sandbox.make({ task }).pipe(Effect.flatMap((b) => b.verify)))
          assert.deepStrictEqual(idle.reward, { _tag: "Scored", reward: 0, rewards: { reward: 0 } }, task.name)
          const solved = yield* Effect.scoped(Effect.gen(function*() {
            const box = yield* Sandbox.make({ task })
            for (const command of task.solverCommands) {
              const r = yield* box.exec(command)
              assert.strictEqual(r.exitCode, 0, `${task.name}: ${command}: ${r.stderr}`)
            }
            return yield* box.verify
          }))
          assert.deepStrictEqual(solved.reward, { _tag: "Scored", reward: 1, rewards: { reward: 1 } }, task.name)
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scopedLive(
    "cannot read another sandbox's files, the host's /work or /root, or write reward.txt as the agent",
    () =>
      Effect.gen(function*() {
        const task = yield* firstTask
        const a = yield* Sandbox.make({ task })
        const b = yield* Sandbox.make({ task })
        assert.strictEqual((yield* a.exec("echo top-secret > secret.txt")).exitCode, 0)
        assert.isTrue(Fs.existsSync(`${a.workspace}/secret.txt`))
        const peek = yield* b.exec(`cat ${a.workspace}/secret.txt; cat /app/secret.txt; ls /tmp; ls /work; ls /root`)
        assert.notInclude(peek.stdout, "top-secret")
        assert.include(peek.stderr, "No such file")
        const host = yield* b.exec("ls /work /root 2>&1; id -u; hostname")
        assert.notInclude(host.stdout, "wt-")
        assert.include(host.stdout, "1000")
        // The agent cannot pre-write the verdict: /logs/verifier does not exist while it runs.
        assert.notStrictEqual(
          (yield* b.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")).exitCode,
          0
        )
        assert.deepStrictEqual((yield* b.verify).reward, { _tag: "Scored", reward: 0, rewards: { reward: 0 } })
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive("reaches the endpoint on 127.0.0.1:8100 and no other host loopback port", () =>
    Effect.gen(function*() {
      const task = yield* firstTask
      const endpoint = yield* httpServer
      const other = yield* listener
      const box = yield* Sandbox.make({ task, endpoint: { url: `http://127.0.0.1:${endpoint.port}` } })
      const http = (port: number) =>
        `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && cat <&3`
      const ok = yield* box.exec(http(8100), { timeout: "10 seconds" })
      assert.include(ok.stdout, "hello from the endpoint")
      const direct = yield* box.exec(http(endpoint.port), { timeout: "10 seconds" })
      assert.notStrictEqual(direct.exitCode, 0)
      const other1 = yield* box.exec(`exec 3<>/dev/tcp/127.0.0.1/${other.port} && cat <&3`, { timeout: "10 seconds" })
      assert.notStrictEqual(other1.exitCode, 0)
      assert.notInclude(other1.stdout, "secret")
      const outside = yield* box.exec("exec 3<>/dev/tcp/1.1.1.1/80", { timeout: "10 seconds" })
      assert.notStrictEqual(outside.exitCode, 0)
      assert.strictEqual(other.connections(), 0)
      // The proxy's own Unix socket, bound in directly.
      const fs = yield* FileSystem.FileSystem
      const socketDir = yield* fs.makeTempDirectoryScoped()
      const onSocket = yield* Effect.acquireRelease(
        Effect.async<Http.Server>((resume) => {
          const server = Http.createServer((_req, res) => res.end("hello over the socket"))
          server.listen(`${socketDir}/proxy.sock`, () => resume(Effect.succeed(server)))
        }),
        (s) =>
          Effect.async<void>((resume) => {
            s.close(() => resume(Effect.void))
          })
      )
      assert.isTrue(onSocket.listening)
      const viaSocket = yield* Sandbox.make({ task, endpoint: { socket: `${socketDir}/proxy.sock` } })
      assert.include((yield* viaSocket.exec(http(8100), { timeout: "10 seconds" })).stdout, "hello over the socket")
      // Without an endpoint there is no network at all.
      const bare = yield* Sandbox.make({ task })
      assert.notStrictEqual((yield* bare.exec(http(8100), { timeout: "10 seconds" })).exitCode, 0)
    }).pipe(Effect.provide(NodeContext.layer)), 60_000)

  it.scopedLive(
    "leaves no process behind: a setsid nohup sleep dies with the sandbox, and its files go",
    () =>
      Effect.gen(function*() {
        const task = yield* firstTask
        const scope = yield* Scope.make()
        const box = yield* Sandbox.make({ task }).pipe(Scope.extend(scope))
        const marker = `987.${process.pid}`
        const r = yield* box.exec(`setsid nohup sleep ${marker} > /dev/null 2>&1 & disown; echo started`)
        assert.include(r.stdout, "started")
        yield* Effect.sleep("200 millis")
        assert.isAbove(hostProcesses(marker).length, 0, "the sleep runs while the sandbox is open")
        const workspace = box.workspace
        yield* Scope.close(scope, Exit.void)
        assert.deepStrictEqual(hostProcesses(marker), [])
        assert.isFalse(Fs.existsSync(workspace))
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive(
    "memory, CPU and wall-time limits hold; a timed-out agent's processes are all killed",
    () =>
      Effect.gen(function*() {
        const task = yield* firstTask
        const box = yield* Sandbox.make({ task, memoryMb: 256, agentTimeout: "3 seconds" })
        const mem = yield* box.exec("python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'")
        assert.notStrictEqual(mem.exitCode, 0)
        assert.include(mem.stderr, "MemoryError")
        // cpus = 1 × 3 s agent time: a busy loop is stopped by RLIMIT_CPU well before its 60 s command timeout.
        const cpu = yield* box.exec("while :; do :; done", { timeout: "60 seconds" })
        assert.isFalse(cpu.timedOut)
        // ulimit -t sets soft = hard: the kernel's SIGXCPU and SIGKILL come together.
        assert.include(["SIGXCPU", "SIGKILL"], cpu.signal)
        const slow = yield* box.exec("sleep 30", { timeout: "1 second" })
        assert.isTrue(slow.timedOut)
        const marker = `876.${process.pid}`
        const agent = yield* box.runAgent(
          box.exec(`(setsid sleep ${marker} &) ; sleep ${marker}`, { timeout: "60 seconds" })
        )
        assert.isTrue(agent.timedOut)
        assert.isTrue(Option.isNone(agent.value))
        assert.deepStrictEqual(hostProcesses(marker), [])
        const after = yield* Effect.either(box.exec("true"))
        assert.isTrue(after._tag === "Left" && after.left.message.includes("killed"))
        // The verifier still runs, in a fresh process tree over the same files.
        assert.strictEqual((yield* box.verify).reward._tag, "Scored")
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive("a missing bubblewrap is named with the fix", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Sandbox.checkBubblewrap("/nonexistent/bwrap"))
      assert.include(error.message, "scripts/ensure-bubblewrap.sh")
      const fs = yield* FileSystem.FileSystem
      assert.isTrue(yield* fs.exists("/usr/bin/bwrap"))
    }).pipe(Effect.provide(NodeContext.layer)))
})
