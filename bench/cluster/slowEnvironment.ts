/**
 * The throughput bench's environments (bench/cluster/throughput.ts): one tool, no reward, and a cost on every
 * environment call (reset and each tool call). The bench's untrained model never calls the tool, so an episode's
 * calls are its reset: `calls` of them are paid there, standing for the tool calls of a multi-turn episode.
 * `latency-env.ts` waits (an env server or sandbox far away: the runner's CPU is free meanwhile); `cpu-env.ts` spins
 * the runner's own CPU (an environment simulated in process).
 */
import { Definition } from "@envtrain/env"
import { Effect } from "effect"

/** Blocks this thread for `ms` milliseconds (an in-process simulator's work). */
export const spin = (ms: number) =>
  Effect.sync(() => {
    const end = performance.now() + ms
    while (performance.now() < end) {
      // busy: the point is to use the CPU
    }
  })

/** A definition named `name` whose every call costs `cost`, `calls` times on reset. */
export const slowed = (name: string, cost: Effect.Effect<void>, calls: number) => {
  const base = Definition.make({
    name,
    description: `Every call to this environment costs time (${name}).`,
    start: () => ({ calls: 0 }),
    tools: {
      wait: {
        description: "Does nothing, slowly.",
        returns: "ok",
        run: (state) => {
          state.calls += 1
          return "ok"
        }
      }
    },
    reward: () => 0
  })
  const instance = Effect.map(base.environment.instance, (i) => ({
    reset: (columns: unknown) => Effect.zipRight(Effect.repeatN(cost, calls - 1), i.reset(columns)),
    invoke: (tool: string, params: unknown) => Effect.zipRight(cost, i.invoke(tool, params)),
    state: i.state
  }))
  return { ...base, environment: { ...base.environment, instance } }
}
