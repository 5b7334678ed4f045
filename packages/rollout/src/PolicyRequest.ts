/**
 * One HTTP request from the trainer to a policy server (`envtrain serve-policy`, vLLM), over node:http with kept-alive
 * connections, and the one rule for resending it.
 *
 * node:http's server closes a kept-alive connection after 5 s idle. A trainer whose event loop is held longer than
 * that (a synchronous optimizer step on a loaded machine) cannot see the close, and its next request is written into
 * the dead connection: it fails at once (ECONNRESET, EPIPE; undici says `UND_ERR_SOCKET`) and never reached the
 * server. Such a failure — at the connection, on a reused socket, before any byte of an answer — is `dropped`
 * ({@link isDroppedBeforeAnswer}), and {@link sendResending} sends the request again on a fresh connection, once (a
 * fresh connection cannot be a stale kept-alive one), logged and counted ({@link resends}). Any other failure (a
 * refused or fresh connection reset: the server is gone; a timeout: it may still be working; a connection lost
 * after answer bytes arrived) is not resent.
 *
 * @since 0.0.0
 */
import { Duration, Effect, Metric } from "effect"
import * as Http from "node:http"
import * as Https from "node:https"

/** @since 0.0.0 */
export interface Answer {
  readonly status: number
  readonly text: string
}

/**
 * Why a request failed: `dropped` (see {@link isDroppedBeforeAnswer}: safe to send again), `connect` (any other
 * failure at the connection: refused, reset on a fresh connection or after answer bytes), `timeout`.
 *
 * @since 0.0.0
 */
export interface Failure {
  readonly reason: "dropped" | "connect" | "timeout"
  readonly message: string
}

/** @since 0.0.0 */
export interface Init {
  readonly method?: "GET" | "POST"
  readonly headers?: Readonly<Record<string, string>>
  readonly body?: string | Uint8Array
}

/** @since 0.0.0 */
export interface SendOptions {
  /** Time limit of the request, answer body included. */
  readonly timeout: Duration.DurationInput
  /** The option that sets `timeout`, named in a timeout's message so it says what to raise. */
  readonly limit?: string
  /** A new connection of its own (closed after the answer) instead of a kept-alive one. */
  readonly fresh?: boolean
}

// What a write into, or a read from, a connection the peer has closed fails with.
const DROP_CODES: ReadonlySet<string> = new Set(["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"])

/**
 * The classification of a failed request: true when it failed at the connection (ECONNRESET, EPIPE,
 * `UND_ERR_SOCKET`) on a reused kept-alive socket before any byte of the answer arrived — the server had closed
 * that connection and never saw the request, so it can be sent again.
 *
 * @since 0.0.0
 */
export const isDroppedBeforeAnswer = (failed: {
  readonly code: string | undefined
  readonly reusedSocket: boolean
  readonly answerBytes: number
}): boolean => failed.reusedSocket && failed.answerBytes === 0 && DROP_CODES.has(failed.code ?? "")

/**
 * The drop code (ECONNRESET, EPIPE, `UND_ERR_SOCKET`) of an error or of any error in its `cause` chain, for failures
 * from clients that cannot tell whether the socket was a reused one (a user's Effect `HttpClient`: fetch wraps the
 * socket's error as the cause of "fetch failed"); undefined for every other failure.
 *
 * @since 0.0.0
 */
export const dropCodeOf = (error: unknown): string | undefined => {
  let e: unknown = error
  for (let depth = 0; depth < 6 && typeof e === "object" && e !== null; depth++) {
    const code = (e as { readonly code?: unknown }).code
    if (typeof code === "string" && DROP_CODES.has(code)) return code
    e = (e as { readonly cause?: unknown }).cause
  }
  return undefined
}

/**
 * Requests sent again by {@link sendResending} (and weight pushes resent by the policy-server trainer) after a
 * {@link isDroppedBeforeAnswer} failure.
 *
 * @since 0.0.0
 */
export const resends = Metric.counter("envtrain_policy_request_resends_total", {
  description: "requests to policy servers sent again after a kept-alive connection dropped them before any answer",
  incremental: true
})

// The process's kept-alive connections to policy servers (free sockets are unref'd: they hold no process open).
const agents = {
  http: new Http.Agent({ keepAlive: true }),
  https: new Https.Agent({ keepAlive: true })
}

const once = (url: string, init: Init, fresh: boolean): Effect.Effect<Answer, Failure> =>
  Effect.async<Answer, Failure>((resume) => {
    const method = init.method ?? "GET"
    const fail = (reason: Failure["reason"], detail: string) =>
      resume(Effect.fail({ reason, message: `${method} ${url} failed: ${detail}` }))
    let target: URL
    try {
      target = new URL(url)
    } catch {
      fail("connect", "not a URL")
      return
    }
    const secure = target.protocol === "https:"
    const body = init.body === undefined
      ? undefined
      : typeof init.body === "string"
      ? Buffer.from(init.body)
      : init.body
    let done = false
    let answered = false
    // socket.bytesRead when this request got its socket: a reused socket has read earlier answers.
    let readAtStart: number | undefined
    const req = (secure ? Https : Http).request(target, {
      method,
      headers: { ...init.headers, ...(body === undefined ? {} : { "content-length": String(body.byteLength) }) },
      agent: fresh ? false : secure ? agents.https : agents.http
    })
    req.on("socket", (socket) => void (readAtStart = socket.bytesRead))
    req.on("error", (e: Error & { code?: string }) => {
      if (done) return
      done = true
      const answerBytes = answered ? 1 : readAtStart === undefined ? 0 : (req.socket?.bytesRead ?? 0) - readAtStart
      const dropped = isDroppedBeforeAnswer({ code: e.code, reusedSocket: req.reusedSocket, answerBytes })
      fail(dropped ? "dropped" : "connect", e.code === undefined ? e.message : `${e.code} (${e.message})`)
    })
    req.on("response", (res) => {
      answered = true
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("error", (e: Error & { code?: string }) => {
        if (done) return
        done = true
        fail("connect", `the connection was lost after the answer began: ${e.code ?? e.message}`)
      })
      res.on("end", () => {
        if (done) return
        done = true
        resume(Effect.succeed({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
      })
    })
    req.end(body)
    return Effect.sync(() => {
      done = true
      req.destroy()
    })
  })

/**
 * One request, within `options.timeout`; interruption aborts it. Not resent: see {@link sendResending}.
 *
 * @since 0.0.0
 */
export const send = (url: string, init: Init, options: SendOptions): Effect.Effect<Answer, Failure> => {
  const timeout = Duration.decode(options.timeout)
  return once(url, init, options.fresh === true).pipe(
    Effect.timeoutFail({
      duration: timeout,
      onTimeout: (): Failure => ({
        reason: "timeout",
        message: `${init.method ?? "GET"} ${url} did not answer within ${Duration.format(timeout)}` +
          (options.limit === undefined ? "" : ` (${options.limit})`)
      })
    })
  )
}

/**
 * Logs and counts a request about to be sent again after `failure` (a `dropped` one); `why` says what dropped it.
 *
 * @since 0.0.0
 */
export const noteResend = (
  failure: Failure,
  why = "the server had closed this kept-alive connection before the request reached it"
): Effect.Effect<void> =>
  Effect.zipRight(
    Metric.increment(resends),
    Effect.logInfo(`${failure.message}: ${why}; sending it again on a fresh connection`)
  )

/**
 * {@link send}, and once more on a fresh connection when the first send was `dropped` (each send within
 * `options.timeout`). For requests that may be repeated: a dropped one never reached the server.
 *
 * @since 0.0.0
 */
export const sendResending = (url: string, init: Init, options: SendOptions): Effect.Effect<Answer, Failure> =>
  send(url, init, options).pipe(
    Effect.catchIf(
      (failure) => failure.reason === "dropped",
      (failure) => Effect.zipRight(noteResend(failure), send(url, init, { ...options, fresh: true }))
    )
  )
