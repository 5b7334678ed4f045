/**
 * A private PostgreSQL server for the cluster's tests, benchmarks and one-machine trials: `initdb` in a temporary
 * directory, `postgres` on a free loopback port (trust authentication, no fsync: the data is thrown away), stopped
 * and removed with its scope. `stop` and `start` restart it on the same port and data (a database outage).
 *
 * The server binaries are Debian's (`/usr/lib/postgresql/<version>/bin`, package `postgresql`), or those on PATH.
 * Postgres refuses to run as root, so as root the server runs as the `postgres` user (`runuser`), which the Debian
 * package creates.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { PostgresProcess } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const pg = yield* PostgresProcess.launch()
 *   console.log(pg.url) // postgres://envtrain@127.0.0.1:PORT/postgres — give it to `envtrain runner --postgres`
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Launcher } from "@envtrain/env"
import { Data, Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"

/**
 * Postgres could not be found, initialised, started or stopped; `output` is what the command printed.
 *
 * @since 0.0.0
 */
export class PostgresError extends Data.TaggedError("PostgresError")<{
  readonly problem: string
  readonly output: string
}> {
  override get message() {
    return `${this.problem}${this.output === "" ? "" : `\n${this.output.slice(-2000)}`}`
  }
}

/** The newest Debian server binaries, else the directory of `initdb` on PATH. */
const binDir = (): string | undefined => {
  const root = "/usr/lib/postgresql"
  if (Fs.existsSync(root)) {
    const versions = Fs.readdirSync(root).filter((v) => Fs.existsSync(NodePath.join(root, v, "bin", "postgres")))
      .sort((a, b) => Number(b) - Number(a))
    if (versions.length > 0) return NodePath.join(root, versions[0], "bin")
  }
  for (const dir of (process.env.PATH ?? "").split(NodePath.delimiter)) {
    if (dir !== "" && Fs.existsSync(NodePath.join(dir, "initdb")) && Fs.existsSync(NodePath.join(dir, "postgres"))) {
      return dir
    }
  }
  return undefined
}

const isRoot = () => typeof process.getuid === "function" && process.getuid() === 0

/** Runs a server binary (as `postgres` when this process is root), with a time limit. */
const run = (bin: string, args: ReadonlyArray<string>, problem: string) =>
  Effect.async<string, PostgresError>((resume) => {
    const [command, argv] = isRoot() ? ["runuser", ["-u", "postgres", "--", bin, ...args]] : [bin, [...args]]
    const child = execFile(command, argv, { timeout: 60_000 }, (error, stdout, stderr) => {
      const output = `${stdout}${stderr}`
      resume(error === null ? Effect.succeed(output) : Effect.fail(new PostgresError({ problem, output })))
    })
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/**
 * A running private server.
 *
 * @since 0.0.0
 */
export interface Postgres {
  /** `postgres://envtrain@127.0.0.1:PORT/postgres` */
  readonly url: string
  readonly port: number
  /** Stops the server at once (`immediate`: as a crash would). */
  readonly stop: Effect.Effect<void, PostgresError>
  /** Starts it again on the same port and data. */
  readonly start: Effect.Effect<void, PostgresError>
}

/**
 * Initialises and starts a private server in a temporary directory; the scope stops it and removes the directory.
 * Fails with {@link PostgresError} naming the fix when Postgres is not installed.
 *
 * @since 0.0.0
 */
export const launch = (options: { readonly port?: number } = {}) =>
  Effect.gen(function*() {
    const bin = binDir()
    if (bin === undefined) {
      return yield* new PostgresError({
        problem: "PostgreSQL's server binaries (initdb, postgres) were not found: install Debian's package as root " +
          "(apt-get install -y postgresql; `npm test` does it through scripts/ensure-postgres.sh)",
        output: ""
      })
    }
    const port = options.port ?? (yield* Launcher.freePort())
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const d = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "envtrain-pg-"))
        if (isRoot()) Fs.chownSync(d, Number(uidOf("postgres")), Number(gidOf("postgres")))
        return d
      }),
      (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
    )
    const data = NodePath.join(dir, "data")
    const pgCtl = NodePath.join(bin, "pg_ctl")
    yield* run(
      NodePath.join(bin, "initdb"),
      ["-D", data, "-A", "trust", "-U", "envtrain", "--no-sync"],
      "initdb failed"
    )
    const options_ = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`
    const start = Effect.asVoid(
      run(pgCtl, ["-D", data, "-o", options_, "-l", NodePath.join(dir, "log"), "-w", "-t", "60", "start"], "start")
    ).pipe(Effect.mapError((e) => new PostgresError({ ...e, problem: `postgres did not start on port ${port}` })))
    const stop = Effect.asVoid(run(pgCtl, ["-D", data, "-m", "immediate", "-w", "stop"], "postgres did not stop"))
    yield* Effect.acquireRelease(start, () => Effect.ignore(stop))
    return { url: `postgres://envtrain@127.0.0.1:${port}/postgres`, port, stop, start } satisfies Postgres
  })

/** A user's uid and gid from /etc/passwd (no getpwnam in Node). */
const passwd = (user: string) =>
  Fs.readFileSync("/etc/passwd", "utf8").split("\n").map((l) => l.split(":")).find((f) => f[0] === user)
const uidOf = (user: string) => passwd(user)?.[2] ?? "0"
const gidOf = (user: string) => passwd(user)?.[3] ?? "0"
