/**
 * Tasks in Harbor's own task layout, loaded from a directory:
 *
 * ```
 * <task>/instruction.md          what the agent is asked to do
 * <task>/task.toml               [agent] timeout_sec, [verifier] timeout_sec, [environment] cpus, memory_mb, workdir…
 * <task>/environment/Dockerfile  Harbor builds it; envtrain does not (see below)
 * <task>/environment/workspace/  the files the agent starts with, copied to `workdir` (default /app)
 * <task>/tests/test.sh           the verifier: writes the reward to /logs/verifier/reward.txt (or reward.json)
 * <task>/solution/solve.sh       Harbor's oracle; here also the scripted solver, one command per line
 * ```
 *
 * envtrain runs tasks in a bubblewrap sandbox on the host's own filesystem (see `Sandbox`), not in a container, so
 * it cannot build images. A task's Dockerfile may therefore only say FROM, WORKDIR and `COPY workspace/ <workdir>`
 * — exactly what the sandbox reproduces by copying environment/workspace/ into a fresh directory mounted at
 * `workdir`. A Dockerfile that installs or runs anything is refused with that reason, never half-honoured.
 *
 * A suite is a directory with `train/` and `held-out/` subdirectories of tasks (the split is where a task lives).
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Data, Effect, Option } from "effect"
import { parse, TomlSyntaxError, type TomlTable } from "./internal/toml.js"

/** The parts of task.toml a sandboxed run honours (Harbor's field names in the comments). */
export interface TaskConfig {
  /** `[agent] timeout_sec`: the agent's wall-time limit. Harbor's default: none; here 600 s. */
  readonly agentTimeoutSec: number
  /** `[verifier] timeout_sec` (Harbor's default 600 s). */
  readonly verifierTimeoutSec: number
  /** `[environment] cpus`: how many CPUs' worth of time; here the CPU-seconds limit is cpus × agent timeout. */
  readonly cpus: number
  /** `[environment] memory_mb`: the address-space limit of every process in the sandbox. Default 2048. */
  readonly memoryMb: number
  /** `[environment] workdir` (or the Dockerfile's WORKDIR); default /app. */
  readonly workdir: string
  /** `[environment] allow_internet`: must not be true — sandboxes reach nothing but the model endpoint. */
  readonly allowInternet: boolean
}

/** The split a task belongs to: the directory it lives under. */
export type Split = "train" | "held-out"

/** One task, its files located and its config read. */
export interface HarborTask {
  /** The directory's name. */
  readonly name: string
  readonly dir: string
  readonly split: Split
  readonly instruction: string
  readonly config: TaskConfig
  /** environment/workspace/, when the task has starting files. */
  readonly workspaceDir: Option.Option<string>
  /** tests/: mounted read-only at /tests; tests/test.sh is run. */
  readonly testsDir: string
  /** solution/solve.sh's commands, one per non-blank, non-comment line (the scripted solver). */
  readonly solverCommands: ReadonlyArray<string>
}

/** A malformed task: which task, what is wrong, how to fix it. */
export class TaskError extends Data.TaggedError("TaskError")<{
  readonly task: string
  readonly problem: string
  readonly fix: string
}> {
  override get message() {
    return `Task ${this.task}: ${this.problem} ${this.fix}`
  }
}

/** The verifier's reward files inside the sandbox (Harbor's paths). */
export const verifierDir = "/logs/verifier"

const number = (
  table: TomlTable | undefined,
  key: string,
  fallback: number,
  bad: (p: string) => TaskError
): Effect.Effect<number, TaskError> => {
  const v = table?.[key]
  if (v === undefined) return Effect.succeed(fallback)
  return typeof v === "number" && Number.isFinite(v) && v > 0
    ? Effect.succeed(v)
    : Effect.fail(bad(`${key} must be a positive number, got ${JSON.stringify(v)}.`))
}

const tableOf = (root: TomlTable, key: string): TomlTable | undefined => {
  const v = root[key]
  return typeof v === "object" && !Array.isArray(v) ? (v as TomlTable) : undefined
}

/** Reads task.toml's text into a `TaskConfig`. */
export const parseConfig = (name: string, text: string, dockerWorkdir: Option.Option<string>) =>
  Effect.gen(function*() {
    const bad = (problem: string) =>
      new TaskError({ task: name, problem: `task.toml: ${problem}`, fix: "Fix task.toml." })
    const root = yield* Effect.try({
      try: () => parse(text),
      catch: (e) => bad(e instanceof TomlSyntaxError ? e.message : String(e))
    })
    const agent = tableOf(root, "agent")
    const verifier = tableOf(root, "verifier")
    const env = tableOf(root, "environment")
    const workdir = env?.workdir ?? Option.getOrElse(dockerWorkdir, () => "/app")
    if (typeof workdir !== "string" || !workdir.startsWith("/") || workdir.split("/").includes("..")) {
      return yield* bad(`environment.workdir must be an absolute path without "..", got ${JSON.stringify(workdir)}.`)
    }
    if (["/", "/tests", "/logs", "/proc", "/dev", "/usr", "/tmp"].some((p) => workdir === p)) {
      return yield* bad(`environment.workdir ${workdir} collides with a path the sandbox mounts; use e.g. /app.`)
    }
    const allowInternet = env?.allow_internet ?? false
    if (allowInternet !== false) {
      return yield* bad(
        "environment.allow_internet is true, but envtrain's sandboxes reach nothing except the model endpoint; set it to false or leave it out."
      )
    }
    return {
      agentTimeoutSec: yield* number(agent, "timeout_sec", 600, bad),
      verifierTimeoutSec: yield* number(verifier, "timeout_sec", 600, bad),
      cpus: yield* number(env, "cpus", 1, bad),
      memoryMb: yield* number(env, "memory_mb", 2048, bad),
      workdir,
      allowInternet: false
    } satisfies TaskConfig
  })

// FROM, WORKDIR and `COPY workspace/ <workdir>` are all a sandbox can honour; returns the WORKDIR if given.
const checkDockerfile = (name: string, text: string) =>
  Effect.gen(function*() {
    let workdir = Option.none<string>()
    for (const [i, raw] of text.split(/\r?\n/).entries()) {
      const line = raw.trim()
      if (line === "" || line.startsWith("#")) continue
      const [word, ...rest] = line.split(/\s+/)
      const op = word.toUpperCase()
      if (op === "FROM") continue
      if (op === "WORKDIR") {
        workdir = Option.some(rest.join(" "))
        continue
      }
      if (op === "COPY" && rest.length === 2 && /^\.?\/?workspace\/?$/.test(rest[0])) continue
      return yield* new TaskError({
        task: name,
        problem: `environment/Dockerfile line ${
          i + 1
        } ("${line}") needs an image build, which envtrain's sandboxes do not do.`,
        fix:
          "Keep the Dockerfile to FROM, WORKDIR and `COPY workspace/ <workdir>`, and put the starting files in environment/workspace/."
      })
    }
    return workdir
  })

const commandsOf = (script: string): ReadonlyArray<string> =>
  script.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("#"))

/**
 * Loads one task directory. Fails with `TaskError` naming the missing or malformed part.
 *
 * @since 0.0.0
 */
export const load = (dir: string, split: Split = "train") =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const abs = path.resolve(dir)
    const name = path.basename(abs)
    const missing = (file: string, fix: string) =>
      new TaskError({ task: name, problem: `${file} is missing (looked in ${abs}).`, fix })
    const read = (file: string, fix: string) =>
      fs.readFileString(path.join(abs, file)).pipe(Effect.mapError(() => missing(file, fix)))
    const exists = (file: string) => fs.exists(path.join(abs, file)).pipe(Effect.orElseSucceed(() => false))

    const instruction = (yield* read("instruction.md", "Write the agent's instruction in instruction.md.")).trim()
    if (instruction === "") {
      return yield* new TaskError({ task: name, problem: "instruction.md is empty.", fix: "Write the instruction." })
    }
    const dockerWorkdir = (yield* exists("environment/Dockerfile"))
      ? yield* checkDockerfile(name, yield* read("environment/Dockerfile", ""))
      : Option.none<string>()
    const config = yield* parseConfig(
      name,
      yield* read("task.toml", "Add task.toml (Harbor's task config: [agent], [verifier], [environment])."),
      dockerWorkdir
    )
    if (!(yield* exists("tests/test.sh"))) {
      return yield* missing(
        "tests/test.sh",
        "Add the verifier script; it must write the reward to /logs/verifier/reward.txt."
      )
    }
    const solverCommands = (yield* exists("solution/solve.sh"))
      ? commandsOf(yield* read("solution/solve.sh", ""))
      : []
    const workspace = path.join(abs, "environment", "workspace")
    return {
      name,
      dir: abs,
      split,
      instruction,
      config,
      workspaceDir: (yield* exists("environment/workspace")) ? Option.some(workspace) : Option.none(),
      testsDir: path.join(abs, "tests"),
      solverCommands
    } satisfies HarborTask
  })

/** A suite's two splits. */
export interface Suite {
  readonly train: ReadonlyArray<HarborTask>
  readonly heldOut: ReadonlyArray<HarborTask>
}

/**
 * Loads a suite: every task directory under `root/train` and `root/held-out`, sorted by name.
 *
 * @since 0.0.0
 */
export const loadSuite = (root: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const splitOf = (split: Split) =>
      Effect.gen(function*() {
        const dir = path.join(root, split)
        const names = yield* fs.readDirectory(dir).pipe(
          Effect.mapError(() =>
            new TaskError({
              task: split,
              problem: `the suite has no ${split}/ directory (looked in ${path.resolve(dir)}).`,
              fix: "A suite holds train/ and held-out/ directories of Harbor task directories."
            })
          )
        )
        return yield* Effect.forEach([...names].sort(), (n) => load(path.join(dir, n), split))
      })
    return { train: yield* splitOf("train"), heldOut: yield* splitOf("held-out") } satisfies Suite
  })

/** Where the suite shipped with envtrain lives. */
export const shippedSuiteDir = new URL("../tasks", import.meta.url).pathname

/** The verifier's outcome: Harbor's reward rule applied to what test.sh wrote. */
export type Reward =
  | { readonly _tag: "Scored"; readonly reward: number; readonly rewards: Readonly<Record<string, number>> }
  | { readonly _tag: "Unscored"; readonly reason: string }

/**
 * Reads reward.txt (one finite number) or reward.json (`{name: number}`; the reward is the single key's value or
 * the `reward` key's) from the verifier directory on the host. Never a made-up zero: no file is `Unscored`.
 *
 * @since 0.0.0
 */
export const readReward = (hostVerifierDir: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const txt = yield* fs.readFileString(path.join(hostVerifierDir, "reward.txt")).pipe(Effect.option)
    if (Option.isSome(txt)) {
      const value = Number(txt.value.trim())
      return txt.value.trim() !== "" && Number.isFinite(value)
        ? ({ _tag: "Scored", reward: value, rewards: { reward: value } } as Reward)
        : ({ _tag: "Unscored", reason: `reward.txt does not hold one finite number: "${txt.value.trim()}"` } as Reward)
    }
    const json = yield* fs.readFileString(path.join(hostVerifierDir, "reward.json")).pipe(Effect.option)
    if (Option.isNone(json)) {
      return { _tag: "Unscored", reason: "the verifier wrote neither reward.txt nor reward.json" } as Reward
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(json.value)
    } catch {
      return { _tag: "Unscored", reason: "reward.json is not JSON" } as Reward
    }
    const rewards = typeof parsed === "number" ? { reward: parsed } : parsed
    if (
      typeof rewards !== "object" || rewards === null ||
      !Object.values(rewards).every((v) => typeof v === "number" && Number.isFinite(v))
    ) {
      return { _tag: "Unscored", reason: "reward.json must map names to finite numbers" } as Reward
    }
    const table = rewards as Record<string, number>
    const keys = Object.keys(table)
    const reward = keys.length === 1 ? table[keys[0]] : table.reward
    return reward === undefined
      ? ({ _tag: "Unscored", reason: `reward.json has several keys and no "reward": ${keys.join(", ")}` } as Reward)
      : ({ _tag: "Scored", reward, rewards: table } as Reward)
  })
