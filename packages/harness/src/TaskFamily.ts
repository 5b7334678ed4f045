/**
 * Procedurally varied tasks: a task family (write-text, count-lines, copy-file, …) and a seed make one task
 * instance — its file names, words and starting files drawn from small vocabularies — written as a Harbor task
 * directory in the same layout as the shipped suite (instruction.md, task.toml, environment/, tests/test.sh,
 * solution/solve.sh), so `HarborTask.load`/`loadSuite` read it unchanged and `envtrain harness serve` can serve it.
 *
 * Why: trained on the 12 fixed shipped tasks, a tiny model memorises each transcript and nothing transfers to the
 * held-out tasks (bench/results/learning-harness.md). Many instances of a few families make the skill (copy the
 * names from the instruction into the family's command) what is learnt; the held-out split is new instances (other
 * seeds, so other combinations of names and words) of the same families, plus optionally whole families never
 * trained on.
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { HarborTask, TaskFamily } from "@envtrain/harness"
 * import { Effect } from "effect"
 *
 * const program = Effect.gen(function*() {
 *   const written = yield* TaskFamily.writeSuite({ dir: "/tmp/generated-tasks", train: 28, heldOut: 7 })
 *   const suite = yield* HarborTask.loadSuite(written.root)
 *   return suite.train.length // 28
 * })
 * Effect.runPromise(program.pipe(Effect.provide(NodeContext.layer)))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Random } from "@envtrain/text"
import { Data, Effect } from "effect"
import { families, hash, vocabulary } from "./internal/taskFamilies.js"

/** Every family's name, with what its instances ask. */
export const all: ReadonlyArray<{ readonly name: string; readonly summary: string }> = families.map((f) => ({
  name: f.name,
  summary: f.summary
}))

/** The families trained on by default. */
export const defaultTrainFamilies: ReadonlyArray<string> = [
  "write-text",
  "count-lines",
  "copy-file",
  "append-line",
  "make-executable",
  "delete-by-pattern",
  "uppercase"
]

/** The family held out whole by default: its instances are only ever evaluated. */
export const defaultHeldOutFamilies: ReadonlyArray<string> = ["rename-file"]

/** One generated task. */
export interface TaskInstance {
  readonly family: string
  readonly seed: number
  /** `<family>-<seed>`: the task directory's name. */
  readonly name: string
  readonly instruction: string
  /** Starting files, relative to the workdir. */
  readonly files: ReadonlyArray<{ readonly path: string; readonly content: string; readonly executable?: boolean }>
  /** The scripted solver's commands (solution/solve.sh, one per line). */
  readonly solution: ReadonlyArray<string>
  /** tests/test.sh: writes 1 to /logs/verifier/reward.txt when the task is done, else 0. */
  readonly test: string
}

/** An unknown family name. */
export class TaskFamilyError extends Data.TaggedError("TaskFamilyError")<{ readonly family: string }> {
  override get message() {
    return `Unknown task family "${this.family}"; pick one of ${families.map((f) => f.name).join(", ")}.`
  }
}

const taskToml = `schema_version = "1.4"

[metadata]
author_name = "envtrain"
difficulty = "easy"
category = "shell"
tags = ["shell", "files", "generated"]

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 60.0
cpus = 1
memory_mb = 2048
storage_mb = 64
workdir = "/app"
allow_internet = false
`

const dockerfile = `# envtrain copies workspace/ into a fresh sandbox instead of building this image.
FROM debian:bookworm-slim
WORKDIR /app
COPY workspace/ /app/
`

const testScript = (check: string) =>
  `#!/bin/bash
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
if ${check}; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`

/**
 * The instance of `family` for `seed`: a pure function of the two (same seed, same instance). `vocabularySize`
 * (default 16, the whole lists; at least 4) keeps only the first names and words of each list: fewer distinct words,
 * each seen more often in training.
 *
 * @since 0.0.0
 */
export const make = (
  family: string,
  seed: number,
  vocabularySize = 16
): Effect.Effect<TaskInstance, TaskFamilyError> => {
  const spec = families.find((f) => f.name === family)
  if (spec === undefined) return Effect.fail(new TaskFamilyError({ family }))
  const made = spec.make(Random.mulberry32(hash(`${family}:${seed}`)), vocabulary(vocabularySize))
  return Effect.succeed({
    family,
    seed,
    name: `${family}-${seed}`,
    instruction: made.instruction,
    files: made.files,
    solution: made.solution,
    test: testScript(made.check)
  })
}

/**
 * Writes `instance` as a Harbor task directory `dir/<name>` and returns its path.
 *
 * @since 0.0.0
 */
export const write = (dir: string, instance: TaskInstance) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const root = path.join(dir, instance.name)
    const put = (file: string, content: string, mode = 0o644) =>
      Effect.gen(function*() {
        const target = path.join(root, file)
        yield* fs.makeDirectory(path.dirname(target), { recursive: true })
        yield* fs.writeFileString(target, content)
        yield* fs.chmod(target, mode)
      })
    yield* fs.remove(root, { recursive: true }).pipe(Effect.ignore)
    yield* put("instruction.md", instance.instruction + "\n")
    yield* put("task.toml", taskToml)
    yield* put("environment/Dockerfile", dockerfile)
    // An empty workspace keeps its directory (as the shipped create-file task does).
    if (instance.files.length === 0) yield* put("environment/workspace/.keep", "")
    for (const f of instance.files) {
      yield* put(path.join("environment/workspace", f.path), f.content, f.executable === true ? 0o755 : 0o644)
    }
    yield* put("tests/test.sh", instance.test, 0o755)
    yield* put(
      "solution/solve.sh",
      `#!/bin/bash\n# The scripted solver: one shell command per line, run in /app.\n${instance.solution.join("\n")}\n`,
      0o755
    )
    return root
  })

/** What `writeSuite` generates. */
export interface SuiteOptions {
  /** The suite's directory; `train/` and `held-out/` are (re)written under it. */
  readonly dir: string
  /** Training instances, spread round-robin over `trainFamilies`. */
  readonly train: number
  /** Held-out instances of the training families (other seeds), round-robin. */
  readonly heldOut: number
  /** Default `defaultTrainFamilies`. */
  readonly trainFamilies?: ReadonlyArray<string>
  /** Families only evaluated, never trained on. Default `defaultHeldOutFamilies`. */
  readonly heldOutFamilies?: ReadonlyArray<string>
  /** Instances per held-out family. Default 2. */
  readonly perHeldOutFamily?: number
  /** Names and words per vocabulary list (see `make`). Default 16. */
  readonly vocabularySize?: number
}

/** The suite written: its root (for `HarborTask.loadSuite`) and the instances of each part. */
export interface WrittenSuite {
  readonly root: string
  readonly train: ReadonlyArray<TaskInstance>
  /** Same families as training, new instances. */
  readonly heldOut: ReadonlyArray<TaskInstance>
  /** Families never trained on (also under held-out/). */
  readonly heldOutFamilies: ReadonlyArray<TaskInstance>
}

// Held-out seeds start here, far from the training seeds, and an instance whose instruction a training instance
// already has is skipped: every held-out instance is new.
const heldOutSeedBase = 1_000_000

/**
 * Writes a suite of generated instances: `train/` with seeds 0, 1, … of the training families, `held-out/` with
 * seeds from 1,000,000 of the same families (instructions never equal to a training one) and of the held-out
 * families.
 *
 * @since 0.0.0
 */
export const writeSuite = (options: SuiteOptions) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const trainFamilies = options.trainFamilies ?? defaultTrainFamilies
    const heldOutFamilies = options.heldOutFamilies ?? defaultHeldOutFamilies
    const perHeldOutFamily = options.perHeldOutFamily ?? 2
    for (const f of [...trainFamilies, ...heldOutFamilies]) {
      if (!families.some((spec) => spec.name === f)) return yield* new TaskFamilyError({ family: f })
    }
    const train = yield* Effect.forEach(
      Array.from({ length: options.train }, (_, i) => i),
      (i) => make(trainFamilies[i % trainFamilies.length], Math.floor(i / trainFamilies.length), options.vocabularySize)
    )
    const seen = new Set(train.map((t) => t.instruction))
    const fresh = (family: string, count: number) =>
      Effect.gen(function*() {
        const out: Array<TaskInstance> = []
        for (let seed = heldOutSeedBase; out.length < count && seed < heldOutSeedBase + 10_000; seed++) {
          const t = yield* make(family, seed, options.vocabularySize)
          if (seen.has(t.instruction)) continue
          seen.add(t.instruction)
          out.push(t)
        }
        return out
      })
    const heldOutCounts = trainFamilies.map((_, k) =>
      Math.floor(options.heldOut / trainFamilies.length) + (k < options.heldOut % trainFamilies.length ? 1 : 0)
    )
    const heldOut = (yield* Effect.forEach(trainFamilies, (f, k) => fresh(f, heldOutCounts[k]))).flat()
    const novel = (yield* Effect.forEach(heldOutFamilies, (f) => fresh(f, perHeldOutFamily))).flat()
    const root = path.resolve(options.dir)
    for (const split of ["train", "held-out"]) {
      yield* fs.remove(path.join(root, split), { recursive: true }).pipe(Effect.ignore)
      yield* fs.makeDirectory(path.join(root, split), { recursive: true })
    }
    yield* Effect.forEach(train, (t) => write(path.join(root, "train"), t), { discard: true })
    yield* Effect.forEach([...heldOut, ...novel], (t) => write(path.join(root, "held-out"), t), { discard: true })
    return { root, train, heldOut, heldOutFamilies: novel } satisfies WrittenSuite
  })
