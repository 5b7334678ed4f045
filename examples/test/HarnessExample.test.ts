// The harness example end to end at its smallest sizes with the built-in agent on generated tasks (~40 s; with mini-swe-agent the same
// sizes take ~5 min, so that path is checked by bench/results/learning-harness.md's runs, not here), then again from
// the first run's SFT weights (--sft-from).
import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const root = new URL("../../", import.meta.url).pathname

type Evaluations = {
  heldOut: { episodes: number }
  train: { episodes: number }
  novelFamilies: { episodes: number }
  sampled: { heldOut: { episodes: number }; train: { episodes: number } } | null
}

const example = (args: ReadonlyArray<string>) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) =>
    execFile(
      Path.join(root, "node_modules/.bin/tsx"),
      [...Launcher.sourceConditions, "examples/src/harness.ts", ...args],
      { cwd: root, encoding: "utf8", timeout: 170_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => resolve({ status: error === null ? 0 : (error.code as number | null), stdout, stderr })
    )
  )

const small = [
  ...["--agent", "bash", "--steps", "1", "--num-generations", "2", "--prompts", "1"],
  ...["--agent-steps", "2", "--max-tokens", "16"],
  ...["--train-tasks", "7", "--held-out-tasks", "3", "--held-out-family-tasks", "1"]
]

const readEval = (out: string) =>
  JSON.parse(Fs.readFileSync(Path.join(out, "eval.json"), "utf8")) as {
    agent: string
    globalStep: number
    settings: { sftEpochs: number | null }
    before: Evaluations
    after: Evaluations
  }

describe("examples/src/harness.ts", () => {
  it.live(
    "--agent bash on generated tasks: SFT on 7 solver transcripts, greedy and sampled evaluations before and after, " +
      "one GRPO step of two micro-batches; then GRPO again from those SFT weights",
    () =>
      // The child runs asynchronously: a synchronous spawn blocked the test worker for minutes under load, and
      // vitest reported its own RPC timeout.
      Effect.promise(async () => {
        const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "harness-example-"))
        const again = Fs.mkdtempSync(Path.join(Os.tmpdir(), "harness-example-again-"))
        try {
          const r = await example([
            ...small,
            ...["--sft-epochs", "1", "--eval-samples", "2", "--grad-accum", "2", "--out", out]
          ])
          assert.strictEqual(r.status, 0, r.stderr)
          assert.include(r.stdout, "harness example: agent bash-agent")
          assert.include(r.stdout, "--agent bash")
          assert.include(r.stdout, "training tasks, sampled (14 episodes)")
          const evalJson = readEval(out)
          assert.strictEqual(evalJson.agent, "bash-agent")
          assert.strictEqual(evalJson.globalStep, 1)
          for (const e of [evalJson.before, evalJson.after]) {
            assert.deepStrictEqual([e.heldOut.episodes, e.train.episodes, e.novelFamilies.episodes], [3, 7, 1])
            // --eval-samples 2: two sampled episodes per task, training and held-out.
            assert.deepStrictEqual([e.sampled?.train.episodes, e.sampled?.heldOut.episodes], [14, 6])
          }
          const sft = Fs.readFileSync(Path.join(out, "sft.jsonl"), "utf8").trim().split("\n")
          assert.strictEqual(sft.length, 7)
          // Without --sft-mistakes every transcript replays the task's own solution.
          assert.deepStrictEqual(
            sft.map((l) => (JSON.parse(l) as { solution: string }).solution),
            Array.from({ length: 7 }, () => "right")
          )
          assert.strictEqual(Fs.readdirSync(Path.join(out, "traces", "after", "held-out")).length, 3)
          assert.strictEqual(Fs.readdirSync(Path.join(out, "traces", "after", "sampled-train")).length, 14)
          // The generated suite is written in Harbor's layout beside the run.
          assert.strictEqual(Fs.readdirSync(Path.join(out, "tasks", "train")).length, 7)
          assert.strictEqual(Fs.readdirSync(Path.join(out, "tasks", "held-out")).length, 4)

          // --sft-from: no SFT, GRPO from the saved weights (the same generated suite: same seed and sizes).
          const r2 = await example([...small, "--sft-from", Path.join(out, "sft-model"), "--out", again])
          assert.strictEqual(r2.status, 0, r2.stderr)
          assert.include(r2.stdout, `sft: skipped (--sft-from ${Path.join(out, "sft-model")})`)
          assert.isFalse(Fs.existsSync(Path.join(again, "sft")))
          const second = readEval(again)
          assert.strictEqual(second.settings.sftEpochs, null)
          assert.strictEqual(second.globalStep, 1)
          assert.isNull(second.before.sampled)
        } finally {
          Fs.rmSync(out, { recursive: true, force: true })
          Fs.rmSync(again, { recursive: true, force: true })
        }
      }),
    360_000
  )

  // The mix itself is SolverMistakes.test.ts's; here only that the flag reaches it (seconds: it stops before SFT).
  it.live(
    "--sft-mistakes on generated tasks is refused: the wrong solutions are the shipped tasks'",
    () =>
      Effect.promise(async () => {
        const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "harness-example-mistakes-"))
        try {
          const r = await example([...small, "--sft-mistakes", "0.5", "--out", out])
          assert.notStrictEqual(r.status, 0)
          assert.include(r.stderr + r.stdout, "--sft-mistakes: the wrong solutions")
          assert.isFalse(Fs.existsSync(Path.join(out, "sft.jsonl")))
        } finally {
          Fs.rmSync(out, { recursive: true, force: true })
        }
      }),
    120_000
  )
})
