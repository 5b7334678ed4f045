import { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { Session } from "@envtrain/rollout/Episode"
import { Effect, Option } from "effect"
import * as Dataset from "../src/Dataset.js"
import * as Evaluation from "../src/Evaluation.js"
import * as Reward from "../src/Reward.js"
import * as F from "./fixtures.js"

interface Game {
  readonly env: string
}

class SessionLostError extends Error {
  readonly _tag = "SessionLostError"
}

// Two environments by the `env` column; seed 3 loses its session (an unscoreable episode).
const open = (row: Readonly<Record<string, unknown>>) =>
  row.seed === 3
    ? Effect.fail(new SessionLostError("lost"))
    : Effect.succeed<Session<Game, SessionLostError>>({
      environment: String(row.env),
      observation: Option.none(),
      toolDefinitions: [],
      call: () => Effect.die("no tools"),
      state: Effect.succeed({ env: String(row.env) })
    })

describe("Evaluation", () => {
  it.scoped(
    "greedy evaluation per environment: success rate, mean reward, unscoreable; table and eval.json",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const prompt = [{ role: "user" as const, content: "Say a" }]
        const dataset = Dataset.fromRows([
          { prompt, env: "even", seed: 1 },
          { prompt, env: "even", seed: 2 },
          { prompt, env: "even", seed: 3 },
          { prompt, env: "odd", seed: 4 }
        ])
        // "even" scores the parity fixture; "odd" always 0.25; each returns null for the other environment.
        const even = Reward.perEpisode<Game>(
          "even",
          (e) => e.environment.env === "even" ? (e.completionIds.length > 0 ? 1 : 0) : null
        )
        const odd = Reward.perEpisode<Game>("odd", (e) => e.environment.env === "odd" ? 0.25 : null)
        const result = yield* Evaluation.evaluate({
          model: yield* F.tinyModel(),
          dataset,
          open,
          rewardFunctions: [even, odd],
          maxCompletionLength: 4,
          step: 7,
          success: (_e, reward) => reward >= 1
        })
        assert.deepStrictEqual(result.rows.map((r) => r.environment), ["even", "odd"])
        const byEnv = Object.fromEntries(result.rows.map((r) => [r.environment, r]))
        assert.strictEqual(byEnv["odd"].meanReward, 0.25)
        assert.strictEqual(byEnv["odd"].successRate, 0)
        assert.strictEqual(byEnv["even"].unscoreable, 1)
        assert.strictEqual(byEnv["even"].successRate, 1)
        assert.strictEqual(result.overall.episodes, 4)
        assert.strictEqual(result.overall.unscoreable, 1)
        assert.strictEqual(result.overall.successRate, 2 / 3)
        assert.strictEqual(result.metrics["eval/odd/mean_reward"], 0.25)
        assert.strictEqual(result.metrics["eval/rewards/odd/mean"], 0.25)
        const table = Evaluation.formatTable(result)
        assert.include(table, "evaluation (step 7)")
        assert.include(table, "odd")
        yield* Evaluation.write(dir, result)
        const saved = JSON.parse(yield* fs.readFileString(path.join(dir, "eval.json")))
        assert.strictEqual(saved.step, 7)
      }).pipe(Effect.provide(NodeContext.layer)),
    60_000
  )
})
