import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import * as Catch from "../src/Catch.js"
import * as Client from "../src/Client.js"
import * as Environment from "../src/Environment.js"
import * as Server from "../src/Server.js"

// Remote episodes against a server with fewer sessions than episodes at once (an `envtrain serve` with
// --max-concurrent-envs 1 or 2, a real OpenEnv server's default of 1): they wait for a session, bounded.
const seeds = [11, 12, 13, 14, 15, 16, 17]
const player = (seed: number) => Catch.solver({ errorRate: 0.3, seed })

const capacityErrorOf = <A, E>(exit: Exit.Exit<A, E>) => {
  assert.isTrue(Exit.isFailure(exit))
  const defect = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.dieOption(exit.cause)) : undefined
  assert.isTrue(Client.isClientError(defect), `expected a client error, got ${String(defect)}`)
  const error = defect as Client.ClientError
  assert.strictEqual(error._tag, "CapacityReachedError")
  return error as Client.CapacityReachedError
}

describe("Remote sessions and server capacity", () => {
  it.scopedLive(
    "more episodes at once than the server has sessions: all complete, as in process",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 2 })
        const local = yield* Effect.forEach(seeds, (seed) => Environment.run(Catch.environment, { seed }, player(seed)))
        // All at once, as an evaluation does: 7 opens meet 2 sessions; the refused ones wait for a free session.
        const remote = yield* Effect.forEach(
          seeds,
          (seed) => Environment.run(Catch.remote(s.url), { seed }, player(seed)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(remote.map((r) => r.steps), local.map((r) => r.steps))
        assert.deepStrictEqual(remote.map((r) => r.state), local.map((r) => r.state))
        assert.strictEqual(yield* s.activeSessions, 0)
      }),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a per-URL limit (maxSessions / limitSessions) queues episodes locally, never past it",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 2 })
        yield* Client.limitSessions(s.url, 1)
        let peak = 0
        const watched = (seed: number) => (ep: Environment.Episode<unknown>) =>
          Effect.flatMap(s.activeSessions, (n) => {
            peak = Math.max(peak, n)
            return player(seed)(ep as never)
          })
        const local = yield* Effect.forEach(seeds, (seed) => Environment.run(Catch.environment, { seed }, player(seed)))
        const remote = yield* Effect.forEach(
          seeds,
          (seed) => Environment.run(Catch.remote(s.url), { seed }, watched(seed)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(remote.map((r) => r.state), local.map((r) => r.state))
        assert.strictEqual(peak, 1)
      }),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "the wait is bounded: past capacityWait the episode fails with the limit and the fix",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        const holder = yield* Client.connect({ url: s.url })
        yield* holder.reset({ seed: 1 })
        const started = Date.now()
        // The server refuses; the client backs off and retries until its bound.
        const refused = capacityErrorOf(
          yield* Effect.exit(
            Environment.run(Catch.remote(s.url, { capacityWait: "400 millis" }), { seed: 2 }, player(2))
          )
        )
        assert.isAtLeast(Date.now() - started, 400)
        assert.isAtLeast(refused.waitedMs ?? 0, 400)
        assert.strictEqual(refused.maxSessions, 1)
        assert.include(refused.message, "Server at capacity: 1/1 sessions active")
        assert.include(refused.message, "the server allows 1 session at once")
        assert.include(refused.message, "envtrain serve <env> --max-concurrent-envs N")
        assert.include(refused.message, "--env-concurrency N")
        // The refusal taught the process the server's limit: the next episode waits locally, and says so.
        const queued = capacityErrorOf(
          yield* Effect.exit(
            Environment.run(Catch.remote(s.url, { capacityWait: "200 millis" }), { seed: 3 }, player(3))
          )
        )
        assert.include(queued.message, "every session this process may hold at once (1) is in use")
        assert.include(queued.message, "--max-concurrent-envs N")
        // Once the holder closes, an episode gets the session.
        yield* holder.close
        const local = yield* Environment.run(Catch.environment, { seed: 4 }, player(4))
        const remote = yield* Environment.run(
          Catch.remote(s.url, { capacityWait: "5 seconds" }),
          { seed: 4 },
          player(4)
        )
        assert.deepStrictEqual(remote.state, local.state)
      }),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "the bound is on a stall: a queue longer than capacityWait that keeps moving completes",
    () =>
      Effect.gen(function*() {
        const s = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        // Queued locally (limit 1), each episode holding its session 100 ms: the last of 6 waits 500+ ms in all,
        // past a 400 ms bound, but a session opens or closes every ~100 ms.
        yield* Client.limitSessions(s.url, 1)
        const slow = (seed: number) => (ep: Environment.Episode<unknown>) =>
          Effect.zipRight(Effect.sleep("100 millis"), player(seed)(ep as never))
        const started = Date.now()
        const remote = yield* Effect.forEach(
          seeds.slice(0, 6),
          (seed) => Environment.run(Catch.remote(s.url, { capacityWait: "400 millis" }), { seed }, slow(seed)),
          { concurrency: "unbounded" }
        )
        assert.isAbove(Date.now() - started, 500)
        const local = yield* Effect.forEach(
          seeds.slice(0, 6),
          (seed) => Environment.run(Catch.environment, { seed }, player(seed))
        )
        assert.deepStrictEqual(remote.map((r) => r.state), local.map((r) => r.state))
      }),
    { timeout: 30_000 }
  )

  it.scopedLive("a waiting episode takes the session as soon as one frees", () =>
    Effect.gen(function*() {
      const s = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
      const holder = yield* Client.connect({ url: s.url })
      yield* holder.reset({ seed: 1 })
      const waiting = yield* Effect.fork(Environment.run(Catch.remote(s.url), { seed: 5 }, player(5)))
      yield* Effect.sleep("300 millis")
      yield* holder.close
      const remote = yield* waiting
      const local = yield* Environment.run(Catch.environment, { seed: 5 }, player(5))
      assert.deepStrictEqual(remote.state, local.state)
    }), { timeout: 30_000 })
})
