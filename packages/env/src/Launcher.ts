/**
 * Starts an environment server as a child process on a free loopback port, waits for `GET /health`, and stops it
 * (SIGTERM, then SIGKILL after a grace period) when the scope closes. Works for an envtrain server
 * ({@link envtrain}) or any command, e.g. `uvicorn envs.echo_env.server.app:app --port {port}`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Client, Launcher } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const server = yield* Launcher.envtrain("catch")
 *   const env = yield* Client.make({ url: server.url })
 *   yield* env.reset()
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Data, Deferred, Duration, Effect, Exit, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { createRequire } from "node:module"
import * as Net from "node:net"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

/** The server could not be started or never became healthy. */
export class LaunchError extends Data.TaggedError("LaunchError")<{
  readonly command: string
  readonly reason: string
  readonly output: string
}> {
  override get message() {
    const tail = this.output.trim() === "" ? "" : `\n--- output (last lines) ---\n${this.output.trim()}`
    return `Could not start server '${this.command}': ${this.reason}${tail}`
  }
}

/** What to run. In `args` and `env` values, `{port}` is replaced by the chosen port. */
export interface LaunchOptions {
  readonly command: string
  readonly args?: ReadonlyArray<string>
  /** Default: a free port. */
  readonly port?: number
  readonly host?: string
  readonly env?: Readonly<Record<string, string>>
  readonly cwd?: string
  /** How long to wait for `/health`. Default 60 s. */
  readonly healthTimeout?: Duration.DurationInput
  /** Grace period between SIGTERM and SIGKILL on stop. Default 5 s. */
  readonly stopGrace?: Duration.DurationInput
}

/** A running server process. */
export interface Launched {
  readonly url: string
  readonly port: number
  readonly pid: number
  /** Sends a signal (tests use SIGKILL to simulate a crash). */
  readonly kill: (signal?: NodeJS.Signals) => Effect.Effect<void>
  /** Resolves when the process has exited. */
  readonly exited: Effect.Effect<number | null>
}

/** A free TCP port on the host (bound then released). */
export const freePort = (host = "127.0.0.1") =>
  Effect.async<number, LaunchError>((resume) => {
    const server = Net.createServer()
    server.once("error", (e) => resume(Effect.fail(new LaunchError({ command: "", reason: e.message, output: "" }))))
    server.listen(0, host, () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resume(Effect.succeed(port)))
    })
  })

/** Polls `GET {url}/health` until it answers 200 with `{"status":"healthy"}` (OpenEnv) or an empty body (vLLM), or `timeout` passes. */
export const waitForHealth = (url: string, timeout: Duration.DurationInput, failFast?: Effect.Effect<string>) =>
  Effect.tryPromise({
    try: async (signal) => {
      const res = await fetch(`${url}/health`, { signal })
      const text = await res.text()
      // OpenEnv answers {"status": "healthy"}; vLLM and envtrain's policy server answer 200 with an empty body.
      const healthy = res.status === 200 &&
        (text === "" || (JSON.parse(text) as { status?: string }).status === "healthy")
      if (!healthy) throw new Error(`status ${res.status}`)
    },
    catch: (e) => String(e)
  }).pipe(
    Effect.timeoutFail({ duration: Duration.seconds(2), onTimeout: () => "health request timed out" }),
    Effect.retry(Schedule.spaced(Duration.millis(100))),
    Effect.raceFirst(failFast === undefined ? Effect.never : Effect.flatMap(failFast, (r) => Effect.fail(r))),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => `no healthy /health within ${Duration.format(timeout)}` })
  )

/** Starts `options.command` and waits until it serves `/health`; stops it when the scope closes. */
export const launch = Effect.fn("Launcher.launch")(function*(options: LaunchOptions) {
  const host = options.host ?? "127.0.0.1"
  const port = options.port ?? (yield* freePort(host))
  const fill = (s: string) => s.replaceAll("{port}", String(port))
  const args = (options.args ?? []).map(fill)
  const commandLine = [options.command, ...args].join(" ")
  let output = ""
  const exited = yield* Deferred.make<number | null>()
  const child: ChildProcess = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const env: Record<string, string | undefined> = { ...process.env }
      for (const [k, v] of Object.entries(options.env ?? {})) env[k] = fill(v)
      const proc = spawn(options.command, args, {
        cwd: options.cwd,
        env,
        stdio: ["ignore", "pipe", "pipe"]
      })
      const keep = (chunk: Buffer) => {
        output = (output + chunk.toString()).slice(-4000)
      }
      proc.stdout?.on("data", keep)
      proc.stderr?.on("data", keep)
      proc.on("exit", (code) => Deferred.unsafeDone(exited, Exit.succeed(code)))
      proc.on("error", (e) => {
        output += `\n${e.message}`
        Deferred.unsafeDone(exited, Exit.succeed(null))
      })
      return proc
    }),
    (proc) =>
      Effect.gen(function*() {
        if (proc.exitCode !== null || proc.signalCode !== null) return
        proc.kill("SIGTERM")
        const grace = options.stopGrace ?? Duration.seconds(5)
        const stopped = yield* Deferred.await(exited).pipe(Effect.timeout(grace), Effect.option)
        if (stopped._tag === "None") {
          proc.kill("SIGKILL")
          yield* Deferred.await(exited).pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
        }
      })
  )
  const url = `http://${host}:${port}`
  yield* waitForHealth(
    url,
    options.healthTimeout ?? Duration.seconds(60),
    Effect.map(Deferred.await(exited), (code) => `the process exited (code ${code}) before serving /health`)
  ).pipe(Effect.mapError((reason) => new LaunchError({ command: commandLine, reason, output })))
  const launched: Launched = {
    url,
    port,
    pid: child.pid ?? -1,
    kill: (signal = "SIGTERM") => Effect.sync(() => void child.kill(signal)),
    exited: Deferred.await(exited)
  }
  return launched
})

/** Options of {@link envtrain}. */
export interface EnvtrainServerOptions {
  readonly maxConcurrentEnvs?: number
  /** Seconds. */
  readonly sessionTimeout?: number
  /** The served variant (`--scenario`, carla's), as `envtrain serve` takes it. */
  readonly scenario?: string
  readonly healthTimeout?: Duration.DurationInput
  readonly env?: Readonly<Record<string, string>>
}

// This module's own file tells how envtrain runs: `src/*.ts` in the repository (tsx, the "@envtrain/source" export
// condition), `dist/*.js` when installed from npm (plain node). Every package runs the same way in one process.
const fromSources = import.meta.url.endsWith(".ts")

/**
 * The Node flags that make a child process or worker thread load envtrain's packages the way this process does:
 * from the sources, the "@envtrain/source" export condition (so `@envtrain/<pkg>/X` resolves to `src/X.ts`, not to
 * a build that may not exist); from the build, none.
 *
 * @since 0.0.0
 */
export const sourceConditions: ReadonlyArray<string> = fromSources ? ["--conditions=@envtrain/source"] : []

// tsx's ESM loader (a repository devDependency; for users an optional peer that only Launcher.tsx needs).
const tsxLoader = () => {
  const require = createRequire(import.meta.url)
  return Path.join(Path.dirname(require.resolve("tsx/package.json")), "dist", "loader.mjs")
}

/**
 * Runs a TypeScript entry point under tsx (`node --import tsx/loader file args…`). tsx is an optional peer
 * dependency: without it this fails with a {@link LaunchError} saying so.
 *
 * @since 0.0.0
 */
export const tsx = (file: string, args: ReadonlyArray<string>, options: Omit<LaunchOptions, "command" | "args"> = {}) =>
  Effect.try({
    try: tsxLoader,
    catch: () =>
      new LaunchError({
        command: `tsx ${file}`,
        reason: "tsx is not installed here: `npm install --save-dev tsx`, or compile the file and start it with " +
          "Launcher.launch({ command: process.execPath, args: [file] })",
        output: ""
      })
  }).pipe(
    Effect.flatMap((loader) =>
      launch({ ...options, command: process.execPath, args: [...sourceConditions, "--import", loader, file, ...args] })
    )
  )

/**
 * The command line (`node [flags] file`) that runs one of envtrain's own modules as a process: `module` is its
 * built name next to the caller (`new URL("./internal/serveMain.js", import.meta.url)`). From the build that is
 * plain `node file.js`; from the sources, the `.ts` file under tsx with the source condition.
 *
 * @since 0.0.0
 */
export const nodeEntry = (module: URL): ReadonlyArray<string> => {
  const file = fileURLToPath(module)
  return fromSources
    ? [...sourceConditions, "--import", tsxLoader(), file.replace(/\.js$/, ".ts")]
    : [file]
}

/** Starts `envtrain serve <env>` (a built-in: echo, echo-mcp, wordle, sudoku, catch) as a child process. */
export const envtrain = (environment: string, options: EnvtrainServerOptions = {}) =>
  Effect.suspend(() =>
    launch({
      command: process.execPath,
      args: [
        ...nodeEntry(new URL("./internal/serveMain.js", import.meta.url)),
        environment,
        "--port",
        "{port}",
        ...(options.maxConcurrentEnvs !== undefined
          ? ["--max-concurrent-envs", String(options.maxConcurrentEnvs)]
          : []),
        ...(options.sessionTimeout !== undefined ? ["--session-timeout", String(options.sessionTimeout)] : []),
        ...(options.scenario !== undefined ? ["--scenario", options.scenario] : [])
      ],
      ...(options.healthTimeout !== undefined ? { healthTimeout: options.healthTimeout } : {}),
      ...(options.env !== undefined ? { env: options.env } : {})
    })
  )
