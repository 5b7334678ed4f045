/**
 * One sandbox per rollout: a fresh copy of a Harbor task's workspace, run under bubblewrap (Debian's `bwrap`,
 * installed by scripts/ensure-bubblewrap.sh) in its own user, process, mount, IPC, UTS and network namespaces.
 *
 * - Files: the host's /usr read-only (the tools, node, python), a private /tmp, /proc and /dev, the task's workspace
 *   copy at its workdir (writable), /logs/agent; nothing of the host's /work, /root or another sandbox. Read-only
 *   extras (a Python environment for mini-swe-agent) only when asked for.
 * - Network: loopback only. A forwarder inside (packages/harness/sandbox/supervisor.mjs) listens on
 *   127.0.0.1:`proxyPort` and connects to a Unix socket bound in from the host — the capture proxy's, or a bridge
 *   the sandbox opens to a loopback HTTP URL. That endpoint is the only thing the sandbox can reach.
 * - Limits: every command runs under `ulimit -v` (task.toml's memory_mb), `ulimit -t` (CPU seconds) and nice 10, in
 *   its own process group killed at the command's timeout; the agent phase has a wall-time limit
 *   (`[agent] timeout_sec`) at which every process in the sandbox is killed and the run is marked timed out.
 * - Verification: `verify` kills whatever the agent left running, then runs tests/test.sh over the same files in a
 *   fresh process tree with /tests and /logs/verifier mounted (neither is visible to the agent), and reads the
 *   reward as Harbor does.
 * - Closing the scope kills every process (the kernel ends a PID namespace with its first process) and deletes the
 *   copy.
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import type { Scope } from "effect"
import { Data, Deferred, Duration, Effect, Option, Runtime } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import * as HarborTask from "./HarborTask.js"

/** The endpoint the sandbox may reach: a Unix socket (the capture proxy's) or a loopback HTTP base URL. */
export type Endpoint = { readonly socket: string } | { readonly url: string }

/** How to make a sandbox. */
export interface SandboxOptions {
  readonly task: HarborTask.HarborTask
  /** The one endpoint reachable inside at `http://127.0.0.1:<proxyPort>`. None: no network at all. */
  readonly endpoint?: Endpoint
  /** Default 8100 (each sandbox has its own loopback, so every sandbox can use the same port). */
  readonly proxyPort?: number
  /** Host paths bound read-only into the sandbox (`at` defaults to the same path). */
  readonly readOnlyBinds?: ReadonlyArray<{ readonly host: string; readonly at?: string }>
  /** Overrides of the task's limits. */
  readonly memoryMb?: number
  readonly agentTimeout?: Duration.DurationInput
  /** Most bytes of stdout and of stderr kept per command. Default 64 KiB. */
  readonly maxOutputBytes?: number
  /** Extra environment variables for every command. */
  readonly env?: Readonly<Record<string, string>>
  /** The bubblewrap binary. Default /usr/bin/bwrap. */
  readonly bwrap?: string
}

/** What one command did. */
export interface ExecResult {
  readonly exitCode: number | null
  readonly signal: string | null
  readonly stdout: string
  readonly stderr: string
  /** Killed at its timeout (with its whole process group). */
  readonly timedOut: boolean
}

/** The verifier's outcome. */
export interface Verification {
  readonly reward: HarborTask.Reward
  readonly exec: ExecResult
}

/** The sandbox could not start, or was asked to run after its processes were killed. */
export class SandboxError extends Data.TaggedError("SandboxError")<{ readonly message: string }> {}

/** A running sandbox. */
export interface Sandbox {
  /** The host directory holding the workspace copy (mounted at the task's workdir). */
  readonly workspace: string
  /** The endpoint as the sandbox sees it, e.g. http://127.0.0.1:8100. */
  readonly endpointUrl: string
  /** Runs `bash -c command` in the workdir. Default timeout: the agent's. */
  readonly exec: (
    command: string,
    options?: { readonly timeout?: Duration.DurationInput; readonly env?: Readonly<Record<string, string>> }
  ) => Effect.Effect<ExecResult, SandboxError>
  /**
   * Runs the agent phase under the wall-time limit. At the limit every process in the sandbox is killed and
   * `timedOut` is true; later `exec` calls fail until `verify` boots a fresh process tree.
   */
  readonly runAgent: <A, E, R>(
    agent: Effect.Effect<A, E, R>
  ) => Effect.Effect<{ readonly value: Option.Option<A>; readonly timedOut: boolean }, E, R>
  /** Kills every process, then runs tests/test.sh in a fresh process tree and reads the reward. */
  readonly verify: Effect.Effect<Verification, SandboxError>
  /** Kills every process in the sandbox now (files stay). */
  readonly killAll: Effect.Effect<void>
}

const supervisorPath = fileURLToPath(new URL("../sandbox/supervisor.mjs", import.meta.url))

/** Is bubblewrap here and able to make namespaces? Fails with the fix when not. */
export const checkBubblewrap = (bwrap = "/usr/bin/bwrap") =>
  Effect.async<void, SandboxError>((resume) => {
    const probe = [
      "--unshare-all",
      "--ro-bind",
      "/usr",
      "/usr",
      "--symlink",
      "usr/lib",
      "/lib",
      "--symlink",
      "usr/lib64",
      "/lib64",
      "/usr/bin/true"
    ]
    ChildProcess.execFile(bwrap, probe, (e, _o, stderr) =>
      resume(
        e === null ? Effect.void : Effect.fail(
          new SandboxError({
            message: `bubblewrap (${bwrap}) cannot make a sandbox here: ${stderr.trim() || e.message}. ` +
              "Run scripts/ensure-bubblewrap.sh (installs Debian's bubblewrap), and allow unprivileged user namespaces " +
              "(sysctl kernel.unprivileged_userns_clone=1) when not running as root."
          })
        )
      ))
  })

type Phase = "agent" | "verifier"

interface Process {
  readonly child: ChildProcess.ChildProcess
  /** The sandbox's first process (PID 1 inside), from bwrap's --info-fd. */
  initPid: number | undefined
  readonly pending: Map<number, (r: ExecResult) => void>
  readonly exited: Promise<void>
  dead: boolean
}

// One bwrap argument list per phase: the agent never sees /tests or /logs/verifier.
const bwrapArgs = (
  o: {
    readonly root: string
    readonly task: HarborTask.HarborTask
    readonly socket: Option.Option<string>
    readonly binds: ReadonlyArray<{ readonly host: string; readonly at: string }>
    readonly env: Readonly<Record<string, string>>
  },
  phase: Phase
): Array<string> => {
  const workdir = o.task.config.workdir
  const env = {
    PATH: "/usr/local/bin:/usr/bin:/bin",
    HOME: "/tmp",
    USER: "agent",
    LANG: "C.UTF-8",
    TERM: "dumb",
    ...o.env
  }
  return [
    "--unshare-all", // user, pid, net (loopback only), ipc, uts, cgroup
    "--die-with-parent",
    "--new-session",
    "--uid",
    "1000",
    "--gid",
    "1000",
    "--hostname",
    "sandbox",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/sbin",
    "/sbin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    ...["/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/ssl"].flatMap((p) => ["--ro-bind-try", p, p]),
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    "--bind",
    `${o.root}/work`,
    workdir,
    "--bind",
    `${o.root}/logs/agent`,
    "/logs/agent",
    ...(phase === "verifier"
      ? ["--ro-bind", o.task.testsDir, "/tests", "--bind", `${o.root}/logs/verifier`, HarborTask.verifierDir]
      : []),
    "--ro-bind",
    supervisorPath,
    "/run/envtrain/supervisor.mjs",
    ...Option.match(o.socket, { onNone: () => [], onSome: (s) => ["--ro-bind", s, "/run/envtrain/proxy.sock"] }),
    ...o.binds.flatMap((b) => ["--ro-bind", b.host, b.at]),
    "--remount-ro",
    "/", // the sandbox's own root: nothing but the mounts above is writable
    "--chdir",
    workdir,
    "--clearenv",
    ...Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v])
  ]
}

/**
 * Makes a sandbox for one rollout; the scope kills every process in it and removes its files.
 *
 * @since 0.0.0
 */
export const make = (options: SandboxOptions): Effect.Effect<
  Sandbox,
  SandboxError,
  Scope.Scope | FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const task = options.task
    const bwrap = options.bwrap ?? "/usr/bin/bwrap"
    yield* checkBubblewrap(bwrap)
    const port = options.proxyPort ?? 8100
    const memoryKb = Math.floor((options.memoryMb ?? task.config.memoryMb) * 1024)
    const agentTimeout = Duration.decode(options.agentTimeout ?? Duration.seconds(task.config.agentTimeoutSec))
    const cpuSeconds = Math.max(1, Math.ceil(task.config.cpus * Duration.toSeconds(agentTimeout)))
    const maxOutput = options.maxOutputBytes ?? 65536
    const ioError = (what: string) => (e: unknown) => new SandboxError({ message: `${what}: ${String(e)}` })

    // The files: a fresh copy of the workspace, and the logs directories.
    const root = yield* Effect.acquireRelease(
      fs.makeTempDirectory({ directory: Os.tmpdir(), prefix: "envtrain-sandbox-" }),
      (dir) => fs.remove(dir, { recursive: true }).pipe(Effect.ignore)
    ).pipe(Effect.mapError(ioError("cannot make the sandbox's directory")))
    const work = path.join(root, "work")
    yield* Option.match(task.workspaceDir, {
      onNone: () => fs.makeDirectory(work),
      onSome: (dir) => fs.copy(dir, work)
    }).pipe(Effect.mapError(ioError(`cannot copy task ${task.name}'s workspace`)))
    for (const dir of ["logs/agent", "logs/verifier"]) {
      yield* fs.makeDirectory(path.join(root, dir), { recursive: true }).pipe(Effect.mapError(ioError("mkdir")))
    }

    // The endpoint as a Unix socket: the proxy's own, or a bridge to a loopback URL.
    const socket = yield* endpointSocket(options.endpoint, path.join(root, "proxy.sock"))
    const binds = (options.readOnlyBinds ?? []).map((b) => ({ host: b.host, at: b.at ?? b.host }))
    const args = (phase: Phase) => [
      ...bwrapArgs({ root, task, socket, binds, env: options.env ?? {} }, phase),
      "/usr/bin/node",
      "/run/envtrain/supervisor.mjs",
      String(port),
      "/run/envtrain/proxy.sock",
      task.config.workdir,
      String(memoryKb),
      String(cpuSeconds),
      String(maxOutput)
    ]

    let current: Option.Option<Process> = Option.none()
    let nextId = 0
    const kill = Effect.promise(async () => {
      if (Option.isNone(current)) return
      const p = current.value
      current = Option.none()
      p.child.kill("SIGKILL")
      await p.exited
      if (p.initPid !== undefined) await namespaceGone(p.initPid)
    })
    yield* Effect.addFinalizer(() => kill)

    const boot = (phase: Phase) =>
      Effect.gen(function*() {
        yield* kill
        const ready = yield* Deferred.make<void, SandboxError>()
        const runtime = yield* Effect.runtime<never>()
        const done = (e: Effect.Effect<void, SandboxError>) => Runtime.runFork(runtime)(Deferred.complete(ready, e))
        const child = ChildProcess.spawn(bwrap, ["--info-fd", "3", ...args(phase)], {
          stdio: ["pipe", "pipe", "pipe", "pipe"]
        })
        let stderr = ""
        child.stderr.on("data", (c: Buffer) => {
          if (stderr.length < 4096) stderr += c.toString("utf8")
        })
        const pending = new Map<number, (r: ExecResult) => void>()
        const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()))
        const proc: Process = { child, initPid: undefined, pending, exited, dead: false }
        let info = ""
        ;(child.stdio[3] as NodeJS.ReadableStream).on("data", (c: Buffer) => {
          info += c.toString("utf8")
          const m = /"child-pid":\s*(\d+)/.exec(info)
          if (m !== null) proc.initPid = Number(m[1])
        })
        void exited.then(() => {
          proc.dead = true
          const gone: ExecResult = {
            exitCode: null,
            signal: "SIGKILL",
            stdout: "",
            stderr: "the sandbox was killed",
            timedOut: true
          }
          for (const resolve of pending.values()) resolve(gone)
          pending.clear()
          done(Effect.fail(new SandboxError({ message: `the sandbox exited before it was ready: ${stderr.trim()}` })))
        })
        Readline.createInterface({ input: child.stdout }).on("line", (line) => {
          let msg: { ready?: boolean; id?: number } & ExecResult
          try {
            msg = JSON.parse(line) as typeof msg
          } catch {
            return // only the supervisor writes here, one JSON object a line; anything else is not an answer
          }
          if (msg.ready === true) return done(Effect.void)
          const resolve = pending.get(msg.id ?? -1)
          pending.delete(msg.id ?? -1)
          resolve?.({
            exitCode: msg.exitCode,
            signal: msg.signal,
            stdout: msg.stdout,
            stderr: msg.stderr,
            timedOut: msg.timedOut
          })
        })
        current = Option.some(proc)
        yield* Deferred.await(ready).pipe(
          Effect.timeoutFail({
            duration: "30 seconds",
            onTimeout: () => new SandboxError({ message: `the sandbox did not start within 30 s: ${stderr.trim()}` })
          }),
          Effect.tapError(() => kill)
        )
      })

    const execIn = (
      command: string,
      o: { readonly timeout?: Duration.DurationInput; readonly env?: Readonly<Record<string, string>> } = {}
    ) =>
      Effect.suspend(() => {
        if (Option.isNone(current) || current.value.dead) {
          return Effect.fail(
            new SandboxError({
              message: "the sandbox's processes were killed (its time limit, or verify ran); nothing can run in it now."
            })
          )
        }
        const p = current.value
        const id = nextId++
        const timeoutMs = Duration.toMillis(o.timeout ?? agentTimeout)
        return Effect.async<ExecResult>((resume) => {
          p.pending.set(id, (r) => resume(Effect.succeed(r)))
          p.child.stdin?.write(JSON.stringify({ id, command, timeoutMs, env: o.env ?? {} }) + "\n")
          return Effect.sync(() => p.pending.delete(id))
        }).pipe(
          // The supervisor enforces the timeout; this is the backstop should it stop answering.
          Effect.timeoutFail({
            duration: Duration.millis(timeoutMs + 15_000),
            onTimeout: () =>
              new SandboxError({
                message: `the sandbox's supervisor did not answer for "${command.slice(0, 80)}"; close the sandbox.`
              })
          })
        )
      })

    yield* boot("agent")

    const sandbox: Sandbox = {
      workspace: work,
      endpointUrl: `http://127.0.0.1:${port}`,
      exec: execIn,
      killAll: kill,
      runAgent: <A, E, R>(agent: Effect.Effect<A, E, R>) =>
        Effect.gen(function*() {
          const value = yield* Effect.timeoutOption(agent, agentTimeout)
          if (Option.isNone(value)) yield* kill
          return { value, timedOut: Option.isNone(value) }
        }),
      verify: Effect.gen(function*() {
        yield* fs.remove(path.join(root, "logs/verifier"), { recursive: true }).pipe(Effect.ignore)
        yield* fs.makeDirectory(path.join(root, "logs/verifier")).pipe(Effect.mapError(ioError("mkdir")))
        yield* boot("verifier")
        const exec = yield* execIn("bash /tests/test.sh", { timeout: Duration.seconds(task.config.verifierTimeoutSec) })
        yield* kill
        const reward = yield* HarborTask.readReward(path.join(root, "logs/verifier")).pipe(
          Effect.provideService(FileSystem.FileSystem, fs),
          Effect.provideService(Path.Path, path)
        )
        return { reward, exec }
      })
    }
    return sandbox
  })

// The kernel kills every process of a PID namespace when its first process dies, and that process finishes
// dying (turns zombie, or is reaped) only once they are all gone: wait for that, so "killed" means gone.
const namespaceGone = async (pid: number) => {
  for (let i = 0; i < 1000; i++) {
    let state: string
    try {
      state = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "")[0]
    } catch {
      return
    }
    if (state === "Z" || state === "X") return
    await new Promise((r) => setTimeout(r, 10))
  }
}

// A host-side Unix socket for the sandbox to connect to: the given one, or a bridge to a loopback URL.
const endpointSocket = (endpoint: Endpoint | undefined, bridgePath: string) =>
  Effect.gen(function*() {
    if (endpoint === undefined) return Option.none<string>()
    if ("socket" in endpoint) return Option.some(endpoint.socket)
    const url = new URL(endpoint.url)
    const port = Number(url.port || (url.protocol === "https:" ? 443 : 80))
    const server = Net.createServer((client) => {
      const upstream = Net.connect(port, url.hostname)
      client.pipe(upstream).pipe(client)
      const close = () => {
        client.destroy()
        upstream.destroy()
      }
      client.on("error", close)
      upstream.on("error", close)
    })
    yield* Effect.acquireRelease(
      Effect.async<void, SandboxError>((resume) => {
        server.once("error", (e) =>
          resume(Effect.fail(new SandboxError({ message: `cannot listen on ${bridgePath}: ${e.message}` }))))
        server.listen(bridgePath, () => {
          resume(Effect.void)
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() =>
            resume(Effect.void)
          )
        })
    )
    return Option.some(bridgePath)
  })
