/**
 * `envtrain harness serve`: OpenEnv's Harbor MCP contract (`openenv harbor serve`), served by env's
 * OpenEnv-compatible server, so OpenEnv's Python `HarborEnv` client (and a `HarborSessionFactory` over it) drives
 * envtrain's tasks, sandboxes and agents. An MCP environment (`harbor_env`, concurrent sessions up to
 * `MAX_CONCURRENT_ENVS`) with three tools:
 *
 * - `run_rollout(split="", task_index=0, harness="bash-agent", sandbox="bubblewrap", agent_timeout_sec=0,
 *   agent_step_limit=0, llm_url="", model="", …)` → the JSON text of a `HarborRolloutResult`: identity, the
 *   verifier's `reward` (null = never graded, not 0) and `rewards`, the captured `turns` (engine token ids, logprobs,
 *   loss mask, node id, tool calls, request messages), `conversations`, counts, `wall_s`; failures come back as
 *   `ok: false` with `error` and `exception_type`, never raised. The other keyword arguments of OpenEnv's tool are
 *   accepted; `sandbox` must be `bubblewrap` (envtrain's only backend) and `llm_url` empty or the server's own. A
 *   harness or sandbox this server does not run is refused (`ok: false`, naming what it runs), unless the operator
 *   aliased the name (`aliases`): then `param_fixes` says what ran instead.
 * - `list_tasks(split, start=0, stop=20)` → JSON list of `HarborTaskRef` (`index, task_id, task_name, dataset,
 *   instruction`).
 * - `capabilities()` → JSON: `harnesses`, `sandboxes`, `datasets` (splits with task counts), `llm`.
 *
 * OpenEnv's plain-HTTP Task API is served beside it (the definition's `tasks`, see env's `TaskApi`):
 * `GET /harbor_env/splits` → `[{"name", "num_tasks"}]`, `POST /harbor_env/num_tasks {"split"}` → `{"num_tasks"}`,
 * `POST /harbor_env/task {"split", "index"}` → `{"task": HarborTaskRef}`, `POST /harbor_env/task_range {"split",
 * "start", "stop"}` → `{"tasks": [HarborTaskRef]}` (Python's slice: stop exclusive, bounds clamped), and
 * `POST /harbor_env/tasks {"split"}`; an unknown split is 404 naming the splits, an index outside the split 400.
 * `list_tasks`, `capabilities`, `run_rollout` and these routes read one task list ({@link taskProvider}).
 *
 * Splits are the suite's directories (`train`, `held-out`); `split=""` is the first.
 *
 * @since 0.0.0
 */
import type { FileSystem, Path } from "@effect/platform"
import { OpenEnv, TaskApi } from "@envtrain/env"
import { Data, Effect, Either, Schema } from "effect"
import type { RunningCaptureProxy } from "./CaptureProxy.js"
import type * as HarborTask from "./HarborTask.js"
import * as HarnessSession from "./HarnessSession.js"

/** Options of {@link definition}. @since 0.0.0 */
export interface HarborServeOptions {
  readonly suite: HarborTask.Suite
  /** The capture proxy in front of the policy server every rollout generates on. */
  readonly proxy: RunningCaptureProxy
  /** The policy server's URL (what `llm_url` may name) and served model. */
  readonly llmUrl: string
  readonly model: string
  /** Agents by harness name; the first is the default. */
  readonly agents: ReadonlyArray<HarnessSession.Agent>
  /** Default 8 (OpenEnv's). */
  readonly defaultMaxConcurrentEnvs?: number
  /**
   * Names a request may give for what this server runs instead, set by the operator (`--harness-alias
   * opencode=bash-agent`, `--sandbox-alias e2b=bubblewrap`): OpenEnv's client sends `harness="opencode"` and
   * `sandbox="e2b"` unless told otherwise. Without an alias such a request is refused; with one, the result's
   * `harness`/`sandbox` say what ran and `param_fixes` says what was mapped.
   */
  readonly aliases?: {
    readonly harness?: Readonly<Record<string, string>>
    readonly sandbox?: Readonly<Record<string, string>>
  }
}

/** The only sandbox backend envtrain has. @since 0.0.0 */
export const sandboxBackend = "bubblewrap"

/** A configuration error of the server itself (an alias naming nothing this server runs). @since 0.0.0 */
export class HarborServeError extends Data.TaggedError("HarborServeError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

const str = { type: "string" } as const
const int = { type: "integer" } as const

const descriptor = (
  name: string,
  description: string,
  properties: Readonly<Record<string, unknown>>
): OpenEnv.McpToolDescriptor => ({
  name,
  title: null,
  description,
  inputSchema: { additionalProperties: true, properties, type: "object" },
  outputSchema: { properties: { result: { type: "string" } }, required: ["result"], type: "object" },
  icons: null,
  annotations: null,
  meta: { fastmcp: { tags: [] } },
  execution: null
})

/** The three tools as FastMCP lists them. @since 0.0.0 */
export const tools: ReadonlyArray<OpenEnv.McpToolDescriptor> = [
  descriptor(
    "run_rollout",
    "Run one rollout of a task with a harness in a sandbox; returns HarborRolloutResult JSON.",
    {
      split: { ...str, default: "" },
      task_index: { ...int, default: 0 },
      harness: { ...str, default: "bash-agent" },
      sandbox: { ...str, default: "bubblewrap" },
      agent_timeout_sec: { type: "number", default: 0 },
      agent_step_limit: { ...int, default: 0 },
      llm_url: { ...str, default: "" },
      model: { ...str, default: "" }
    }
  ),
  descriptor("list_tasks", "List a split's tasks (HarborTaskRef JSON).", {
    split: str,
    start: { ...int, default: 0 },
    stop: { ...int, default: 20 }
  }),
  descriptor("capabilities", "Harnesses, sandboxes, datasets and the LLM this server offers (JSON).", {})
]

const text = (value: unknown): OpenEnv.McpCallToolResult => {
  const json = JSON.stringify(value)
  return {
    content: [{ type: "text", text: json }],
    structured_content: { result: json },
    meta: { fastmcp: { wrap_result: true } },
    data: json,
    is_error: false
  }
}

const splitsOf = (suite: HarborTask.Suite) => [
  { name: "train", tasks: suite.train },
  { name: "held-out", tasks: suite.heldOut }
]

/** A task as OpenEnv's Task API and `list_tasks` give it (`HarborTaskRef`). @since 0.0.0 */
export interface HarborTaskRef {
  readonly index: number
  readonly task_id: string
  readonly task_name: string
  readonly dataset: string
  readonly instruction: string
}

const taskRef = (split: string, task: HarborTask.HarborTask, index: number): HarborTaskRef => ({
  index,
  task_id: `${split}/${task.name}`,
  task_name: task.name,
  dataset: split,
  instruction: task.instruction
})

/**
 * The suite's task list, the one every tool and route reads: a split per suite directory (`train`, `held-out`) of
 * `HarborTaskRef`s; `split=""` is `train`, as OpenEnv's Harbor reads an empty split as its first dataset.
 *
 * @since 0.0.0
 */
export const taskProvider = (suite: HarborTask.Suite): TaskApi.TaskProvider =>
  TaskApi.make(
    splitsOf(suite).map((s) => ({ name: s.name, tasks: s.tasks.map((t, i) => taskRef(s.name, t, i)) })),
    { defaultSplit: "train" }
  )

/** One failed rollout as OpenEnv returns it (`ok: false`, never raised). @since 0.0.0 */
export const failedResult = (fields: Readonly<Record<string, unknown>>, error: string, exceptionType: string) => ({
  ...fields,
  reward: null,
  ok: false,
  error,
  exception_type: exceptionType
})

/**
 * The `HarborRolloutResult` of an outcome (OpenEnv's field names).
 *
 * @since 0.0.0
 */
export const resultOf = (
  identity: Readonly<Record<string, unknown>>,
  outcome: HarnessSession.HarnessRolloutOutcome,
  wallSeconds: number
) => {
  const turns = outcome.trace.turns.map((t, i) => {
    const choices = t.response["choices"]
    const choice = Array.isArray(choices) ? choices[0] as Record<string, any> | undefined : undefined
    const message = choice?.message as Record<string, any> | undefined
    const calls = Array.isArray(message?.tool_calls) ? message.tool_calls as Array<Record<string, any>> : []
    const role = typeof t.metadata["role"] === "string" ? t.metadata["role"] as string : "agent"
    return {
      turn: i,
      role: role === "auxiliary" ? "auxiliary" : "agent",
      finish_reason: typeof choice?.finish_reason === "string" ? choice.finish_reason : null,
      prompt_token_ids: t.prompt_token_ids,
      completion_token_ids: t.completion_token_ids,
      per_token_logps: t.per_token_logps,
      loss_mask: t.loss_mask,
      node_id: t.node_id,
      n_tools: calls.length,
      discarded: role === "discarded",
      trainable: t.loss_mask.some((m) => m === 1),
      text: typeof message?.content === "string" ? message.content : "",
      tool_calls: calls.map((c) => ({ name: c.function?.name ?? "", arguments: c.function?.arguments ?? "" })),
      request_messages: Array.isArray(t.request["messages"]) ? t.request["messages"] : [],
      request_tools: Array.isArray(t.request["tools"]) ? t.request["tools"] : null
    }
  })
  const roots = new Map<string, { role: string; n: number }>()
  for (const t of outcome.trace.turns) {
    const root = typeof t.metadata["root_id"] === "string" ? t.metadata["root_id"] as string : t.node_id
    const role = typeof t.metadata["role"] === "string" ? t.metadata["role"] as string : "agent"
    const entry = roots.get(root) ?? { role, n: 0 }
    entry.n++
    roots.set(root, entry)
  }
  const trainable = outcome.trace.turns.reduce((s, t) => s + t.loss_mask.reduce((a, m) => a + m, 0), 0)
  const rewards = Object.fromEntries(
    Object.entries(outcome.metrics).filter(([k, v]) =>
      typeof v === "number" && (k === "reward" || k.startsWith("reward"))
    )
  ) as Record<string, number>
  return {
    ...identity,
    reward: outcome.envReward,
    rewards: outcome.envReward === null ? {} : { reward: outcome.envReward, ...rewards },
    reward_key: "",
    step_results: [],
    rollout_type: "train",
    capture_level: "tokens",
    param_fixes: [],
    turns,
    conversations: [...roots].map(([root_id, c]) => ({ root_id, role: c.role, n_turns: c.n, messages: [] })),
    n_turns: turns.length,
    n_roots: roots.size,
    budget_stop_count: 0,
    n_trainable_tokens: trainable,
    multi_turn: turns.length > 1,
    atif: "none",
    trace_source: "envtrain-capture-proxy",
    findings: [
      ...(outcome.timedOut ? ["agent_timeout"] : []),
      ...(outcome.unscoreable === undefined ? [] : [`unscoreable: ${outcome.unscoreable}`])
    ],
    wall_s: wallSeconds,
    phase_timings: {},
    agent_log_tail: typeof outcome.metrics["agent_error"] === "string" ? outcome.metrics["agent_error"] : "",
    ok: true,
    error: null,
    exception_type: null
  }
}

/**
 * A tool's keyword arguments, read by type: absent (or null) gives the tool's default; a value of another type is a
 * problem named in the answer, never replaced by the default.
 */
const argumentReader = (args: Readonly<Record<string, unknown>>) => {
  const problems: Array<string> = []
  const read = <A>(key: string, fallback: A, ok: (v: unknown) => v is A, kind: string): A => {
    const v = args[key]
    if (v === undefined || v === null) return fallback
    if (ok(v)) return v
    problems.push(`${key} must be ${kind}, got ${JSON.stringify(v)}`)
    return fallback
  }
  return {
    problems,
    string: (key: string, fallback: string) =>
      read(key, fallback, (v): v is string => typeof v === "string", "a string"),
    number: (key: string, fallback: number) =>
      read(key, fallback, (v): v is number => typeof v === "number" && Number.isFinite(v), "a number"),
    integer: (key: string, fallback: number) =>
      read(key, fallback, (v): v is number => typeof v === "number" && Number.isInteger(v), "an integer")
  }
}

/**
 * The Harbor MCP environment over a suite, a capture proxy and agents. Needs FileSystem and Path (captured from
 * the context it is built in, for the rollouts it runs).
 *
 * @since 0.0.0
 */
export const definition = (options: HarborServeOptions) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<FileSystem.FileSystem | Path.Path>()
    const splits = splitsOf(options.suite)
    const provider = taskProvider(options.suite)
    const agents = new Map(options.agents.map((a) => [a.name, a]))
    const defaultAgent = options.agents[0]
    const harnessAliases = options.aliases?.harness ?? {}
    const sandboxAliases = options.aliases?.sandbox ?? {}
    for (const [from, to] of Object.entries(harnessAliases)) {
      if (!agents.has(to)) {
        return yield* new HarborServeError({
          problem: `--harness-alias ${from}=${to}: this server has no harness "${to}" (it runs ${
            [...agents.keys()].join(", ")
          })`
        })
      }
    }
    for (const [from, to] of Object.entries(sandboxAliases)) {
      if (to !== sandboxBackend) {
        return yield* new HarborServeError({
          problem: `--sandbox-alias ${from}=${to}: envtrain's only sandbox is ${sandboxBackend}`
        })
      }
    }
    const available = [...agents.keys()].join(", ")

    const runRollout = (args: Readonly<Record<string, unknown>>) =>
      Effect.gen(function*() {
        const read = argumentReader(args)
        const split = read.string("split", "")
        const index = read.integer("task_index", 0)
        const harness = read.string("harness", defaultAgent.name)
        const sandbox = read.string("sandbox", sandboxBackend)
        const llmUrl = read.string("llm_url", "")
        const timeoutSec = read.number("agent_timeout_sec", 0)
        const identity = { split, harness, sandbox, dataset: split || splits[0].name }
        if (read.problems.length > 0) return failedResult(identity, read.problems.join("; "), "TypeError")
        const found = TaskApi.task(provider, split, index)
        if (Either.isLeft(found)) {
          return failedResult(
            identity,
            found.left.message,
            found.left._tag === "UnknownSplit" ? "KeyError" : "IndexError"
          )
        }
        const ref = found.right as HarborTaskRef
        const chosen = splits.find((s) => s.name === ref.dataset)!
        const task = chosen.tasks[ref.index]
        // "" asks for nothing in particular: the server's default. Any other name runs as itself, or as what the
        // operator aliased it to (said in param_fixes); nothing else is substituted.
        const paramFixes: Array<string> = []
        const harnessName = harness === "" ? defaultAgent.name : harness
        const aliasedHarness = agents.has(harnessName) ? undefined : harnessAliases[harnessName]
        const agent = agents.get(aliasedHarness ?? harnessName)
        if (aliasedHarness !== undefined) {
          paramFixes.push(`harness "${harness}" ran as "${aliasedHarness}" (the server's --harness-alias)`)
        }
        const withTask = {
          ...identity,
          dataset: chosen.name,
          task_id: `${chosen.name}/${task.name}`,
          task_name: task.name,
          harness: agent?.name ?? harness
        }
        if (agent === undefined) {
          return failedResult(
            withTask,
            `harness "${harness}" is not available: this server runs ${available} (pass harness="${defaultAgent.name}"` +
              `, or the server's operator maps the name with --harness-alias ${harness}=${defaultAgent.name})`,
            "ValueError"
          )
        }
        if (sandbox !== sandboxBackend && sandbox !== "") {
          if (sandboxAliases[sandbox] !== sandboxBackend) {
            return failedResult(
              withTask,
              `sandbox "${sandbox}" is not available: envtrain runs ${sandboxBackend} sandboxes (pass ` +
                `sandbox="${sandboxBackend}", or the server's operator maps the name with --sandbox-alias ` +
                `${sandbox}=${sandboxBackend})`,
              "ValueError"
            )
          }
          paramFixes.push(`sandbox "${sandbox}" ran as "${sandboxBackend}" (the server's --sandbox-alias)`)
        }
        if (llmUrl !== "" && llmUrl.replace(/\/+$/, "") !== options.llmUrl.replace(/\/+$/, "")) {
          return failedResult(
            withTask,
            `this server generates on ${options.llmUrl}; llm_url ${llmUrl} is not served here`,
            "ValueError"
          )
        }
        const factory = HarnessSession.makeFactory({
          tasks: [task],
          agent,
          proxy: options.proxy,
          model: options.model,
          ...(timeoutSec > 0 ? { agentTimeout: `${timeoutSec} seconds` as const } : {})
        })
        const started = Date.now()
        const trial = `${task.name}-${crypto.randomUUID().slice(0, 8)}`
        const outcome = yield* Effect.either(HarnessSession.rollout(factory, task.instruction, index, trial))
        const seconds = (Date.now() - started) / 1000
        const full = { ...withTask, sandbox: sandboxBackend, trial_name: trial, session_id: trial }
        if (outcome._tag === "Left") {
          return {
            ...failedResult(full, outcome.left.message, outcome.left._tag),
            param_fixes: paramFixes,
            wall_s: seconds
          }
        }
        return { ...resultOf(full, outcome.right, seconds), param_fixes: paramFixes }
      }).pipe(
        // Failures are returned, never raised (OpenEnv's rule): a defect too.
        Effect.catchAllDefect((d) => Effect.succeed(failedResult({}, String(d), "InternalError")))
      )

    const call = (name: string, args: Readonly<Record<string, unknown>>) =>
      Effect.suspend((): Effect.Effect<OpenEnv.McpCallToolResult, OpenEnv.McpToolError> => {
        if (name === "run_rollout") return Effect.map(Effect.provide(runRollout(args), runtime), text)
        if (name === "list_tasks") {
          // The Task API's task_range, as OpenEnv's tool is (an unknown split lists nothing here).
          const read = argumentReader(args)
          const range = [read.string("split", ""), read.integer("start", 0), read.integer("stop", 20)] as const
          if (read.problems.length > 0) {
            return Effect.fail(new OpenEnv.McpToolError({ kind: "invalid_args", message: read.problems.join("; ") }))
          }
          const listed = TaskApi.range(provider, ...range)
          return Effect.succeed(text(Either.getOrElse(listed, () => [])))
        }
        if (name === "capabilities") {
          return Effect.succeed(text({
            harnesses: options.agents.map((a) => a.name),
            sandboxes: [sandboxBackend],
            datasets: TaskApi.descriptors(provider),
            llm: { url: options.llmUrl, model: options.model, tier: "train" }
          }))
        }
        return Effect.fail(new OpenEnv.McpToolError({ kind: "tool_not_found", message: `Unknown tool: '${name}'` }))
      })

    const def: OpenEnv.OpenEnvDefinition<OpenEnv.McpAction> = {
      name: "harbor_env",
      metadata: {
        name: "HarborEnvironment",
        description: "envtrain's Harbor tasks in bubblewrap sandboxes. Call run_rollout(...).",
        readme_content: null,
        version: "1.0.0",
        author: null,
        documentation_url: null
      },
      action: OpenEnv.McpAction,
      observation: OpenEnv.McpObservation,
      state: Schema.Struct({ episode_id: Schema.NullOr(Schema.String), step_count: Schema.Int }),
      supportsConcurrentSessions: true,
      defaultMaxConcurrentEnvs: options.defaultMaxConcurrentEnvs ?? 8,
      tasks: provider,
      make: Effect.sync(() => {
        let stepCount = 0
        let episodeId: string | null = null
        const mcpTools: OpenEnv.McpTools = { list: Effect.succeed(tools), call }
        return {
          reset: (o) =>
            Effect.sync(() => {
              stepCount = 0
              episodeId = typeof o.episode_id === "string" ? o.episode_id : crypto.randomUUID()
              return { observation: {}, reward: null, done: false }
            }),
          step: (action) =>
            Effect.suspend(() => {
              stepCount++
              return OpenEnv.mcpStep(action, mcpTools)
            }),
          state: Effect.sync(() => ({ episode_id: episodeId, step_count: stepCount })),
          tools: mcpTools
        }
      })
    }
    return def
  })
