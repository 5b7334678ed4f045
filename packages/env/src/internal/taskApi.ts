// OpenEnv's Task API routes (`/<env>/splits`, `/<env>/task_range`, …) as the server answers them: the body checked as
// FastAPI checks OpenEnv's request models (pydantic, extra="forbid"), then the definition's TaskProvider asked.
// The server reads and parses the body; this file decides the status and the JSON answer.
import { Either } from "effect"
import type { OpenEnvDefinition } from "../OpenEnv.js"
import * as TaskApi from "../TaskApi.js"
import type { PydanticError } from "../Wire.js"
import { reprString } from "./pythonText.js"

export type Op = "splits" | "tasks" | "num_tasks" | "task" | "task_range"

/** The Python method OpenEnv calls for each route (named in its 501 text). */
const methodNames: Readonly<Record<Op, string>> = {
  splits: "list_splits",
  tasks: "list_tasks",
  num_tasks: "num_tasks",
  task: "get_task",
  task_range: "get_task_range"
}

type Field = "str" | "int" | "int?"

/** OpenEnv's request models, field by field in declaration order (`ListTasksRequest`, `GetTaskRangeRequest`, …). */
const models: Readonly<Record<Exclude<Op, "splits">, Readonly<Record<string, Field>>>> = {
  tasks: { split: "str" },
  num_tasks: { split: "str" },
  task: { split: "str", index: "int" },
  task_range: { split: "str", start: "int?", stop: "int?" }
}

const ROUTE = /^\/([^/]+)\/(splits|tasks|num_tasks|task|task_range)$/

/** The Task API route a path names, and the method it takes (GET for `splits`, POST for the rest). */
export const match = (path: string): { readonly env: string; readonly op: Op; readonly method: string } | undefined => {
  const m = ROUTE.exec(path)
  if (m === null) return undefined
  let env: string
  try {
    env = decodeURIComponent(m[1])
  } catch {
    env = m[1]
  }
  const op = m[2] as Op
  return { env, op, method: op === "splits" ? "GET" : "POST" }
}

export interface Answer {
  readonly status: number
  readonly body: unknown
}

const fieldErrors = (op: Exclude<Op, "splits">, body: Readonly<Record<string, unknown>>): Array<PydanticError> => {
  const model = models[op]
  const errors: Array<PydanticError> = []
  for (const [name, kind] of Object.entries(model)) {
    const value = body[name]
    if (value === undefined) {
      if (kind !== "int?") errors.push({ type: "missing", loc: ["body", name], msg: "Field required", input: body })
    } else if (kind === "str") {
      if (typeof value !== "string") {
        errors.push({ type: "string_type", loc: ["body", name], msg: "Input should be a valid string", input: value })
      }
    } else if (!(kind === "int?" && value === null)) {
      if (typeof value === "number" && Number.isFinite(value) && !Number.isInteger(value)) {
        errors.push({
          type: "int_from_float",
          loc: ["body", name],
          msg: "Input should be a valid integer, got a number with a fractional part",
          input: value
        })
      } else if (typeof value !== "number" || !Number.isSafeInteger(value)) {
        errors.push({ type: "int_type", loc: ["body", name], msg: "Input should be a valid integer", input: value })
      }
    }
  }
  for (const [name, value] of Object.entries(body)) {
    if (!(name in model)) {
      errors.push({ type: "extra_forbidden", loc: ["body", name], msg: "Extra inputs are not permitted", input: value })
    }
  }
  return errors
}

const failed = (error: TaskApi.UnknownSplit | TaskApi.TaskIndexOutOfRange): Answer => ({
  status: error._tag === "UnknownSplit" ? 404 : 400,
  body: { detail: error.message }
})

/**
 * Answers one Task API request. `body` is the request's JSON object (`{}` for `GET /splits`); the server has
 * already refused bodies that are not JSON objects.
 */
export const answer = (
  definition: OpenEnvDefinition,
  route: { readonly env: string; readonly op: Op },
  body: Readonly<Record<string, unknown>>
): Answer => {
  const { env, op } = route
  // FastAPI validates the body before OpenEnv's handler checks the environment's name.
  if (op !== "splits") {
    const errors = fieldErrors(op, body)
    if (errors.length > 0) return { status: 422, body: { detail: errors } }
  }
  if (env.toLowerCase() !== definition.name.toLowerCase()) {
    return { status: 404, body: { detail: `unknown environment ${reprString(env)}` } }
  }
  const provider = definition.tasks
  if (provider === undefined) {
    return { status: 501, body: { detail: `${methodNames[op]} is not supported for this environment` } }
  }
  const splitName = body.split as string
  switch (op) {
    case "splits":
      return { status: 200, body: TaskApi.descriptors(provider) }
    case "tasks":
      return Either.match(TaskApi.range(provider, splitName), {
        onLeft: failed,
        onRight: (tasks) => ({ status: 200, body: { tasks, env_name: definition.name } })
      })
    case "num_tasks":
      return Either.match(TaskApi.split(provider, splitName), {
        onLeft: failed,
        onRight: (s) => ({ status: 200, body: { num_tasks: s.tasks.length } })
      })
    case "task":
      return Either.match(TaskApi.task(provider, splitName, body.index as number), {
        onLeft: failed,
        onRight: (task) => ({ status: 200, body: { task } })
      })
    case "task_range":
      return Either.match(
        TaskApi.range(
          provider,
          splitName,
          body.start as number | null | undefined,
          body.stop as number | null | undefined
        ),
        { onLeft: failed, onRight: (tasks) => ({ status: 200, body: { tasks } }) }
      )
  }
}
