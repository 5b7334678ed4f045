/**
 * Test fixtures of the harness's end-to-end tests: a tiny model in a temporary directory served by a real
 * `envtrain serve-policy` child, the shipped task suite, a capture proxy in front of the policy server, and an
 * engine whose captures break TrainingTrace's logprob rule. All scoped: the scope stops the processes and servers
 * and removes the directory.
 */
import { FileSystem, Path } from "@effect/platform"
import * as Checkpoint from "@envtrain/gpu/formats/Checkpoint"
import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import * as CaptureProxy from "../src/CaptureProxy.js"
import * as HarborTask from "../src/HarborTask.js"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"

/** The name every fixture serves and captures the model under. */
export const MODEL = "tiny"

/** The Qwen3 template without thinking, as a proxy's `extraBody`. */
export const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } }

/** The task suite shipped with the harness (`train`, `held-out`). */
export const shippedSuite = HarborTask.loadSuite(HarborTask.shippedSuiteDir)

/**
 * A fresh tiny model's logits are nearly flat (greedy repeats one token); with its weights (norms aside) scaled by
 * `factor`, greedy outputs vary from token to token.
 */
export const sharpened = (model: Checkpoint.Model, factor: number): Checkpoint.Model => ({
  ...model,
  tensors: new Map(
    [...model.tensors].map((
      [name, t]
    ) => [name, name.endsWith("norm.weight") ? t : { ...t, data: t.data.map((x) => x * factor) }])
  )
})

/**
 * A tiny model (`seed` picks its weights; `sharpen` scales them, for tests that need greedy outputs to vary) saved
 * under a scoped temporary directory (`dir/model`) and served by a `serve-policy` child on the CPU. `dir` is free for
 * the test's own outputs.
 */
export const tinyPolicy = (seed: number, options?: { readonly sharpen?: number }) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    const fresh = yield* Checkpoint.makeModel(MODEL, seed)
    const model = options?.sharpen === undefined ? fresh : sharpened(fresh, options.sharpen)
    yield* Checkpoint.save(path.join(dir, "model"), model)
    const server = yield* PolicyServerProcess.launch({
      model: path.join(dir, "model"),
      backend: "cpu",
      servedModelName: MODEL
    })
    return { dir, model, server }
  })

/** A capture proxy for {@link MODEL} in front of `upstream`. */
export const captureProxy = (upstream: string, extraBody?: Readonly<Record<string, unknown>>) =>
  CaptureProxy.make({ upstream, model: MODEL, ...(extraBody === undefined ? {} : { extraBody }) })

/** {@link tinyPolicy}, the {@link shippedSuite} and a {@link captureProxy} in front of the policy server. */
export const tinyHarness = (seed: number, extraBody?: Readonly<Record<string, unknown>>) =>
  Effect.gen(function*() {
    const policy = yield* tinyPolicy(seed)
    const suite = yield* shippedSuite
    const proxy = yield* captureProxy(policy.server.url, extraBody)
    return { ...policy, suite, proxy }
  })

/**
 * An OpenAI-style engine on loopback that names its model and answers every chat call with one token whose
 * "logprob" is positive (a probability, say): every capture of it breaks TrainingTrace's logprob rule at turn 0.
 * Its URL.
 */
export const positiveLogprobEngine = Effect.map(
  Effect.acquireRelease(
    Effect.async<Http.Server>((resume) => {
      const server = Http.createServer((req, res) => {
        req.resume()
        req.on("end", () => {
          res.setHeader("content-type", "application/json")
          res.end(JSON.stringify(
            req.url === "/v1/models"
              ? { object: "list", data: [{ id: MODEL, object: "model" }] }
              : {
                id: "chatcmpl-1",
                object: "chat.completion",
                model: MODEL,
                prompt_token_ids: [1, 2, 3],
                choices: [{
                  index: 0,
                  message: { role: "assistant", content: "done" },
                  finish_reason: "stop",
                  token_ids: [7],
                  logprobs: { content: [{ token: "done", logprob: 0.4 }] }
                }]
              }
          ))
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ),
  (server) => `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`
)
