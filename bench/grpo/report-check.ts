/**
 * Trains the tiny model for a few GRPO steps on an in-process environment (CPU reference model), writes the report,
 * and checks it in a real headless Chromium (`--dump-dom` after scripts ran, and a screenshot that is not blank).
 * Saves the report, the screenshot and the numbers under bench/results/grpo/ (the report itself is not committed:
 * git ignores it, as it does the run folder).
 *
 *   npx tsx bench/grpo/report-check.ts [steps]
 */
import { NodeContext } from "@effect/platform-node"
import { Effect, Option } from "effect"
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs"
import { resolve } from "node:path"
import * as BrowserCheck from "../../packages/grpo/src/internal/browserCheck.js"
import * as Trainer from "../../packages/grpo/src/Trainer.js"
import * as F from "../../packages/grpo/test/fixtures.js"

const steps = Number(process.argv[2] ?? 8)
const out = resolve("bench/results/grpo")
const runDir = resolve("bench/results/grpo/run")
mkdirSync(out, { recursive: true })

const program = Effect.gen(function*() {
  const config = yield* F.config({ maxSteps: steps, evalSteps: Math.max(1, Math.floor(steps / 2)), outputDir: runDir })
  const started = Date.now()
  const result = yield* Trainer.train({
    config,
    model: yield* F.tinyModel(),
    dataset: F.dataset(0, 256),
    evalDataset: F.dataset(10_000, 10_004),
    open: F.open,
    rewardFunctions: [F.parityReward],
    title: "report check (tiny model, parity environment)"
  })
  const seconds = (Date.now() - started) / 1000
  const check = yield* BrowserCheck.check(result.report, `${out}/report.png`).pipe(Effect.option)
  copyFileSync(result.report, `${out}/report.html`)
  const numbers = {
    date: new Date().toISOString(),
    steps,
    seconds,
    secondsPerStep: seconds / steps,
    rewardFirst: result.steps[0]?.values["reward"],
    rewardLast: result.steps[result.steps.length - 1]?.values["reward"],
    browser: Option.getOrNull(check)
  }
  writeFileSync(`${out}/report-check.json`, JSON.stringify(numbers, null, 2) + "\n")
  console.log(JSON.stringify(numbers, null, 2))
  if (Option.isNone(check)) {
    console.log(
      BrowserCheck.chromiumPath() === undefined
        ? "Chromium is not installed: `apt-get install -y chromium` to check the report in a browser."
        : "The browser check FAILED (see the error above)."
    )
  }
}).pipe(Effect.provide(NodeContext.layer))

Effect.runPromise(program).catch((e) => {
  console.error(e)
  process.exit(1)
})
