// One environment spread over several real servers on loopback (envtrain's OpenEnv server, Catch): sessions placed
// by free room, a refused session moved to another server, and a clear failure when every server refuses.
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import * as Catch from "../src/Catch.js"
import * as Client from "../src/Client.js"
import * as Environment from "../src/Environment.js"
import * as Server from "../src/Server.js"
import * as ServerPool from "../src/ServerPool.js"

const player = (seed: number) => Catch.solver({ errorRate: 0.3, seed })

describe("ServerPool", () => {
  it.scopedLive(
    "six episodes at once over three servers of two sessions: two on each, results as in process",
    () =>
      Effect.gen(function*() {
        const servers = yield* Effect.forEach([0, 1, 2], () =>
          Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 2 }))
        for (const s of servers) {
          yield* Client.limitSessions(s.url, 2)
        }
        const pool = ServerPool.of(
          servers.map((s) =>
            s.url
          ),
          (url) => Catch.remote(url)
        )
        const seeds = [21, 22, 23, 24, 25, 26]
        // Every episode holds its session until all six have one; then the servers' sessions are counted.
        const allOpen = yield* Deferred.make<void>()
        let opened = 0
        let counted: ReadonlyArray<number> = []
        const holding = (seed: number) => (ep: Environment.Episode<unknown>) =>
          Effect.gen(function*() {
            if (++opened === seeds.length) {
              counted = yield* Effect.forEach(servers, (s) => s.activeSessions)
              yield* Deferred.succeed(allOpen, undefined)
            }
            yield* Deferred.await(allOpen)
            return yield* player(seed)(ep as never)
          })
        const remote = yield* Effect.forEach(
          seeds,
          (seed) => Environment.run(pool, { seed }, holding(seed)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(counted, [2, 2, 2])
        const local = yield* Effect.forEach(seeds, (seed) => Environment.run(Catch.environment, { seed }, player(seed)))
        assert.deepStrictEqual(remote.map((r) => r.state), local.map((r) => r.state))
        for (const s of servers) assert.strictEqual(yield* s.activeSessions, 0)
      }),
    { timeout: 30_000 }
  )

  it.scopedLive(
    "a server that refuses (CAPACITY_REACHED) passes the episode to the next; when all refuse, the refusal is the error",
    () =>
      Effect.gen(function*() {
        const a = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        const b = yield* Server.serve(Catch.openEnv, { port: 0, maxConcurrentEnvs: 1 })
        // Another client (as another process would) holds a's only session.
        const holderA = yield* Client.connect({ url: a.url, capacityWait: 0 })
        yield* holderA.reset({ seed: 1 })
        const pool = ServerPool.of([a.url, b.url], (url) => Catch.remote(url, { capacityWait: "300 millis" }))
        let onB = 0
        const watched = (ep: Environment.Episode<unknown>) =>
          Effect.flatMap(b.activeSessions, (n) => {
            onB = n
            return player(5)(ep as never)
          })
        // Both look free: a is tried first, refuses, and b plays the episode.
        const moved = yield* Environment.run(pool, { seed: 5 }, watched)
        const local = yield* Environment.run(Catch.environment, { seed: 5 }, player(5))
        assert.deepStrictEqual(moved.state, local.state)
        assert.strictEqual(onB, 1)

        // Now b is held too: every server refuses, and the episode fails with the refusal.
        const holderB = yield* Client.connect({ url: b.url, capacityWait: 0 })
        yield* holderB.reset({ seed: 2 })
        const exit = yield* Effect.exit(Environment.run(pool, { seed: 6 }, player(6)))
        assert.isTrue(Exit.isFailure(exit))
        const defect = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.dieOption(exit.cause)) : undefined
        assert.strictEqual((defect as { _tag?: string } | undefined)?._tag, "CapacityReachedError")
        assert.include(String((defect as Error).message), "--max-concurrent-envs N")
      }),
    { timeout: 30_000 }
  )
})
