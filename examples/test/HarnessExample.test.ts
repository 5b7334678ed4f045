// The harness example end to end at its smallest sizes with the built-in agent on generated tasks (~40 s; with mini-swe-agent the same
// sizes take ~5 min, so that path is checked by bench/results/learning-harness.md's runs, not here).
import { assert, describe, it } from "@effect/vitest"
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
}

describe("examples/src/harness.ts", () => {
  it.live(
    "--agent bash on generated tasks: SFT on 7 solver transcripts, evaluations before and after, one GRPO step",
    () =>
      // The child runs asynchronously: a synchronous spawn blocked the test worker for minutes under load, and
      // vitest reported its own RPC timeout.
      Effect.promise(async () => {
        const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "harness-example-"))
        try {
          const r = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) =>
            execFile(
              Path.join(root, "node_modules/.bin/tsx"),
              [
                "examples/src/harness.ts",
                ...["--agent", "bash", "--sft-epochs", "1", "--steps", "1", "--num-generations", "2", "--prompts", "1"],
                ...["--agent-steps", "2", "--max-tokens", "16", "--out", out],
                ...["--train-tasks", "7", "--held-out-tasks", "3", "--held-out-family-tasks", "1"]
              ],
              { cwd: root, encoding: "utf8", timeout: 170_000, maxBuffer: 64 * 1024 * 1024 },
              (error, stdout, stderr) =>
                resolve({ status: error === null ? 0 : (error.code as number | null), stdout, stderr })
            )
          )
          assert.strictEqual(r.status, 0, r.stderr)
          assert.include(r.stdout, "harness example: agent bash-agent")
          assert.include(r.stdout, "--agent bash")
          const evalJson = JSON.parse(Fs.readFileSync(Path.join(out, "eval.json"), "utf8")) as {
            agent: string
            globalStep: number
            before: Evaluations
            after: Evaluations
          }
          assert.strictEqual(evalJson.agent, "bash-agent")
          assert.strictEqual(evalJson.globalStep, 1)
          for (const e of [evalJson.before, evalJson.after]) {
            assert.deepStrictEqual([e.heldOut.episodes, e.train.episodes, e.novelFamilies.episodes], [3, 7, 1])
          }
          const sft = Fs.readFileSync(Path.join(out, "sft.jsonl"), "utf8").trim().split("\n")
          assert.strictEqual(sft.length, 7)
          assert.strictEqual(Fs.readdirSync(Path.join(out, "traces", "after", "held-out")).length, 3)
          // The generated suite is written in Harbor's layout beside the run.
          assert.strictEqual(Fs.readdirSync(Path.join(out, "tasks", "train")).length, 7)
          assert.strictEqual(Fs.readdirSync(Path.join(out, "tasks", "held-out")).length, 4)
        } finally {
          Fs.rmSync(out, { recursive: true, force: true })
        }
      }),
    180_000
  )
})
