import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"

// A user's project outside the repository, as the issue reports it: its own package.json (CommonJS or ESM), its own
// node_modules holding envtrain and effect, an environment and reward functions in TypeScript and JavaScript,
// loaded by the real `envtrain` binary in a child process.
// The command from its sources (node + tsx + the source condition, which the symlinked packages resolve through);
// examples/test/Library.test.ts runs the built binary from packed tarballs.
const bin = Launcher.nodeEntry(new URL("../src/bin.js", import.meta.url))
const repo = fileURLToPath(new URL("../../../", import.meta.url))
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "envtrain-user-modules-"))
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

const runCli = (args: ReadonlyArray<string>, cwd: string) =>
  Effect.async<{ code: number; out: string }>((resume) => {
    const child = execFile(process.execPath, [...bin, ...args], { cwd, timeout: 120_000 }, (error, stdout, stderr) => {
      resume(
        Effect.succeed({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, out: stdout + stderr })
      )
    })
    return Effect.sync(() => child.kill())
  })

const environmentModule = fs.readFileSync(path.join(repo, "examples/src/environments/echo.ts"), "utf8")

const rewardsModule = `import { Reward } from "@envtrain/grpo"

// One number per episode from TRL's keyword arguments: the environment states' echo counts.
export default Reward.make("echoes", ({ environments }) => environments.map((env) => (env as { echoes: number }).echoes))
`

const plainReward = `export default function long_completions({ completionIds }) {
  return completionIds.map((ids) => ids.length / 100)
}
`

/** A project directory: package.json (with `type` if given), node_modules linking this checkout's packages. */
const project = (name: string, type: "module" | undefined, withModules = true) => {
  const dir = path.join(tmp, name)
  fs.mkdirSync(path.join(dir, "node_modules", "@envtrain"), { recursive: true })
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name, ...(type === undefined ? {} : { type }) }))
  if (withModules) {
    for (const pkg of ["env", "grpo"]) {
      fs.symlinkSync(path.join(repo, "packages", pkg), path.join(dir, "node_modules", "@envtrain", pkg))
    }
    fs.symlinkSync(path.join(repo, "node_modules", "effect"), path.join(dir, "node_modules", "effect"))
  }
  fs.writeFileSync(path.join(dir, "my-env.ts"), environmentModule)
  fs.writeFileSync(path.join(dir, "rewards.ts"), rewardsModule)
  fs.writeFileSync(path.join(dir, "plain.mjs"), plainReward)
  fs.writeFileSync(path.join(dir, "not-a-reward.mjs"), "export default 3\n")
  return dir
}

const evalConfig = (dir: string, model: string, lines: ReadonlyArray<string>) => {
  const file = path.join(dir, `eval-${Math.random().toString(36).slice(2)}.yaml`)
  fs.writeFileSync(
    file,
    [
      `model: ${model}`,
      "backend: cpu",
      "evalDataset: { seeds: [0, 2], prompt: \"Say something.\" }",
      "max_completion_length: 8",
      `output_dir: ${path.join(dir, "out")}`,
      ...lines
    ].join("\n")
  )
  return file
}

describe("a user's modules outside the repository", () => {
  it.live(
    "load as environment and rewardFuncs, CommonJS and ESM projects, TypeScript and JavaScript",
    () =>
      Effect.gen(function*() {
        const model = path.join(tmp, "tiny")
        const init = yield* runCli(["init-model", "--preset", "tiny", "--out", model], tmp)
        assert.strictEqual(init.code, 0, init.out)
        for (const type of [undefined, "module"] as const) {
          const dir = project(`project-${type ?? "commonjs"}`, type)
          const config = evalConfig(dir, model, [
            "environment: ./my-env.ts",
            "reward_funcs: [./rewards.ts, ./plain.mjs]"
          ])
          const { code, out } = yield* runCli(["eval", config], dir)
          assert.strictEqual(code, 0, out)
          assert.notInclude(out, "in a cycle")
          const metrics = JSON.parse(fs.readFileSync(path.join(dir, "out", "eval.json"), "utf8")).metrics
          // Both modules' functions were scored beside the environment's own reward (a tiny model calls no tool).
          assert.strictEqual(metrics["eval/rewards/echoes/mean"], 0)
          assert.strictEqual(metrics["eval/rewards/long_completions/mean"], 0.08)
          assert.strictEqual(metrics["eval/rewards/echo-defined/mean"], 0)
          // The environment's own solver gives the SFT warm-up (its transcripts), from the same project.
          fs.copyFileSync(path.join(repo, "packages/grpo/test/fixtures/shout.ts"), path.join(dir, "shout.ts"))
          const sftConfig = path.join(dir, "sft.yaml")
          fs.writeFileSync(
            sftConfig,
            [
              `model: ${model}`,
              "backend: cpu",
              "environment: ./shout.ts",
              "dataset: { seeds: [0, 8], prompt: \"Say hello.\" }",
              "sft_data: { seeds: [0, 8], errorRate: 0.5 }",
              "max_steps: 1",
              `output_dir: ${path.join(dir, "sft")}`
            ].join("\n")
          )
          const sft = yield* runCli(["sft", sftConfig], dir)
          assert.strictEqual(sft.code, 0, sft.out)
          assert.include(sft.out, `sft: 1/1 steps, output in ${path.join(dir, "sft")}`)
          assert.isTrue(fs.existsSync(path.join(dir, "sft", "checkpoint-1")))
        }
      }),
    { timeout: 240_000 }
  )

  it.live(
    "fail naming the key, the file and the fix: a missing file, a missing dependency, no reward exported",
    () =>
      Effect.gen(function*() {
        const dir = project("errors", "module")
        const bare = project("no-node-modules", "module", false)
        const failure = (cwd: string, lines: ReadonlyArray<string>) =>
          Effect.map(runCli(["eval", evalConfig(cwd, "models/unused", lines)], cwd), ({ code, out }) => {
            assert.strictEqual(code, 1, out)
            return out
          })
        const missingEnv = yield* failure(dir, ["environment: ./nope.ts"])
        assert.include(missingEnv, `no such file (${path.join(dir, "nope.ts")})`)
        // The file exists; what is missing is the package it imports, and the message says so.
        const noDependency = yield* failure(bare, ["environment: ./my-env.ts"])
        assert.include(noDependency, `${path.join(bare, "my-env.ts")} imports '@envtrain/env', which is not installed`)
        assert.include(noDependency, "npm install @envtrain/env")
        assert.notInclude(noDependency, "no such file")
        const missingReward = yield* failure(dir, ["environment: ./my-env.ts", "rewardFuncs: ./nope.ts"])
        assert.include(missingReward, `rewardFuncs: no such file (${path.join(dir, "nope.ts")})`)
        assert.include(missingReward, "Reward.make")
        const notReward = yield* failure(dir, ["environment: ./my-env.ts", "rewardFuncs: [./not-a-reward.mjs]"])
        assert.include(notReward, "rewardFuncs: ./not-a-reward.mjs exports no reward function")
        const noDependencyReward = yield* failure(bare, ["environment: echo", "rewardFuncs: ./rewards.ts"])
        assert.include(noDependencyReward, "rewardFuncs: ")
        assert.include(noDependencyReward, "imports '@envtrain/grpo', which is not installed")
        const twice = yield* failure(dir, ["environment: echo", "sft_data: a.jsonl", "sftData: b.jsonl"])
        assert.include(twice, "\"sft_data\" and \"sftData\" both set sftData: keep only one")
      }),
    { timeout: 240_000 }
  )
})
