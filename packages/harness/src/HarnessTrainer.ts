/**
 * Harness GRPO: training a black-box agent on Harbor tasks with grpo's trainer (synchronous or async GRPO), TRL's
 * harness worker as one Effect. Generation happens on policy servers (`policyServers` is required: the trainer
 * pushes its weights there after every step); each server gets its own capture proxy, and each rollout runs the
 * agent in its own sandbox against the least busy proxy, through `HarnessSession.rollout`. The trainer's
 * `rolloutFunc` turns the outcome into the episode's record:
 *
 * - rows come from the validated trace's token ids and loss masks only (never re-tokenised): `TrainingTrace.rows`
 *   chains turns by exact token prefix, and a rewritten history starts a new row; every row of a rollout is one
 *   segment of its record (`EpisodeRecord.segments`), so they share its reward and advantage;
 * - the reward is `rolloutRewardFn(outcome)` (default: the verifier's `envReward`); null is unscoreable: the
 *   rollout leaves its group's baseline, gets advantage 0 and no gradient (never a 0 reward);
 * - a malformed capture (`CaptureContractError`) stops training with the rule and the turn; a transport failure
 *   only makes its rollout unscoreable.
 *
 * Metrics: the trainer's own (metrics.jsonl, rewards per task as `env/<task>/reward`, `unscoreable_frac`,
 * `tools/*`), plus one line per optimizer step in `harness.jsonl` beside them: the rollouts finished since the last
 * line, their tool calls by name, timeouts, unscoreable fraction, mean env reward and success rate. Checkpoints and
 * resume are the trainer's. {@link evaluate} measures task success on held-out tasks.
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { Checkpoint } from "@envtrain/gpu"
 * import { Config, Trainer } from "@envtrain/grpo"
 * import { HarborTask, HarnessSession, HarnessTrainer } from "@envtrain/harness"
 * import { Effect } from "effect"
 *
 * const program = Effect.gen(function*() {
 *   const suite = yield* HarborTask.loadSuite(HarborTask.shippedSuiteDir)
 *   const config = yield* Config.fromSources({
 *     outputDir: "runs/harness",
 *     policyServers: ["http://127.0.0.1:8000"],
 *     numGenerations: 4,
 *     maxSteps: 20
 *   })
 *   const result = yield* HarnessTrainer.train({
 *     config,
 *     model: Trainer.referenceModel(yield* Checkpoint.load("models/tiny-sft")),
 *     tasks: suite.train,
 *     agent: HarnessSession.bashAgent({ maxSteps: 6 })
 *   })
 *   const heldOut = yield* HarnessTrainer.evaluate({
 *     tasks: suite.heldOut,
 *     agent: HarnessSession.bashAgent({ temperature: 0 }),
 *     policyServer: "http://127.0.0.1:8000"
 *   })
 *   console.log(result.globalStep, heldOut.successRate)
 * }).pipe(Effect.provide(NodeContext.layer))
 * ```
 *
 * @since 0.0.0
 */
import { FileSystem, Path } from "@effect/platform"
import type * as Config from "@envtrain/grpo/Config"
import * as Dataset from "@envtrain/grpo/Dataset"
import * as Metrics from "@envtrain/grpo/Metrics"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Reward from "@envtrain/grpo/Reward"
import * as Trainer from "@envtrain/grpo/Trainer"
import type { EpisodeRecord } from "@envtrain/rollout/Episode"
import type { ChatMessage } from "@envtrain/text/ChatTemplate"
import { Data, type Duration, Effect } from "effect"
import * as CaptureProxy from "./CaptureProxy.js"
import * as HarborRemote from "./HarborRemote.js"
import type * as HarborTask from "./HarborTask.js"
import * as HarnessSession from "./HarnessSession.js"
import * as TrainingTrace from "./TrainingTrace.js"

/** The episode state the trainer's reward function reads: the rollout's outcome in brief. @since 0.0.0 */
export interface HarnessState {
  readonly task: string
  /** What `rolloutRewardFn` returned (null: unscoreable). */
  readonly reward: number | null
  readonly envReward: number | null
  readonly timedOut: boolean
  readonly toolCallsByName: Readonly<Record<string, number>>
  readonly unscoreable?: string
}

/** What stops a harness run from inside a rollout. @since 0.0.0 */
export type RunStop = HarnessSession.CaptureContractError | HarnessSession.UnknownTask

/** The harness run is misconfigured. @since 0.0.0 */
export class HarnessConfigError extends Data.TaggedError("HarnessConfigError")<{ readonly problem: string }> {
  override get message() {
    return this.problem
  }
}

/** Options of {@link train}. @since 0.0.0 */
export interface HarnessTrainOptions {
  /** The GRPO configuration; `policyServers` must name at least one server. */
  readonly config: Config.GRPOConfig
  /** The local model (scoring, gradients, checkpoints); the servers must serve the same weights at the start. */
  readonly model: Trainer.TrainableModel
  /** The training tasks: one dataset row per task (its instruction as the user prompt). Not with `harborServer`. */
  readonly tasks?: ReadonlyArray<HarborTask.HarborTask>
  /** The agent run in local sandboxes. Not with `harborServer`. */
  readonly agent?: HarnessSession.Agent
  /**
   * Instead of local sandboxes: run every rollout on a Harbor server (`envtrain harness serve`, or OpenEnv's), its
   * split's tasks as the dataset; it should generate on the trainer's policy server (`llmUrl`). Needs
   * `maxConcurrentRollouts`; the server must allow that many sessions, + 1 without the Task API (checked first).
   */
  readonly harborServer?: HarborRemote.HarborRemoteOptions
  /** TRL's `rollout_reward_fn`; default the verifier's reward. null = unscoreable. */
  readonly rolloutRewardFn?: (outcome: HarnessSession.HarnessRolloutOutcome) => number | null
  /** Rollouts (sandboxes) in flight at once. Default: one generation batch. */
  readonly maxConcurrentRollouts?: number
  /** Overrides every task's agent wall-time limit. */
  readonly agentTimeout?: Duration.DurationInput
  /** Merged into every upstream body; default `{chat_template_kwargs: {enable_thinking: false}}`. */
  readonly extraBody?: Readonly<Record<string, unknown>>
  /** Sandbox options beyond the task (memory, bwrap). */
  readonly sandbox?: HarnessSession.FactoryOptions["sandbox"]
  readonly resume?: boolean | string
  readonly progress?: false
  readonly title?: string
  readonly stopAfter?: number
  readonly onStep?: (step: Trainer.StepResult) => Effect.Effect<void>
  /** Called with every finished rollout and the record the trainer got for it (tests, custom logging). */
  readonly onRollout?: (
    outcome: HarnessSession.HarnessRolloutOutcome,
    record: EpisodeRecord<HarnessState>
  ) => Effect.Effect<void>
}

/** One line of harness.jsonl. @since 0.0.0 */
export interface HarnessStepRecord {
  readonly step: number
  readonly rollouts: number
  readonly timeouts: number
  readonly unscoreable: number
  readonly unscoreable_frac: number
  readonly env_reward_mean: number | null
  readonly success_rate: number | null
  readonly tool_calls: number
  readonly tool_failures: number
  readonly tool_calls_by_name: Readonly<Record<string, number>>
  readonly trainable_tokens: number
  readonly rows: number
}

/** Where the harness metrics go, beside the trainer's. @since 0.0.0 */
export const harnessMetricsFile = "harness.jsonl"

const defaultExtraBody = { chat_template_kwargs: { enable_thinking: false } }

/** The served model name of a policy server (its `/v1/models`). @since 0.0.0 */
export const servedModel = (url: string) =>
  Effect.tryPromise({
    try: async (signal) => {
      const r = await fetch(`${url.replace(/\/+$/, "")}/v1/models`, { signal })
      const json = await r.json() as { data?: Array<{ id?: unknown }> }
      const id = json.data?.[0]?.id
      if (typeof id !== "string") throw new Error("its /v1/models names no model")
      return id
    },
    catch: (e) =>
      new HarnessConfigError({
        problem: `The policy server ${url} did not say which model it serves (${
          e instanceof Error ? e.message : String(e)
        }); start it with \`envtrain serve-policy\` and check the URL.`
      })
  }).pipe(
    Effect.timeoutFail({
      duration: "30 seconds",
      onTimeout: () =>
        new HarnessConfigError({ problem: `The policy server ${url} did not answer /v1/models in 30 s.` })
    })
  )

const userMessagesEnd = (messages: ReadonlyArray<HarnessSession.Message>) => {
  const i = messages.findIndex((m) => m.role === "user")
  return i < 0 ? 0 : i + 1
}

// The running tallies between two harness.jsonl lines.
const emptyTally = () => ({
  rollouts: 0,
  timeouts: 0,
  unscoreable: 0,
  rewards: [] as Array<number>,
  successes: 0,
  toolCalls: 0,
  toolFailures: 0,
  byName: {} as Record<string, number>,
  trainable: 0,
  rows: 0
})

/**
 * Runs harness GRPO. Fails with `HarnessConfigError` when no policy server is configured, with
 * `CaptureContractError` on a malformed capture, and with the trainer's own errors.
 *
 * @since 0.0.0
 */
export const train = (options: HarnessTrainOptions) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const config = options.config
    if (config.policyServers.length === 0) {
      return yield* new HarnessConfigError({
        problem: "Harness training generates on policy servers: set policyServers (start one with `envtrain " +
          "serve-policy --model <the same checkpoint>`); the agents reach it through a capture proxy."
      })
    }
    type Source = {
      readonly rows: ReadonlyArray<
        { readonly prompt: ReadonlyArray<{ readonly role: "user"; readonly content: string }>; readonly task: string }
      >
      readonly rollout: (
        prompt: ReadonlyArray<HarnessSession.Message>,
        seed: number,
        episodeId: string
      ) => Effect.Effect<HarnessSession.HarnessRolloutOutcome, RunStop, FileSystem.FileSystem | Path.Path>
    }
    const remoteOptions = options.harborServer
    let source: Source
    if (remoteOptions !== undefined) {
      if (options.agent !== undefined || options.tasks !== undefined) {
        return yield* new HarnessConfigError({
          problem: "harborServer runs the server's own agents on its own tasks: leave agent and tasks out."
        })
      }
      if (options.maxConcurrentRollouts === undefined) {
        return yield* new HarnessConfigError({
          problem: "With harborServer, set maxConcurrentRollouts (the server must allow that many sessions, " +
            "+ 1 if it has no Task API)."
        })
      }
      const remote = yield* HarborRemote.connect(remoteOptions, options.maxConcurrentRollouts)
      source = {
        rows: remote.tasks.map((t) => ({
          prompt: [{ role: "user" as const, content: t.instruction }],
          task: t.task_name
        })),
        rollout: remote.rollout
      }
    } else {
      const tasks = options.tasks ?? []
      const agent = options.agent
      if (tasks.length === 0 || agent === undefined) {
        return yield* new HarnessConfigError({
          problem: "Pass the training tasks (the suite's train split) and the agent, or a harborServer."
        })
      }
      // One capture proxy per policy server; a rollout goes to the one with the fewest rollouts in flight.
      const proxies = yield* Effect.forEach(config.policyServers, (url) =>
        Effect.gen(function*() {
          const model = yield* servedModel(url)
          const proxy = yield* CaptureProxy.make({
            upstream: url,
            model,
            extraBody: options.extraBody ?? defaultExtraBody
          })
          const factory = HarnessSession.makeFactory({
            tasks,
            agent,
            proxy,
            model,
            ...(options.agentTimeout === undefined ? {} : { agentTimeout: options.agentTimeout }),
            ...(options.sandbox === undefined ? {} : { sandbox: options.sandbox })
          })
          return { factory, inFlight: 0 }
        }))
      source = {
        rows: tasks.map((t) => ({ prompt: [{ role: "user" as const, content: t.instruction }], task: t.name })),
        rollout: (prompt, seed, episodeId) =>
          Effect.suspend(() => {
            const slot = proxies.reduce((a, b) => (b.inFlight < a.inFlight ? b : a))
            slot.inFlight++
            return HarnessSession.rollout(slot.factory, prompt, seed, episodeId).pipe(
              Effect.ensuring(Effect.sync(() => slot.inFlight--))
            )
          })
      }
    }
    const model = yield* PolicyServers.forConfig(options.model, config)
    const rewardOf = options.rolloutRewardFn ?? ((o: HarnessSession.HarnessRolloutOutcome) => o.envReward)
    const metricsPath = path.join(config.outputDir, harnessMetricsFile)
    let tally = emptyTally()
    let firstStep = true
    const context = yield* Effect.context<FileSystem.FileSystem | Path.Path>()

    const rolloutFunc: Trainer.RolloutFunc<HarnessState, RunStop, never> = (input) =>
      Effect.gen(function*() {
        const episodeId = `step${input.trainer.globalStep}-p${input.promptIndex}-g${input.generation}`
        const outcome = yield* source.rollout(
          input.prompt as unknown as ReadonlyArray<HarnessSession.Message>,
          input.envSeed,
          episodeId
        ).pipe(
          // A malformed capture, or a prompt naming no task (the dataset's fault), stops the run.
          Effect.provide(context)
        )
        const reward = outcome.envReward === null && options.rolloutRewardFn === undefined ? null : rewardOf(outcome)
        const segments = TrainingTrace.rows(outcome.trace)
        const p = input.progress
        const first = segments[0]
        p.environment = outcome.task
        if (first !== undefined) {
          p.promptIds = first.promptIds
          p.completionIds.push(...first.completionIds)
          p.mask.push(...first.mask)
          p.logprobs.push(...first.logprobs)
        }
        const messages = outcome.completion as unknown as Array<ChatMessage>
        p.messages = messages.slice()
        p.promptMessageCount = userMessagesEnd(outcome.completion)
        p.turns = outcome.trace.turns.length
        p.stopReason = "no_tool_call"
        const unscoreable = reward === null
          ? outcome.unscoreable ?? "rolloutRewardFn returned null"
          : undefined
        p.state = {
          task: outcome.task,
          reward,
          envReward: outcome.envReward,
          timedOut: outcome.timedOut,
          toolCallsByName: outcome.toolCallsByName,
          ...(unscoreable === undefined ? {} : { unscoreable })
        }
        const finished = p.finish(unscoreable === undefined ? undefined : { reason: unscoreable, tag: "Unscoreable" })
        const toolStats: Record<string, { calls: number; failures: number }> = {}
        for (const [name, calls] of Object.entries(outcome.toolCallsByName)) toolStats[name] = { calls, failures: 0 }
        const record: EpisodeRecord<HarnessState> = {
          ...finished,
          toolCallCount: outcome.toolCallCount,
          toolFailureCount: outcome.toolFailureCount,
          toolStats,
          truncated: segments.some((s) => s.truncated),
          segments
        }
        // The tallies for harness.jsonl.
        tally.rollouts++
        if (outcome.timedOut) tally.timeouts++
        if (reward === null) tally.unscoreable++
        if (outcome.envReward !== null) {
          tally.rewards.push(outcome.envReward)
          if (outcome.envReward > 0) tally.successes++
        }
        tally.toolCalls += outcome.toolCallCount
        tally.toolFailures += outcome.toolFailureCount
        for (const [name, n] of Object.entries(outcome.toolCallsByName)) {
          tally.byName[name] = (tally.byName[name] ?? 0) + n
        }
        tally.rows += segments.length
        for (const s of segments) for (const m of s.mask) tally.trainable += m
        if (options.onRollout !== undefined) yield* options.onRollout(outcome, record)
        return record
      })

    const writeStep = (step: number) =>
      Effect.gen(function*() {
        // On resume, lines past the checkpoint were logged by the interrupted run: drop them.
        if (firstStep) {
          firstStep = false
          if (yield* fs.exists(metricsPath).pipe(Effect.orElseSucceed(() => false))) {
            yield* Metrics.truncateAfter(metricsPath, step - 1)
          }
        }
        const t = tally
        tally = emptyTally()
        const line: HarnessStepRecord = {
          step,
          rollouts: t.rollouts,
          timeouts: t.timeouts,
          unscoreable: t.unscoreable,
          unscoreable_frac: t.rollouts === 0 ? 0 : t.unscoreable / t.rollouts,
          env_reward_mean: t.rewards.length === 0 ? null : t.rewards.reduce((a, b) => a + b, 0) / t.rewards.length,
          success_rate: t.rewards.length === 0 ? null : t.successes / t.rewards.length,
          tool_calls: t.toolCalls,
          tool_failures: t.toolFailures,
          tool_calls_by_name: t.byName,
          trainable_tokens: t.trainable,
          rows: t.rows
        }
        yield* Metrics.append(metricsPath, [line])
      }).pipe(Effect.provideService(FileSystem.FileSystem, fs), Effect.orDie)

    return yield* Trainer.train<HarnessState, RunStop, never>({
      config,
      model,
      dataset: Dataset.fromRows(source.rows, "harness-tasks"),
      // Every episode is the rollout function's; the built-in loop (and so `open`) never runs.
      open: () => Effect.die("harness rollouts open no environment session"),
      rewardFunctions: [
        Reward.perEpisode<HarnessState>("harness_reward", (e) => e.environment?.reward ?? null)
      ],
      rolloutFunc,
      ...(options.maxConcurrentRollouts === undefined ? {} : { concurrency: options.maxConcurrentRollouts }),
      ...(options.resume === undefined ? {} : { resume: options.resume }),
      ...(options.progress === undefined ? {} : { progress: options.progress }),
      ...(options.title === undefined ? {} : { title: options.title }),
      ...(options.stopAfter === undefined ? {} : { stopAfter: options.stopAfter }),
      onStep: (step) =>
        Effect.zipRight(writeStep(step.step), options.onStep === undefined ? Effect.void : options.onStep(step))
    })
  }))

/** Options of {@link evaluate}. @since 0.0.0 */
export interface EvaluateOptions {
  readonly tasks: ReadonlyArray<HarborTask.HarborTask>
  readonly agent: HarnessSession.Agent
  /** The policy server's root URL. */
  readonly policyServer: string
  /** Episodes per task. Default 1. */
  readonly episodesPerTask?: number
  /** Rollouts in flight. Default 2. */
  readonly concurrency?: number
  /** Write each rollout's trace and outcome here as `<task>-<i>.json`. */
  readonly tracesDir?: string
  readonly agentTimeout?: Duration.DurationInput
  readonly extraBody?: Readonly<Record<string, unknown>>
  /** Whether a reward is a success. Default reward > 0. */
  readonly success?: (reward: number) => boolean
}

/** Held-out task success. @since 0.0.0 */
export interface EvaluationReport {
  readonly agent: string
  readonly episodes: number
  readonly successes: number
  /** Successes over scored episodes (unscoreable ones left out); null when none was scored. */
  readonly successRate: number | null
  readonly meanReward: number | null
  readonly unscoreable: number
  readonly timeouts: number
  readonly tasks: ReadonlyArray<{
    readonly task: string
    readonly rewards: ReadonlyArray<number | null>
    readonly successes: number
    readonly timeouts: number
    readonly toolCalls: number
  }>
}

/**
 * Runs the agent on each task `episodesPerTask` times against a policy server (through a capture proxy, so the
 * traces are kept) and reports task success.
 *
 * @since 0.0.0
 */
export const evaluate = (options: EvaluateOptions) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const model = yield* servedModel(options.policyServer)
    const proxy = yield* CaptureProxy.make({
      upstream: options.policyServer,
      model,
      extraBody: options.extraBody ?? defaultExtraBody
    })
    const factory = HarnessSession.makeFactory({
      tasks: options.tasks,
      agent: options.agent,
      proxy,
      model,
      ...(options.agentTimeout === undefined ? {} : { agentTimeout: options.agentTimeout })
    })
    const n = options.episodesPerTask ?? 1
    const success = options.success ?? ((r: number) => r > 0)
    if (options.tracesDir !== undefined) yield* fs.makeDirectory(options.tracesDir, { recursive: true })
    const jobs = options.tasks.flatMap((task) => Array.from({ length: n }, (_, i) => ({ task, i })))
    const outcomes = yield* Effect.forEach(jobs, ({ i, task }) =>
      Effect.gen(function*() {
        const outcome = yield* HarnessSession.rollout(factory, task.instruction, i, `eval-${task.name}-${i}`)
        if (options.tracesDir !== undefined) {
          yield* fs.writeFileString(
            path.join(options.tracesDir, `${task.name}-${i}.json`),
            JSON.stringify({ ...outcome, agent: options.agent.name }, null, 1)
          )
        }
        return outcome
      }), { concurrency: options.concurrency ?? 2 })
    const tasks = options.tasks.map((task) => {
      const mine = outcomes.filter((o) => o.task === task.name)
      return {
        task: task.name,
        rewards: mine.map((o) => o.envReward),
        successes: mine.filter((o) => o.envReward !== null && success(o.envReward)).length,
        timeouts: mine.filter((o) => o.timedOut).length,
        toolCalls: mine.reduce((s, o) => s + o.toolCallCount, 0)
      }
    })
    const scored = outcomes.flatMap((o) => (o.envReward === null ? [] : [o.envReward]))
    const successes = scored.filter(success).length
    return {
      agent: options.agent.name,
      episodes: outcomes.length,
      successes,
      successRate: scored.length === 0 ? null : successes / scored.length,
      meanReward: scored.length === 0 ? null : scored.reduce((a, b) => a + b, 0) / scored.length,
      unscoreable: outcomes.length - scored.length,
      timeouts: outcomes.filter((o) => o.timedOut).length,
      tasks
    } satisfies EvaluationReport
  }))
