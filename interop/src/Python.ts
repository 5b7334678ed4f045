/**
 * The project's Python (.venv, made by scripts/ensure-venv.sh) for the TypeScript side of the interop suite:
 * run a script to completion, or start a server as a scoped child process on a free loopback port.
 *
 * @since 0.0.0
 */
import { Data, Duration, Effect } from "effect"
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { createServer, Socket } from "node:net"
import { fileURLToPath } from "node:url"

/** The repository root. */
export const root = fileURLToPath(new URL("../../", import.meta.url))

/** The .venv's interpreter. */
export const python = `${root}.venv/bin/python`

/** Python failed: the script's exit code and its output. */
export class PythonError extends Data.TaggedError("PythonError")<{ readonly message: string }> {}

const requireVenv = Effect.suspend(() =>
  existsSync(python)
    ? Effect.void
    : Effect.fail(new PythonError({ message: `${python} is missing: run \`bash scripts/ensure-venv.sh\` first` }))
)

/** Runs `python args…` with `stdin`, and returns its stdout; a non-zero exit fails with stderr in the message. */
export const run = (
  args: ReadonlyArray<string>,
  options: { readonly stdin?: string; readonly timeout?: Duration.DurationInput } = {}
) =>
  requireVenv.pipe(
    Effect.zipRight(Effect.async<string, PythonError>((resume) => {
      const child = spawn(python, args, { cwd: root, stdio: ["pipe", "pipe", "pipe"] })
      const out: Array<Buffer> = []
      const err: Array<Buffer> = []
      child.stdout.on("data", (b: Buffer) => out.push(b))
      child.stderr.on("data", (b: Buffer) => err.push(b))
      child.on("error", (e) => resume(Effect.fail(new PythonError({ message: `python did not start: ${e.message}` }))))
      child.on("close", (code) =>
        resume(
          code === 0
            ? Effect.succeed(Buffer.concat(out).toString("utf8"))
            : Effect.fail(
              new PythonError({
                message: `python ${args.join(" ")} exited with ${code}:\n${Buffer.concat(err).toString("utf8")}`
              })
            )
        ))
      child.stdin.end(options.stdin ?? "")
      return Effect.sync(() => child.kill("SIGKILL"))
    })),
    Effect.timeoutFail({
      duration: options.timeout ?? Duration.minutes(5),
      onTimeout: () => new PythonError({ message: `python ${args.join(" ")} timed out` })
    })
  )

/** A free loopback port. */
export const freePort = Effect.async<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const connects = (port: number) =>
  Effect.async<boolean>((resume) => {
    const socket = new Socket()
    socket.once("connect", () => {
      socket.destroy()
      resume(Effect.succeed(true))
    })
    socket.once("error", () => {
      socket.destroy()
      resume(Effect.succeed(false))
    })
    socket.connect(port, "127.0.0.1")
  })

/**
 * Starts `python args…` (with `{port}` in args replaced by a free port) and waits until it listens; the process is
 * killed when the scope closes. The returned `output()` gives what it printed so far (for error messages).
 */
export const serve = (args: ReadonlyArray<string>, options: { readonly timeout?: Duration.DurationInput } = {}) =>
  Effect.gen(function*() {
    yield* requireVenv
    const port = yield* freePort
    const argv = args.map((a) => a.replaceAll("{port}", String(port)))
    const log: Array<string> = []
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c = spawn(python, argv, { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
        c.stdout.on("data", (b: Buffer) => log.push(b.toString("utf8")))
        c.stderr.on("data", (b: Buffer) => log.push(b.toString("utf8")))
        return c
      }),
      (c) => Effect.sync(() => c.exitCode === null && c.kill("SIGKILL"))
    )
    const output = () => log.join("")
    yield* Effect.gen(function*() {
      while (true) {
        if (child.exitCode !== null) {
          return yield* Effect.fail(
            new PythonError({ message: `python ${argv.join(" ")} exited with ${child.exitCode}:\n${output()}` })
          )
        }
        if (yield* connects(port)) return
        yield* Effect.sleep(Duration.millis(100))
      }
    }).pipe(Effect.timeoutFail({
      duration: options.timeout ?? Duration.seconds(90),
      onTimeout: () => new PythonError({ message: `python ${argv.join(" ")} did not listen:\n${output()}` })
    }))
    return { port, url: `http://127.0.0.1:${port}`, process: child, output } as const
  })
