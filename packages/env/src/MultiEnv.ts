/**
 * The multi-environment router (TRL's `MultiEnv` pattern): one environment that picks the active environment
 * from a dataset column on `reset`, shows the model the union of all tools, and answers a tool of an inactive
 * environment with a clear error. Per-environment reward functions return `null` for foreign episodes.
 *
 * @example
 * ```ts
 * import { Catch, Environment, MultiEnv, Wordle } from "@envtrain/env"
 *
 * const games = MultiEnv.make({ column: "env", default: "wordle", environments: { wordle: Wordle.environment, catch: Catch.environment } })
 * const result = Environment.run(games, { env: "catch", seed: 1 }, Catch.solver())
 * const catchReward = MultiEnv.rewardFor("catch", Catch.reward) // (state) => number | null
 * ```
 *
 * @since 0.0.0
 */
import { Effect, ExecutionStrategy, Exit, Schema, Scope } from "effect"
import * as Environment from "./Environment.js"
import type * as Tool from "./Tool.js"

/** A tool of an environment that is not the active one in this episode. */
export class WrongEnvironment extends Schema.TaggedError<WrongEnvironment>()("WrongEnvironment", {
  tool: Schema.String,
  message: Schema.String
}) {}

type StateOf<E> = E extends Environment.Environment<infer S, any> ? S : never

/** The router's reward state: which environment was active, and its state. */
export type State<Envs extends Record<string, Environment.Environment<any, any>>> = {
  readonly [K in keyof Envs & string]: { readonly active: K; readonly state: StateOf<Envs[K]> }
}[keyof Envs & string]

/** Makes the router. `column` (default "env") names the dataset column; `default` is used when it is absent. */
export const make = <const Envs extends Record<string, Environment.Environment<any, any>>>(options: {
  readonly name?: string
  readonly column?: string
  readonly default?: keyof Envs & string
  readonly environments: Envs
}): Environment.Environment<State<Envs>, Environment.Row> => {
  const column = options.column ?? "env"
  const names = Object.keys(options.environments)
  const tools: Array<Tool.Any> = []
  const owner = new Map<string, string>()
  for (const name of names) {
    for (const tool of options.environments[name].tools) {
      const existing = tools.find((t) => t.name === tool.name)
      if (existing !== undefined && existing !== tool) {
        throw new Error(
          `MultiEnv: tool '${tool.name}' is defined by both '${
            owner.get(tool.name)
          }' and '${name}'; rename one of them.`
        )
      }
      if (existing === undefined) {
        tools.push(tool)
        owner.set(tool.name, name)
      }
    }
  }
  // TRL sorts tools by name (inspect.getmembers); keep that order for identical prompts.
  tools.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  const pick = (row: Environment.Row) => {
    const value = row[column] ?? options.default
    return typeof value === "string" && names.includes(value) ? value : undefined
  }
  const columns = Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
    Schema.filter((row) =>
      pick(row) !== undefined ||
      `column '${column}' must be one of ${names.map((n) => `'${n}'`).join(", ")} (got ${
        JSON.stringify(row[column] ?? null)
      })`
    )
  )
  const instance = Effect.gen(function*() {
    const scope = yield* Effect.scope
    let active: { name: string; instance: Environment.Instance<unknown>; scope: Scope.CloseableScope } | undefined
    const self: Environment.Instance<State<Envs>> = {
      reset: (row) =>
        Effect.gen(function*() {
          const name = pick(row as Environment.Row)
          if (name === undefined) {
            return yield* Effect.dieMessage(`MultiEnv: no environment for row column '${column}'.`)
          }
          // A new reset replaces the previous sub-instance and releases it.
          if (active !== undefined) yield* Scope.close(active.scope, Exit.void)
          const env = options.environments[name]
          const child = yield* Scope.fork(scope, ExecutionStrategy.sequential)
          const sub = yield* Scope.extend(env.instance, child)
          const { [column]: _routing, ...rest } = row as Environment.Row
          const subColumns = yield* Environment.decodeColumns(env.name, env.columns, rest).pipe(Effect.orDie)
          active = { name, instance: sub, scope: child }
          return yield* sub.reset(subColumns)
        }),
      invoke: (tool, params) =>
        Effect.suspend(() => {
          if (active === undefined) {
            return Effect.fail(new WrongEnvironment({ tool, message: "No environment is active: reset first." }))
          }
          if (!options.environments[active.name].tools.some((t) => t.name === tool)) {
            return Effect.fail(
              new WrongEnvironment({
                tool,
                message: `Tool '${tool}' belongs to the '${
                  owner.get(tool)
                }' environment, but this episode plays '${active.name}'.`
              })
            )
          }
          return active.instance.invoke(tool, params)
        }),
      state: Effect.suspend(() =>
        active === undefined
          ? Effect.dieMessage("MultiEnv: state read before reset.")
          : Effect.map(active.instance.state, (state) => ({ active: active!.name, state }) as State<Envs>)
      )
    }
    return self
  })
  return {
    name: options.name ?? `multi(${names.join(",")})`,
    description: `Routes each episode to one of: ${names.join(", ")} (by column '${column}').`,
    tools,
    columns,
    supportsConcurrentSessions: names.every((n) => options.environments[n].supportsConcurrentSessions),
    instance
  }
}

/** A per-environment reward function for routed episodes: `null` for episodes of other environments. */
export const rewardFor =
  <S>(name: string, reward: (state: S) => number) =>
  (state: { readonly active: string; readonly state: unknown }): number | null =>
    state.active === name ? reward(state.state as S) : null

/** The active environment's name of a routed episode's state. */
export const activeOf = (state: { readonly active: string }): string => state.active
