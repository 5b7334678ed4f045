import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as Metrics from "../src/Metrics.js"
import * as SftTrainer from "../src/SftTrainer.js"
import * as TrainerState from "../src/TrainerState.js"
import * as F from "./fixtures.js"

const toolTranscript: SftTrainer.Transcript = {
  tools: [{
    type: "function",
    function: { name: "stay", description: "Wait.", parameters: { type: "object", properties: {} } }
  }],
  messages: [
    { role: "user", content: "Play." },
    { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "stay", arguments: {} } }] },
    { role: "tool", name: "stay", content: "ball at 3" },
    { role: "assistant", content: "Caught it." }
  ]
}

describe("SftTrainer", () => {
  it.effect("masks exactly the assistant turns (content, tool calls, end-of-turn token)", () =>
    Effect.gen(function*() {
      const model = yield* F.tinyModel()
      const { ids, mask } = yield* SftTrainer.tokenize(model, toolTranscript, { enableThinking: false })
      assert.strictEqual(ids.length, mask.length)
      // Assistant spans, decoded.
      const spans: Array<string> = []
      let current: Array<number> = []
      ids.forEach((id, i) => {
        if (mask[i] === 1) current.push(id)
        else if (current.length > 0) {
          spans.push(model.tokenizer.decode(current))
          current = []
        }
      })
      if (current.length > 0) spans.push(model.tokenizer.decode(current))
      assert.strictEqual(spans.length, 2)
      assert.include(spans[0], "<tool_call>")
      assert.include(spans[0], "\"name\": \"stay\"")
      assert.isTrue(spans[0].endsWith("<|im_end|>"))
      assert.notInclude(spans[0], "<|im_start|>")
      assert.strictEqual(spans[1].replace(/^<think>\n\n<\/think>\n\n/, ""), "Caught it.<|im_end|>")
      // The whole sequence is the template's rendering of the conversation.
      const full = yield* model.chatTemplate.render({
        messages: toolTranscript.messages,
        tools: toolTranscript.tools ?? [],
        enableThinking: false
      })
      assert.strictEqual(model.tokenizer.decode(ids), full)
      const none = yield* Effect.exit(SftTrainer.tokenize(model, { messages: [{ role: "user", content: "hi" }] }))
      assert.isTrue(Exit.isFailure(none))
    }))

  it.scoped(
    "lowers the assistant-token loss, writes metrics and a checkpoint, resumes exactly",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const file = path.join(dir, "data.jsonl")
        const lines = Array.from({ length: 4 }, (_, i) =>
          JSON.stringify({
            messages: [{ role: "user", content: `Say ${i}` }, { role: "assistant", content: `ok ${i} ok` }]
          }))
        yield* fs.writeFileString(file, lines.join("\n") + "\n" + JSON.stringify(toolTranscript) + "\n")
        const transcripts = yield* SftTrainer.fromJsonl(file)
        assert.strictEqual(transcripts.length, 5)
        const config = yield* F.config({
          outputDir: path.join(dir, "out"),
          perDeviceTrainBatchSize: 2,
          gradientAccumulationSteps: 2,
          maxSteps: 4,
          learningRate: 0.02,
          saveSteps: 2
        })
        const full = yield* SftTrainer.train({ config, model: yield* F.tinyModel(), transcripts, progress: false })
        const losses = full.losses.map((l) => l.loss)
        assert.isTrue(losses[3] < losses[0] * 0.8, `loss should fall: ${losses.map((l) => l.toFixed(3)).join(", ")}`)
        const metrics = yield* Metrics.read<Metrics.MetricsRecord>(path.join(dir, "out", Metrics.files.metrics))
        assert.deepStrictEqual(metrics.map((m) => m.step), [1, 2, 3, 4])
        const state = yield* TrainerState.latest(path.join(dir, "out"))
        assert.isTrue(state._tag === "Some" && state.value.endsWith("checkpoint-4"))

        const config2 = yield* F.config({ ...config, outputDir: path.join(dir, "out2") })
        yield* SftTrainer.train({
          config: config2,
          model: yield* F.tinyModel(),
          transcripts,
          progress: false,
          stopAfter: 2
        })
        const resumed = yield* SftTrainer.train({
          config: config2,
          model: yield* F.tinyModel(5),
          transcripts,
          progress: false,
          resume: true
        })
        assert.deepStrictEqual(resumed.losses, full.losses.slice(2))
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped(
    "refuses transcripts with no assistant token inside maxLength (how many, where, the fix), or drops them when told",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const model = yield* F.tinyModel()
        const long = (i: number): SftTrainer.Transcript => ({
          messages: [{ role: "user", content: `${"word ".repeat(60)}${i}` }, { role: "assistant", content: "ok" }]
        })
        const short = (i: number): SftTrainer.Transcript => ({
          messages: [{ role: "user", content: `Say ${i}` }, { role: "assistant", content: `ok ${i}` }]
        })
        const transcripts = [long(0), short(1), long(2), short(3), short(4)]
        const firstAssistant = (yield* SftTrainer.tokenize(model, long(0))).mask.indexOf(1)
        const maxLength = 40
        assert.isAbove(firstAssistant, maxLength)
        const config = yield* F.config({ outputDir: path.join(dir, "out"), perDeviceTrainBatchSize: 2, maxSteps: 1 })
        const refused = yield* Effect.flip(SftTrainer.train({ config, model, transcripts, maxLength, progress: false }))
        assert.strictEqual(refused._tag, "TranscriptError")
        assert.include(refused.message, "2 of 5 transcripts have no assistant token to train on")
        assert.include(refused.message, `past maxLength ${maxLength}`)
        assert.include(refused.message, "Raise maxLength")
        assert.isFalse(yield* fs.exists(path.join(dir, "out", "checkpoint-1")))
        const dropped = yield* SftTrainer.train({
          config,
          model,
          transcripts,
          maxLength,
          dropUntrainable: true,
          progress: false
        })
        assert.strictEqual(dropped.losses.length, 1)
        assert.isAbove(dropped.losses[0].loss, 0)
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
