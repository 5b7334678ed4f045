// A CPU-bound environment at its worst, for the livelock watchdog's test (Cluster.test.ts): every episode's reset
// holds the runner's event loop for 6 s at a time (past Cluster.fastFailover's 5 s lock expiry), 10 times. Between
// spins it waits for Node's check phase (setImmediate), as the episodes of a CPU-bound batch take turns: the runner's
// timers that came due meanwhile (its shard-lock refresh) have just sent their queries, whose answers then wait
// behind the next spin, so the refresh times out and the runner loses its shards.
import { Definition } from "@envtrain/env"
import { Effect } from "effect"

const spin = (ms: number) =>
  Effect.sync(() => {
    const end = performance.now() + ms
    while (performance.now() < end) {
      // busy: the point is to hold the event loop
    }
  })

const nextTurn = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

const base = Definition.make({
  name: "blocking",
  description: "Every reset holds the event loop for a minute, 6 s at a time.",
  start: () => ({}),
  tools: { wait: { description: "Does nothing.", returns: "ok", run: () => "ok" } },
  reward: () => 0
})

export default {
  ...base,
  environment: {
    ...base.environment,
    instance: Effect.map(base.environment.instance, (i) => ({
      ...i,
      reset: (columns: unknown) =>
        Effect.zipRight(Effect.repeatN(Effect.zipRight(spin(6000), nextTurn), 9), i.reset(columns))
    }))
  }
}
