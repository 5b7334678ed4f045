/**
 * OpenEnv's Task API: an environment that offers tasks (named splits of task specs) has them served as plain HTTP
 * beside its protocol. OpenEnv's server does this for any environment it finds `list_splits` / `num_tasks` /
 * `list_tasks` / `get_task` / `get_task_range` on (duck typing); here a definition carries a {@link TaskProvider}
 * (`OpenEnvDefinition.tasks`) and env's server answers, under the environment's name:
 *
 * - `GET /list_environments` → `["<env>"]`
 * - `GET /<env>/splits` → each split's descriptor (default `{"name", "num_tasks"}`)
 * - `POST /<env>/tasks {"split"}` → `{"tasks": [...], "env_name"}`
 * - `POST /<env>/num_tasks {"split"}` → `{"num_tasks"}`
 * - `POST /<env>/task {"split", "index"}` → `{"task"}`
 * - `POST /<env>/task_range {"split", "start"?, "stop"?}` → `{"tasks": [...]}`: Python's `tasks[start:stop]` (stop
 *   exclusive, negative bounds from the end, out-of-range bounds clamped, a missing or null bound open)
 *
 * Errors answer as FastAPI does, `{"detail": ...}`: a bad body is 422 with pydantic's entries naming the field
 * (`split` and `index` required, unknown fields refused); another environment's name is 404; an environment without
 * tasks is 501 (OpenEnv's texts). Beyond OpenEnv, which leaves them to the environment: an unknown split is 404
 * naming the known ones, and an index outside the split is 400 (OpenEnv's status for `IndexError`) naming the range.
 *
 * @example
 * ```ts
 * import { TaskApi } from "@envtrain/env"
 *
 * const tasks = TaskApi.make([
 *   { name: "train", tasks: [{ id: "t0" }, { id: "t1" }] },
 *   { name: "test", tasks: [{ id: "e0" }] }
 * ], { defaultSplit: "train" })
 * // a definition with `tasks` serves POST /<env>/task_range {"split": "train", "start": 1} → {"tasks": [{"id": "t1"}]}
 * ```
 *
 * @since 0.0.0
 */
import { Data, Either } from "effect"

/** One split: its name, what `/splits` lists for it, and its task specs (JSON values) in index order. @since 0.0.0 */
export interface TaskSplit {
  readonly name: string
  /** What `GET /<env>/splits` lists for this split. Default `{name, num_tasks}`. */
  readonly descriptor?: Readonly<Record<string, unknown>>
  readonly tasks: ReadonlyArray<unknown>
}

/** The tasks an environment offers. @since 0.0.0 */
export interface TaskProvider {
  readonly splits: ReadonlyArray<TaskSplit>
  /** The split an empty name (`"split": ""`) means. Default: none, so `""` is an unknown split. */
  readonly defaultSplit?: string
}

/** No split of that name (404 on the Task API). @since 0.0.0 */
export class UnknownSplit extends Data.TaggedError("UnknownSplit")<{
  readonly split: string
  readonly known: ReadonlyArray<string>
}> {
  override get message() {
    return `unknown split "${this.split}"; this server has ${this.known.join(", ") || "no splits"}`
  }
}

/** An index outside its split (400 on the Task API, OpenEnv's status for `IndexError`). @since 0.0.0 */
export class TaskIndexOutOfRange extends Data.TaggedError("TaskIndexOutOfRange")<{
  readonly split: string
  readonly index: number
  readonly size: number
}> {
  override get message() {
    return `task index ${this.index} is out of range: ${this.split} has ${this.size} tasks` +
      (this.size > 0 ? ` (0..${this.size - 1})` : "")
  }
}

/** A provider over splits held in memory. @since 0.0.0 */
export const make = (
  splits: ReadonlyArray<TaskSplit>,
  options: { readonly defaultSplit?: string } = {}
): TaskProvider => ({ splits, ...options })

/** What `GET /<env>/splits` answers. @since 0.0.0 */
export const descriptors = (provider: TaskProvider): ReadonlyArray<Readonly<Record<string, unknown>>> =>
  provider.splits.map((s) => s.descriptor ?? { name: s.name, num_tasks: s.tasks.length })

/** The split a name means (`""` is the default split, if any). @since 0.0.0 */
export const split = (provider: TaskProvider, name: string): Either.Either<TaskSplit, UnknownSplit> => {
  const wanted = name === "" ? provider.defaultSplit : name
  const found = wanted === undefined ? undefined : provider.splits.find((s) => s.name === wanted)
  return found === undefined
    ? Either.left(new UnknownSplit({ split: name, known: provider.splits.map((s) => s.name) }))
    : Either.right(found)
}

/** One task by index (negative indices are out of range, as in OpenEnv's Harbor provider). @since 0.0.0 */
export const task = (
  provider: TaskProvider,
  name: string,
  index: number
): Either.Either<unknown, UnknownSplit | TaskIndexOutOfRange> =>
  Either.flatMap(split(provider, name), (s) =>
    Number.isInteger(index) && index >= 0 && index < s.tasks.length
      ? Either.right(s.tasks[index])
      : Either.left(new TaskIndexOutOfRange({ split: s.name, index, size: s.tasks.length })))

/**
 * Python's `tasks[start:stop]`: stop exclusive, negative bounds counted from the end, bounds clamped, `null` or
 * `undefined` open (JavaScript's `slice` has the same rules for integers).
 *
 * @since 0.0.0
 */
export const range = (
  provider: TaskProvider,
  name: string,
  start?: number | null,
  stop?: number | null
): Either.Either<ReadonlyArray<unknown>, UnknownSplit> =>
  Either.map(split(provider, name), (s) => s.tasks.slice(start ?? undefined, stop ?? undefined))
