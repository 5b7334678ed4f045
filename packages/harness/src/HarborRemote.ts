/**
 * A Harbor server as the rollout source: envtrain's trainer driving the same MCP contract `envtrain harness serve`
 * offers (or OpenEnv's `openenv harbor serve`) on any host. Each rollout is one `run_rollout` call on a session of
 * its own (one socket cannot carry overlapping rollouts); its `HarborRolloutResult` becomes a
 * `HarnessRolloutOutcome` whose trace is the result's turns (engine token ids, logprobs, loss masks) checked
 * against every TrainingTrace rule. `ok: false` (the server could not run or grade it) and a lost session are
 * unscoreable; a turn breaking a rule is a `CaptureContractError`, which stops training.
 *
 * {@link connect} lists the split's tasks through OpenEnv's plain-HTTP Task API (`POST /harbor_env/task_range`)
 * when the server offers it (`envtrain harness serve` and `openenv harbor serve` do), else through the `list_tasks`
 * tool on a session of its own. It first checks the server's session limit: one session per rollout in flight, plus
 * the listing's when it needs one (OpenEnv's advice for `HarborSessionFactory`: `MAX_CONCURRENT_ENVS >=
 * max_inflight + 1`), opened together, and refuses clearly when the server turns one away.
 *
 * @since 0.0.0
 */
import { Client } from "@envtrain/env"
import type { Scope } from "effect"
import { Data, Duration, Effect } from "effect"
import type * as HarborServe from "./HarborServe.js"
import * as HarnessSession from "./HarnessSession.js"
import * as TrainingTrace from "./TrainingTrace.js"

/** Where and how to run rollouts remotely. @since 0.0.0 */
export interface HarborRemoteOptions {
  /** The Harbor server's root, e.g. http://127.0.0.1:8000. */
  readonly url: string
  /** Default: the server's first split. */
  readonly split?: string
  /** The harness to run; default the server's default. */
  readonly harness?: string
  /** The engine the server should generate on (the trainer's policy server); default the server's own. */
  readonly llmUrl?: string
  readonly agentTimeoutSec?: number
  /** Longest wait for one rollout. Default 30 minutes (OpenEnv's client: 1800 s). */
  readonly rolloutTimeout?: Duration.DurationInput
}

/** The Harbor server cannot be used as asked. @since 0.0.0 */
export class HarborServerError extends Data.TaggedError("HarborServerError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** A task as the server lists it (OpenEnv's HarborTaskRef). @since 0.0.0 */
export type TaskRef = HarborServe.HarborTaskRef

/** A connected Harbor server. @since 0.0.0 */
export interface HarborRemote {
  readonly tasks: ReadonlyArray<TaskRef>
  readonly rollout: (
    prompt: ReadonlyArray<HarnessSession.Message> | string,
    seed: number,
    episodeId: string
  ) => Effect.Effect<
    HarnessSession.HarnessRolloutOutcome,
    HarnessSession.CaptureContractError | HarnessSession.UnknownTask
  >
}

const textOf = (result: { readonly content: ReadonlyArray<{ readonly text: string }> }) => result.content[0]?.text ?? ""

const unscoreable = (task: string, reason: string): HarnessSession.HarnessRolloutOutcome => ({
  envReward: null,
  completion: [],
  trace: { schema_version: 1, turns: [] },
  toolCallCount: 0,
  toolFailureCount: 0,
  toolCallsByName: {},
  timedOut: false,
  task,
  unscoreable: reason,
  metrics: { task }
})

/**
 * A `HarborRolloutResult` (JSON) as a rollout outcome: its turns as a validated TrainingTrace.
 *
 * @since 0.0.0
 */
export const outcomeOf = (
  result: Readonly<Record<string, any>>,
  task: string
): Effect.Effect<HarnessSession.HarnessRolloutOutcome, HarnessSession.CaptureContractError> =>
  Effect.gen(function*() {
    if (result.ok !== true) {
      return unscoreable(task, `the server could not run it: ${result.exception_type ?? "error"}: ${result.error}`)
    }
    const turns = (Array.isArray(result.turns) ? result.turns : []) as Array<Record<string, any>>
    const trace = yield* TrainingTrace.decode({
      schema_version: 1,
      turns: turns.map((t, i) => ({
        node_id: typeof t.node_id === "string" && t.node_id !== "" ? t.node_id : String(i),
        prompt_token_ids: t.prompt_token_ids ?? [],
        completion_token_ids: t.completion_token_ids ?? [],
        per_token_logps: t.per_token_logps ?? [],
        loss_mask: t.loss_mask ?? [
          ...(t.prompt_token_ids ?? []).map(() => 0),
          ...(t.completion_token_ids ?? []).map(() => (t.trainable === false ? 0 : 1))
        ],
        request: {
          messages: t.request_messages ?? [],
          ...(Array.isArray(t.request_tools) ? { tools: t.request_tools } : {})
        },
        response: {
          choices: [{
            message: {
              role: "assistant",
              content: t.text ?? "",
              tool_calls: (t.tool_calls ?? []).map((c: Record<string, unknown>, j: number) => ({
                id: `call_${j}`,
                type: "function",
                function: { name: c.name, arguments: c.arguments }
              }))
            },
            finish_reason: t.finish_reason ?? "stop"
          }]
        },
        metadata: { role: t.role ?? "agent" }
      }))
    }).pipe(
      Effect.mapError((e) =>
        new HarnessSession.CaptureContractError({
          rule: e.rule,
          ...(e.turn === undefined ? {} : { turn: e.turn }),
          detail: `the Harbor server's result: ${e.detail}`
        })
      )
    )
    const byName = HarnessSession.toolCallsOf(trace)
    const reward = typeof result.reward === "number" ? result.reward : null
    const last = turns[turns.length - 1]
    return {
      envReward: reward,
      completion: last === undefined
        ? []
        : [...(last.request_messages ?? []), { role: "assistant", content: last.text ?? "" }],
      trace,
      toolCallCount: Object.values(byName).reduce((s, n) => s + n, 0),
      toolFailureCount: 0,
      toolCallsByName: byName,
      timedOut: Array.isArray(result.findings) && result.findings.includes("agent_timeout"),
      task,
      ...(reward === null ? { unscoreable: "the server returned no reward (never graded)" } : {}),
      metrics: { task, wall_s: typeof result.wall_s === "number" ? result.wall_s : 0 }
    } satisfies HarnessSession.HarnessRolloutOutcome
  })

/** What the Task API answered: the tasks, a refusal to pass on, or nothing usable (fall back to `list_tasks`). */
type Listing =
  | { readonly _tag: "Tasks"; readonly tasks: ReadonlyArray<TaskRef> }
  | { readonly _tag: "Refused"; readonly detail: string }
  | { readonly _tag: "Unavailable" }

/** `POST /harbor_env/task_range` for the whole split (stop null: Python's open slice), bounded by 10 s. */
const taskRange = (url: string, split: string): Effect.Effect<Listing> =>
  Effect.tryPromise(async (signal) => {
    const response = await fetch(`${url.replace(/\/+$/, "")}/harbor_env/task_range`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ split, start: 0, stop: null }),
      signal
    })
    const body = await response.json().catch(() => undefined) as Record<string, unknown> | undefined
    if (response.ok && Array.isArray(body?.tasks)) {
      return { _tag: "Tasks", tasks: body.tasks as Array<TaskRef> } as const
    }
    // An unknown split is the answer; any other status (no Task API: 404 Not Found, 501) means ask list_tasks.
    const detail = body?.detail
    if (response.status === 404 && typeof detail === "string" && detail.startsWith("unknown split")) {
      return { _tag: "Refused", detail } as const
    }
    return { _tag: "Unavailable" } as const
  }).pipe(
    Effect.timeout(Duration.seconds(10)),
    Effect.orElseSucceed((): Listing => ({ _tag: "Unavailable" }))
  )

/**
 * Connects: lists the split's tasks (Task API, else `list_tasks`), after checking the session limit
 * (maxConcurrentRollouts sessions, + 1 when the listing needs one).
 *
 * @since 0.0.0
 */
export const connect = (
  options: HarborRemoteOptions,
  maxConcurrentRollouts: number
): Effect.Effect<HarborRemote, HarborServerError, Scope.Scope> =>
  Effect.gen(function*() {
    const listing = yield* taskRange(options.url, options.split ?? "")
    if (listing._tag === "Refused") {
      return yield* new HarborServerError({ problem: `The Harbor server ${options.url} refused: ${listing.detail}` })
    }
    const needed = maxConcurrentRollouts + (listing._tag === "Tasks" ? 0 : 1)
    // Every probe session stays open until all are: the server counts them together.
    yield* Effect.scoped(
      Effect.forEach(
        Array.from({ length: needed }, (_, i) => i),
        () =>
          // capacityWait 0: a refusal here is the answer (the limit is too low), not a queue to wait in.
          Client.connect({ url: options.url, connectTimeout: "10 seconds", capacityWait: 0 }).pipe(
            Effect.mapError((e) =>
              e._tag === "CapacityReachedError"
                ? new HarborServerError({
                  problem: `The Harbor server ${options.url} allows fewer than ${needed} sessions ` +
                    `(maxConcurrentRollouts ${maxConcurrentRollouts}` +
                    (listing._tag === "Tasks" ? "" : " + 1 for the task list, as it has no Task API") +
                    `): ${e.message}. Start it ` +
                    `with MAX_CONCURRENT_ENVS=${needed} (or --max-concurrent-envs ${needed}), or lower ` +
                    `maxConcurrentRollouts.`
                })
                : new HarborServerError({ problem: `The Harbor server ${options.url} cannot be reached: ${e.message}` })
            )
          ),
        { concurrency: 1 }
      )
    )
    const tasks = listing._tag === "Tasks" ? listing.tasks : yield* Effect.gen(function*() {
      const meta = yield* Client.make({ url: options.url, messageTimeout: "60 seconds" })
      const listed = yield* meta.callTool("list_tasks", { split: options.split ?? "", start: 0, stop: 100_000 }).pipe(
        Effect.mapError((e) => new HarborServerError({ problem: `list_tasks failed on ${options.url}: ${e.message}` }))
      )
      return JSON.parse(textOf(listed)) as Array<TaskRef>
    })
    if (tasks.length === 0) {
      return yield* new HarborServerError({
        problem: `The Harbor server ${options.url} lists no tasks in split "${options.split ?? ""}".`
      })
    }
    const byInstruction = new Map<string, TaskRef>()
    for (const t of tasks) if (!byInstruction.has(t.instruction.trim())) byInstruction.set(t.instruction.trim(), t)
    const timeout = Duration.decode(options.rolloutTimeout ?? Duration.minutes(30))

    const rollout = (prompt: ReadonlyArray<HarnessSession.Message> | string, _seed: number, _episodeId: string) =>
      Effect.gen(function*() {
        const instruction = typeof prompt === "string"
          ? prompt.trim()
          : String(prompt.filter((m) => m.role === "user").at(-1)?.content ?? "").trim()
        const task = byInstruction.get(instruction)
        if (task === undefined) return yield* new HarnessSession.UnknownTask({ instruction })
        // One session per rollout, closed with it.
        const called = yield* Effect.scoped(Effect.gen(function*() {
          const client = yield* Client.make({ url: options.url, messageTimeout: timeout })
          return yield* client.callTool("run_rollout", {
            split: task.dataset,
            task_index: task.index,
            ...(options.harness === undefined ? {} : { harness: options.harness }),
            ...(options.llmUrl === undefined ? {} : { llm_url: options.llmUrl }),
            ...(options.agentTimeoutSec === undefined ? {} : { agent_timeout_sec: options.agentTimeoutSec })
          })
        })).pipe(Effect.either)
        if (called._tag === "Left") return unscoreable(task.task_name, `run_rollout failed: ${called.left.message}`)
        let result: Record<string, unknown>
        try {
          result = JSON.parse(textOf(called.right)) as Record<string, unknown>
        } catch {
          return unscoreable(task.task_name, "run_rollout's answer is not HarborRolloutResult JSON")
        }
        return yield* outcomeOf(result, task.task_name)
      })
    return { tasks, rollout } satisfies HarborRemote
  })
