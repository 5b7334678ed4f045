/**
 * The capture proxy's added latency per model call: the same greedy chat request (8 tokens, ignore_eos) sent to
 * `envtrain serve-policy --backend cpu` (tiny preset, its own process) directly and through a CaptureProxy in this
 * process (OpenAI chat, OpenAI chat streamed, Anthropic Messages), interleaved call by call so the shared CPUs load
 * every path alike. Reports per path the median wall time of a call and the median of the paired differences with
 * the direct call just before it. Saves bench/results/harness-proxy.json and .md.
 *
 *   npx tsx bench/harness/proxy.ts [calls]
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Checkpoint } from "@envtrain/gpu"
import { CaptureProxy, PolicyServerProcess } from "@envtrain/harness"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { loadavg } from "node:os"

const calls = Number(process.argv[2] ?? 40)
const MAX_TOKENS = 8

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const h = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[h] : (s[h - 1] + s[h]) / 2
}

const timed = (url: string, body: unknown, headers: Record<string, string>) =>
  Effect.promise(async () => {
    const start = performance.now()
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body)
    })
    await res.text()
    if (res.status !== 200) throw new Error(`${url} answered ${res.status}`)
    return performance.now() - start
  })

type Path = "direct" | "proxy-chat" | "proxy-chat-stream" | "proxy-anthropic"

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* Checkpoint.save(dir, yield* Checkpoint.makeModel("tiny", 1))
  const server = yield* PolicyServerProcess.launch({ model: dir, backend: "cpu", servedModelName: "tiny" })
  const sampling = { max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true }
  const proxy = yield* CaptureProxy.make({ upstream: server.url, model: "tiny", extraBody: { ignore_eos: true } })
  const key = yield* proxy.open({ label: "bench" })
  const messages = [{ role: "system", content: "You are a helper." }, { role: "user", content: "Count the lines." }]
  const send: Record<Path, Effect.Effect<number>> = {
    direct: timed(`${server.url}/v1/chat/completions`, {
      model: "tiny",
      messages,
      ...sampling,
      logprobs: true,
      return_token_ids: true
    }, {}),
    "proxy-chat": timed(`${proxy.url}/v1/chat/completions`, { messages, ...sampling }, {
      authorization: `Bearer ${key}`
    }),
    "proxy-chat-stream": timed(`${proxy.url}/v1/chat/completions`, { messages, ...sampling, stream: true }, {
      authorization: `Bearer ${key}`
    }),
    "proxy-anthropic": timed(`${proxy.url}/v1/messages`, {
      system: messages[0].content,
      messages: [messages[1]],
      max_tokens: MAX_TOKENS,
      temperature: 0
    }, { "x-api-key": key })
  }
  const paths = Object.keys(send) as Array<Path>
  // Warm-up: one of each.
  for (const p of paths) yield* send[p]
  const times: Record<Path, Array<number>> = {
    direct: [],
    "proxy-chat": [],
    "proxy-chat-stream": [],
    "proxy-anthropic": []
  }
  const added: Record<Path, Array<number>> = {
    direct: [],
    "proxy-chat": [],
    "proxy-chat-stream": [],
    "proxy-anthropic": []
  }
  for (let i = 0; i < calls; i++) {
    for (const p of paths.slice(1)) {
      const base = yield* send.direct
      const t = yield* send[p]
      times.direct.push(base)
      times[p].push(t)
      added[p].push(t - base)
    }
  }
  const trace = yield* proxy.trace(key)
  const rows = paths.map((p) => ({
    path: p,
    calls: times[p].length,
    medianMs: Number(median(times[p]).toFixed(2)),
    medianAddedMs: p === "direct" ? 0 : Number(median(added[p]).toFixed(2))
  }))
  const result = {
    bench: "harness-proxy",
    date: new Date().toISOString(),
    model: "tiny (CPU backend, envtrain serve-policy in its own process)",
    completionTokens: MAX_TOKENS,
    callsPerPath: calls,
    capturedTurns: trace.turns.length,
    loadavg: loadavg().map((x) => Number(x.toFixed(2))),
    rows
  }
  mkdirSync("bench/results", { recursive: true })
  writeFileSync("bench/results/harness-proxy.json", JSON.stringify(result, null, 2) + "\n")
  const md = [
    "# Capture proxy: added latency per model call",
    "",
    `\`npx tsx bench/harness/proxy.ts ${calls}\`: one greedy chat request (${MAX_TOKENS} completion tokens, ignore_eos) ` +
    "to `envtrain serve-policy --backend cpu` (tiny preset, its own process), directly and through a CaptureProxy " +
    "in the bench's process; each proxied call is paired with a direct call just before it. 2 CPUs shared with other " +
    `jobs (load average ${result.loadavg.join(", ")}). ${trace.turns.length} turns captured.`,
    "",
    "| path | calls | median call (ms) | median added vs direct (ms) |",
    "| --- | --- | --- | --- |",
    ...rows.map((r) => `| ${r.path} | ${r.calls} | ${r.medianMs} | ${r.path === "direct" ? "—" : r.medianAddedMs} |`),
    ""
  ].join("\n")
  writeFileSync("bench/results/harness-proxy.md", md)
  console.log(md)
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
