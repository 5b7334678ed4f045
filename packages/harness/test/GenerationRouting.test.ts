// Generation routing over real `envtrain serve-policy --weights-from` children on loopback: the trainer finds the
// servers in the weight store (no URL list), keeps each episode's turns on one server (counted from each server's
// own /metrics), spreads new episodes by load, takes in a server that joins at the next update and drops one that
// stops. Live clock.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as WeightStore from "@envtrain/rollout/WeightStore"
import { Effect, Schedule } from "effect"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import { policyVersion, tinyDir } from "./parityRun.js"

// Completions a server has answered, from its Prometheus counters.
const completionsServed = (url: string) =>
  Effect.promise(() => fetch(`${url}/metrics`).then((r) => r.text())).pipe(
    Effect.map((text) => {
      const m = /envtrain:requests_total\{[^}]*endpoint="\/v1\/completions",status="200"\} (\d+)/.exec(text)
      return m === null ? 0 : Number(m[1])
    })
  )

describe("generation routing over discovered policy servers", () => {
  it.scopedLive(
    "servers found in the store (a dead one's left-over registration does not hold the start); an episode's turns stay on one server; new episodes go to the least loaded; a " +
      "server that joins takes part from the next update; one that stops is dropped and its episodes move, and is " +
      "used again once it is back",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const { dir, model } = yield* tinyDir
        const store = yield* fs.makeTempDirectoryScoped()
        const launch = PolicyServerProcess.launch({
          model: dir,
          backend: "reference",
          servedModelName: "tiny",
          weightsFrom: store
        })
        // A server registers right after it starts listening, so just after /health answers: waited for.
        const registered = (n: number) =>
          Effect.repeat(WeightStore.directory(store).registered("10 seconds"), {
            until: (r) => r.length === n,
            schedule: Schedule.spaced("50 millis")
          })
        const first = yield* launch
        const second = yield* launch
        yield* registered(2)
        // A registration a dead server left behind (still fresh): tried once at the start, left down, not waited for.
        const deadFile = path.join(store, "servers", "dead.json")
        yield* fs.writeFileString(deadFile, JSON.stringify({ url: `http://127.0.0.1:${yield* Launcher.freePort()}` }))
        const local = Trainer.referenceModel(model)
        const remote = yield* PolicyServers.withPolicyServers(local, {
          urls: [],
          weightStore: store,
          discoverServers: true,
          retryInterval: "100 millis"
        })
        yield* fs.remove(deadFile)
        const generate = remote.generateEach!
        const turns = (episode: string, n: number) =>
          Effect.forEach(
            Array.from({ length: n }, (_, i) => i),
            (i) => generate({ promptIds: [1, 2, 3 + i], sampling: { maxTokens: 2, seed: i }, episode }),
            { discard: true }
          )
        const served = (servers: ReadonlyArray<{ readonly url: string }>) =>
          Effect.forEach(servers, (s) => completionsServed(s.url))

        // Both discovered and given the weights.
        assert.deepStrictEqual([yield* policyVersion(first.url), yield* policyVersion(second.url)], [1, 1])
        yield* turns("e1", 3)
        const afterE1 = yield* served([first, second])
        assert.deepStrictEqual([...afterE1].sort(), [0, 3], `e1's three turns on one server: ${afterE1}`)
        yield* turns("e2", 3)
        // e1 is still active: e2 goes to the other server.
        assert.deepStrictEqual(yield* served([first, second]), [3, 3])
        const e1On = afterE1[0] === 3 ? first : second

        // A third server joins: it is found and brought to the current weights at the next update, and the next new
        // episode goes to it (it holds none).
        const third = yield* launch
        yield* registered(3)
        yield* remote.importState(yield* local.exportState)
        assert.strictEqual(yield* policyVersion(third.url), 2)
        yield* turns("e3", 2)
        assert.deepStrictEqual(yield* served([first, second, third]), [3, 3, 2])

        // e1's server stops (its registration goes with it): the next update marks it down, and e1 moves.
        yield* e1On.kill("SIGTERM")
        yield* e1On.exited
        yield* remote.importState(yield* local.exportState)
        const others = [first, second, third].filter((s) => s !== e1On)
        const before = yield* served(others)
        yield* turns("e1", 2)
        const after = yield* served(others)
        const moved = after.map((n, i) => n - before[i])
        assert.deepStrictEqual([...moved].sort(), [0, 2], `e1's later turns on one live server: ${moved}`)

        // It comes back on its port: it loads the newest version before it listens, registers, and is used again
        // from the next update (a new episode goes to it: it holds none).
        const back = yield* PolicyServerProcess.launch({
          model: dir,
          backend: "reference",
          servedModelName: "tiny",
          weightsFrom: store,
          port: e1On.port
        })
        assert.strictEqual(yield* policyVersion(back.url), 3)
        yield* registered(3)
        yield* remote.importState(yield* local.exportState)
        assert.strictEqual(yield* policyVersion(back.url), 4)
        yield* turns("e4", 1)
        assert.strictEqual(yield* completionsServed(back.url), 1)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
})
