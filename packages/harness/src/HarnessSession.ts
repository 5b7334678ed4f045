/**
 * The loop-owning session contract (OpenEnv's `ResourceSessionFactory` with the loop-owning extensions, as TRL's
 * harness worker drives it): a factory over a task suite, an agent, a capture proxy and the policy server's model
 * name; `create(prompt, seed, episodeId)` maps the prompt's instruction back to its task, opens a capture session
 * and a fresh sandbox, and returns a session with its `initialMessages`. `waitForCompletion(timeout)` runs the
 * agent to its end (or its wall-time limit: every process killed, the rollout marked timed out);
 * `fetchTrainingTrace` returns the proxy's capture after checking every TrainingTrace rule; `verify` runs the
 * task's verifier and gives the env reward, or null when the rollout cannot be scored; the scope closes the sandbox
 * and the capture session.
 *
 * Failure classes (as TRL's harness path draws them): a transport failure (the policy server unreachable, failing
 * or too slow, the agent's model endpoint refusing) makes the rollout unscoreable: `verify` answers null and
 * {@link rollout} returns an outcome with `envReward: null`. A malformed capture (a trace breaking a TrainingTrace
 * rule, or an engine answer the proxy could not capture) is a {@link CaptureContractError} naming the rule and the
 * turn, which stops training: it is a configuration fault every later rollout would repeat.
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { Effect } from "effect"
 * import { CaptureProxy, HarborTask, HarnessSession } from "@envtrain/harness"
 *
 * const program = Effect.gen(function*() {
 *   const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
 *   const proxy = yield* CaptureProxy.make({ upstream: "http://127.0.0.1:8000", model: "tiny" })
 *   const factory = HarnessSession.makeFactory({ tasks: suite.train, agent: HarnessSession.bashAgent(), proxy, model: "tiny" })
 *   const outcome = yield* HarnessSession.rollout(factory, factory.promptRows()[0].prompt, 0, "episode-0")
 *   console.log(outcome.envReward, outcome.toolCallsByName, outcome.timedOut)
 * }).pipe(Effect.scoped, Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import type { FileSystem, Path } from "@effect/platform"
import type { Scope } from "effect"
import { Data, Duration, Effect, Option } from "effect"
import * as BashAgent from "./BashAgent.js"
import type { RunningCaptureProxy, SessionStatus } from "./CaptureProxy.js"
import type * as HarborTask from "./HarborTask.js"
import * as MiniSweAgent from "./MiniSweAgent.js"
import * as Sandbox from "./Sandbox.js"
import * as TrainingTrace from "./TrainingTrace.js"

/** A chat message as agents and traces carry it. @since 0.0.0 */
export type Message = Readonly<Record<string, unknown>>

/** What an agent is given for one rollout. @since 0.0.0 */
export interface AgentContext {
  readonly task: HarborTask.HarborTask
  readonly sandbox: Sandbox.Sandbox
  /** The capture proxy's OpenAI base URL as the host sees it (`…/v1`); inside the sandbox use `sandbox.endpointUrl`. */
  readonly baseUrl: string
  /** The capture session id: the API key to present. */
  readonly apiKey: string
  /** The served model name. */
  readonly model: string
}

/** What an agent reports when it ends (the trace says the rest). @since 0.0.0 */
export interface AgentReport {
  /** The final transcript, when the agent keeps one. */
  readonly messages?: ReadonlyArray<Message>
  /** Tool calls that failed, when the agent counts them (else they are read off the trace). */
  readonly toolFailures?: number
  /** Anything to keep with the rollout (the agent's exit code, its stop reason). */
  readonly metrics?: Readonly<Record<string, number | string>>
}

/** The agent could not run to its end (its model endpoint failed, the command crashed). @since 0.0.0 */
export class AgentFailed extends Data.TaggedError("AgentFailed")<{ readonly message: string }> {}

/**
 * An agent: its name and how to run it in a sandbox. `sandboxBinds` are read-only host paths the sandbox must
 * hold (a Python environment).
 *
 * @since 0.0.0
 */
export interface Agent {
  readonly name: string
  readonly run: (context: AgentContext) => Effect.Effect<AgentReport, AgentFailed>
  readonly sandboxBinds?: Effect.Effect<
    ReadonlyArray<{ readonly host: string; readonly at?: string }>,
    AgentFailed,
    FileSystem.FileSystem | Path.Path
  >
}

/**
 * The built-in bash-tool loop (`BashAgent`), run on the host against the capture proxy, its commands in the
 * sandbox.
 *
 * @since 0.0.0
 */
export const bashAgent = (
  options: Omit<BashAgent.BashAgentOptions, "baseUrl" | "apiKey" | "model" | "instruction"> = {}
): Agent => ({
  name: "bash-agent",
  run: (c) =>
    BashAgent.run(c.sandbox, {
      ...options,
      baseUrl: c.baseUrl,
      apiKey: c.apiKey,
      model: c.model,
      instruction: c.task.instruction
    })
      .pipe(
        Effect.map((r): AgentReport => ({
          messages: r.messages as unknown as ReadonlyArray<Message>,
          toolFailures: r.toolFailures,
          metrics: { steps: r.steps, stop_reason: r.stopReason }
        })),
        Effect.mapError((e) => new AgentFailed({ message: e.message }))
      )
})

/**
 * mini-swe-agent (PyPI), unmodified, inside the sandbox, reaching the proxy through the sandbox's one endpoint.
 * `venv` is the Python environment holding it (bound read-only into every sandbox).
 *
 * @since 0.0.0
 */
export const miniSweAgent = (
  options: { readonly venv: string } & Omit<MiniSweAgent.MiniSweAgentOptions, "task" | "model" | "apiKey">
): Agent => ({
  name: "mini-swe-agent",
  sandboxBinds: MiniSweAgent.binds(options.venv).pipe(Effect.mapError((e) => new AgentFailed({ message: e.message }))),
  run: (c) =>
    MiniSweAgent.run(c.sandbox, { ...options, task: c.task, model: c.model, apiKey: c.apiKey }).pipe(
      Effect.mapError((e) => new AgentFailed({ message: e.message })),
      Effect.flatMap((r) =>
        r.exitCode === 0
          ? Effect.succeed<AgentReport>({ metrics: { exit_code: 0 } })
          : Effect.fail(
            new AgentFailed({
              message: `mini-swe-agent exited ${r.exitCode ?? r.signal}: ${(r.stderr || r.stdout).slice(-800)}`
            })
          )
      )
    )
})

/**
 * Harbor's oracle: asks the model once through the proxy (so the rollout has a capture, and a dead model endpoint
 * shows), then runs the task's own solution (solution/solve.sh, one command per line) in the sandbox whatever the
 * model said. A check of the plumbing (sandbox, capture, verifier), not a policy.
 *
 * @since 0.0.0
 */
export const oracleAgent = (options: { readonly maxTokens?: number } = {}): Agent => ({
  name: "oracle",
  run: (c) =>
    Effect.gen(function*() {
      const asked = yield* BashAgent.run(c.sandbox, {
        baseUrl: c.baseUrl,
        apiKey: c.apiKey,
        model: c.model,
        instruction: c.task.instruction,
        maxSteps: 1,
        maxTokens: options.maxTokens ?? 8,
        // The model's own commands are not run: the oracle runs the solution instead.
        systemPrompt: BashAgent.defaultSystemPrompt
      }).pipe(Effect.mapError((e) => new AgentFailed({ message: e.message })))
      let failures = 0
      for (const command of c.task.solverCommands) {
        const r = yield* c.sandbox.exec(command).pipe(Effect.mapError((e) => new AgentFailed({ message: e.message })))
        if (r.exitCode !== 0) failures++
      }
      return {
        messages: asked.messages as unknown as ReadonlyArray<Message>,
        toolFailures: failures,
        metrics: { steps: 1 }
      }
    })
})

/**
 * A capture that breaks the capture contract: a TrainingTrace rule (`rule`, `turn`), or an engine answer the proxy
 * could not capture (`rule` "engine_answer"). Training stops on it.
 *
 * @since 0.0.0
 */
export class CaptureContractError extends Data.TaggedError("CaptureContractError")<{
  readonly rule: string
  readonly turn?: number
  readonly detail: string
}> {
  override get message() {
    return `Malformed capture${this.turn === undefined ? "" : ` at turn ${this.turn}`} (rule ${this.rule}): ` +
      `${this.detail}. Training stops: every rollout would repeat it; fix the policy server (token ids and ` +
      `logprobs: serve-policy, or vLLM with --return-tokens-as-token-ids and processed logprobs) or the capture.`
  }
}

/** The prompt names no task of the factory's suite. @since 0.0.0 */
export class UnknownTask extends Data.TaggedError("UnknownTask")<{ readonly instruction: string }> {
  override get message() {
    return `The prompt's instruction does not match any task of the suite ("${this.instruction.slice(0, 80)}…"); ` +
      "build the dataset from the factory's promptRows()."
  }
}

/** The sandbox or the capture session could not be set up (a transport-class failure: unscoreable). @since 0.0.0 */
export class SessionSetupError extends Data.TaggedError("SessionSetupError")<{ readonly message: string }> {}

/** What `verify` returns (OpenEnv's VerifyResult). @since 0.0.0 */
export interface VerifyResult {
  /** The verifier's reward; null: the rollout cannot be scored (never 0). */
  readonly envReward: number | null
  readonly done: boolean
  readonly metrics: Readonly<Record<string, number | string>>
  /** Paths on the host (the workspace copy, while the session is open) and the verifier's output. */
  readonly artifacts: Readonly<Record<string, string>>
}

/** What `waitForCompletion` returns. @since 0.0.0 */
export interface Completion {
  /** 0: the agent ran to its end; 1: it failed or timed out (the capture so far is still usable). */
  readonly exitCode: 0 | 1
  readonly timedOut: boolean
  readonly error?: string
}

/** One rollout's session. @since 0.0.0 */
export interface HarnessSession {
  readonly task: HarborTask.HarborTask
  readonly episodeId: string
  readonly seed: number
  /** The capture session id (the agent's API key). */
  readonly captureSession: string
  readonly initialMessages: ReadonlyArray<Message>
  /** Runs the agent to its end, or until `timeout` (default: the task's agent limit) kills it. Never fails. */
  readonly waitForCompletion: (timeout?: Duration.DurationInput) => Effect.Effect<Completion>
  /** The capture, every rule checked. */
  readonly fetchTrainingTrace: Effect.Effect<TrainingTrace.TrainingTrace, CaptureContractError>
  /** The capture session's status (turns, conversations, failures). */
  readonly captureStatus: Effect.Effect<SessionStatus>
  /** Runs the verifier (after a transport failure: null without running it). */
  readonly verify: Effect.Effect<VerifyResult>
  /** What the agent reported (after `waitForCompletion`). */
  readonly report: Effect.Effect<Option.Option<AgentReport>>
}

/** Options of {@link makeFactory}. @since 0.0.0 */
export interface FactoryOptions {
  readonly tasks: ReadonlyArray<HarborTask.HarborTask>
  readonly agent: Agent
  readonly proxy: RunningCaptureProxy
  /** The served model name the agent asks for. */
  readonly model: string
  /** Overrides every task's agent wall-time limit. */
  readonly agentTimeout?: Duration.DurationInput
  /** Sandbox options beyond the task, endpoint and binds (memory, bwrap path, env). */
  readonly sandbox?: Omit<Sandbox.SandboxOptions, "task" | "endpoint" | "readOnlyBinds" | "agentTimeout">
}

/** The factory: prompt rows for a dataset, and `create`. @since 0.0.0 */
export interface HarnessSessionFactory {
  readonly agent: Agent
  readonly tasks: ReadonlyArray<HarborTask.HarborTask>
  /** One dataset row per task: `{prompt: [{role: "user", content: instruction}], task}`. */
  readonly promptRows: () => ReadonlyArray<{
    readonly prompt: ReadonlyArray<{ readonly role: "user"; readonly content: string }>
    readonly task: string
  }>
  /** The task a prompt (messages, or the instruction itself) names. */
  readonly taskOf: (prompt: ReadonlyArray<Message> | string) => Effect.Effect<HarborTask.HarborTask, UnknownTask>
  readonly create: (
    prompt: ReadonlyArray<Message> | string,
    seed: number,
    episodeId: string
  ) => Effect.Effect<HarnessSession, UnknownTask | SessionSetupError, Scope.Scope | FileSystem.FileSystem | Path.Path>
}

const instructionOf = (prompt: ReadonlyArray<Message> | string): string => {
  if (typeof prompt === "string") return prompt.trim()
  const users = prompt.filter((m) => m.role === "user")
  const last = users[users.length - 1]
  return typeof last?.content === "string" ? last.content.trim() : ""
}

/**
 * The factory over a task list. Tasks are matched by their instruction text (the first task wins among
 * duplicates, as OpenEnv's HarborSessionFactory).
 *
 * @since 0.0.0
 */
export const makeFactory = (options: FactoryOptions): HarnessSessionFactory => {
  const byInstruction = new Map<string, HarborTask.HarborTask>()
  for (const task of options.tasks) {
    if (!byInstruction.has(task.instruction.trim())) byInstruction.set(task.instruction.trim(), task)
  }
  const taskOf = (prompt: ReadonlyArray<Message> | string) =>
    Effect.suspend(() => {
      const instruction = instructionOf(prompt)
      const task = byInstruction.get(instruction)
      return task === undefined ? Effect.fail(new UnknownTask({ instruction })) : Effect.succeed(task)
    })
  const create = (prompt: ReadonlyArray<Message> | string, seed: number, episodeId: string) =>
    Effect.gen(function*() {
      const task = yield* taskOf(prompt)
      const proxy = options.proxy
      const captureSession = yield* Effect.acquireRelease(
        proxy.open({ label: `${task.name}/${episodeId}` }),
        (id) => Effect.ignore(proxy.close(id))
      )
      const binds = options.agent.sandboxBinds === undefined ? [] : yield* options.agent.sandboxBinds.pipe(
        Effect.mapError((e) => new SessionSetupError({ message: e.message }))
      )
      const limit = options.agentTimeout ?? Duration.seconds(task.config.agentTimeoutSec)
      const sandbox = yield* Sandbox.make({
        ...options.sandbox,
        task,
        endpoint: proxy.socketPath === undefined ? { url: proxy.url } : { socket: proxy.socketPath },
        readOnlyBinds: binds,
        agentTimeout: limit
      }).pipe(Effect.mapError((e) => new SessionSetupError({ message: e.message })))
      let report = Option.none<AgentReport>()
      let ran: Completion | undefined
      const captureStatus = Effect.orDie(proxy.status(captureSession))
      const session: HarnessSession = {
        task,
        episodeId,
        seed,
        captureSession,
        initialMessages: [{ role: "user", content: task.instruction }],
        waitForCompletion: (timeout) =>
          Effect.gen(function*() {
            const agent = options.agent.run({
              task,
              sandbox,
              baseUrl: `${proxy.url}/v1`,
              apiKey: captureSession,
              model: options.model
            })
            const bounded = timeout === undefined
              ? agent
              : Effect.flatMap(
                Effect.timeoutOption(agent, timeout),
                (o) => Option.isSome(o) ? Effect.succeed(o.value) : Effect.as(sandbox.killAll, undefined)
              )
            const result = yield* sandbox.runAgent(Effect.either(bounded))
            const value = Option.getOrUndefined(result.value)
            const timedOut = result.timedOut || value === undefined ||
              (value._tag === "Right" && value.right === undefined)
            if (value !== undefined && value._tag === "Right" && value.right !== undefined) {
              report = Option.some(value.right)
            }
            ran = timedOut
              ? { exitCode: 1, timedOut: true }
              : value!._tag === "Left"
              ? { exitCode: 1, timedOut: false, error: value!.left.message }
              : { exitCode: 0, timedOut: false }
            return ran
          }),
        fetchTrainingTrace: Effect.gen(function*() {
          const status = yield* captureStatus
          const contract = status.failures.find((f) => f.kind === "contract")
          if (contract !== undefined) {
            return yield* new CaptureContractError({ rule: "engine_answer", detail: contract.message })
          }
          const trace = yield* Effect.orDie(proxy.trace(captureSession))
          return yield* TrainingTrace.validate(trace).pipe(
            Effect.mapError((e) =>
              new CaptureContractError({
                rule: e.rule,
                ...(e.turn === undefined ? {} : { turn: e.turn }),
                detail: e.detail
              })
            )
          )
        }),
        captureStatus,
        report: Effect.sync(() => report),
        verify: Effect.gen(function*() {
          const status = yield* captureStatus
          const metrics: Record<string, number | string> = {
            task: task.name,
            turns: status.n_turns,
            timed_out: ran?.timedOut === true ? 1 : 0
          }
          const artifacts = { workspace: sandbox.workspace }
          if (status.transport_failure !== null) {
            return {
              envReward: null,
              done: false,
              metrics: { ...metrics, unscoreable: `transport failure: ${status.transport_failure}` },
              artifacts
            }
          }
          const verified = yield* Effect.either(sandbox.verify)
          if (verified._tag === "Left") {
            return {
              envReward: null,
              done: false,
              metrics: { ...metrics, unscoreable: `the verifier could not run: ${verified.left.message}` },
              artifacts
            }
          }
          const v = verified.right
          const out = { ...artifacts, verifier_stdout: v.exec.stdout.slice(-2000) }
          return v.reward._tag === "Scored"
            ? { envReward: v.reward.reward, done: true, metrics: { ...metrics, ...v.reward.rewards }, artifacts: out }
            : { envReward: null, done: true, metrics: { ...metrics, unscoreable: v.reward.reason }, artifacts: out }
        })
      }
      return session
    })
  return {
    agent: options.agent,
    tasks: options.tasks,
    promptRows: () => options.tasks.map((t) => ({ prompt: [{ role: "user", content: t.instruction }], task: t.name })),
    taskOf,
    create
  }
}

/**
 * TRL's `HarnessRolloutOutcome`: what `rollout_reward_fn` sees.
 *
 * @since 0.0.0
 */
export interface HarnessRolloutOutcome {
  /** The verifier's reward; null: unscoreable. */
  readonly envReward: number | null
  /** The final transcript (the agent's own, or the last captured request plus its answer). */
  readonly completion: ReadonlyArray<Message>
  /** The validated capture (empty when the session could not start). */
  readonly trace: TrainingTrace.TrainingTrace
  readonly toolCallCount: number
  readonly toolFailureCount: number
  readonly toolCallsByName: Readonly<Record<string, number>>
  readonly timedOut: boolean
  /** Which task, and why it is unscoreable (when it is). */
  readonly task: string
  readonly unscoreable?: string
  readonly metrics: Readonly<Record<string, number | string>>
}

const emptyTrace: TrainingTrace.TrainingTrace = { schema_version: 1, turns: [] }

/** Tool calls by name over every captured answer (zero-masked turns count too, as TRL counts them). @since 0.0.0 */
export const toolCallsOf = (trace: TrainingTrace.TrainingTrace): Record<string, number> => {
  const byName: Record<string, number> = {}
  for (const turn of trace.turns) {
    const choices = turn.response["choices"]
    const message = Array.isArray(choices) ? (choices[0] as { message?: { tool_calls?: unknown } })?.message : undefined
    const calls = Array.isArray(message?.tool_calls) ? message.tool_calls : []
    for (const call of calls as Array<{ function?: { name?: unknown } }>) {
      const name = typeof call?.function?.name === "string" ? call.function.name : "(unnamed)"
      byName[name] = (byName[name] ?? 0) + 1
    }
  }
  return byName
}

// TRL's fallback when the agent does not count: tool results in the last request that read as failures.
const failuresOf = (trace: TrainingTrace.TrainingTrace): number => {
  const last = trace.turns[trace.turns.length - 1]
  const messages = Array.isArray(last?.request["messages"]) ? last.request["messages"] as Array<Message> : []
  const seen = new Set<string>()
  for (const m of messages) {
    if (m.role !== "tool" || typeof m.content !== "string") continue
    if (/error|failed|traceback|exception/i.test(m.content)) seen.add(`${String(m.name)}:${m.content.slice(0, 200)}`)
  }
  return seen.size
}

const transcriptOf = (trace: TrainingTrace.TrainingTrace): ReadonlyArray<Message> => {
  const last = trace.turns[trace.turns.length - 1]
  if (last === undefined) return []
  const messages = Array.isArray(last.request["messages"]) ? last.request["messages"] as Array<Message> : []
  const choices = last.response["choices"]
  const reply = Array.isArray(choices) ? (choices[0] as { message?: Message })?.message : undefined
  return reply === undefined ? messages : [...messages, reply]
}

/**
 * One whole rollout (TRL's `_run_session`): create, wait for completion, fetch the trace, verify, close. A session
 * that cannot start, an agent whose model endpoint failed: an outcome with `envReward: null` (unscoreable). A
 * malformed capture: {@link CaptureContractError}.
 *
 * @since 0.0.0
 */
export const rollout = (
  factory: HarnessSessionFactory,
  prompt: ReadonlyArray<Message> | string,
  seed: number,
  episodeId: string,
  options: { readonly timeout?: Duration.DurationInput } = {}
): Effect.Effect<HarnessRolloutOutcome, CaptureContractError | UnknownTask, FileSystem.FileSystem | Path.Path> =>
  Effect.scoped(
    Effect.gen(function*() {
      const task = yield* factory.taskOf(prompt)
      const created = yield* Effect.either(factory.create(prompt, seed, episodeId))
      if (created._tag === "Left") {
        if (created.left._tag === "UnknownTask") return yield* created.left
        return {
          envReward: null,
          completion: [],
          trace: emptyTrace,
          toolCallCount: 0,
          toolFailureCount: 0,
          toolCallsByName: {},
          timedOut: false,
          task: task.name,
          unscoreable: created.left.message,
          metrics: { task: task.name }
        } satisfies HarnessRolloutOutcome
      }
      const session = created.right
      const completion = yield* session.waitForCompletion(options.timeout)
      const trace = yield* session.fetchTrainingTrace
      const verified = yield* session.verify
      const report = Option.getOrUndefined(yield* session.report)
      const byName = toolCallsOf(trace)
      const unscoreable = verified.envReward === null
        ? String(verified.metrics["unscoreable"] ?? completion.error ?? "no reward")
        : undefined
      return {
        envReward: verified.envReward,
        completion: report?.messages ?? transcriptOf(trace),
        trace,
        toolCallCount: Object.values(byName).reduce((s, n) => s + n, 0),
        toolFailureCount: report?.toolFailures ?? failuresOf(trace),
        toolCallsByName: byName,
        timedOut: completion.timedOut,
        task: task.name,
        ...(unscoreable === undefined ? {} : { unscoreable }),
        metrics: {
          ...verified.metrics,
          ...report?.metrics,
          ...(completion.error === undefined ? {} : { agent_error: completion.error.slice(0, 500) })
        }
      } satisfies HarnessRolloutOutcome
    })
  )
