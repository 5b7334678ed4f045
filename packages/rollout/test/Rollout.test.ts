import { assert, describe, it } from "@effect/vitest"
import { Catch, Client, Echo, Environment, Server } from "@envtrain/env"
import { Cause, Chunk, Effect, Exit, Fiber, Layer, Ref, Schedule, Stream, TestClock, Tracer } from "effect"
import type { Policy as PolicyNs } from "../src/index.js"
import { Episode, Policy, RemoteSession, Rollout } from "../src/index.js"
import { catchScript, renderer, tinyModel } from "./fixtures.js"

const scripted = (respond: (ctx: PolicyNs.ScriptContext) => string | Effect.Effect<string>) =>
  Layer.unwrapEffect(Effect.map(tinyModel, ({ tokenizer }) => Policy.scripted(tokenizer, respond)))

const Live = Layer.merge(renderer(false), scripted(catchScript))

const rows = (n: number, extra: Record<string, unknown> = {}) =>
  Stream.fromIterable(
    Array.from({ length: n }, (_, i) => ({ prompt: [{ role: "user" as const, content: `Game ${i}.` }], ...extra }))
  )

const poll = Schedule.spaced("10 millis")

// Polls the server's session count until it is 0 (sockets close asynchronously) or 3 s pass; returns the last count.
const drained = (server: Server.RunningServer) =>
  Effect.repeat(server.activeSessions, { until: (n) => n === 0, schedule: poll }).pipe(
    Effect.timeout("3 seconds"),
    Effect.ignore,
    Effect.zipRight(server.activeSessions)
  )

const config: Episode.EpisodeConfig = { maxCompletionLength: 2048, sampling: { temperature: 1 } }

const openCatch = (row: Environment.Row) =>
  Effect.map(Environment.episode(Catch.environment, row), Episode.fromEnvironment)

describe("Rollout", () => {
  it.effect("emits one group of G episodes per prompt, with bounded concurrency", () =>
    Effect.gen(function*() {
      const inFlight = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const open = (row: Environment.Row) =>
        Effect.gen(function*() {
          const now = yield* Ref.updateAndGet(inFlight, (n) => n + 1)
          yield* Ref.update(peak, (p) => Math.max(p, now))
          yield* Effect.addFinalizer(() => Ref.update(inFlight, (n) => n - 1))
          return yield* openCatch(row)
        })
      const groups = yield* Rollout.groups(rows(5), { groupSize: 4, concurrency: 3, config, open }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      assert.deepStrictEqual(groups.map((g) => g.promptIndex).sort(), [0, 1, 2, 3, 4])
      for (const g of groups) {
        assert.deepStrictEqual(
          g.episodes.map((e) => [e.promptIndex, e.generation]),
          [0, 1, 2, 3].map((i) => [g.promptIndex, i])
        )
        assert.isTrue(g.episodes.every((e) => e.unscoreable === undefined && (e.state as Catch.State).caught))
        assert.include(g.episodes[0].messages[0].content, `Game ${g.promptIndex}.`)
        // No seed column: each generation gets its own derived seed, recorded and passed to reset.
        assert.strictEqual(new Set(g.episodes.map((e) => e.envSeed)).size, 4)
        assert.deepStrictEqual(g.episodes.map((e) => (e.state as Catch.State).seed), g.episodes.map((e) => e.envSeed))
      }
      assert.isAtMost(yield* Ref.get(peak), 3)
      assert.strictEqual(yield* Ref.get(inFlight), 0)
    }).pipe(Effect.provide(Live)))

  it.effect("a seed column gives the whole group the same environment", () =>
    Effect.gen(function*() {
      const [g] = yield* Rollout.groups(rows(1, { seed: 77 }), {
        groupSize: 3,
        concurrency: 3,
        config,
        open: openCatch
      })
        .pipe(Stream.runCollect, Effect.map(Chunk.toArray))
      assert.deepStrictEqual(g.episodes.map((e) => e.envSeed), [77, 77, 77])
      assert.strictEqual(new Set(g.episodes.map((e) => e.completionIds.join(","))).size, 1)
    }).pipe(Effect.provide(Live)))

  it.effect("a lost session makes only its episode unscoreable; the group's others complete", () =>
    Effect.gen(function*() {
      let opened = 0
      const open = (row: Environment.Row) =>
        Effect.map(openCatch(row), (session): Episode.Session<Catch.State, Client.SessionLostError> => {
          if (opened++ !== 1) return session
          let calls = 0
          return {
            ...session,
            call: (name, args) =>
              ++calls > 2
                ? Effect.fail(new Client.SessionLostError({ url: "ws://test", reason: "socket closed (1006)" }))
                : session.call(name, args)
          }
        })
      const [g] = yield* Rollout.groups(rows(1), { groupSize: 4, concurrency: 1, config, open }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      const lost = g.episodes.filter((e) => e.unscoreable !== undefined)
      assert.strictEqual(lost.length, 1)
      assert.strictEqual(lost[0].generation, 1)
      assert.strictEqual(lost[0].unscoreable?.tag, "SessionLostError")
      assert.include(lost[0].unscoreable?.reason, "lost mid-episode")
      assert.strictEqual(lost[0].stopReason, "unscoreable")
      assert.strictEqual(lost[0].state, undefined)
      // What happened before the loss is kept (two tool calls made it).
      assert.strictEqual(lost[0].toolCallCount, 2)
      assert.strictEqual(lost[0].mask.length, lost[0].completionIds.length)
      const rest = g.episodes.filter((e) => e.unscoreable === undefined)
      assert.strictEqual(rest.length, 3)
      assert.isTrue(rest.every((e) => (e.state as Catch.State).caught))
    }).pipe(Effect.provide(Live)))

  it.effect("a session's finalizers see how its episode ended: success, or the failure that ended it", () =>
    Effect.gen(function*() {
      const ends: Array<string> = []
      let opened = 0
      const open = (row: Environment.Row) =>
        Effect.gen(function*() {
          const n = opened++
          yield* Effect.addFinalizer((exit) =>
            Effect.sync(() => {
              ends[n] = Exit.isSuccess(exit) ? "success" : String(Cause.squash(exit.cause))
            })
          )
          const session = yield* openCatch(row)
          return n !== 1 ? session : {
            ...session,
            call: () => Effect.fail(new Client.SessionLostError({ url: "ws://test", reason: "socket closed (1006)" }))
          }
        })
      const [g] = yield* Rollout.groups(rows(1), { groupSize: 3, concurrency: 1, config, open }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      assert.strictEqual(g.episodes[1].unscoreable?.tag, "SessionLostError")
      assert.strictEqual(ends[0], "success")
      assert.include(ends[1], "SessionLostError")
      assert.strictEqual(ends[2], "success")
    }).pipe(Effect.provide(Live)))

  it.effect("a session whose release dies with a lost connection after its episode makes that episode unscoreable", () =>
    Effect.gen(function*() {
      let opened = 0
      const open = (row: Environment.Row) =>
        Effect.gen(function*() {
          if (opened++ === 0) {
            yield* Effect.addFinalizer(() =>
              Effect.die(new Client.SessionLostError({ url: "ws://test", reason: "socket closed (1006)" }))
            )
          }
          return yield* openCatch(row)
        })
      const [g] = yield* Rollout.groups(rows(1), { groupSize: 2, concurrency: 1, config, open }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      assert.strictEqual(g.episodes[0].unscoreable?.tag, "SessionLostError")
      // The episode itself ran to its end: what it did is kept.
      assert.isAbove(g.episodes[0].toolCallCount, 0)
      assert.isUndefined(g.episodes[1].unscoreable)
    }).pipe(Effect.provide(Live)))

  it.effect("a remote-backed environment's lost session (a client-error defect from Environment) is unscoreable too", () =>
    Effect.gen(function*() {
      let opened = 0
      // Environment.Episode.call lets a client error escape as a defect (a remote-backed tool cannot answer).
      const open = (row: Environment.Row) =>
        Effect.map(openCatch(row), (session): Episode.Session<Catch.State> => {
          if (opened++ !== 2) return session
          return {
            ...session,
            call: () => Effect.die(new Client.SessionLostError({ url: "ws://test", reason: "socket closed (1006)" }))
          }
        })
      const [g] = yield* Rollout.groups(rows(1), { groupSize: 3, concurrency: 1, config, open }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray)
      )
      assert.deepStrictEqual(g.episodes.map((e) => e.unscoreable?.tag), [undefined, undefined, "SessionLostError"])
      // Any other defect still fails the run.
      const broken = (row: Environment.Row) =>
        Effect.map(openCatch(row), (session): Episode.Session<Catch.State> => ({
          ...session,
          call: () => Effect.die(new Error("bug in a tool adapter"))
        }))
      const exit = yield* Effect.exit(
        Rollout.groups(rows(1), { groupSize: 2, concurrency: 1, config, open: broken }).pipe(Stream.runDrain)
      )
      assert.isTrue(Exit.isFailure(exit))
    }).pipe(Effect.provide(Live)))

  it.effect("an episode past its timeout is unscoreable; the others finish", () =>
    Effect.gen(function*() {
      let opened = 0
      const open = (row: Environment.Row) =>
        Effect.map(openCatch(row), (session): Episode.Session<Catch.State> =>
          opened++ === 0
            ? {
              ...session,
              call: (n, a) => Effect.zipRight(Effect.sleep("1 hour"), session.call(n, a))
            }
            : session)
      const fiber = yield* Rollout.groups(rows(1), {
        groupSize: 3,
        concurrency: 3,
        config,
        open,
        episodeTimeout: "1 minute"
      })
        .pipe(Stream.runCollect, Effect.map(Chunk.toArray), Effect.fork)
      yield* TestClock.adjust("2 minutes")
      const [g] = yield* Fiber.join(fiber)
      assert.deepStrictEqual(g.episodes.map((e) => e.unscoreable?.tag), ["EpisodeTimeout", undefined, undefined])
      assert.include(g.episodes[0].unscoreable?.reason, "within 1m")
    }).pipe(Effect.provide(Live)))

  it.effect("a run-level failure (a policy answering 4xx) fails the stream", () =>
    Effect.gen(function*() {
      const failing = Layer.succeed(Policy.Policy, {
        generate: () => Effect.fail(new Policy.PolicyResponseError({ message: "400: unknown model" }))
      })
      const exit = yield* Rollout.groups(rows(2), { groupSize: 2, concurrency: 2, config, open: openCatch }).pipe(
        Stream.runCollect,
        Effect.provide(failing),
        Effect.exit
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), "PolicyResponseError")
    }).pipe(Effect.provide(renderer(false))))

  it.effect("escape hatch: a user episode function returns the record (TRL's rollout_func)", () =>
    Effect.gen(function*() {
      const [g] = yield* Rollout.groups(rows(1), {
        groupSize: 2,
        concurrency: 2,
        config,
        open: openCatch,
        episode: ({ generation, progress, prompt }) =>
          generation === 1
            ? Effect.fail(new Client.SessionLostError({ url: "ws://agent", reason: "agent crashed" }))
            : Effect.sync(() => {
              progress.promptIds = [1, 2]
              progress.completionIds = [3, 4, 5]
              progress.mask = [1, 0, 1]
              progress.logprobs = [-0.5, 0, -0.25]
              progress.messages = [...prompt, { role: "assistant", content: "hand-made" }]
              progress.stopReason = "no_tool_call"
              return progress.finish()
            })
      }).pipe(Stream.runCollect, Effect.map(Chunk.toArray))
      assert.deepStrictEqual(g.episodes[0].completionIds, [3, 4, 5])
      assert.strictEqual(g.episodes[0].envSeed, Rollout.seedOf(0, 0, 0))
      assert.strictEqual(g.episodes[1].unscoreable?.tag, "SessionLostError")
    }).pipe(Effect.provide(Live)))

  it.effect("a Rollout.episode span per episode when the run has a tracer of its own; none when turned off", () =>
    Effect.gen(function*() {
      const spans: Array<{ name: string; attributes: ReadonlyMap<string, unknown> }> = []
      const builtIn = yield* Effect.tracer
      const recording = Tracer.make({
        span: (name, parent, context, links, startTime, kind, options) => {
          const span = builtIn.span(name, parent, context, links, startTime, kind, options)
          spans.push(span)
          return span
        },
        context: (f) => f()
      })
      const run = (traceEpisodes?: boolean) =>
        Rollout.groups(rows(2), {
          groupSize: 2,
          concurrency: 2,
          config,
          open: openCatch,
          ...(traceEpisodes === undefined ? {} : { traceEpisodes })
        }).pipe(Stream.runDrain, Effect.withTracer(recording))
      yield* run()
      const episodes = spans.filter((s) => s.name === "Rollout.episode")
      assert.strictEqual(episodes.length, 4)
      assert.deepStrictEqual(
        episodes.map((s) => [s.attributes.get("promptIndex"), s.attributes.get("generation")]).sort(),
        [[0, 0], [0, 1], [1, 0], [1, 1]]
      )
      spans.length = 0
      yield* run(false)
      assert.strictEqual(spans.filter((s) => s.name === "Rollout.episode").length, 0)
    }).pipe(Effect.provide(Live)))
})

describe("Rollout against the envtrain server", () => {
  const echoForever = ({ text }: PolicyNs.ScriptContext) =>
    Effect.as(
      Effect.sleep("5 millis"),
      `<tool_call>\n{"name": "echo_message", "arguments": {"message": "turn ${text.length % 97}"}}\n</tool_call>`
    )

  it.scopedLive("over the wire: MCP tools are listed, called, and sessions are released after the run", () =>
    Effect.gen(function*() {
      const server = yield* Server.serve(Echo.openEnvMcp, { port: 0, host: "127.0.0.1", maxConcurrentEnvs: 16 })
      const groups = yield* Rollout.groups(rows(2), {
        groupSize: 3,
        concurrency: 6,
        config: { ...config, maxToolCallingIterations: 2 },
        open: (row) => RemoteSession.mcp({ client: { url: server.url }, environment: "echo_env" }, row)
      }).pipe(
        Stream.runCollect,
        Effect.map(Chunk.toArray),
        Effect.provide(Layer.merge(renderer(false), scripted(echoForever)))
      )
      const episodes = groups.flatMap((g) => g.episodes)
      assert.strictEqual(episodes.length, 6)
      for (const e of episodes) {
        assert.strictEqual(e.unscoreable, undefined)
        assert.strictEqual(e.toolCallCount, 2)
        assert.strictEqual(e.toolFailureCount, 0)
        assert.deepStrictEqual(e.messages.filter((m) => m.role === "tool").map((m) => m.content.startsWith("turn ")), [
          true,
          true
        ])
        assert.isString((e.state as { episode_id: string }).episode_id)
      }
      assert.strictEqual(yield* drained(server), 0)
    }))

  it.scopedLive("abort interrupts every in-flight episode and the server reports zero active sessions", () =>
    Effect.gen(function*() {
      const server = yield* Server.serve(Echo.openEnvMcp, { port: 0, host: "127.0.0.1", maxConcurrentEnvs: 64 })
      const generated = yield* Ref.make(0)
      const counting = (ctx: PolicyNs.ScriptContext) =>
        Effect.zipRight(Ref.update(generated, (n) => n + 1), echoForever(ctx))
      const abort = yield* Rollout.makeAbort
      const fiber = yield* Rollout.groups(rows(100), {
        groupSize: 4,
        concurrency: 24,
        config: { ...config, maxCompletionLength: 1_000_000 },
        open: (row) => RemoteSession.mcp({ client: { url: server.url } }, row),
        abort
      }).pipe(Stream.runDrain, Effect.provide(Layer.merge(renderer(false), scripted(counting))), Effect.fork)
      // Wait until the run is in full swing.
      yield* Effect.repeat(server.activeSessions, { until: (n) => n >= 20, schedule: poll })
      yield* Rollout.abort(abort, "trainer stopping")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), "trainer stopping")
      // Sessions are released as the episode scopes close; the server notices the sockets closing.
      assert.strictEqual(yield* drained(server), 0)
      const after = yield* Ref.get(generated)
      yield* Effect.sleep("100 millis")
      assert.strictEqual(yield* Ref.get(generated), after)
    }))

  it.scopedLive("pooled sessions: sockets are reused across episodes and all close with the pool's scope", () =>
    Effect.gen(function*() {
      const server = yield* Server.serve(Echo.openEnvMcp, { port: 0, host: "127.0.0.1", maxConcurrentEnvs: 16 })
      const peak = yield* Ref.make(0)
      const abort = yield* Rollout.makeAbort
      const exit = yield* Effect.scoped(Effect.gen(function*() {
        const open = yield* RemoteSession.pooled(
          { url: server.url },
          4,
          (client, row) => RemoteSession.mcpOn(client, { environment: "echo_env" }, row)
        )
        const groups = yield* Rollout.groups(rows(4), {
          groupSize: 3,
          concurrency: 4,
          config: { ...config, maxToolCallingIterations: 2 },
          open: (row) =>
            Effect.tap(
              open(row),
              () => Effect.flatMap(server.activeSessions, (n) => Ref.update(peak, (p) => Math.max(p, n)))
            )
        }).pipe(
          Stream.runCollect,
          Effect.map(Chunk.toArray),
          Effect.provide(Layer.merge(renderer(false), scripted(echoForever)))
        )
        const episodes = groups.flatMap((g) => g.episodes)
        assert.strictEqual(episodes.length, 12)
        assert.isTrue(episodes.every((e) => e.unscoreable === undefined && e.toolCallCount === 2))
        // Then a run on the same pool is aborted mid-way.
        const fiber = yield* Rollout.groups(rows(50), {
          groupSize: 4,
          concurrency: 4,
          config: { ...config, maxCompletionLength: 1_000_000 },
          open,
          abort
        }).pipe(Stream.runDrain, Effect.provide(Layer.merge(renderer(false), scripted(echoForever))), Effect.fork)
        yield* Effect.sleep("200 millis")
        yield* Rollout.abort(abort, "stop")
        return yield* Fiber.await(fiber)
      }))
      assert.isTrue(Exit.isFailure(exit))
      assert.isAtMost(yield* Ref.get(peak), 4)
      assert.strictEqual(yield* drained(server), 0)
    }))
})
