// One environment played on several servers. Each episode's session goes to the server with the most free sessions
// for this process: its session limit (set by `Client.limitSessions` / `envConcurrency`, or learned by the client from
// the server's CAPACITY_REACHED) less the sessions this pool has placed there (counted from the instance's start,
// before its socket opens, so a burst of episodes spreads instead of all seeing an idle server). A server whose limit
// is not known yet counts as having room. A session refused with CAPACITY_REACHED (once the client's own bounded
// wait on that server is over) is moved to the next server not yet tried, its reset sent again there; the episode
// fails with the last refusal only when every server refused it.
import { Cause, Effect, ExecutionStrategy, Exit, Option, Scope } from "effect"
import type * as Environment from "../Environment.js"
import * as Wire from "../Wire.js"
import * as Gate from "./sessionGate.js"

export interface Replica<State, Columns> {
  readonly url: string
  readonly environment: Environment.Environment<State, Columns>
}

const isCapacity = (cause: Cause.Cause<unknown>) =>
  Option.exists(Cause.dieOption(cause), (d) => (d as { _tag?: unknown } | null)?._tag === "CapacityReachedError")

export const spread = <State, Columns>(
  replicas: ReadonlyArray<Replica<State, Columns>>
): Environment.Environment<State, Columns> => {
  if (replicas.length === 0) throw new Error("ServerPool.spread: give at least one server")
  const first = replicas[0].environment
  const gates = replicas.map((r) => Gate.gateOf(Wire.toWebSocketUrl(r.url)))
  const placed = replicas.map(() => 0)
  let turn = 0
  const room = (i: number) => (gates[i].limit ?? Infinity) - placed[i]
  // The untried server with the most room, then the fewest placed sessions, ties in turn.
  const choose = (tried: ReadonlySet<number>) => {
    const order = replicas.map((_, i) => (i + turn) % replicas.length).filter((i) => !tried.has(i))
    turn++
    return order.reduce((best, i) =>
      room(i) > room(best) || (room(i) === room(best) && placed[i] < placed[best]) ? i : best
    )
  }

  // An instance on server `i` in a scope of its own, counted as placed there until that scope closes.
  const open = (i: number, parent: Scope.Scope) =>
    Effect.gen(function*() {
      const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
      placed[i]++
      yield* Scope.addFinalizer(scope, Effect.sync(() => void placed[i]--))
      const instance = yield* Scope.extend(replicas[i].environment.instance, scope)
      return { i, scope, instance }
    })

  return {
    name: first.name,
    description: first.description,
    tools: first.tools,
    columns: first.columns,
    supportsConcurrentSessions: first.supportsConcurrentSessions,
    ...(first.openEnv === undefined ? {} : { openEnv: first.openEnv }),
    instance: Effect.gen(function*() {
      const parent = yield* Effect.scope
      const tried = new Set<number>()
      let current = yield* open(choose(tried), parent)
      tried.add(current.i)
      const reset = (columns: unknown): Effect.Effect<Option.Option<string>> =>
        Effect.flatMap(Effect.exit(current.instance.reset(columns)), (exit) => {
          if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
          if (!isCapacity(exit.cause) || tried.size === replicas.length) return Effect.failCause(exit.cause)
          // Refused: this server's session goes, the next server gets the reset.
          return Scope.close(current.scope, Exit.void).pipe(
            Effect.zipRight(Effect.suspend(() => open(choose(tried), parent))),
            Effect.flatMap((next) => {
              const refused = replicas[current.i].url
              current = next
              tried.add(next.i)
              return Effect.logInfo(
                `${first.name}: ${replicas[next.i].url} takes an episode ${refused} refused (CAPACITY_REACHED)`
              ).pipe(Effect.zipRight(reset(columns)))
            })
          )
        })
      const instance: Environment.Instance<State> = {
        reset,
        invoke: (tool, params) => current.instance.invoke(tool, params),
        state: Effect.suspend(() => current.instance.state)
      }
      return instance
    })
  }
}
