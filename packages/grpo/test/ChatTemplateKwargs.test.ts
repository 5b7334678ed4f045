// The config's chat_template_kwargs reach every render of a run: the rollouts' and the evaluation's.
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ChatTemplate, RenderOptions } from "@envtrain/text/ChatTemplate"
import { Effect } from "effect"
import * as Trainer from "../src/Trainer.js"
import * as F from "./fixtures.js"

/** The template, recording what each render was asked with. */
const recording = (base: ChatTemplate) => {
  const seen: Array<{ enableThinking: boolean | undefined; extra: RenderOptions["extra"] | undefined }> = []
  const note = (o: RenderOptions) => seen.push({ enableThinking: o.enableThinking, extra: o.extra })
  const template: ChatTemplate = Object.assign(Object.create(base) as ChatTemplate, {
    render: (o: RenderOptions) => (note(o), base.render(o)),
    renderUnsafe: (o: RenderOptions) => (note(o), base.renderUnsafe(o))
  })
  return { seen, template }
}

describe("chat_template_kwargs in a run", () => {
  it.scoped(
    "enable_thinking and every other kwarg go to each render of the rollouts and the evaluation",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        const tiny = yield* F.tinyModel()
        const { seen, template } = recording(tiny.chatTemplate)
        const config = yield* F.config({
          maxSteps: 1,
          outputDir: dir,
          chat_template_kwargs: { enable_thinking: true, reasoning_effort: "low" }
        })
        yield* Trainer.train({
          config,
          model: { ...tiny, chatTemplate: template },
          dataset: F.dataset(0, 8),
          evalDataset: F.dataset(1000, 1002),
          open: F.open,
          rewardFunctions: [F.parityReward],
          progress: false
        })
        // Every render of the run's conversations carries them (a probe of the template's own output, made
        // without any kwargs, may come first).
        const run = seen.filter((s) => s.enableThinking !== undefined || s.extra !== undefined)
        assert.isAbove(run.length, 0)
        for (const s of run) assert.deepStrictEqual(s, { enableThinking: true, extra: { reasoning_effort: "low" } })
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
