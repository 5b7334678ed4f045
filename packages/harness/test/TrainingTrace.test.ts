// TrainingTrace: OpenEnv's strict shape and validation rules, each broken once (the rule and the turn named), and
// `envtrain harness validate` as a child process on a good file and on malformed ones.
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Launcher } from "@envtrain/env"
import { Effect, Either } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as TrainingTrace from "../src/TrainingTrace.js"

// The command from its sources (node + tsx + the source condition); the built binary is what
// examples/test/Library.test.ts runs in a project outside the repository.
const bin = Launcher.nodeEntry(new URL("../src/bin.js", import.meta.url))

const turn = (nodeId: string, extra: Record<string, unknown> = {}) => ({
  node_id: nodeId,
  prompt_token_ids: [10, 11],
  completion_token_ids: [12, 13, 14],
  per_token_logps: [-0.5, -0.25, 0],
  loss_mask: [0, 0, 1, 0, 1],
  request: { messages: [{ role: "user", content: "hi" }] },
  response: { choices: [{ message: { content: "ok" } }] },
  metadata: {},
  ...extra
})
const good = { schema_version: 1 as const, turns: [turn("0"), turn("1")] }
const withTurn1 = (extra: Record<string, unknown>) => ({
  schema_version: 1 as const,
  turns: [turn("0"), turn("1", extra)]
})

const broken: ReadonlyArray<readonly [TrainingTrace.Rule, unknown]> = [
  ["schema", { ...good, extra: 1 }],
  ["schema", withTurn1({ surprise: true })],
  ["schema", { schema_version: 2, turns: [] }],
  ["schema", withTurn1({ node_id: "" })],
  ["schema", withTurn1({ loss_mask: [0, 0, true, 0, 1] })],
  ["invalid_token_id", withTurn1({ prompt_token_ids: [10, -1] })],
  ["invalid_token_id", withTurn1({ completion_token_ids: [12, 13.5, 14] })],
  ["positive_logprob", withTurn1({ per_token_logps: [-0.5, 0.25, 0] })],
  ["no_prompt_ids", withTurn1({ prompt_token_ids: [], loss_mask: [1, 0, 1] })],
  ["logprob_misalign", withTurn1({ per_token_logps: [] })],
  ["length_mismatch", withTurn1({ loss_mask: [0, 0, 1] })],
  ["invalid_loss_mask", withTurn1({ loss_mask: [0, 0, 2, 0, 1] })],
  ["trainable_prompt", withTurn1({ loss_mask: [0, 1, 1, 0, 1] })],
  ["duplicate_node_id", { schema_version: 1, turns: [turn("7"), turn("7")] }]
]

const runCli = (args: ReadonlyArray<string>) =>
  Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
    const child = execFile(process.execPath, [...bin, ...args], { timeout: 90_000 }, (error, stdout, stderr) => {
      resume(Effect.succeed({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, stdout, stderr }))
    })
    return Effect.sync(() => child.kill())
  })

describe("TrainingTrace", () => {
  it.effect("a well-formed trace decodes; optional request/response/metadata default to {}", () =>
    Effect.gen(function*() {
      const trace = yield* TrainingTrace.decode(good)
      assert.deepStrictEqual(trace, good)
      const bare = yield* TrainingTrace.decode({
        turns: [{ node_id: "a", prompt_token_ids: [1], completion_token_ids: [], per_token_logps: [], loss_mask: [0] }]
      })
      assert.deepStrictEqual(bare.turns[0].metadata, {})
      assert.strictEqual(bare.schema_version, 1)
      assert.strictEqual(
        TrainingTrace.summary(trace),
        "valid TrainingTrace (schema_version 1): 2 turns, 4 prompt tokens, 6 completion tokens, 4 trainable"
      )
    }))

  it.effect("each rule refuses its malformed trace, naming the rule and the turn", () =>
    Effect.gen(function*() {
      for (const [rule, input] of broken) {
        const result = yield* Effect.either(TrainingTrace.decode(input))
        assert.isTrue(Either.isLeft(result), `${rule}: accepted ${JSON.stringify(input)}`)
        const error = (result as Either.Left<TrainingTrace.TraceInvalid, unknown>).left
        assert.strictEqual(error.rule, rule, error.message)
        const expectTurn = (input as { turns: Array<unknown> }).turns.length === 2 ? 1 : undefined
        if (rule !== "schema" || expectTurn !== undefined && error.turn !== undefined) {
          assert.strictEqual(error.turn, expectTurn, `${rule}: ${error.message}`)
          assert.include(error.message, `turn ${expectTurn}`)
        }
        assert.include(error.message, `rule ${rule}`)
      }
    }))

  it.live(
    "`envtrain harness validate FILE`: exit 0 with one line, or 1 naming the rule and the turn",
    () =>
      Effect.gen(function*() {
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "trace-"))
        const write = (name: string, v: unknown) => {
          const p = Path.join(dir, name)
          Fs.writeFileSync(p, typeof v === "string" ? v : JSON.stringify(v))
          return p
        }
        const ok = yield* runCli(["harness", "validate", write("good.json", good)])
        assert.strictEqual(ok.code, 0, ok.stderr)
        assert.match(ok.stdout.trim(), /good\.json: valid TrainingTrace \(schema_version 1\): 2 turns/)
        assert.strictEqual(ok.stdout.trim().split("\n").length, 1)
        const bad = yield* runCli(["harness", "validate", write("bad.json", withTurn1({ loss_mask: [0, 1, 1, 0, 1] }))])
        assert.strictEqual(bad.code, 1)
        assert.match(bad.stderr, /TraceInvalid: turn 1 \(node_id "1"\) breaks rule trainable_prompt/)
        const notJson = yield* runCli(["harness", "validate", write("notjson.json", "{oops")])
        assert.strictEqual(notJson.code, 1)
        assert.match(notJson.stderr, /TraceFileError: .*notjson\.json: is not JSON/)
        Fs.rmSync(dir, { recursive: true, force: true })
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
