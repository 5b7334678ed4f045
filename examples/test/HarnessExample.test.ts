// The harness example end to end at its smallest sizes with the built-in agent (~40 s; with mini-swe-agent the same
// sizes take ~5 min, so that path is checked by bench/results/learning-harness.md's runs, not here).
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const root = new URL("../../", import.meta.url).pathname

describe("examples/src/harness.ts", () => {
  // The child runs asynchronously: a worker blocked in spawnSync for over a minute misses vitest's own RPC calls
  // ("Timeout calling onTaskUpdate", an unhandled error that fails the run).
  it.live(
    "--agent bash: SFT on 12 solver transcripts, evaluations before and after, one GRPO step",
    () =>
      Effect.promise(async () => {
        const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "harness-example-"))
        try {
          const r = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
            const child = execFile(
              Path.join(root, "node_modules/.bin/tsx"),
              [
                "examples/src/harness.ts",
                ...["--agent", "bash", "--sft-epochs", "1", "--steps", "1", "--num-generations", "2", "--prompts", "1"],
                ...["--agent-steps", "2", "--max-tokens", "16", "--out", out]
              ],
              { cwd: root, encoding: "utf8", timeout: 170_000, maxBuffer: 64 * 1024 * 1024 },
              (_error, stdout, stderr) => resolve({ status: child.exitCode, stdout, stderr })
            )
          })
          assert.strictEqual(r.status, 0, r.stderr)
          assert.include(r.stdout, "harness example: agent bash-agent")
          assert.include(r.stdout, "--agent bash")
          const evalJson = JSON.parse(Fs.readFileSync(Path.join(out, "eval.json"), "utf8")) as {
            agent: string
            globalStep: number
            before: { heldOut: { episodes: number }; train: { episodes: number } }
            after: { heldOut: { episodes: number }; train: { episodes: number } }
          }
          assert.strictEqual(evalJson.agent, "bash-agent")
          assert.strictEqual(evalJson.globalStep, 1)
          for (const e of [evalJson.before, evalJson.after]) {
            assert.deepStrictEqual([e.heldOut.episodes, e.train.episodes], [4, 12])
          }
          const sft = Fs.readFileSync(Path.join(out, "sft.jsonl"), "utf8").trim().split("\n")
          assert.strictEqual(sft.length, 12)
          assert.strictEqual(Fs.readdirSync(Path.join(out, "traces", "after", "held-out")).length, 4)
        } finally {
          Fs.rmSync(out, { recursive: true, force: true })
        }
      }),
    180_000
  )
})
