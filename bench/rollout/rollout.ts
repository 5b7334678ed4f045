/**
 * Rollout benchmark: episodes/s and tool steps/s of `Rollout.groups` with a scripted policy (the tiny preset's
 * tokenizer and Qwen3-style template) on Wordle, in-process and against the envtrain server over /ws on loopback,
 * at concurrency 1..256; the rollout's own overhead per tool step (measured directly against a replayed Wordle, and
 * by subtraction) relative to a bare Wordle step over the wire; and, against a server in its own process as deployed
 * (`envtrain serve wordle`), the same episodes bare and through the rollout side by side at several concurrencies
 * (`--served-concurrency=1,16,64`, `--served-rounds=5`).
 *
 *   npx tsx bench/rollout/rollout.ts                       # defaults
 *   npx tsx bench/rollout/rollout.ts --concurrency=1,16,256 --overhead-episodes=200 --out=rollout-local
 *   npx tsx bench/rollout/rollout.ts --only=direct          # the direct measure and the served step (~1 minute)
 *
 * Results: bench/results/<out>.{json,md} (default out: rollout-wordle).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Client, Environment, Launcher, Server, Wordle } from "@envtrain/env"
import { ChatRenderer, Episode, Policy, RemoteSession, Rollout, ToolCallParser } from "@envtrain/rollout"
import * as ChatTemplate from "@envtrain/text/ChatTemplate"
import * as Tokenizer from "@envtrain/text/Tokenizer"
import { Context, Effect, Layer, Option, type Scope, Stream } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import * as Os from "node:os"

const flag = (name: string): string | undefined => {
  const hit = process.argv.find((a) => a === `--${name}` || a.startsWith(`--${name}=`))
  return hit === undefined ? undefined : hit.includes("=") ? hit.slice(hit.indexOf("=") + 1) : "true"
}
const CONCURRENCY = (flag("concurrency") ?? "1,4,16,64,256").split(",").map(Number)
const OVERHEAD_EPISODES = Number(flag("overhead-episodes") ?? 150)
// `--only=direct`: just the direct measure, the text work and the served step (about a minute), for iterating.
const ONLY = flag("only")
const OUT = flag("out") ?? (ONLY === "direct" ? "rollout-direct" : "rollout-wordle")
const REPEATS = Number(flag("repeats") ?? 5)
const DIRECT_EPISODES = Number(flag("direct-episodes") ?? 2000)
// Against a server in its own process (as deployed): concurrency levels and alternating rounds per level.
const SERVED_CONCURRENCY = (flag("served-concurrency") ?? "1,16,64").split(",").map(Number)
const SERVED_ROUNDS = Number(flag("served-rounds") ?? 5)
const GROUP = 8

// Six valid words; a game ends early when one is the secret.
const GUESSES = ["crane", "pious", "mound", "tight", "bloke", "fuzzy"]
const callFor = (n: number) => `<tool_call>\n{"name": "guess", "arguments": {"guess": "[${GUESSES[n]}]"}}\n</tool_call>`

const f = (x: number, d = 3) => x.toFixed(d)
const timers = { policy: 0, env: 0, open: 0 }
const medianOf = (xs: ReadonlyArray<number>) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]
// The same in process CPU time (user + system, ms): other jobs share the cores, and CPU time is what the rollout
// itself spends, whatever the scheduler does to wall time.
const cpuTimers = { policy: 0, env: 0, open: 0 }
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
// Session lifecycle time: opening (connect + reset) and, at scope close, releasing (socket close, instance drop).
// Finalizers run last-added first, so the one added before opening runs after the session's own release.
const lifecycle = <A, E, R>(open: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let closing = 0
    let closingCpu = 0
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        timers.open += performance.now() - closing
        cpuTimers.open += cpuMs() - closingCpu
      })
    )
    const session = yield* timed("open", open)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closing = performance.now()
        closingCpu = cpuMs()
      })
    )
    return session
  })
const timed = <A, E, R>(key: keyof typeof timers, effect: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    const t0 = performance.now()
    const c0 = cpuMs()
    return Effect.ensuring(
      effect,
      Effect.sync(() => {
        timers[key] += performance.now() - t0
        cpuTimers[key] += cpuMs() - c0
      })
    )
  })

// The Wordle step over the wire as users meet it: one warmed client, server in its own process.
const servedStepAt = (url: string) =>
  Effect.scoped(Effect.gen(function*() {
    const client = yield* Client.make<Record<string, unknown>, Record<string, unknown>>({ url })
    yield* client.reset({ seed: 1 })
    const samples: Array<number> = []
    let k = 0
    for (const [ms, keep] of [[1500, false], [3000, true]] as const) {
      const end = Date.now() + ms
      while (Date.now() < end) {
        const t0 = performance.now()
        const r = yield* client.step({ message: `[${GUESSES[k++ % GUESSES.length]}]` })
        if (keep) samples.push(performance.now() - t0)
        if (r.done || k % GUESSES.length === 0) yield* client.reset({ seed: k })
      }
    }
    samples.sort((a, b) => a - b)
    return {
      steps: samples.length,
      p50Ms: samples[samples.length >> 1],
      p99Ms: samples[Math.floor(samples.length * 0.99)]
    }
  }))

const main = Effect.gen(function*() {
  const loadAtStart = Os.loadavg()
  const trained = Tokenizer.train({ vocabSize: 1024 })
  const tokenizer = yield* Tokenizer.Tokenizer.fromJson(
    trained,
    Tokenizer.qwen3TokenizerConfig(trained, ChatTemplate.QWEN3_STYLE_TEMPLATE)
  )
  const template = yield* ChatTemplate.ChatTemplate.fromString(ChatTemplate.QWEN3_STYLE_TEMPLATE)
  // The script counts tool responses without decoding the context, so the policy's own cost stays small.
  const responseId = tokenizer.tokenToId("<tool_response>")!
  const replies = [...GUESSES.map((_, n) => callFor(n)), "I am done."].map((t) => [
    ...tokenizer.encode(t),
    tokenizer.eosTokenId!
  ])
  const replyLogprobs = replies.map((ids) => ids.map(Policy.scriptedLogprob))
  // Tool responses counted so far per context array, and how far it was scanned: the loop lends the policy one live
  // array per episode that only grows (see Policy.GenerateRequest), so each turn scans only the new tokens and the
  // script's own cost stays far below the rollout's (rescanning the whole context each turn cost ~1 µs per step).
  const scanned = new WeakMap<ReadonlyArray<number>, { at: number; responses: number }>()
  const scriptedReply = (request: Policy.GenerateRequest): Policy.Completion => {
    const ids = request.promptIds
    let seen = scanned.get(ids)
    if (seen === undefined) scanned.set(ids, seen = { at: 0, responses: 0 })
    for (let i = ids.indexOf(responseId, seen.at); i >= 0; i = ids.indexOf(responseId, i + 1)) seen.responses++
    seen.at = ids.length
    const n = seen.responses
    const k = Math.min(n, GUESSES.length)
    const max = request.sampling.maxTokens
    return replies[k].length <= max
      ? { tokenIds: replies[k], logprobs: replyLogprobs[k], finishReason: "stop" as const }
      : {
        tokenIds: replies[k].slice(0, max),
        logprobs: replyLogprobs[k].slice(0, max),
        finishReason: "stop" as const
      }
  }
  const scripted = (request: Policy.GenerateRequest) => Effect.sync(() => scriptedReply(request))
  // Off while the rollout is measured directly (the timers would be charged to it).
  let timing = true
  const policy = Layer.succeed(Policy.Policy, {
    generate: (request) => timing ? timed("policy", scripted(request)) : scripted(request)
  })
  // Built once, as a training run does: the renderer's caches (template frames, token memo) and their verified
  // warm-up carry over between runs instead of being rebuilt for each.
  const Live = yield* Layer.build(
    Layer.merge(ChatRenderer.ChatRenderer.layer({ tokenizer, template, enableThinking: false }), policy)
  )
  const config: Episode.EpisodeConfig = {
    maxCompletionLength: 4096,
    maxToolCallingIterations: 10,
    sampling: { temperature: 1 }
  }
  const rows = (n: number) =>
    Stream.fromIterable(
      Array.from({ length: n }, (_, i) => ({ prompt: [{ role: "user" as const, content: `Game ${i}.` }] }))
    )

  const instrument = <S, E>(session: Episode.Session<S, E>): Episode.Session<S, E> => ({
    ...session,
    // Suspended so that building the environment's effect (its span captures a stack trace) is timed as the
    // environment's, not charged to the rollout.
    call: (name, args) => timed("env", Effect.suspend(() => session.call(name, args)))
  })
  const openLocal = (row: Environment.Row) =>
    lifecycle(
      Effect.suspend(() =>
        Effect.map(Environment.episode(Wordle.environment, row), (e) => instrument(Episode.fromEnvironment(e)))
      )
    )

  const server = yield* Server.serve(Wordle.openEnv, { port: 0, host: "127.0.0.1", maxConcurrentEnvs: 1024 })
  type WordleObservation = { readonly messages?: ReadonlyArray<{ readonly content: string }> }
  type WordleClient = Client.OpenEnvClient<Record<string, unknown>, WordleObservation>
  const transcriptOf = (observation: WordleObservation) => observation.messages?.[0]?.content ?? ""
  const wordleTools = Wordle.environment.tools.map((t) => t.definition as unknown as ChatTemplate.ToolDefinition)
  // One episode's Wordle session on a client: TextArena sends the whole transcript with every step, so each guess
  // answers the model with the transcript's new part, as `Wordle.remote` and the in-process Wordle do.
  const wordleOn = (client: WordleClient, row: Readonly<Record<string, unknown>>) => {
    let last = ""
    return RemoteSession.fromClientOn(client, {
      environment: "wordle",
      toolDefinitions: wordleTools,
      observation: (first) => {
        last = transcriptOf(first.observation)
        return Option.some(last)
      },
      call: (c, _name, args) =>
        Effect.map(c.step({ message: String(args.guess) }), (r) => {
          const full = transcriptOf(r.observation)
          const text = full.slice(last.length)
          last = full
          return { _tag: "Success" as const, tool: "guess", text }
        })
    }, row)
  }
  // Sockets reused across episodes (reset on the same session), pool size = concurrency.
  const pooledAt = (url: string, size: number) =>
    RemoteSession.pooled<Record<string, unknown>, WordleObservation, unknown, Client.ClientError>(
      { url },
      size,
      wordleOn
    )
  const pooledWire = (size: number) =>
    Effect.map(
      pooledAt(server.url, size),
      (open) => (row: Environment.Row) => lifecycle(Effect.suspend(() => Effect.map(open(row), instrument)))
    )
  const openRemote = (row: Environment.Row) =>
    lifecycle(Effect.suspend(() =>
      Effect.map(
        Effect.flatMap(
          Client.make<Record<string, unknown>, WordleObservation>({ url: server.url }),
          (client) => wordleOn(client, row)
        ),
        instrument
      )
    ))

  type Row = {
    readonly where: string
    readonly concurrency: number
    readonly episodes: number
    readonly steps: number
    readonly seconds: number
    readonly cpuSeconds: number
    readonly episodesPerSecond: number
    readonly stepsPerSecond: number
    readonly unscoreable: number
    readonly unscoreableReasons: Record<string, number>
  }
  const results: Array<Row> = []
  // One `Rollout.groups` run over `episodes` episodes with the scripted policy: wall and CPU seconds, episodes, tool
  // steps, and the unscoreable episodes by reason.
  const rolloutOnce = <E>(
    concurrency: number,
    episodes: number,
    open: (row: Environment.Row) => Effect.Effect<Episode.Session<unknown, E>, unknown, any>
  ) =>
    Effect.gen(function*() {
      const t0 = performance.now()
      const c0 = cpuMs()
      let steps = 0
      let n = 0
      let unscoreable = 0
      const reasons = new Map<string, number>()
      // Counted with `Stream.runFold`: `Stream.runForEach` keeps every delivered group alive through V8's young
      // collections (Effect's stream internals), which promoted all records and cost ~3 µs per tool step here.
      yield* Rollout.groups(rows(Math.ceil(episodes / GROUP)), {
        groupSize: GROUP,
        concurrency,
        config,
        open: open as (row: Environment.Row) => Effect.Effect<Episode.Session<unknown, E>, unknown, Scope.Scope>
      }).pipe(
        Stream.runFold(0, (count, g) => {
          for (const e of g.episodes) {
            n++
            steps += e.toolCallCount
            if (e.unscoreable !== undefined) {
              unscoreable++
              reasons.set(e.unscoreable.reason, (reasons.get(e.unscoreable.reason) ?? 0) + 1)
            }
          }
          return count + 1
        }),
        Effect.provide(Live)
      )
      return {
        seconds: (performance.now() - t0) / 1000,
        cpuSeconds: (cpuMs() - c0) / 1000,
        episodes: n,
        steps,
        unscoreable,
        reasons
      }
    })
  const run = <E>(
    where: string,
    concurrency: number,
    episodes: number,
    open: (row: Environment.Row) => Effect.Effect<Episode.Session<unknown, E>, unknown, any>
  ) =>
    Effect.map(rolloutOnce(concurrency, episodes, open), (r) => {
      const row = {
        cpuSeconds: r.cpuSeconds,
        unscoreableReasons: Object.fromEntries(r.reasons),
        where,
        concurrency,
        episodes: r.episodes,
        steps: r.steps,
        seconds: r.seconds,
        episodesPerSecond: r.episodes / r.seconds,
        stepsPerSecond: r.steps / r.seconds,
        unscoreable: r.unscoreable
      }
      results.push(row)
      console.log(
        `${where} c=${concurrency}: ${r.episodes} episodes, ${r.steps} steps in ${r.seconds.toFixed(2)} s: ${
          row.episodesPerSecond.toFixed(1)
        } ep/s, ${row.stepsPerSecond.toFixed(0)} steps/s${
          r.unscoreable > 0 ? `, unscoreable: ${JSON.stringify(row.unscoreableReasons)}` : ""
        }`
      )
    })

  // Warm-up (JIT, template frames, sockets).
  yield* run("warmup-local", 8, 32, openLocal)
  yield* run("warmup-wire", 8, 32, openRemote)
  results.length = 0

  // Sequential overhead: wall minus policy, environment calls and session lifecycle. Repeated REPEATS times; the
  // run with the median overhead is reported (other jobs share the cores, single runs swing by 2x).
  const overhead = (where: string, open: typeof openLocal | typeof openRemote) =>
    Effect.gen(function*() {
      const runs: Array<{
        where: string
        episodes: number
        steps: number
        wallMsPerStep: number
        policyMsPerStep: number
        envMsPerStep: number
        openMsPerEpisode: number
        rolloutOverheadMsPerStep: number
        rolloutOverheadCpuMsPerStep: number
      }> = []
      for (let k = 0; k < REPEATS; k++) {
        timers.policy = 0
        timers.env = 0
        timers.open = 0
        cpuTimers.policy = 0
        cpuTimers.env = 0
        cpuTimers.open = 0
        const before = results.length
        yield* run(where, 1, OVERHEAD_EPISODES, open as any)
        const r = results[before]
        results.pop()
        const wallMs = r.seconds * 1000
        const rolloutMs = wallMs - timers.policy - timers.env - timers.open
        runs.push({
          where,
          episodes: r.episodes,
          steps: r.steps,
          wallMsPerStep: wallMs / r.steps,
          policyMsPerStep: timers.policy / r.steps,
          envMsPerStep: timers.env / r.steps,
          openMsPerEpisode: timers.open / r.episodes,
          rolloutOverheadMsPerStep: rolloutMs / r.steps,
          rolloutOverheadCpuMsPerStep: (r.cpuSeconds * 1000 - cpuTimers.policy - cpuTimers.env - cpuTimers.open) /
            r.steps
        })
      }
      const sorted = runs.slice().sort((a, b) => a.rolloutOverheadMsPerStep - b.rolloutOverheadMsPerStep)
      const cpu = runs.map((r) => r.rolloutOverheadCpuMsPerStep).sort((a, b) => a - b)
      return {
        ...sorted[Math.floor(sorted.length / 2)],
        medianRolloutOverheadCpuMsPerStep: cpu[Math.floor(cpu.length / 2)],
        minRolloutOverheadMsPerStep: sorted[0].rolloutOverheadMsPerStep,
        allRolloutOverheadMsPerStep: runs.map((r) => r.rolloutOverheadMsPerStep)
      }
    })
  // The rollout's own cost measured directly: the same episodes against a replayed Wordle (each tool call returns
  // the outcome a real game gave, at no cost), so wall and CPU time per tool step are the rollout's (rendering,
  // tool-call parsing, suffix tokenisation, bookkeeping, scheduling) plus the scripted policy's scan of each turn's new
  // context tokens (charged to the rollout). No timers run inside, so nothing is subtracted.
  const games: Array<{ observation: string; outcomes: Array<Environment.ToolOutcome> }> = []
  for (let s = 0; s < 64; s++) {
    games.push(
      yield* Effect.scoped(Effect.gen(function*() {
        const live = yield* Environment.episode(Wordle.environment, { seed: s })
        const outcomes: Array<Environment.ToolOutcome> = []
        for (const g of GUESSES) outcomes.push(yield* live.call("guess", { guess: `[${g}]` }))
        return { observation: Option.getOrElse(live.observation, () => ""), outcomes }
      }))
    )
  }
  const openReplay = (row: Environment.Row): Effect.Effect<Episode.Session<number>> =>
    Effect.sync(() => {
      const game = games[Number(row.seed) % games.length]
      let k = 0
      return {
        environment: "wordle",
        observation: Option.some(game.observation),
        toolDefinitions: wordleTools,
        call: () => Effect.sync(() => game.outcomes[Math.min(k++, game.outcomes.length - 1)]),
        state: Effect.sync(() => k)
      }
    })
  const direct = Effect.gen(function*() {
    const runs: Array<{ wallMsPerStep: number; cpuMsPerStep: number; steps: number; episodes: number }> = []
    timing = false
    yield* run("warmup-replay", 1, 400, openReplay)
    for (let k = 0; k < REPEATS; k++) {
      yield* run("replayed environment", 1, DIRECT_EPISODES, openReplay)
      const r = results.pop()!
      runs.push({
        wallMsPerStep: r.seconds * 1000 / r.steps,
        cpuMsPerStep: r.cpuSeconds * 1000 / r.steps,
        steps: r.steps,
        episodes: r.episodes
      })
    }
    results.length = 0
    timing = true
    return {
      episodes: runs[0].episodes,
      steps: runs[0].steps,
      wallMsPerStep: medianOf(runs.map((r) => r.wallMsPerStep)),
      cpuMsPerStep: medianOf(runs.map((r) => r.cpuMsPerStep)),
      allWallMsPerStep: runs.map((r) => r.wallMsPerStep),
      allCpuMsPerStep: runs.map((r) => r.cpuMsPerStep)
    }
  })
  const overheadDirect = yield* direct
  // The part of it no rollout can skip, alone: per episode the prompt's ids, per tool step decoding the model's
  // turn, parsing its tool call and tokenising the tool result, in a plain loop over the same replies and outcomes.
  const renderer = Context.get(Live, ChatRenderer.ChatRenderer)
  const parseOptions = { thinking: renderer.enableThinking, stopStrings: renderer.stopStrings }
  const textWork = () => {
    const c0 = cpuMs()
    const t0 = performance.now()
    let steps = 0
    for (let e = 0; e < DIRECT_EPISODES; e++) {
      const game = games[Rollout.seedOf(0, e >> 3, e & 7) % games.length]
      Effect.runSync(renderer.promptIds([{ role: "user", content: `Game ${e >> 3}.${game.observation}` }], wordleTools))
      for (let k = 0; k < GUESSES.length; k++) {
        const parsed = ToolCallParser.parse(renderer.decode(replies[k]), parseOptions)
        if (!parsed.requestedTools) throw new Error("scripted reply did not parse as a tool call")
        Effect.runSync(renderer.toolSuffixIds([{ role: "tool", name: "guess", content: game.outcomes[k].text }]))
        steps++
      }
    }
    return { wallMsPerStep: (performance.now() - t0) / steps, cpuMsPerStep: (cpuMs() - c0) / steps }
  }
  textWork()
  const textRuns = Array.from({ length: REPEATS }, textWork)
  const textAlone = {
    wallMsPerStep: medianOf(textRuns.map((r) => r.wallMsPerStep)),
    cpuMsPerStep: medianOf(textRuns.map((r) => r.cpuMsPerStep))
  }
  // Floors for the loop itself: the same episodes with the same records (Episode.Progress, its live context,
  // messages, tool-call records, the joined token arrays), the same text work and the same scripted policy, as one
  // plain synchronous loop with no Effect at all (no fibers, scopes, stream or hand-off); and the same loop shaped as
  // the least an Effect-based loop does: one `Effect.gen` per episode whose policy call and tool call are effects (two
  // yields per tool step), still without a scope, supervision or a stream. What the rollout costs above the first is
  // its scheduling; above the second, what it needs besides the two yields.
  const floorSampling = { maxTokens: 4096, temperature: 1 }
  const floorEpisode = (e: number) => {
    const game = games[Rollout.seedOf(0, e >> 3, e & 7) % games.length]
    const p = new Episode.Progress<number>({ promptIndex: e >> 3, generation: e & 7, row: { seed: e }, envSeed: e })
    p.messages = [{ role: "user", content: `Game ${e >> 3}.` + game.observation }]
    p.promptMessageCount = 1
    p.promptIds = Effect.runSync(renderer.promptIds(p.messages, wordleTools))
    return { game, p }
  }
  // After the policy's turn: its tool call, or undefined when it made none.
  const floorTurn = (p: Episode.Progress<number>, out: Policy.Completion) => {
    p.appendModel(out.tokenIds, out.logprobs)
    p.turns++
    const parsed = ToolCallParser.parse(renderer.decode(out.tokenIds), parseOptions)
    p.messages.push({ role: "assistant", content: parsed.content })
    return parsed.requestedTools ? parsed.calls[0] : undefined
  }
  const floorResult = (p: Episode.Progress<number>, call: ToolCallParser.Call, outcome: Environment.ToolOutcome) => {
    p.toolCalls.push({
      turn: p.turns - 1,
      name: call.name,
      arguments: call.arguments,
      status: "success",
      text: outcome.text
    })
    const message: ChatTemplate.ChatMessage = { role: "tool", name: call.name, content: outcome.text }
    p.appendTool(Effect.runSync(renderer.toolSuffixIds([message])))
    p.messages.push(message)
  }
  const floorRun = (episodes: (steps: { n: number }) => void) => () => {
    const c0 = cpuMs()
    const t0 = performance.now()
    const steps = { n: 0 }
    episodes(steps)
    return { wallMsPerStep: (performance.now() - t0) / steps.n, cpuMsPerStep: (cpuMs() - c0) / steps.n }
  }
  const plainLoop = floorRun((steps) => {
    let group: Array<Episode.EpisodeRecord<number>> = []
    for (let e = 0; e < DIRECT_EPISODES; e++) {
      const { game, p } = floorEpisode(e)
      let k = 0
      for (let call = floorTurn(p, scriptedReply({ promptIds: p.contextView(), sampling: floorSampling })); call;) {
        floorResult(p, call, game.outcomes[Math.min(k++, game.outcomes.length - 1)])
        steps.n++
        call = floorTurn(p, scriptedReply({ promptIds: p.contextView(), sampling: floorSampling }))
      }
      p.state = k
      group.push(p.finish())
      if (group.length === GROUP) group = []
    }
  })
  const effectLoop = floorRun((steps) =>
    Effect.runSync(Effect.gen(function*() {
      let group: Array<Episode.EpisodeRecord<number>> = []
      for (let e = 0; e < DIRECT_EPISODES; e++) {
        group.push(
          yield* Effect.gen(function*() {
            const { game, p } = floorEpisode(e)
            let k = 0
            const turn = () => Effect.sync(() => scriptedReply({ promptIds: p.contextView(), sampling: floorSampling }))
            for (let call = floorTurn(p, yield* turn()); call;) {
              floorResult(p, call, yield* Effect.sync(() => game.outcomes[Math.min(k++, game.outcomes.length - 1)]))
              steps.n++
              call = floorTurn(p, yield* turn())
            }
            p.state = k
            return p.finish()
          })
        )
        if (group.length === GROUP) group = []
      }
    }))
  )
  const floorOf = (loop: () => { wallMsPerStep: number; cpuMsPerStep: number }) => {
    loop()
    const runs = Array.from({ length: REPEATS }, loop)
    return {
      wallMsPerStep: medianOf(runs.map((r) => r.wallMsPerStep)),
      cpuMsPerStep: medianOf(runs.map((r) => r.cpuMsPerStep))
    }
  }
  const plainAlone = floorOf(plainLoop)
  const effectAlone = floorOf(effectLoop)
  if (ONLY === "direct") {
    const quick = yield* Launcher.envtrain("wordle", { maxConcurrentEnvs: 16 })
    const step = yield* servedStepAt(quick.url)
    const lines = [
      `# Rollout overhead per tool step, direct measure only (${new Date().toISOString()})`,
      "",
      `Machine: ${Os.cpus().length} CPUs (${Os.cpus()[0]?.model}), Node ${process.version}; load ${
        Os.loadavg().map((l) => l.toFixed(1)).join(" / ")
      }. \`npx tsx bench/rollout/rollout.ts --only=direct\`: the direct measure of the full benchmark (same warm-ups), ` +
      `the text work alone, and the Wordle step of a server in its own process.`,
      "",
      `- rollout over a replayed Wordle: ${f(overheadDirect.wallMsPerStep, 4)} ms wall, ${
        f(overheadDirect.cpuMsPerStep, 4)
      } ms CPU per tool step (every run: ${overheadDirect.allWallMsPerStep.map((x) => f(x, 4)).join(", ")})`,
      `- text work alone: ${f(textAlone.wallMsPerStep, 4)} ms per tool step`,
      `- the same episodes as a plain synchronous loop (no Effect): ${f(plainAlone.wallMsPerStep, 4)} ms per tool step`,
      `- the same loop with an Effect.gen per episode and two yields per step: ${
        f(effectAlone.wallMsPerStep, 4)
      } ms per tool step`,
      `- served Wordle step p50: ${f(step.p50Ms, 4)} ms (p99 ${f(step.p99Ms, 4)})`,
      `- **rollout / served step: ${(overheadDirect.wallMsPerStep / step.p50Ms * 100).toFixed(1)} % wall, ${
        (overheadDirect.cpuMsPerStep / step.p50Ms * 100).toFixed(1)
      } % CPU** (target: below 5 %)`,
      ""
    ].join("\n")
    console.log(lines)
    mkdirSync("bench/results", { recursive: true })
    writeFileSync(
      `bench/results/${OUT}.json`,
      JSON.stringify(
        {
          date: new Date().toISOString(),
          direct: overheadDirect,
          textAlone,
          plainLoop: plainAlone,
          effectLoop: effectAlone,
          servedStep: step
        },
        null,
        2
      ) +
        "\n"
    )
    writeFileSync(`bench/results/${OUT}.md`, lines)
    return
  }
  const overheadLocal = yield* overhead("in-process", openLocal)
  const overheadWire = yield* overhead("wire", openRemote)

  // The bare Wordle step over the wire: the same guesses through the client, no rollout.
  const bareSteps: Array<number> = []
  const bareCpu: Array<number> = []
  for (let i = 0; i < OVERHEAD_EPISODES; i++) {
    yield* Effect.scoped(Effect.gen(function*() {
      const client = yield* Client.make<Record<string, unknown>, Record<string, unknown>>({ url: server.url })
      yield* client.reset({ seed: Rollout.seedOf(0, i, 0) })
      for (const g of GUESSES) {
        const t0 = performance.now()
        const c0 = cpuMs()
        const r = yield* client.step({ message: `[${g}]` })
        bareSteps.push(performance.now() - t0)
        bareCpu.push(cpuMs() - c0)
        if (r.done) break
      }
    }))
  }
  bareSteps.sort((a, b) => a - b)
  bareCpu.sort((a, b) => a - b)
  const bare = {
    steps: bareSteps.length,
    meanMs: bareSteps.reduce((a, b) => a + b, 0) / bareSteps.length,
    p50Ms: bareSteps[Math.floor(bareSteps.length / 2)],
    // Client and server share this process, so this is the CPU both ends spend on one step (sockets included).
    cpuMeanMs: bareCpu.reduce((a, b) => a + b, 0) / bareCpu.length,
    cpuP50Ms: bareCpu[Math.floor(bareCpu.length / 2)]
  }

  const overheadPooled = yield* Effect.scoped(
    Effect.flatMap(pooledWire(1), (open) => overhead("wire, pooled socket", open as any))
  )

  for (const c of CONCURRENCY) {
    const episodes = Math.min(1024, Math.max(128, 4 * c))
    yield* run("in-process", c, episodes, openLocal)
    yield* run("wire", c, episodes, openRemote)
    yield* Effect.scoped(Effect.flatMap(pooledWire(c), (open) => run("wire, pooled sockets", c, episodes, open)))
  }

  // As deployed: the environment server in its own process (`envtrain serve wordle`), the rollout in this one. The
  // same episodes run bare (the environment traffic a rollout episode makes, without the rollout) and through
  // `Rollout.groups` with the scripted policy, in alternating rounds; the rollout's overhead per tool step is how much
  // longer a tool step takes through the rollout than bare.
  const served = yield* Launcher.envtrain("wordle", { maxConcurrentEnvs: 1100 })
  // One socket per episode: the remote Wordle environment a user trains against (`Wordle.remote`), the same object
  // for both sides: bare, its episode's tool is called directly; through the rollout, the episode loop calls it.
  const remoteWordle = Wordle.remote(served.url)
  const openServed = (row: Environment.Row) =>
    Effect.map(Environment.episode(remoteWordle, row), (e) => Episode.fromEnvironment(e))
  const bareRemoteEpisode = (i: number) =>
    Effect.scoped(Effect.gen(function*() {
      const episode = yield* Environment.episode(remoteWordle, { seed: Rollout.seedOf(0, i >> 3, i & 7) })
      let steps = 0
      for (const g of GUESSES) {
        const outcome = yield* episode.call("guess", { guess: `[${g}]` })
        steps++
        if (outcome._tag === "Failure") break
      }
      yield* episode.state
      return steps
    }))
  // One bare episode on a client: reset, the guesses until the game ends, the final state.
  const bareEpisodeOn = (client: Client.OpenEnvClient<Record<string, unknown>, Record<string, unknown>>, i: number) =>
    Effect.gen(function*() {
      yield* client.reset({ seed: Rollout.seedOf(0, i >> 3, i & 7) })
      let steps = 0
      for (const g of GUESSES) {
        const r = yield* client.step({ message: `[${g}]` })
        steps++
        if (r.done) break
      }
      yield* client.state
      return steps
    })
  const bareRun = (concurrency: number, episodes: number, pool: boolean) =>
    Effect.scoped(Effect.gen(function*() {
      const clients = pool
        ? yield* Effect.forEach(
          Array.from({ length: concurrency }),
          () => Client.make<Record<string, unknown>, Record<string, unknown>>({ url: served.url }),
          { concurrency: 16 }
        )
        : []
      let next = 0
      let steps = 0
      const t0 = performance.now()
      const c0 = cpuMs()
      yield* Effect.forEach(Array.from({ length: concurrency }, (_, w) => w), (w) =>
        Effect.gen(function*() {
          while (next < episodes) {
            const i = next++
            // Read into a local first: `steps += yield* …` would read `steps` before the other workers add theirs.
            const n = pool ? yield* bareEpisodeOn(clients[w], i) : yield* bareRemoteEpisode(i)
            steps += n
          }
        }), { concurrency: "unbounded", discard: true })
      return { seconds: (performance.now() - t0) / 1000, cpuSeconds: (cpuMs() - c0) / 1000, steps }
    }))
  const rolloutRun = (concurrency: number, episodes: number, pool: boolean) =>
    pool
      ? Effect.scoped(
        Effect.flatMap(pooledAt(served.url, concurrency), (open) => rolloutOnce(concurrency, episodes, open))
      )
      : rolloutOnce(concurrency, episodes, openServed)
  const servedStep = yield* servedStepAt(served.url)
  timing = false
  const servedRows: Array<{
    concurrency: number
    sockets: string
    episodes: number
    bareStepsPerSecond: number
    rolloutStepsPerSecond: number
    bareClientCpuMsPerStep: number
    rolloutClientCpuMsPerStep: number
    overheadPerToolStep: number
    everyRound: Array<number>
    unscoreable: number
  }> = []
  for (const c of SERVED_CONCURRENCY) {
    for (const pool of [false, true]) {
      const episodes = Math.max(256, 8 * c)
      // Warm-up of both paths at this level (not measured).
      yield* bareRun(c, Math.min(episodes, 128), pool)
      yield* rolloutRun(c, Math.min(episodes, 128), pool)
      const bareRounds: Array<{ seconds: number; cpuSeconds: number; steps: number }> = []
      const rolloutRounds: Array<{ seconds: number; cpuSeconds: number; steps: number; unscoreable: number }> = []
      for (let r = 0; r < SERVED_ROUNDS; r++) {
        // Alternate which goes first, so drift in the machine's load does not favour either.
        if (r % 2 === 0) {
          bareRounds.push(yield* bareRun(c, episodes, pool))
          rolloutRounds.push(yield* rolloutRun(c, episodes, pool))
        } else {
          rolloutRounds.push(yield* rolloutRun(c, episodes, pool))
          bareRounds.push(yield* bareRun(c, episodes, pool))
        }
      }
      const perStep = (x: { seconds: number; steps: number }) => x.seconds / x.steps
      const overheads = bareRounds.map((b, r) => perStep(rolloutRounds[r]) / perStep(b) - 1)
      const row = {
        concurrency: c,
        sockets: pool ? "pooled" : "one per episode",
        episodes,
        bareStepsPerSecond: medianOf(bareRounds.map((b) => b.steps / b.seconds)),
        rolloutStepsPerSecond: medianOf(rolloutRounds.map((b) => b.steps / b.seconds)),
        bareClientCpuMsPerStep: medianOf(bareRounds.map((b) => b.cpuSeconds * 1000 / b.steps)),
        rolloutClientCpuMsPerStep: medianOf(rolloutRounds.map((b) => b.cpuSeconds * 1000 / b.steps)),
        overheadPerToolStep: medianOf(overheads),
        everyRound: overheads,
        unscoreable: rolloutRounds.reduce((a, b) => a + b.unscoreable, 0)
      }
      servedRows.push(row)
      console.log(
        `served c=${c} (${row.sockets}): bare ${row.bareStepsPerSecond.toFixed(0)} steps/s, rollout ${
          row.rolloutStepsPerSecond.toFixed(0)
        } steps/s, overhead per tool step ${(row.overheadPerToolStep * 100).toFixed(1)} % (${
          overheads.map((o) => (o * 100).toFixed(1)).join(", ")
        })`
      )
    }
  }
  timing = true

  const ratio = overheadWire.rolloutOverheadMsPerStep / bare.meanMs
  const localVsP50 = overheadLocal.rolloutOverheadMsPerStep / bare.p50Ms
  const localMinVsP50 = overheadLocal.minRolloutOverheadMsPerStep / bare.p50Ms
  const localCpuVsBareCpu = overheadLocal.medianRolloutOverheadCpuMsPerStep / bare.cpuMeanMs
  const report = {
    date: new Date().toISOString(),
    machine: {
      cpus: Os.cpus().length,
      model: Os.cpus()[0]?.model,
      node: process.version,
      loadAverageAtStart: loadAtStart,
      loadAverageAtEnd: Os.loadavg()
    },
    setup: {
      env: "Wordle (native tool env in-process; textarena_env over /ws on 127.0.0.1, server in this process)",
      policy: "scripted token-level policy (tiny preset tokenizer, vocab 1024), no model",
      groupSize: GROUP,
      guesses: GUESSES
    },
    overhead: {
      direct: overheadDirect,
      textWorkAlone: textAlone,
      plainLoop: plainAlone,
      effectLoop: effectAlone,
      directVsBareWireStepP50: overheadDirect.wallMsPerStep / bare.p50Ms,
      directCpuVsBareWireStepCpuP50: overheadDirect.cpuMsPerStep / bare.cpuP50Ms,
      directCpuVsBareWireStepCpuMean: overheadDirect.cpuMsPerStep / bare.cpuMeanMs,
      inProcess: overheadLocal,
      wire: overheadWire,
      wirePooled: overheadPooled,
      bareWireStep: bare,
      overheadVsBareWireStep: ratio,
      inProcessOverheadVsBareWireStep: overheadLocal.rolloutOverheadMsPerStep / bare.meanMs,
      inProcessOverheadVsBareWireStepP50: localVsP50,
      inProcessMinOverheadVsBareWireStepP50: localMinVsP50,
      inProcessCpuOverheadVsBareWireStepCpu: localCpuVsBareCpu
    },
    served: {
      note:
        "server in its own process (envtrain serve wordle); bare = the same environment traffic without the rollout",
      bareStep: servedStep,
      directVsServedStepP50: overheadDirect.wallMsPerStep / servedStep.p50Ms,
      directCpuVsServedStepP50: overheadDirect.cpuMsPerStep / servedStep.p50Ms,
      levels: servedRows
    },
    throughput: results
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync(`bench/results/${OUT}.json`, JSON.stringify(report, null, 2) + "\n")
  const md = [
    `# Rollout benchmark: Wordle with a scripted policy (${report.date})`,
    "",
    `Machine: ${report.machine.cpus} CPUs (${report.machine.model}), Node ${report.machine.node}. Server, rollout and policy share one process, except in the section on a server in its own process. Load average at start ${
      loadAtStart.map((x) => x.toFixed(1)).join(" / ")
    } (other jobs shared the cores, so absolute times are inflated and noisy).`,
    `Policy: scripted at the token level (tiny preset tokenizer, vocab 1024; replies pre-tokenised), so the numbers are the rollout + environment cost with no model. G = ${GROUP}.`,
    "",
    "## Rollout overhead per tool step, measured directly (sequential, concurrency 1)",
    "",
    `The same rollout (\`Rollout.groups\`, G = ${GROUP}, concurrency 1) against a replayed Wordle: each tool call returns the outcome a real game gave (64 recorded games), at no cost, and the scripted policy returns pre-tokenised replies. So wall and CPU time per tool step are the rollout's own: prompt rendering, decoding each turn, tool-call parsing, suffix tokenisation, bookkeeping, Effect scheduling and the rollout stream (plus the scripted policy's native scan of each turn's new context tokens for tool responses). Median of ${REPEATS} runs of ${overheadDirect.episodes} episodes (${overheadDirect.steps} tool steps); nothing subtracted.`,
    "",
    "| measure | wall ms/step | CPU ms/step | every run (wall) | every run (CPU) |",
    "| --- | ---: | ---: | --- | --- |",
    `| rollout over a replayed environment | ${f(overheadDirect.wallMsPerStep, 4)} | ${
      f(overheadDirect.cpuMsPerStep, 4)
    } | ${overheadDirect.allWallMsPerStep.map((x) => f(x, 4)).join(", ")} | ${
      overheadDirect.allCpuMsPerStep.map((x) => f(x, 4)).join(", ")
    } |`,
    `| of which text work alone (prompt ids, decode, parse, suffix ids; a plain loop) | ${
      f(textAlone.wallMsPerStep, 4)
    } | ${f(textAlone.cpuMsPerStep, 4)} | | |`,
    `| the same episodes as a plain synchronous loop (same records and text work, no Effect: a floor) | ${
      f(plainAlone.wallMsPerStep, 4)
    } | ${f(plainAlone.cpuMsPerStep, 4)} | | |`,
    `| the same loop with the least an Effect loop does (an Effect.gen per episode, two yields per tool step; no scope) | ${
      f(effectAlone.wallMsPerStep, 4)
    } | ${f(effectAlone.cpuMsPerStep, 4)} | | |`,
    `| bare Wordle step over the wire (client.step; client + server CPU), p50 | ${f(bare.p50Ms, 4)} | ${
      f(bare.cpuP50Ms, 4)
    } | | |`,
    "",
    `**Rollout overhead / bare wire step: ${
      (overheadDirect.wallMsPerStep / bare.p50Ms * 100).toFixed(1)
    } % in wall time (p50 step), ${
      (overheadDirect.cpuMsPerStep / bare.cpuP50Ms * 100).toFixed(1)
    } % in CPU time (p50 step; ${
      (overheadDirect.cpuMsPerStep / bare.cpuMeanMs * 100).toFixed(1)
    } % of the mean). Target: below 5 %.**`,
    "",
    "## Against a server in its own process, as deployed",
    "",
    `The environment server runs in its own process (\`envtrain serve wordle\`), as it does for a user; this process runs the clients. A Wordle step over the wire there (one warmed client, 3 s of steps): **p50 ${
      f(servedStep.p50Ms, 4)
    } ms**, p99 ${f(servedStep.p99Ms, 4)} ms. The rollout's own cost per tool step measured directly above (${
      f(overheadDirect.wallMsPerStep, 4)
    } ms wall, ${f(overheadDirect.cpuMsPerStep, 4)} ms CPU) is **${
      (overheadDirect.wallMsPerStep / servedStep.p50Ms * 100).toFixed(1)
    } %** of that step in wall time and ${
      (overheadDirect.cpuMsPerStep / servedStep.p50Ms * 100).toFixed(1)
    } % in CPU time (target: below 5 %).`,
    "",
    `Side by side: the same episodes bare (the environment traffic of a rollout episode without the rollout: with one socket per episode, a \`Wordle.remote\` episode whose tool is called directly; with pooled sockets, a pooled client doing reset, the guesses and state) and through \`Rollout.groups\` with the scripted policy, in ${SERVED_ROUNDS} alternating rounds per row. Overhead per tool step = (rollout time per tool step) / (bare time per tool step) − 1, median over the rounds. Client CPU is this process's CPU per tool step (the server's is not in it).`,
    "",
    "| concurrency | sockets | episodes per round | bare tool steps/s | rollout tool steps/s | bare client CPU ms/step | rollout client CPU ms/step | **overhead per tool step** | every round | unscoreable |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ...servedRows.map((r) =>
      `| ${r.concurrency} | ${r.sockets} | ${r.episodes} | ${f(r.bareStepsPerSecond, 0)} | ${
        f(r.rolloutStepsPerSecond, 0)
      } | ${f(r.bareClientCpuMsPerStep, 4)} | ${f(r.rolloutClientCpuMsPerStep, 4)} | **${
        (r.overheadPerToolStep * 100).toFixed(1)
      } %** | ${r.everyRound.map((o) => (o * 100).toFixed(1)).join(", ")} | ${r.unscoreable} |`
    ),
    "",
    "## Rollout overhead per tool step by subtraction (sequential, concurrency 1)",
    "",
    `Overhead = wall time − policy time − environment call time − session lifecycle (connect + reset, and release at the end), per tool step: rendering, tool-call parsing, suffix tokenisation, bookkeeping and Effect scheduling (the rollout stream's per-episode work included). Each row is the median of ${REPEATS} runs (the "every run" column lists them all). The CPU column is the same subtraction in process CPU time (user + system), which other jobs on the cores do not inflate.`,
    "",
    "| where | episodes | tool steps | wall ms/step | policy ms/step | env ms/step | session open+release ms/episode | rollout overhead ms/step | every run | rollout overhead CPU ms/step |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ...[overheadLocal, overheadWire, overheadPooled].map((o) =>
      `| ${o.where} | ${o.episodes} | ${o.steps} | ${f(o.wallMsPerStep)} | ${f(o.policyMsPerStep)} | ${
        f(o.envMsPerStep)
      } | ${f(o.openMsPerEpisode)} | ${f(o.rolloutOverheadMsPerStep)} | ${
        o.allRolloutOverheadMsPerStep.map((x) => f(x)).join(", ")
      } | ${f(o.medianRolloutOverheadCpuMsPerStep)} |`
    ),
    "",
    `Bare Wordle step over the wire (client.step, no rollout): mean ${f(bare.meanMs)} ms, p50 ${
      f(bare.p50Ms)
    } ms over ${bare.steps} steps; CPU time of client + server per step: mean ${f(bare.cpuMeanMs)} ms, p50 ${
      f(bare.cpuP50Ms)
    } ms.`,
    `**In CPU time: in-process rollout overhead / bare wire step = ${(localCpuVsBareCpu * 100).toFixed(1)} %** (${
      f(overheadLocal.medianRolloutOverheadCpuMsPerStep)
    } ms vs ${f(bare.cpuMeanMs)} ms).`,
    `**In-process rollout overhead / bare wire step = ${(localVsP50 * 100).toFixed(1)} % of the p50 step, ${
      (overheadLocal.rolloutOverheadMsPerStep / bare.meanMs * 100).toFixed(1)
    } % of the mean step** (best run: ${
      (localMinVsP50 * 100).toFixed(1)
    } % of p50; target: below 5 %). Measured over the wire the subtraction gives ${
      (ratio * 100).toFixed(1)
    } % of the mean step, but there it also charges the in-process server's and the socket's asynchronous work to the rollout, so the in-process row is the cleaner measure of the rollout's own cost.`,
    "",
    "## Throughput",
    "",
    "| where | concurrency | episodes | tool steps | seconds | episodes/s | tool steps/s | unscoreable |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...results.map((r) =>
      `| ${r.where} | ${r.concurrency} | ${r.episodes} | ${r.steps} | ${f(r.seconds, 2)} | ${
        f(r.episodesPerSecond, 1)
      } | ${f(r.stepsPerSecond, 0)} | ${r.unscoreable} |`
    ),
    "",
    ...results.filter((r) => r.unscoreable > 0).map((r) =>
      `Unscoreable at ${r.where}, concurrency ${r.concurrency} (ended alone, not scored): ${
        JSON.stringify(r.unscoreableReasons)
      }`
    ),
    ""
  ].join("\n")
  writeFileSync(`bench/results/${OUT}.md`, md)
  console.log(md)
}).pipe(Effect.scoped)

NodeRuntime.runMain(main)
