// GRPO with generation on `envtrain serve-policy` child processes (CPU backend) over loopback: the same run as
// in-process, step for step; one policy_version per step; a server SIGKILLed mid-run and restarted; a URL that
// never answers. The tiny model is made here, as the other tests do. Live clock throughout.
import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as CommandFile from "@envtrain/grpo/CommandFile"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Trainer from "@envtrain/grpo/Trainer"
import * as PolicyRequest from "@envtrain/rollout/PolicyRequest"
import { Effect, Metric, Scope } from "effect"
import * as Http from "node:http"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import { catchRunFile, completionRows, open, policyVersion, timeless, tinyDir, train } from "./parityRun.js"

// `envtrain serve-policy --backend reference` in its own process, stopped with the scope: the specification model on
// both sides, so that "the same run as in process" is checked bit for bit (the CPU device's server is tested against
// the trainer's device model in ServePolicy.test.ts).
const startServer = (dir: string, port?: number) =>
  PolicyServerProcess.launch({
    model: dir,
    backend: "reference",
    servedModelName: "tiny",
    ...(port === undefined ? {} : { port })
  })

// A loaded machine's synchronous work: the event loop is held (the cpu backend computes synchronously) for longer
// than node:http's 5 s keep-alive, so the server closes the connections left open while this process cannot notice.
const holdPastKeepAlive = Effect.sync(() => {
  const until = Date.now() + 6500
  while (Date.now() < until) {
    // busy, as a loaded machine's step would be
  }
})

describe("GRPO generating on envtrain serve-policy", () => {
  it.scopedLive(
    "async GRPO on a server: at maxStaleness 0 it equals the synchronous in-process run; at 1 the staleness is " +
      "counted in optimizer steps (the server's own update count is translated), within 0..1",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const server = yield* startServer(dir)
        const local = yield* train(Trainer.referenceModel(model), 3)
        const remote = (extra: Readonly<Record<string, unknown>>) =>
          Effect.flatMap(
            PolicyServers.withPolicyServers(Trainer.referenceModel(model), { urls: [server.url] }),
            (m) => train(m, 3, open, { async: true, ...extra })
          )
        const strict = yield* remote({ maxStaleness: 0 })
        const fields = (values: Readonly<Record<string, number>>) =>
          Object.fromEntries(
            Object.entries(timeless(values)).filter(([k]) => !k.startsWith("async/") && k !== "buffer_qsize")
          )
        assert.deepStrictEqual(
          strict.result.steps.map((s) => [s.step, s.loss, fields(s.values)]),
          local.result.steps.map((s) => [s.step, s.loss, fields(s.values)])
        )
        const ahead = yield* remote({ maxStaleness: 1 })
        assert.strictEqual(ahead.result.steps.length, 3)
        // A step that takes a new generation batch reports its staleness (a batch can feed several steps).
        const taken = ahead.result.steps.flatMap((s) => {
          const max = s.values["async/staleness/max"]
          return max === undefined ? [] : [{ step: s.step, max, mean: s.values["async/staleness/mean"] }]
        })
        assert.isAbove(taken.length, 0)
        for (const t of taken) {
          assert.isTrue(t.max >= 0 && t.max <= 1 && t.mean !== undefined && t.mean >= 0, JSON.stringify(t))
        }
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "equals the in-process run step for step; policy_version advances once per step",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const servers = [yield* startServer(dir), yield* startServer(dir)]
        const started = Date.now()
        const local = yield* train(Trainer.referenceModel(model), 3)
        const localSeconds = (Date.now() - started) / 1000
        const remoteModel = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: servers.map((s) => s.url)
        })
        // The start pushes the trainer's weights: version 1 on each server.
        for (const s of servers) assert.strictEqual(yield* policyVersion(s.url), 1)
        const remoteStarted = Date.now()
        const remote = yield* train(remoteModel, 3)
        const remoteSeconds = (Date.now() - remoteStarted) / 1000
        yield* Effect.log(`3 steps: in-process ${localSeconds.toFixed(2)} s, two servers ${remoteSeconds.toFixed(2)} s`)
        assert.deepStrictEqual(
          remote.result.steps.map((s) => [s.step, s.loss, timeless(s.values)]),
          local.result.steps.map((s) => [s.step, s.loss, timeless(s.values)])
        )
        // Same completions table (prompts, completions, rewards, advantages), timestamps aside.
        const rows = completionRows
        assert.isAbove(rows(local.completions).length, 0)
        assert.deepStrictEqual(rows(remote.completions), rows(local.completions))
        // One push per step after the start's, to every server.
        for (const s of servers) assert.strictEqual(yield* policyVersion(s.url), 1 + 3)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "a server SIGKILLed mid-generation: its episodes are unscoreable; training resumes once it is back",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const port = yield* Launcher.freePort()
        const first = yield* startServer(dir, port)
        const remoteModel = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
          urls: [first.url],
          retryInterval: "100 millis",
          unreachableTimeout: "60 seconds"
        })
        // Step 1 opens episodes 1-8; the kill lands when step 2's fourth episode opens, with its first three
        // episodes' requests on the way. The server comes back on the same port 2 s later.
        let opened = 0
        let restarted: Effect.Effect<void> = Effect.void
        const scope = yield* Effect.scope
        const killing = (row: Readonly<Record<string, unknown>>) => {
          opened++
          if (opened === 12) {
            restarted = Effect.sleep("2 seconds").pipe(
              Effect.zipRight(startServer(dir, port)),
              Effect.provideService(Scope.Scope, scope),
              Effect.asVoid,
              Effect.orDie
            )
            return first.kill("SIGKILL").pipe(Effect.zipRight(Effect.forkDaemon(restarted)), Effect.zipRight(open(row)))
          }
          return open(row)
        }
        const { result } = yield* train(remoteModel, 4, killing)
        assert.strictEqual(result.globalStep, 4)
        const unscoreable = result.steps.map((s) => s.values["unscoreable_frac"] ?? 0)
        assert.isAbove(unscoreable[1], 0, `step 2 lost episodes: ${unscoreable.join(", ")}`)
        assert.strictEqual(unscoreable[0], 0)
        assert.strictEqual(unscoreable[3], 0)
        // The restarted server (version 0) got the weights once on revival, then once per later step.
        const version = yield* policyVersion(first.url)
        yield* Effect.log(`unscoreable_frac per step: ${unscoreable.join(", ")}; restarted server's version ${version}`)
        assert.include([3, 4], version)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "envtrain train with TRL's use_vllm + vllm_mode: server + vllm_server_base_url generates there",
    () =>
      Effect.gen(function*() {
        const { dir } = yield* tinyDir
        const server = yield* startServer(dir)
        const file = yield* catchRunFile(dir, [
          "use_vllm: true",
          "vllm_mode: server",
          `vllm_server_base_url: ${server.url}`,
          "vllm_server_timeout: 30"
        ])
        yield* CommandFile.train(file, [])
        // The start's push, then one per step.
        assert.strictEqual(yield* policyVersion(server.url), 3)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "a push after a step that kept the trainer busy past the server's keep-alive (a loaded machine) still lands",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const server = yield* startServer(dir)
        const local = Trainer.referenceModel(model)
        // A loaded machine's optimizer step: the event loop is held (the cpu backend computes synchronously) for
        // longer than node:http's 5 s keep-alive, so the server closes the connections the generation left open
        // while the trainer cannot notice; the push that follows at once is written into a closed one (EPIPE).
        // Before the fix that push was lost and the server stayed at the old version.
        const busy: Trainer.TrainableModel = { ...local, step: (o) => Effect.tap(local.step(o), holdPastKeepAlive) }
        const remote = yield* PolicyServers.withPolicyServers(busy, { urls: [server.url] })
        const { result } = yield* train(remote, 2)
        assert.strictEqual(result.globalStep, 2)
        // The start's push, then one per step: none lost.
        assert.strictEqual(yield* policyVersion(server.url), 3)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "generation after the trainer was kept busy past the server's keep-alive: the dropped requests are sent again, " +
      "no episode is lost",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const server = yield* startServer(dir)
        const remote = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), { urls: [server.url] })
        // Step 2's first episode holds the event loop as it opens (as a synchronous environment, or in async GRPO
        // the optimizer step, would), so the server closes every connection step 1's generation and the push left
        // open, and the requests that follow at once are written into them. Before the fix those episodes failed
        // (PolicyTransportError: unscoreable) and the server was marked down.
        let opened = 0
        const holding = (row: Readonly<Record<string, unknown>>) =>
          ++opened === 9 ? Effect.zipRight(holdPastKeepAlive, open(row)) : open(row)
        const before = (yield* Metric.value(PolicyRequest.resends)).count
        const { result } = yield* train(remote, 2, holding)
        assert.strictEqual(result.globalStep, 2)
        assert.deepStrictEqual(result.steps.map((s) => s.values["unscoreable_frac"]), [0, 0])
        assert.isAbove((yield* Metric.value(PolicyRequest.resends)).count - before, 0)
        assert.strictEqual(yield* policyVersion(server.url), 3)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "weights through a shared directory: serve-policy reloads it (/update_weights_from_disk)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const { dir, model } = yield* tinyDir
        const server = yield* startServer(dir)
        const weights = yield* fs.makeTempDirectoryScoped()
        const local = yield* train(Trainer.referenceModel(model), 2)
        const remote = yield* train(
          yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
            urls: [server.url],
            weightDirectory: weights
          }),
          2
        )
        assert.deepStrictEqual(
          remote.result.steps.map((s) => [s.step, s.loss, timeless(s.values)]),
          local.result.steps.map((s) => [s.step, s.loss, timeless(s.values)])
        )
        assert.strictEqual(yield* policyVersion(server.url), 3)
        assert.deepStrictEqual(yield* fs.readDirectory(weights), ["model.safetensors"])
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )

  it.scopedLive(
    "a vLLM server: refused without a weight directory; with one, reload_weights then a cache reset",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const model = yield* Checkpoint.makeModel("tiny", 1)
        // A stand-in for `VLLM_SERVER_DEV_MODE=1 vllm serve DIR` that records the weight routes (no vLLM here).
        const calls: Array<string> = []
        const fake = yield* Effect.acquireRelease(
          Effect.async<Http.Server>((resume) => {
            const server = Http.createServer((req, res) => {
              let body = ""
              req.on("data", (d: Buffer) => (body += d.toString()))
              req.on("end", () => {
                calls.push(`${req.method} ${req.url} ${body}`)
                res.writeHead(200, { "content-type": "application/json" })
                res.end(
                  req.url === "/v1/models"
                    ? JSON.stringify({ object: "list", data: [{ id: "Qwen/Qwen3-0.6B", owned_by: "vllm" }] })
                    : req.url === "/collective_rpc"
                    ? JSON.stringify({ results: [null] })
                    : "{}"
                )
              })
            })
            server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
          }),
          (server) => Effect.promise(() => new Promise<void>((done) => server.close(() => done())))
        )
        const url = `http://127.0.0.1:${(fake.address() as { port: number }).port}`
        const refused = yield* Effect.flip(
          PolicyServers.withPolicyServers(Trainer.referenceModel(model), { urls: [url] })
        )
        assert.include(refused.message, "it is a vLLM server, which takes no pushed weights")
        calls.length = 0
        const weights = yield* fs.makeTempDirectoryScoped()
        yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model), { urls: [url], weightDirectory: weights })
        assert.deepStrictEqual(calls, [
          "GET /v1/models ",
          "POST /collective_rpc {\"method\":\"reload_weights\"}",
          "POST /reset_prefix_cache "
        ])
        // What vLLM reloads from its --model directory: the trainer's weights, every tensor.
        const written = yield* Checkpoint.loadWeights(weights, model.config)
        for (const [name, t] of model.tensors) assert.deepStrictEqual(written.get(name)?.data, t.data, name)
        assert.isTrue(yield* fs.exists(path.join(weights, "model.safetensors")))
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )

  it.scopedLive("a URL that never answers fails at the start, naming it", () =>
    Effect.gen(function*() {
      const model = yield* Checkpoint.makeModel("tiny", 1)
      const port = yield* Launcher.freePort()
      const url = `http://127.0.0.1:${port}`
      const error = yield* Effect.flip(PolicyServers.withPolicyServers(Trainer.referenceModel(model), {
        urls: [url],
        unreachableTimeout: "1 second",
        retryInterval: "200 millis"
      }))
      assert.strictEqual(error._tag, "PolicyServerError")
      assert.include(error.message, `Policy server ${url}: it did not answer within 1s`)
      assert.include(error.message, "ECONNREFUSED")
      assert.include(error.message, "envtrain serve-policy --model DIR")
    }), 60_000)
})
