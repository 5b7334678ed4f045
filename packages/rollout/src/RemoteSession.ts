/**
 * Episode sessions backed by a remote OpenEnv server (the envtrain server, an HF Space, a Docker container).
 *
 * - {@link mcp}: environments that expose MCP tools (`tools/list`, `tools/call`): the tools are listed from the
 *   server, and each call is a `tools/call` over the episode's WebSocket session.
 * - {@link fromClient}: step-based environments (Wordle/TextArena, Catch/OpenSpiel): you give the tool definitions
 *   and map each call to `step`s, as TRL's environment classes do.
 *
 * Client errors (`SessionLostError`, `RequestTimeoutError`, `ConnectionClosedError`, `ConnectError`) are left on
 * the error channel, so the rollout ends only that episode, as unscoreable. An MCP error (unknown tool, invalid
 * arguments) or a tool result flagged `is_error` goes back to the model as a tool failure.
 *
 * @example
 * ```ts
 * const open = (row) => RemoteSession.mcp({ client: { url: server.url } }, row) // Effect<Session<...>, ClientError, Scope>
 * Rollout.groups(rows, { groupSize: 4, concurrency: 32, config, open })
 * ```
 *
 * @since 0.0.0
 */
import * as Client from "@envtrain/env/Client"
import * as Environment from "@envtrain/env/Environment"
import type { ToolDefinition } from "@envtrain/text/ChatTemplate"
import { Effect, Option, Pool, Scope } from "effect"
import type { Session, ToolOutcome } from "./Episode.js"

/** The client errors a remote episode can fail with. */
export type RemoteError = Client.ClientError | Client.McpError

/** Options of {@link mcp}. */
export interface McpSessionOptions {
  readonly client: Client.ClientOptions
  /** The first observation's text from the reset envelope (default: none). */
  readonly observation?: (observation: Readonly<Record<string, unknown>>) => Option.Option<string>
  /** Shown in records; default "remote". */
  readonly environment?: string
}

/** Opens a session on an MCP-tool environment: connect, reset with `row`, list the tools. Closes with the scope. */
export const mcp = (
  options: McpSessionOptions,
  row: Readonly<Record<string, unknown>>
): Effect.Effect<Session<Readonly<Record<string, unknown>>, RemoteError>, RemoteError, Scope.Scope> =>
  Effect.flatMap(Client.make(options.client), (client) => mcpOn(client, options, row))

/** {@link mcp} on a client you hold (e.g. one from {@link pooled}): resets it with `row`. */
export const mcpOn = <A, O>(
  client: Client.OpenEnvClient<A, O>,
  options: Omit<McpSessionOptions, "client">,
  row: Readonly<Record<string, unknown>>
): Effect.Effect<Session<Readonly<Record<string, unknown>>, RemoteError>, RemoteError> =>
  Effect.gen(() => mcpSession(client, options, row))

// Module-level generator functions, not a `function*` per episode (see docs/architecture.md, "Hot paths and the young generation").
function* mcpSession<A, O>(
  client: Client.OpenEnvClient<A, O>,
  options: Omit<McpSessionOptions, "client">,
  row: Readonly<Record<string, unknown>>
) {
  const first = yield* client.reset(row)
  const tools = yield* client.listTools
  const toolDefinitions: Array<ToolDefinition> = tools.map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.inputSchema }
  }))
  const call = (name: string, args: Readonly<Record<string, unknown>>): Effect.Effect<ToolOutcome, RemoteError> =>
    client.callTool(name, args).pipe(
      Effect.map((result): ToolOutcome => {
        const text = result.content.map((c) => c.text).join("")
        return result.is_error
          ? { _tag: "Failure", tool: name, reason: "failure", error: text, text: Environment.errorText(text) }
          : { _tag: "Success", tool: name, text }
      }),
      // JSON-RPC -32602 is OpenEnv's code for an unknown tool or bad arguments; the model gets the message.
      Effect.catchTag("McpError", (e) =>
        Effect.succeed<ToolOutcome>({
          _tag: "Failure",
          tool: name,
          reason: e.code === -32602
            ? (/unknown tool/i.test(e.serverMessage) ? "unknown_tool" : "invalid_arguments")
            : "failure",
          error: e.serverMessage,
          text: Environment.errorText(e.serverMessage)
        }))
    )
  return {
    environment: options.environment ?? "remote",
    observation: options.observation?.(first.observation as Readonly<Record<string, unknown>>) ?? Option.none(),
    toolDefinitions,
    call,
    state: client.state
  }
}

/** How a step-based remote environment is driven (what a TRL environment class does around its client). */
export interface ClientSessionOptions<A, O, State> {
  readonly client: Client.ClientOptions<A, O>
  readonly environment: string
  readonly toolDefinitions: ReadonlyArray<ToolDefinition>
  /** The first observation text from the reset reply. */
  readonly observation: (reset: Client.StepResult<O>) => Option.Option<string>
  /** Runs one tool call with the client (usually one `step`) and says what the model sees. */
  readonly call: (
    client: Client.OpenEnvClient<A, O>,
    name: string,
    args: Readonly<Record<string, unknown>>
  ) => Effect.Effect<ToolOutcome, Client.ClientError>
  /** The reward state (default: the server's `state`). */
  readonly state?: (client: Client.OpenEnvClient<A, O>) => Effect.Effect<State, Client.ClientError>
}

/** Opens a session on a step-based environment: connect, reset with `row`. Closes with the scope. */
export const fromClient = <A, O, State = Readonly<Record<string, unknown>>>(
  options: ClientSessionOptions<A, O, State>,
  row: Readonly<Record<string, unknown>>
): Effect.Effect<Session<State, Client.ClientError>, Client.ClientError, Scope.Scope> =>
  Effect.flatMap(Client.make(options.client), (client) => fromClientOn(client, options, row))

/** {@link fromClient} on a client you hold (e.g. one from {@link pooled}): resets it with `row`. */
export const fromClientOn = <A, O, State = Readonly<Record<string, unknown>>>(
  client: Client.OpenEnvClient<A, O>,
  options: Omit<ClientSessionOptions<A, O, State>, "client">,
  row: Readonly<Record<string, unknown>>
): Effect.Effect<Session<State, Client.ClientError>, Client.ClientError> =>
  Effect.map(client.reset(row), (first): Session<State, Client.ClientError> => ({
    environment: options.environment,
    observation: options.observation(first),
    toolDefinitions: options.toolDefinitions,
    call: (name, args) => options.call(client, name, args),
    state: options.state === undefined
      ? client.state as Effect.Effect<State, Client.ClientError>
      : options.state(client)
  }))

const LOST: ReadonlySet<string> = new Set([
  "SessionLostError",
  "RequestTimeoutError",
  "ConnectionClosedError",
  "ConnectError"
])
const isLost = (e: unknown) => typeof e === "object" && e !== null && "_tag" in e && LOST.has(String(e._tag))

/**
 * A pool of `size` clients (WebSockets) reused across episodes: each episode takes a client, starts its episode
 * with `reset` on it (a fresh environment state on the same server session, as OpenEnv defines reset) and gives it
 * back when its scope closes. Saves a connect and a close per episode. A client whose session was lost, timed out
 * or closed is invalidated and replaced; every socket closes with the pool's scope (so an aborted run still ends
 * with zero sessions once that scope closes). Size it to the rollout's `concurrency`.
 *
 * @example
 * ```ts
 * const open = yield* RemoteSession.pooled({ url: server.url }, 64, (client, row) => RemoteSession.mcpOn(client, {}, row))
 * yield* Rollout.groups(rows, { groupSize: 8, concurrency: 64, config, open }).pipe(Stream.runDrain)
 * ```
 */
export const pooled = <A, O, State, E>(
  client: Client.ClientOptions<A, O>,
  size: number,
  session: (
    client: Client.OpenEnvClient<A, O>,
    row: Readonly<Record<string, unknown>>
  ) => Effect.Effect<Session<State, E>, E>
): Effect.Effect<
  (row: Readonly<Record<string, unknown>>) => Effect.Effect<Session<State, E>, E, Scope.Scope>,
  never,
  Scope.Scope
> =>
  Effect.map(
    Pool.make({ acquire: Client.make(client), size }),
    (pool) => (row) => Effect.gen(() => pooledSession(pool, session, row))
  )

function* pooledSession<A, O, State, E>(
  pool: Pool.Pool<Client.OpenEnvClient<A, O>>,
  session: (
    client: Client.OpenEnvClient<A, O>,
    row: Readonly<Record<string, unknown>>
  ) => Effect.Effect<Session<State, E>, E>,
  row: Readonly<Record<string, unknown>>
) {
  const held = yield* Pool.get(pool)
  const scope = yield* Effect.scope
  const invalidateOnLoss = <X, Y>(effect: Effect.Effect<X, Y>) =>
    Effect.tapError(effect, (e) => isLost(e) ? Scope.extend(Pool.invalidate(pool, held), scope) : Effect.void)
  const s = yield* invalidateOnLoss(session(held, row))
  // Written out rather than `{ ...s, call, state }` (a spread followed by properties is V8's slow path).
  const wrapped: Session<State, E> = {
    environment: s.environment,
    observation: s.observation,
    toolDefinitions: s.toolDefinitions,
    call: (name, args) => invalidateOnLoss(s.call(name, args)),
    state: invalidateOnLoss(s.state)
  }
  return wrapped
}
