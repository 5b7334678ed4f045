// A LoRA GRPO run generating on an `envtrain serve-policy` child (reference backend) over loopback: the trainer
// pushes only the adapter (`LoraAdapter.encodePushed`), the server merges it into the base it was started with, and
// the run equals the in-process LoRA run (same completions; losses within f32 rounding: the server samples from the
// merged weights, the trainer's forward is the unmerged LoRA). The pushes are counted and sized on the wire by a
// loopback relay in front of the server. Live clock throughout.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as LoraConfig from "@envtrain/gpu/formats/LoraConfig"
import * as Safetensors from "@envtrain/gpu/formats/Safetensors"
import * as PolicyServers from "@envtrain/grpo/PolicyServers"
import * as Trainer from "@envtrain/grpo/Trainer"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as PolicyServerProcess from "../src/PolicyServerProcess.js"
import { completionRows, tinyDir, train } from "./parityRun.js"

const lora: Trainer.LoraOptions = {
  config: { r: 4, alpha: 8, dropout: 0, targetModules: ["q_proj", "v_proj", "up_proj"], useRsLora: false },
  seed: 3
}

/** A loopback relay to `target` that records the size of every `/update_weights` body it forwards. */
const relay = (target: string) =>
  Effect.acquireRelease(
    Effect.async<{ readonly url: string; readonly pushes: Array<number>; readonly server: Http.Server }>((resume) => {
      const pushes: Array<number> = []
      const server = Http.createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (c: Buffer) => chunks.push(c))
        req.on("end", () => {
          const body = Buffer.concat(chunks)
          if (req.url === "/update_weights") pushes.push(body.length)
          const headers = { ...req.headers, "content-length": String(body.length) }
          const out = Http.request(`${target}${req.url}`, { method: req.method, headers }, (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers)
            answer.pipe(res)
          })
          out.on("error", () => res.destroy())
          out.end(body)
        })
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          pushes,
          server
        })))
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  )

describe("a LoRA run generating on envtrain serve-policy", () => {
  it.scopedLive(
    "pushes only the adapter, which the server merges: the run equals the in-process one",
    () =>
      Effect.gen(function*() {
        const { dir, model } = yield* tinyDir
        const child = yield* PolicyServerProcess.launch({ model: dir, backend: "reference", servedModelName: "tiny" })
        const front = yield* relay(child.url)
        const steps = 3
        const local = yield* train(Trainer.referenceModel(model, { lora }), steps, undefined, { lora: lora.config })
        const remoteModel = yield* PolicyServers.withPolicyServers(Trainer.referenceModel(model, { lora }), {
          urls: [front.url]
        })
        const remote = yield* train(remoteModel, steps, undefined, { lora: lora.config })

        // Same episodes (prompts, completions, rewards, advantages): the server sampled what the trainer would.
        assert.isAbove(completionRows(local.completions).length, 0)
        assert.deepStrictEqual(completionRows(remote.completions), completionRows(local.completions))
        for (let i = 0; i < steps; i++) {
          assert.closeTo(remote.result.steps[i].loss, local.result.steps[i].loss, 1e-5)
        }
        // Step 1 moved the adapter, so the later pushes are not the initial (B = 0) adapter again.
        assert.notStrictEqual(local.result.steps[1].loss, local.result.steps[0].loss)

        // One push at the start and one per step, each the adapter's size, not the model's.
        assert.strictEqual(front.pushes.length, 1 + steps)
        const adapterValues = LoraConfig.adaptedProjections(model.config, lora.config)
          .reduce((n, p) => n + p.a.shape[0] * p.a.shape[1] + p.b.shape[0] * p.b.shape[1], 0)
        const full = Safetensors.encode(model.tensors).length
        for (const bytes of front.pushes) {
          assert.isAtLeast(bytes, 4 * adapterValues)
          assert.isBelow(bytes, 4 * adapterValues + 16_384)
          assert.isBelow(bytes, full / 10)
        }
        yield* Effect.log(`pushed ${front.pushes.join(", ")} bytes per update; a full push is ${full} bytes`)
      }).pipe(Effect.provide(NodeContext.layer)),
    300_000
  )
})
