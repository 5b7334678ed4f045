// Writes a TrainingTrace captured by envtrain for the interop suite (interop/python/test_capture_trace.py): a tiny
// model served by the policy server in-process, the capture proxy in front of it, and fetch as an agent that runs a
// two-step tool loop in OpenAI chat, one Anthropic call and one title-generation call. Usage: tsx captureTrace.ts OUT
import { NodeContext } from "@effect/platform-node"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import * as CaptureProxy from "@envtrain/harness/CaptureProxy"
import * as PolicyBackend from "@envtrain/harness/PolicyBackend"
import * as PolicyServer from "@envtrain/rollout/PolicyServer"
import { Effect } from "effect"
import * as Fs from "node:fs"

const out = process.argv[2]
if (out === undefined) throw new Error("usage: captureTrace.ts OUT.json")

// Sharpened weights (as the harness tests do) so greedy replies vary; seed 38's re-encode to the same ids.
const sharpened = (model: Checkpoint.Model): Checkpoint.Model => ({
  ...model,
  tensors: new Map(
    [...model.tensors].map((
      [name, t]
    ) => [name, name.endsWith("norm.weight") ? t : { ...t, data: t.data.map((x) => x * 30) }])
  )
})

const program = Effect.gen(function*() {
  const model = sharpened(yield* Checkpoint.makeModel("tiny", 38))
  const backend = yield* PolicyBackend.cpu(model, { maxBatchSize: 4 })
  const server = yield* PolicyServer.serve(backend, { port: 0, servedModelName: "tiny" })
  const proxy = yield* CaptureProxy.make({
    upstream: server.url,
    model: "tiny",
    extraBody: { chat_template_kwargs: { enable_thinking: false } }
  })
  const key = yield* proxy.open({ label: "interop" })
  const call = (path: string, body: unknown) =>
    Effect.promise(() =>
      fetch(`${proxy.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify(body)
      }).then((r) => r.json() as Promise<Record<string, any>>)
    )
  const tools = [{
    type: "function",
    function: {
      name: "bash",
      description: "Run a shell command.",
      parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] }
    }
  }]
  const messages: Array<unknown> = [{ role: "system", content: "You are a helper." }, {
    role: "user",
    content: "Count the lines."
  }]
  const first = yield* call("/v1/chat/completions", { messages, tools, max_tokens: 4, temperature: 0 })
  messages.push(first.choices[0].message, { role: "tool", tool_call_id: "call_1", content: "3" })
  yield* call("/v1/chat/completions", { messages, tools, max_tokens: 4, temperature: 0 })
  yield* call("/v1/messages", {
    system: "You are a helper.",
    messages: [{ role: "user", content: "Count the words." }],
    max_tokens: 4,
    temperature: 0
  })
  yield* call("/v1/chat/completions", {
    messages: [{ role: "system", content: "You are a title generator." }, {
      role: "user",
      content: "Count the lines."
    }],
    max_tokens: 4,
    temperature: 0
  })
  const trace = yield* proxy.trace(key)
  Fs.writeFileSync(out, JSON.stringify(trace, null, 1))
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
