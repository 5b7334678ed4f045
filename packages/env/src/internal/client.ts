// The OpenEnv client's socket handling: one outstanding request per socket (a lock of its own), replies taken from an
// inbox filled by the socket's listeners, and a socket that cannot be trusted any more (timeout, interruption, drop)
// discarded at once.
import { Deferred, Duration, Effect, Exit, Schedule, Schema } from "effect"
import { WebSocket } from "ws"
import type { McpCallToolResult, McpToolDescriptor } from "../OpenEnv.js"
import * as Wire from "../Wire.js"
import type * as Api from "./clientContract.js"
import {
  CapacityReachedError,
  ConnectError,
  ConnectionClosedError,
  McpError,
  ProtocolError,
  RequestTimeoutError,
  ServerError,
  SessionLostError
} from "./clientContract.js"
import * as Gate from "./sessionGate.js"

type Outcome =
  | { readonly _tag: "Frame"; readonly text: string }
  | { readonly _tag: "Closed"; readonly code: number; readonly reason: string }
  | { readonly _tag: "Timeout" }

interface Conn {
  readonly ws: WebSocket
  /** Frames that arrived with no request waiting (e.g. CAPACITY_REACHED right after the handshake). */
  readonly early: Array<string>
  /** The waiting request, resolved straight from the socket's listeners (one async boundary per request). */
  waiting: ((outcome: Outcome) => void) | undefined
  closedWith: { readonly code: number; readonly reason: string } | undefined
  readonly closed: Deferred.Deferred<{ readonly code: number; readonly reason: string }>
  alive: boolean
  timer: ReturnType<typeof setInterval> | undefined
  /** When the waiting request times out (performance.now() ms). */
  deadline: number
  /** One timer per socket, re-armed only when it fires early: no timer is set or cleared per message. */
  deadlineTimer: ReturnType<typeof setTimeout> | undefined
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const open = (url: string, options: { maxPayload: number; connectTimeoutMs: number; pingMs: number }) =>
  Effect.gen(() => openSocket(url, options))

// Module-level generator functions and plain combinators, not a `function*` per client or request (see docs/architecture.md, "Hot paths and the young generation").
function* openSocket(url: string, options: { maxPayload: number; connectTimeoutMs: number; pingMs: number }) {
  const closed = yield* Deferred.make<{ code: number; reason: string }>()
  const ws = new WebSocket(url, { maxPayload: options.maxPayload, perMessageDeflate: false })
  const conn: Conn = {
    ws,
    early: [],
    waiting: undefined,
    closedWith: undefined,
    closed,
    alive: true,
    timer: undefined,
    deadline: 0,
    deadlineTimer: undefined
  }
  // Listeners go on before "open" so a frame sent right after the handshake (CAPACITY_REACHED) is kept.
  ws.on("message", (data, isBinary) => {
    if (isBinary) return
    const waiting = conn.waiting
    conn.waiting = undefined
    if (waiting !== undefined) waiting({ _tag: "Frame", text: data.toString() })
    else conn.early.push(data.toString())
  })
  ws.on("pong", () => {
    conn.alive = true
  })
  ws.on("close", (code, reason) => {
    if (conn.timer !== undefined) clearInterval(conn.timer)
    if (conn.deadlineTimer !== undefined) clearTimeout(conn.deadlineTimer)
    conn.closedWith = { code, reason: reason.toString() }
    const waiting = conn.waiting
    conn.waiting = undefined
    if (waiting !== undefined) waiting({ _tag: "Closed", ...conn.closedWith })
    Deferred.unsafeDone(closed, Exit.succeed(conn.closedWith))
  })
  ws.on("error", () => {
    // Always followed by "close" (or reported by the open below).
  })
  yield* Effect.async<void, ConnectError>((resume) => {
    ws.once("open", () => resume(Effect.void))
    ws.once("error", (e) => resume(Effect.fail(new ConnectError({ url, reason: e.message }))))
    ws.once("unexpected-response", (_req, res) => {
      resume(Effect.fail(new ConnectError({ url, reason: `HTTP ${res.statusCode} instead of a WebSocket upgrade` })))
      ws.terminate()
    })
    return Effect.sync(() => ws.terminate())
  }).pipe(
    Effect.timeoutFail({
      duration: Duration.millis(options.connectTimeoutMs),
      onTimeout: () => new ConnectError({ url, reason: `no handshake within ${options.connectTimeoutMs} ms` })
    })
  )
  if (options.pingMs > 0) {
    conn.timer = setInterval(() => {
      if (!conn.alive) return ws.terminate()
      conn.alive = false
      ws.ping()
    }, options.pingMs)
    conn.timer.unref()
  }
  return conn
}

const discardNow = (conn: Conn): void => {
  if (conn.timer !== undefined) clearInterval(conn.timer)
  if (conn.deadlineTimer !== undefined) clearTimeout(conn.deadlineTimer)
  conn.ws.terminate()
}

/** Starts the wait for a reply: the socket's timer fires at the first deadline and re-arms for a later one. */
const armDeadline = (conn: Conn, timeoutMs: number): void => {
  conn.deadline = performance.now() + timeoutMs
  if (conn.deadlineTimer === undefined) conn.deadlineTimer = startDeadlineTimer(conn, timeoutMs)
}

const startDeadlineTimer = (conn: Conn, ms: number) => {
  const timer = setTimeout(() => {
    conn.deadlineTimer = undefined
    const waiting = conn.waiting
    if (waiting === undefined) return
    const left = conn.deadline - performance.now()
    if (left > 0) {
      conn.deadlineTimer = startDeadlineTimer(conn, left)
      return
    }
    conn.waiting = undefined
    waiting({ _tag: "Timeout" })
  }, Math.ceil(ms))
  // A waiting request always has an open socket, which keeps the process alive; an idle client must not.
  timer.unref()
  return timer
}

type Reply = { readonly type: string; readonly data: unknown }

/** Between retries of a refused open: 50 ms growing to at most 2 s, jittered so waiting clients spread out. */
const capacityBackoff = Schedule.exponential(Duration.millis(50), 1.5).pipe(
  Schedule.union(Schedule.spaced(Duration.seconds(2))),
  Schedule.jittered
)

const makeWithOpen = <A, O>(options: Api.ClientOptions<A, O>) => Effect.gen(() => clientOf(options))

function* clientOf<A, O>(options: Api.ClientOptions<A, O>) {
  const url = Wire.toWebSocketUrl(options.url)
  const connectTimeoutMs = Duration.toMillis(Duration.decode(options.connectTimeout ?? Duration.seconds(10)))
  const messageTimeoutMs = Duration.toMillis(Duration.decode(options.messageTimeout ?? Duration.seconds(60)))
  const pingMs = Duration.toMillis(Duration.decode(options.pingInterval ?? Duration.seconds(20)))
  const maxPayload = options.maxMessageBytes ?? 100 * 1024 * 1024
  const capacityWaitMs = Duration.toMillis(Duration.decode(options.capacityWait ?? Duration.minutes(5)))
  // No gate when the client is to fail at the first refusal (and sets no limit): the plain OpenEnv behaviour.
  const gate = capacityWaitMs > 0 || options.maxSessions !== undefined ? Gate.gateOf(url) : undefined
  if (gate !== undefined && options.maxSessions !== undefined) Gate.setLimit(gate, options.maxSessions)
  /** This client holds one of the gate's permits (from its first open until it is closed). */
  let holding = false
  const releasePermit = (): void => {
    if (holding && gate !== undefined) {
      holding = false
      Gate.release(gate)
    }
  }
  const encodeAction = options.action === undefined
    ? (a: A) => Effect.succeed(a as unknown)
    : (a: A) =>
      Schema.encode(options.action as Schema.Schema<A, unknown>)(a).pipe(
        Effect.mapError((e) => new ProtocolError({ reason: `action does not encode: ${e.message}` }))
      )
  const decodeObservation = options.observation === undefined
    ? (o: unknown) => Effect.succeed(o as O)
    : (o: unknown) =>
      Schema.decodeUnknown(options.observation as Schema.Schema<O, unknown>)(o).pipe(
        Effect.mapError((e) => new ProtocolError({ reason: `observation does not decode: ${e.message}` }))
      )

  // One request at a time per socket. A plain flag, not a Semaphore: the hot path takes and frees it inside the
  // request's one async callback (no extra fiber steps per message); everything else waits through `withLock`.
  let busy = false
  const waiters: Array<() => void> = []
  const release = (): void => {
    busy = false
    // Every waiter retries (the first to run takes the lock, the rest queue again), so one that was interrupted
    // after being woken strands no one.
    if (waiters.length > 0) { for (const wake of waiters.splice(0)) wake() }
  }
  const acquire: Effect.Effect<void> = Effect.async<void>((resume) => {
    if (!busy) {
      busy = true
      return resume(Effect.void)
    }
    const wake = () => resume(acquire)
    waiters.push(wake)
    return Effect.sync(() => {
      const i = waiters.indexOf(wake)
      if (i >= 0) waiters.splice(i, 1)
    })
  })
  const withLock = <R, E>(body: Effect.Effect<R, E>): Effect.Effect<R, E> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.zipRight(restore(acquire), Effect.ensuring(restore(body), Effect.sync(release)))
    )
  let conn: Conn | undefined
  let episodeActive = false
  let lost: SessionLostError | undefined

  /** Forget the socket; if an episode was running, it is lost for good. */
  const dropNow = (reason: string): void => {
    if (conn !== undefined) discardNow(conn)
    conn = undefined
    if (episodeActive && lost === undefined) lost = new SessionLostError({ url, reason })
    episodeActive = false
  }

  const parseReply = (text: string): Reply | ProtocolError => {
    try {
      const value = JSON.parse(text)
      if (isObject(value) && typeof value.type === "string") return value as Reply
    } catch {
      // fall through
    }
    return new ProtocolError({ reason: `not an OpenEnv frame: ${text.slice(0, 200)}` })
  }

  const errorOf = (reply: Reply): Api.ClientError => {
    const data = isObject(reply.data) ? reply.data : {}
    const message = typeof data.message === "string" ? data.message : "unknown error"
    const code = typeof data.code === "string" ? data.code : "UNKNOWN"
    if (code === "CAPACITY_REACHED") {
      return new CapacityReachedError({
        url,
        serverMessage: message,
        activeSessions: typeof data.active_sessions === "number" ? data.active_sessions : -1,
        maxSessions: typeof data.max_sessions === "number" ? data.max_sessions : -1
      })
    }
    return new ServerError({
      code,
      serverMessage: message,
      ...(Array.isArray(data.errors) ? { errors: data.errors } : {})
    })
  }

  /** A frame that arrived unasked (right after the handshake) is the server refusing the session. */
  const unsolicitedNow = (c: Conn): Api.ClientError | undefined => {
    const early = c.early.shift()
    if (early === undefined) return undefined
    dropNow("server sent an unsolicited frame")
    const reply = parseReply(early)
    if (reply instanceof ProtocolError) return reply
    return reply.type === "error" ? errorOf(reply) : new ProtocolError({ reason: "unsolicited frame" })
  }

  /** What one reply (or its absence) means, decided in the socket's callback. */
  const outcomeOf = (c: Conn, kind: string, outcome: Outcome): Exit.Exit<Reply, Api.ClientError> => {
    switch (outcome._tag) {
      case "Timeout":
        dropNow(`'${kind}' timed out`)
        return Exit.fail(new RequestTimeoutError({ url, request: kind, timeoutMs: messageTimeoutMs }))
      case "Closed": {
        const refused = unsolicitedNow(c)
        if (refused !== undefined) return Exit.fail(refused)
        const wasActive = episodeActive
        dropNow(`socket closed during '${kind}' (code ${outcome.code})`)
        return Exit.fail(
          wasActive && lost !== undefined
            ? lost
            : new ConnectionClosedError({ url, code: outcome.code, reason: outcome.reason })
        )
      }
      case "Frame":
        return frameOutcome(parseReply(outcome.text))
    }
  }

  /** What a parsed frame means: the reply, or the failure it carries (a full server also loses the socket). */
  const frameOutcome = (reply: Reply | ProtocolError): Exit.Exit<Reply, Api.ClientError> => {
    if (reply instanceof ProtocolError) return Exit.fail(reply)
    if (reply.type !== "error") return Exit.succeed(reply)
    const error = errorOf(reply)
    if (error._tag === "CapacityReachedError") dropNow("capacity reached")
    return Exit.fail(error)
  }

  /** Sends one frame on an open socket and takes its one reply, straight from the socket's listeners. */
  const exchange = (c: Conn, kind: string, text: string) =>
    Effect.async<Reply, Api.ClientError>((resume) => {
      c.waiting = (outcome) => resume(outcomeOf(c, kind, outcome))
      armDeadline(c, messageTimeoutMs)
      c.ws.send(text)
      // Interrupted while waiting: the reply could arrive later and be read as the next request's; drop the socket.
      return Effect.sync(() => {
        c.waiting = undefined
        if (conn === c) dropNow(`'${kind}' was interrupted`)
      })
    })

  /** The general path: opens the socket if needed and reports a refusal, under the lock. */
  const slowRequest = (kind: string, text: string, opensEpisode: boolean): Effect.Effect<Reply, Api.ClientError> =>
    patiently(slowAttempt(kind, text, opensEpisode))

  const slowAttempt = (kind: string, text: string, opensEpisode: boolean): Effect.Effect<Reply, Api.ClientError> =>
    withLock(Effect.suspend(() => {
      if (conn !== undefined) {
        const refused = unsolicitedNow(conn)
        if (refused !== undefined) return Effect.fail(refused)
        if (conn.closedWith !== undefined) dropNow(`socket closed (code ${conn.closedWith.code})`)
      }
      if (opensEpisode) lost = undefined
      else if (lost !== undefined) return Effect.fail(lost)
      const send = (opened: Conn): Effect.Effect<Reply, Api.ClientError> => {
        conn = opened
        const refused = unsolicitedNow(opened)
        return refused !== undefined ? Effect.fail(refused) : exchange(opened, kind, text)
      }
      return conn !== undefined
        ? send(conn)
        : Effect.flatMap(
          open(url, { maxPayload, connectTimeoutMs, pingMs }),
          // A session that opened (and was not refused) is a moving queue for this URL's waiters.
          (opened) => gate === undefined ? send(opened) : Effect.tap(send(opened), () => Gate.moved(gate))
        )
    }))

  /**
   * Runs an attempt that may open a session, waiting for a free one (bounded: at most `capacityWait` without a
   * session of this process at this URL opening or closing): first for a permit of
   * this process's gate for the server, then, while the server still answers CAPACITY_REACHED (other processes, or
   * a limit not learned yet), retrying with jittered backoff. The refusal's limit becomes the gate's. Only a refused
   * open is retried: a refusal comes right behind the handshake, before any request reached an environment.
   */
  const patiently = <R>(attempt: Effect.Effect<R, Api.ClientError>): Effect.Effect<R, Api.ClientError> =>
    gate === undefined ? attempt : Effect.suspend(() => {
      const started = Date.now()
      // The bound is on a stall, not on the whole wait: a long queue that keeps moving (a session of this process
      // at this URL opened or closed within the last `capacityWait`) keeps its place.
      const stalled = () => Date.now() - Math.max(started, gate.movedAt)
      const permit = holding ? Effect.void : Effect.raceFirst(
        Gate.acquire(gate, () => {
          holding = true
        }),
        Effect.suspend(function watch(): Effect.Effect<never, CapacityReachedError> {
          const left = capacityWaitMs - stalled()
          return left > 0
            ? Effect.zipRight(Effect.sleep(Duration.millis(left)), Effect.suspend(watch))
            : Effect.fail(
              new CapacityReachedError({
                url,
                activeSessions: gate.active,
                maxSessions: gate.limit ?? -1,
                serverMessage: `every session this process may hold at once (${gate.limit ?? gate.active}) is in use`,
                waitedMs: stalled()
              })
            )
        })
      )
      return Effect.zipRight(
        permit,
        attempt.pipe(
          Effect.tapError((e) =>
            e._tag === "CapacityReachedError" ? Effect.sync(() => Gate.learn(gate, e.maxSessions)) : Effect.void
          ),
          Effect.retry({
            schedule: capacityBackoff,
            while: (e) => e._tag === "CapacityReachedError" && stalled() < capacityWaitMs
          }),
          Effect.mapError((e) =>
            e._tag === "CapacityReachedError" && e.waitedMs === undefined
              ? new CapacityReachedError({ ...e, waitedMs: stalled() })
              : e
          )
        )
      )
    })

  /**
   * Sends one frame and takes its one reply; `finish` reads it. `kind` names the request in errors. The hot path
   * (an open socket with nothing unexpected on it, no other request) is one async step: lock, send, and the reply
   * read in the socket's callback.
   */
  const request = <R, E>(
    kind: string,
    frame: Record<string, unknown>,
    opensEpisode: boolean,
    finish: (reply: Reply) => Effect.Effect<R, E>
  ): Effect.Effect<R, Api.ClientError | E> =>
    Effect.async<R, Api.ClientError | E>((resume) => {
      const text = JSON.stringify(frame)
      const c = conn
      if (busy || c === undefined || c.early.length > 0 || c.closedWith !== undefined) {
        return resume(Effect.flatMap(slowRequest(kind, text, opensEpisode), finish))
      }
      if (opensEpisode) lost = undefined
      else if (lost !== undefined) return resume(Effect.fail(lost))
      busy = true
      let answered = false
      c.waiting = (outcome) => {
        answered = true
        // The usual reply (an observation, state or mcp frame) goes straight to `finish`, without an Exit.
        const reply = outcome._tag === "Frame" ? parseReply(outcome.text) : undefined
        if (reply !== undefined && !(reply instanceof ProtocolError) && reply.type !== "error") {
          release()
          return resume(finish(reply))
        }
        const exit = reply === undefined ? outcomeOf(c, kind, outcome) : frameOutcome(reply)
        release()
        resume(Exit.isSuccess(exit) ? finish(exit.value) : Exit.failCause(exit.cause))
      }
      armDeadline(c, messageTimeoutMs)
      c.ws.send(text)
      // Interrupted while waiting: the reply could arrive later and be read as the next request's; drop the socket.
      return Effect.sync(() => {
        if (!answered) {
          c.waiting = undefined
          release()
        }
        if (conn === c) dropNow(`'${kind}' was interrupted`)
      })
    })

  /** Reads a reset/step reply; `after` sees the result once it is decoded (before the caller resumes). */
  const toStep = (
    reply: Reply,
    after: (r: Api.StepResult<O>) => void
  ): Effect.Effect<Api.StepResult<O>, ProtocolError> => {
    if (reply.type !== "observation" || !isObject(reply.data) || !isObject(reply.data.observation)) {
      return Exit.fail(new ProtocolError({ reason: `expected an observation frame, got '${reply.type}'` }))
    }
    const { done, observation, reward } = reply.data
    const r = typeof reward === "number" || typeof reward === "boolean" ? reward : null
    if (options.observation === undefined) {
      const result: Api.StepResult<O> = { observation: observation as O, reward: r, done: done === true }
      after(result)
      return Exit.succeed(result)
    }
    return Effect.map(decodeObservation(observation), (o) => {
      const result: Api.StepResult<O> = { observation: o, reward: r, done: done === true }
      after(result)
      return result
    })
  }
  const afterReset = (r: Api.StepResult<O>): void => {
    episodeActive = !r.done
  }
  const afterStep = (r: Api.StepResult<O>): void => {
    if (r.done) episodeActive = false
  }
  const toResetResult = (reply: Reply) => toStep(reply, afterReset)
  const toStepResult = (reply: Reply) => toStep(reply, afterStep)

  const toState = (reply: Reply): Effect.Effect<Readonly<Record<string, unknown>>, ProtocolError> =>
    reply.type === "state" && isObject(reply.data)
      ? Exit.succeed(reply.data as Readonly<Record<string, unknown>>)
      : Exit.fail(new ProtocolError({ reason: `expected a state frame, got '${reply.type}'` }))

  const toMcpResult = (reply: Reply): Effect.Effect<unknown, ProtocolError | McpError> => {
    const data = reply.data
    if (reply.type !== "mcp" || !isObject(data)) {
      return Exit.fail(new ProtocolError({ reason: `expected an mcp frame, got '${reply.type}'` }))
    }
    if (isObject(data.error)) {
      return Exit.fail(
        new McpError({
          code: typeof data.error.code === "number" ? data.error.code : 0,
          serverMessage: String(data.error.message),
          data: data.error.data ?? null
        })
      )
    }
    return Exit.succeed(data.result)
  }

  const mcp = (method: string, params: Record<string, unknown>) =>
    request(method, { type: "mcp", data: { jsonrpc: "2.0", method, params, id: 1 } }, false, toMcpResult)

  const close = withLock(Effect.suspend(() => {
    releasePermit()
    if (conn === undefined) return Effect.void
    const c = conn
    conn = undefined
    episodeActive = false
    if (c.ws.readyState === WebSocket.OPEN) c.ws.send(JSON.stringify({ type: "close" }))
    if (c.timer !== undefined) clearInterval(c.timer)
    if (c.deadlineTimer !== undefined) clearTimeout(c.deadlineTimer)
    c.ws.close(1000)
    // Wait briefly for the close handshake, then drop the socket regardless.
    return Deferred.await(c.closed).pipe(
      Effect.timeout(Duration.seconds(1)),
      Effect.ignore,
      Effect.andThen(Effect.sync(() => c.ws.terminate()))
    )
  }))
  yield* Effect.addFinalizer(() => close)

  const client: Api.OpenEnvClient<A, O> = {
    url,
    reset: (resetOptions = {}) => request("reset", { type: "reset", data: resetOptions }, true, toResetResult),
    step: options.action === undefined
      ? (action) => request("step", { type: "step", data: action }, false, toStepResult)
      : (action) =>
        Effect.flatMap(encodeAction(action), (data) => request("step", { type: "step", data }, false, toStepResult)),
    state: request("state", { type: "state" }, false, toState),
    listTools: mcp("tools/list", {}).pipe(
      Effect.map((result) =>
        (isObject(result) && Array.isArray(result.tools) ? result.tools : []) as ReadonlyArray<McpToolDescriptor>
      )
    ),
    callTool: (name, args) =>
      mcp("tools/call", { name, arguments: args }).pipe(Effect.map((r) => r as McpCallToolResult)),
    close,
    episodeActive: Effect.sync(() => episodeActive)
  }
  const openNow = patiently(withLock(
    Effect.suspend(() =>
      conn !== undefined ?
        Effect.void :
        Effect.flatMap(open(url, { maxPayload, connectTimeoutMs, pingMs }), (opened) => {
          conn = opened
          // A full server sends CAPACITY_REACHED right behind the handshake; its frame is parsed on the next turn of
          // the event loop, so one turn tells a refused session from an accepted one at connect.
          return Effect.flatMap(
            Effect.async<void>((resume) => {
              setImmediate(() => resume(Effect.void))
            }),
            () => {
              const refused = unsolicitedNow(opened)
              return refused !== undefined ? Effect.fail(refused) : Effect.void
            }
          )
        })
    )
  ))
  return { client, openNow }
}

export const make = <A, O>(options: Api.ClientOptions<A, O>) =>
  Effect.map(makeWithOpen(options), ({ client }) => client)

export const connect = <A, O>(options: Api.ClientOptions<A, O>) =>
  Effect.flatMap(makeWithOpen(options), ({ client, openNow }) => Effect.as(openNow, client))

export const limitSessions = (url: string, maxSessions: number): Effect.Effect<void> =>
  Effect.sync(() => Gate.setLimit(Gate.gateOf(Wire.toWebSocketUrl(url)), maxSessions))
