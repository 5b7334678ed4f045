/**
 * OpenEnv's `from_docker_image` for TypeScript: runs an environment image with the docker CLI
 * (`docker run -d -p <port>:8000 IMAGE`), waits for `/health`, and removes the container when the scope closes.
 * Fails with a clear {@link DockerUnavailableError} when the docker CLI or its engine is missing.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Client, Docker } from "@envtrain/env"
 *
 * const program = Effect.gen(function*() {
 *   const server = yield* Docker.run({ image: "registry.hf.space/openenv-wordle:latest" })
 *   const env = yield* Client.make({ url: server.url })
 *   yield* env.reset()
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.0.0
 */
import { Data, Duration, Effect } from "effect"
import { execFile } from "node:child_process"
import { freePort, LaunchError, waitForHealth } from "./Launcher.js"

/** Docker cannot be used here (no CLI, or no engine behind it). */
export class DockerUnavailableError extends Data.TaggedError("DockerUnavailableError")<{
  readonly reason: "cli_missing" | "engine_unreachable"
  readonly detail: string
}> {
  override get message() {
    return this.reason === "cli_missing"
      ? "The docker CLI was not found on PATH. Install Docker, or start the server another way " +
        "(Launcher.launch with any command, or a URL of a running server)."
      : `The docker CLI is installed but its engine is not reachable (${this.detail.trim()}). ` +
        "Start the Docker daemon (or set DOCKER_HOST), or start the server another way (Launcher.launch, or a URL)."
  }
}

/** Options of {@link run}. */
export interface DockerRunOptions {
  readonly image: string
  /** Host port; default a free one. The container port is 8000 (OpenEnv images). */
  readonly port?: number
  readonly containerPort?: number
  readonly env?: Readonly<Record<string, string>>
  /** Default 60 s (image start-up can be slow). */
  readonly healthTimeout?: Duration.DurationInput
  /** The docker binary. Default "docker". */
  readonly docker?: string
}

/** A running container. */
export interface Container {
  readonly id: string
  readonly url: string
  readonly port: number
}

const exec = (file: string, args: ReadonlyArray<string>) =>
  Effect.async<string, { readonly code: string | number | null; readonly stderr: string }>((resume) => {
    const child = execFile(file, [...args], { timeout: 120_000 }, (error, stdout, stderr) => {
      if (error === null) return resume(Effect.succeed(stdout))
      const code = (error as NodeJS.ErrnoException).code ?? null
      resume(Effect.fail({ code, stderr: stderr || error.message }))
    })
    return Effect.sync(() => void child.kill())
  })

/** Checks that the docker CLI exists and its engine answers. */
export const check = (docker = "docker") =>
  exec(docker, ["version", "--format", "{{.Server.Version}}"]).pipe(
    Effect.asVoid,
    Effect.mapError((e) =>
      e.code === "ENOENT"
        ? new DockerUnavailableError({ reason: "cli_missing", detail: e.stderr })
        : new DockerUnavailableError({ reason: "engine_unreachable", detail: e.stderr })
    )
  )

/** Runs `image` detached with its port 8000 published on a free loopback port; removed when the scope closes. */
export const run = Effect.fn("Docker.run")(function*(options: DockerRunOptions) {
  const docker = options.docker ?? "docker"
  yield* check(docker)
  const port = options.port ?? (yield* freePort())
  const envArgs = Object.entries(options.env ?? {}).flatMap(([k, v]) => ["-e", `${k}=${v}`])
  const args = ["run", "-d", "-p", `127.0.0.1:${port}:${options.containerPort ?? 8000}`, ...envArgs, options.image]
  const id = yield* Effect.acquireRelease(
    exec(docker, args).pipe(
      Effect.map((out) => out.trim()),
      Effect.mapError((e) =>
        new LaunchError({ command: `${docker} ${args.join(" ")}`, reason: "docker run failed", output: e.stderr })
      )
    ),
    (id) => exec(docker, ["rm", "-f", id]).pipe(Effect.ignore)
  )
  const url = `http://127.0.0.1:${port}`
  yield* waitForHealth(url, options.healthTimeout ?? Duration.seconds(60)).pipe(
    Effect.mapError((reason) => new LaunchError({ command: `${docker} ${args.join(" ")}`, reason, output: "" }))
  )
  const container: Container = { id, url, port }
  return container
})
