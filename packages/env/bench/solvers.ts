/**
 * Solver benchmark: win rates, moves per episode and episodes per second of the built-in solvers (perfect and
 * imperfect), played through the tools exactly as the rollout loop would call them.
 * Results go to bench/results/env-solvers.{json,md} at the repository root.
 *
 *   npx tsx packages/env/bench/solvers.ts [--seeds=N]
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { Catch, Environment, Sudoku, Wordle } from "../src/index.js"

const seedsFlag = process.argv.find((a) => a.startsWith("--seeds="))
const SEEDS = seedsFlag ? Number(seedsFlag.slice("--seeds=".length)) : 200

interface Row {
  readonly env: string
  readonly errorRate: number
  readonly episodes: number
  readonly winRate: number
  readonly meanMoves: number
  readonly episodesPerSecond: number
}

const measure = <S, C>(
  env: string,
  errorRate: number,
  rows: ReadonlyArray<Environment.Row>,
  environment: Environment.Environment<S, C>,
  player: (seed: number) => (e: Environment.Episode<S>) => Effect.Effect<void>,
  won: (s: S) => boolean
) =>
  Effect.gen(function*() {
    const start = performance.now()
    let wins = 0
    let moves = 0
    for (let i = 0; i < rows.length; i++) {
      const r = yield* Environment.run(environment, rows[i], player(i))
      if (won(r.state)) wins++
      moves += r.steps.length
    }
    const seconds = (performance.now() - start) / 1000
    return {
      env,
      errorRate,
      episodes: rows.length,
      winRate: wins / rows.length,
      meanMoves: moves / rows.length,
      episodesPerSecond: rows.length / seconds
    } satisfies Row
  })

const program = Effect.gen(function*() {
  const seeds = Array.from({ length: SEEDS }, (_, i) => ({ seed: i }))
  const secrets = Wordle.secrets().map((secret) => ({ secret }))
  const results: Array<Row> = []
  for (const errorRate of [0, 0.1, 0.3]) {
    results.push(
      yield* measure(
        "wordle (156 secrets)",
        errorRate,
        secrets,
        Wordle.environment,
        (seed) => Wordle.solver({ errorRate, seed }),
        (s) => s.won
      )
    )
    results.push(
      yield* measure(
        "sudoku",
        errorRate,
        seeds.slice(0, Math.min(SEEDS, 100)),
        Sudoku.environment,
        (seed) => Sudoku.solver({ errorRate, seed }),
        (s) => s.won
      )
    )
    results.push(
      yield* measure(
        "catch",
        errorRate,
        seeds,
        Catch.environment,
        (seed) => Catch.solver({ errorRate, seed }),
        (s) => s.caught
      )
    )
  }
  const md = [
    "| env | error rate | episodes | win rate | mean tool calls | episodes/s |",
    "| --- | --- | --- | --- | --- | --- |",
    ...results.map((r) =>
      `| ${r.env} | ${r.errorRate} | ${r.episodes} | ${(100 * r.winRate).toFixed(1)}% | ${r.meanMoves.toFixed(2)} | ${
        r.episodesPerSecond.toFixed(1)
      } |`
    )
  ].join("\n")
  const out = new URL("../../../bench/results/", import.meta.url)
  mkdirSync(out, { recursive: true })
  writeFileSync(new URL("env-solvers.json", out), JSON.stringify({ date: new Date().toISOString(), results }, null, 2))
  writeFileSync(new URL("env-solvers.md", out), md + "\n")
  yield* Effect.log("\n" + md)
})

NodeRuntime.runMain(program)
