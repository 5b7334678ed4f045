/**
 * The minimal built-in agent: a loop speaking OpenAI chat completions with one `bash` tool. Each turn it sends the
 * conversation and the tool to `baseUrl`/chat/completions with the API key (against the capture proxy, the key is
 * the capture session id), runs every `bash` call in the rollout's `Sandbox`, appends the results as `tool`
 * messages, and stops when a reply has no tool call or at the step limit.
 *
 * The loop runs on the host and executes commands through the sandbox, rather than running inside it: the loop is
 * envtrain's own trusted code, the commands the model writes are the untrusted part and those do run inside; and
 * a host-side loop needs no TypeScript toolchain bound into every sandbox. Black-box agents (mini-swe-agent) run
 * wholly inside instead, reaching the model through the sandbox's one endpoint.
 *
 * @since 0.0.0
 */
import type { Duration } from "effect"
import { Data, Effect } from "effect"
import type * as Sandbox from "./Sandbox.js"

/** What the loop needs. */
export interface BashAgentOptions {
  /** OpenAI base URL, e.g. http://127.0.0.1:8100/v1. */
  readonly baseUrl: string
  readonly apiKey: string
  readonly model: string
  /** The task's instruction (the first user message). */
  readonly instruction: string
  /** Most model calls. Default 20. */
  readonly maxSteps?: number
  /** max_tokens per call. Default 512. */
  readonly maxTokens?: number
  /** Default 1. */
  readonly temperature?: number
  /** How long one model call may take. Default 120 s. */
  readonly requestTimeout?: Duration.DurationInput
  /** How long one command may run. Default 30 s. */
  readonly commandTimeout?: Duration.DurationInput
  /** Most characters of a command's output shown to the model. Default 4000. */
  readonly maxObservationChars?: number
  readonly systemPrompt?: string
}

/** One OpenAI chat message as the loop sends it. */
export interface ChatMessage {
  readonly role: "system" | "user" | "assistant" | "tool"
  readonly content: string | null
  readonly tool_calls?: ReadonlyArray<ToolCall>
  readonly tool_call_id?: string
}

/** An OpenAI tool call. */
export interface ToolCall {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}

/** How a run went. */
export interface AgentRun {
  /** Model calls made. */
  readonly steps: number
  readonly toolCalls: number
  /** Calls that failed: unknown tool, unreadable arguments, non-zero exit or timeout. */
  readonly toolFailures: number
  readonly stopReason: "no_tool_call" | "step_limit"
  readonly messages: ReadonlyArray<ChatMessage>
}

/** The model endpoint failed or answered something that is not a chat completion. */
export class AgentError extends Data.TaggedError("AgentError")<{ readonly message: string }> {}

/** The one tool, in OpenAI's format. */
export const bashTool = {
  type: "function",
  function: {
    name: "bash",
    description: "Run a bash command in the task's working directory and see its exit code, stdout and stderr.",
    parameters: {
      type: "object",
      properties: { command: { type: "string", description: "The command line to run." } },
      required: ["command"]
    }
  }
} as const

/** The default system prompt. */
export const defaultSystemPrompt =
  "You are an agent in a Linux sandbox. Use the bash tool to run shell commands in the working directory. " +
  "When the task is done, reply without calling a tool."

const complete = (options: BashAgentOptions, messages: ReadonlyArray<ChatMessage>) =>
  Effect.tryPromise({
    try: async (signal) => {
      const response = await fetch(`${options.baseUrl.replace(/\/$/, "")}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${options.apiKey}` },
        body: JSON.stringify({
          model: options.model,
          messages,
          tools: [bashTool],
          tool_choice: "auto",
          max_tokens: options.maxTokens ?? 512,
          temperature: options.temperature ?? 1
        }),
        signal
      })
      const text = await response.text()
      if (!response.ok) throw new Error(`HTTP ${response.status}: ${text.slice(0, 500)}`)
      return JSON.parse(text) as unknown
    },
    catch: (e) =>
      new AgentError({
        message: `The model endpoint ${options.baseUrl} failed: ${e instanceof Error ? e.message : String(e)}. ` +
          "Check that the policy server or capture proxy is running and that the API key is one it knows."
      })
  }).pipe(
    Effect.timeoutFail({
      duration: options.requestTimeout ?? "120 seconds",
      onTimeout: () => new AgentError({ message: `The model endpoint ${options.baseUrl} did not answer in time.` })
    }),
    Effect.flatMap((json) => {
      const message = (json as { choices?: Array<{ message?: unknown }> }).choices?.[0]?.message as
        | { content?: string | null; tool_calls?: Array<ToolCall> }
        | undefined
      return message === undefined
        ? Effect.fail(
          new AgentError({
            message: `The model endpoint answered without choices[0].message: ${JSON.stringify(json).slice(0, 300)}`
          })
        )
        : Effect.succeed(message)
    })
  )

// Runs one tool call; returns the tool message and whether it failed.
const runTool = (sandbox: Sandbox.Sandbox, call: ToolCall, options: BashAgentOptions) =>
  Effect.gen(function*() {
    const reply = (content: string, failed: boolean) => ({
      message: { role: "tool", tool_call_id: call.id, content } as ChatMessage,
      failed
    })
    if (call.function?.name !== "bash") {
      return reply(`Unknown tool "${call.function?.name}"; the only tool is bash.`, true)
    }
    let command: unknown
    try {
      command = (JSON.parse(call.function.arguments) as { command?: unknown }).command
    } catch {
      command = undefined
    }
    if (typeof command !== "string" || command.trim() === "") {
      return reply("The arguments must be JSON {\"command\": \"<a bash command line>\"}.", true)
    }
    const r = yield* sandbox.exec(command, { timeout: options.commandTimeout ?? "30 seconds" }).pipe(
      Effect.catchAll((e) =>
        Effect.succeed({ exitCode: null, signal: null, stdout: "", stderr: e.message, timedOut: false })
      )
    )
    const limit = options.maxObservationChars ?? 4000
    const status = r.timedOut
      ? "timed out (killed)"
      : r.exitCode === null
      ? `killed by ${r.signal}`
      : `exit code ${r.exitCode}`
    const text = `${status}\nstdout:\n${r.stdout.slice(0, limit)}\nstderr:\n${r.stderr.slice(0, limit)}`
    return reply(text, r.timedOut || r.exitCode !== 0)
  })

/**
 * Runs the loop until a reply calls no tool or `maxSteps` model calls were made.
 *
 * @since 0.0.0
 */
export const run = (sandbox: Sandbox.Sandbox, options: BashAgentOptions) =>
  Effect.gen(function*() {
    const maxSteps = options.maxSteps ?? 20
    const messages: Array<ChatMessage> = [
      { role: "system", content: options.systemPrompt ?? defaultSystemPrompt },
      { role: "user", content: options.instruction }
    ]
    let toolCalls = 0
    let toolFailures = 0
    for (let step = 1; step <= maxSteps; step++) {
      const reply = yield* complete(options, messages)
      const calls = reply.tool_calls ?? []
      messages.push({
        role: "assistant",
        content: reply.content ?? null,
        ...(calls.length > 0 ? { tool_calls: calls } : {})
      })
      if (calls.length === 0) {
        return { steps: step, toolCalls, toolFailures, stopReason: "no_tool_call", messages } satisfies AgentRun
      }
      for (const call of calls) {
        const { failed, message } = yield* runTool(sandbox, call, options)
        toolCalls++
        if (failed) toolFailures++
        messages.push(message)
      }
    }
    return { steps: maxSteps, toolCalls, toolFailures, stopReason: "step_limit", messages } satisfies AgentRun
  })
