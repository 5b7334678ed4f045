/**
 * CARLA driving decisions, as OpenEnv's `carla_env` serves them, with its simulated-physics ("mock") mode, seeded.
 *
 * - {@link openEnv} / {@link openEnvFor}: the OpenEnv-level environment: `CarlaAction` (`action_type` and its
 *   parameters), `CarlaObservation` (`scene_description`, `speed_kmh`, `nearby_actors`, `collision_detected`,
 *   `rubric_reward`, …) and `CarlaState`, field for field; reset kwargs `scenario_name`, `scenario_config` and (unlike
 *   carla_env) `seed`. The world is the simulated one of internal/carlaWorld.ts: the real simulator needs a GPU and
 *   Unreal Engine, which these machines lack.
 * - {@link environment}: TRL's `CarlaGRPOEnv` tool layer (examples/scripts/openenv/carla.py): `observe()`,
 *   `emergency_stop()`, `lane_change(direction)`, each acting and then advancing up to 10 `observe` ticks; the reward
 *   is the last `rubric_reward` (0 until the scenario ends). Default scenario `trolley_micro_escape_exists`.
 * - {@link remote} / {@link connect}: the same tools, or a typed client, against any carla_env server: an
 *   `envtrain serve carla`, or OpenEnv's own (mock or backed by a real simulator).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Carla, Environment } from "@envtrain/env"
 *
 * const result = Environment.run(Carla.environment, { seed: 3 }, Carla.solver())
 * // Effect<EpisodeResult<Carla.State>>: result.state.reward === 1 (swerved at once into the clear lane)
 * ```
 *
 * @since 0.0.0
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Client from "./Client.js"
import * as Environment from "./Environment.js"
import * as Scenarios from "./internal/carlaScenarios.js"
import * as World from "./internal/carlaWorld.js"
import { actionStruct, BaseState, defaultMetadata, seedFrom } from "./internal/openEnvSupport.js"
import * as Prng from "./internal/prng.js"
import type { OpenEnvDefinition, StepResult } from "./OpenEnv.js"
import { OpenEnvExecutionError } from "./OpenEnv.js"
import type { RemoteOptions } from "./Remote.js"
import * as Tool from "./Tool.js"

// ---------------------------------------------------------------------------------------------------------------
// Wire schema (carla_env's models.py)
// ---------------------------------------------------------------------------------------------------------------

const unit = Schema.Number.pipe(Schema.between(0, 1))
const nullable = <S extends Schema.Schema.Any>(s: S, value: Schema.Schema.Type<S> | null = null) =>
  Schema.optionalWith(Schema.NullOr(s), { default: () => value })

/** carla_env's `ActionType`. */
export const ActionType = Schema.Literal(
  "control",
  "emergency_stop",
  "brake_vehicle",
  "maintain_speed",
  "lane_change",
  "observe",
  "init_navigation_agent",
  "set_destination",
  "follow_route",
  "capture_image"
)

/** `CarlaAction`: every field has carla_env's default and bounds; unknown keys are rejected. */
export const Action = actionStruct({
  action_type: Schema.optionalWith(ActionType, { default: () => "observe" as const }),
  throttle: Schema.optionalWith(unit, { default: () => 0 }),
  steer: Schema.optionalWith(Schema.Number.pipe(Schema.between(-1, 1)), { default: () => 0 }),
  brake: Schema.optionalWith(unit, { default: () => 0 }),
  lane_direction: nullable(Schema.String),
  target_speed_kmh: nullable(Schema.Number.pipe(Schema.between(0, 200))),
  brake_intensity: nullable(unit),
  target_lane_id: nullable(Schema.String),
  navigation_behavior: nullable(Schema.String, "normal"),
  destination_x: nullable(Schema.Number),
  destination_y: nullable(Schema.Number),
  destination_z: nullable(Schema.Number),
  route_steps: nullable(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)), 1)
}, "CarlaAction")
/** A decoded `CarlaAction`. */
export type Action = typeof Action.Type

const Vector = Schema.Tuple(Schema.Number, Schema.Number, Schema.Number)

/** One of `nearby_actors` (a `dict[str, Any]` in carla_env; these are the keys it fills). */
export const NearbyActor = Schema.Struct({
  type: Schema.String,
  id: Schema.Int,
  distance: Schema.Number,
  position: Schema.String
})

/** `CarlaObservation` (without the envelope's reward/done). */
export const Observation = Schema.Struct({
  scene_description: Schema.String,
  speed_kmh: Schema.Number,
  location: Vector,
  rotation: Vector,
  goal_distance: Schema.NullOr(Schema.Number),
  goal_direction: Schema.NullOr(Schema.String),
  current_lane: Schema.String,
  nearby_actors: Schema.Array(NearbyActor),
  collision_detected: Schema.Boolean,
  collision_intensity: Schema.Number,
  collided_with: Schema.NullOr(Schema.String),
  scenario_name: Schema.String,
  simulation_time: Schema.Number,
  step_number: Schema.Int,
  done_reason: Schema.String,
  rubric_reward: Schema.NullOr(Schema.Number),
  camera_image: Schema.NullOr(Schema.String)
}).annotations({ identifier: "CarlaObservation" })
/** A decoded `CarlaObservation`. */
export type Observation = typeof Observation.Type

/** A collision event of `CarlaState.collisions`. */
export const Collision = Schema.Struct({
  frame: Schema.Int,
  actor_id: Schema.Int,
  actor_type: Schema.String,
  intensity: Schema.Number
})

/** `CarlaState`. */
export const OpenEnvState = Schema.Struct({
  ...BaseState.fields,
  scenario_name: Schema.String,
  town: Schema.String,
  weather: Schema.String,
  total_distance: Schema.Number,
  total_reward: Schema.Number,
  simulation_time: Schema.Number,
  num_turns: Schema.Int,
  total_tool_calls: Schema.Int,
  tool_call_counts: Schema.Record({ key: Schema.String, value: Schema.Int }),
  is_truncated: Schema.Boolean,
  average_speed: Schema.Number,
  max_speed: Schema.Number,
  collisions: Schema.Array(Collision),
  collisions_count: Schema.Int,
  collision_intensity_total: Schema.Number,
  scenario_data: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "CarlaState" })
/** A decoded CARLA server state (OpenEnv's base state plus the scenario's fields). */
export type OpenEnvState = typeof OpenEnvState.Type

// ---------------------------------------------------------------------------------------------------------------
// OpenEnv level
// ---------------------------------------------------------------------------------------------------------------

/** carla_env's default scenario (`CARLA_SCENARIO`). */
export const defaultScenario = "trolley_saves"

/** The scenario names carla_env accepts, for help and error texts. */
export const scenarioNames = Scenarios.scenarioNames

/** Is `name` a scenario carla_env knows? The message says why not. */
export const checkScenario = (
  name: string
): { readonly ok: true } | { readonly ok: false; readonly message: string } => {
  const found = Scenarios.lookup(name)
  return found._tag === "Found" ? { ok: true } : { ok: false, message: found.message }
}

const scenarioOf = (name: string) => {
  const found = Scenarios.lookup(name)
  return found._tag === "Found"
    ? Effect.succeed(found.scenario)
    : Effect.fail(
      new OpenEnvExecutionError({ message: `${found.message}. Known scenarios: ${scenarioNames.join(", ")}` })
    )
}

const envelope = (out: World.StepOutput): StepResult => ({
  observation: out.observation as unknown as Readonly<Record<string, unknown>>,
  reward: out.reward,
  done: out.done
})

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * `carla_env` in mock mode with `scenario` as its default (carla_env's `CARLA_SCENARIO`). Fails with the known names
 * when the scenario does not exist. Each session owns its own simulated world, so sessions run concurrently (carla_env's
 * app allows one: one simulator serves one client).
 */
export const openEnvFor = (scenario: string = defaultScenario): OpenEnvDefinition<Action> => ({
  name: "carla_env",
  metadata: defaultMetadata("CarlaEnvironment"),
  action: Action,
  observation: Observation,
  state: OpenEnvState,
  supportsConcurrentSessions: true,
  pythonFloats: true,
  defaultMaxConcurrentEnvs: 8,
  make: Effect.gen(function*() {
    const initial = Scenarios.lookup(scenario)
    if (initial._tag === "Unknown") return yield* Effect.die(new Error(initial.message))
    const world = new World.World(initial.scenario)
    // The stateless HTTP /step meets a fresh instance: it steps a reset world rather than failing.
    world.reset(crypto.randomUUID(), Prng.make(yield* seedFrom({})))
    return {
      reset: (options) =>
        Effect.gen(function*() {
          const name = options.scenario_name
          const config = isRecord(options.scenario_config) ? options.scenario_config : undefined
          if (typeof name === "string" && name !== world.scenario.name) {
            const next = yield* scenarioOf(name)
            world.scenario = config === undefined ? next : Scenarios.withConfig(next, config)
          } else if (config !== undefined) {
            // carla_env sets the overrides on the current scenario's config, where they stay.
            world.scenario = Scenarios.withConfig(world.scenario, config)
          }
          const seed = yield* seedFrom(options)
          return envelope(world.reset(crypto.randomUUID(), Prng.make(seed)))
        }),
      step: (action) => Effect.sync(() => envelope(world.step(action))),
      state: Effect.sync(() => world.state() as unknown as Readonly<Record<string, unknown>>)
    }
  })
})

/** carla_env with its default scenario, `trolley_saves`. */
export const openEnv: OpenEnvDefinition<Action> = openEnvFor()

// ---------------------------------------------------------------------------------------------------------------
// Tool level (TRL's CarlaGRPOEnv)
// ---------------------------------------------------------------------------------------------------------------

/** The scenario TRL's example trains on. */
export const trainingScenario = "trolley_micro_escape_exists"

/** TRL's `SIM_TICKS`: `observe` steps taken after each action. */
export const SIM_TICKS = 10

/** `observe()`. */
export const Observe = Tool.make("observe", {
  description: "Get the current scene description without taking any action.",
  success: Schema.String,
  returns: "The scene description with vehicle state and nearby actors."
})

/** `emergency_stop()`. */
export const EmergencyStop = Tool.make("emergency_stop", {
  description: "Apply maximum braking to stop the vehicle.",
  success: Schema.String,
  returns: "The scene description after braking."
})

/** `lane_change(direction)`, the directions as an enum. */
export const LaneChange = Tool.make("lane_change", {
  description: "Change lane to avoid obstacles.",
  parameters: {
    direction: Schema.Literal("left", "right").annotations({
      description: "Direction to change lane, either \"left\" or \"right\"."
    })
  },
  success: Schema.String,
  returns: "The scene description after changing lane."
})

/** The reward state: TRL's `env.reward` (the last `rubric_reward`, or 0) and what the episode did. */
export interface State {
  readonly scenario: string
  readonly seed: number
  readonly done: boolean
  /** The last action's `rubric_reward` (0 until the scenario ends), as TRL's `reward_func` reads it. */
  readonly reward: number
  /** The decision carla_env classifies from the actions so far. */
  readonly decision: Scenarios.TrolleyDecision
  readonly collision: boolean
  readonly toolCalls: number
  readonly steps: number
}

/** The Carla tool service. */
export class CarlaTools extends Context.Tag("@envtrain/env/Carla/CarlaTools")<CarlaTools, {
  readonly reset: (columns: Columns) => Effect.Effect<Option.Option<string>>
  readonly observe: () => Effect.Effect<string, Tool.GameOver>
  readonly emergencyStop: () => Effect.Effect<string, Tool.GameOver>
  readonly laneChange: (params: { readonly direction: "left" | "right" }) => Effect.Effect<string, Tool.GameOver>
  readonly state: Effect.Effect<State>
}>() {}

/** Dataset columns: `seed` and the `scenario` (default {@link trainingScenario}). */
export const Columns = Schema.Struct({ seed: Schema.optional(Schema.Int), scenario: Schema.optional(Schema.String) })
/** The dataset columns a CARLA episode reads: the seed and the scenario (both optional). */
export type Columns = typeof Columns.Type

/** Python's `str(float)` for the one-decimal distances the world reports. */
const pyFloat = (x: number) => Number.isInteger(x) ? x.toFixed(1) : String(x)

/** TRL's `_describe`: speed, one line per nearby actor, and the collision line. */
export const describe = (
  obs: Pick<Observation, "speed_kmh" | "nearby_actors" | "collision_detected" | "collided_with">
) => {
  const lines = [`Speed: ${obs.speed_kmh.toFixed(1)} km/h.`]
  if (obs.nearby_actors.length === 0) lines.push("No nearby actors detected.")
  for (const a of obs.nearby_actors) lines.push(`- ${a.type} at ${pyFloat(a.distance)}m`)
  if (obs.collision_detected) lines.push(`COLLISION detected with ${obs.collided_with ?? "unknown"}!`)
  return lines.join("\n")
}

interface Reply {
  readonly observation: Observation
  readonly done: boolean
}

/** The tool logic over any reset/step pair: the in-process world and a remote session share it. */
const driver = (
  reset: (scenario: string, seed: number) => Effect.Effect<Reply>,
  step: (action: Partial<Action> & Pick<Action, "action_type">) => Effect.Effect<Reply>
) => {
  let scenario = trainingScenario
  let seed = 0
  let done = false
  let started = false
  let reward = 0
  let collision = false
  let toolCalls = 0
  let steps = 0
  const calls: Array<Scenarios.ToolCall> = []
  const record = (r: Reply) => {
    steps += 1
    done = r.done
    collision = r.observation.collision_detected
    return r
  }
  // TRL's `_advance`: observe until done, at most SIM_TICKS times (at least once, even after a finishing action).
  const advance = Effect.gen(function*() {
    let last: Reply | undefined
    for (let i = 0; i < SIM_TICKS; i++) {
      last = record(yield* step({ action_type: "observe" }))
      if (last.done) break
    }
    reward = last?.observation.rubric_reward ?? 0
    return describe(last!.observation)
  })
  const act = (action: (Partial<Action> & Pick<Action, "action_type">) | undefined) =>
    Effect.suspend(() => {
      // TRL's wrapper would keep stepping; a finished episode ends the calls instead, so nothing scores twice.
      if (!started || done) return Effect.fail(new Tool.GameOver({ message: "Episode is done." }))
      toolCalls += 1
      if (action !== undefined) {
        calls.push({ name: action.action_type, direction: action.lane_direction ?? null, steer: action.steer ?? 0 })
      }
      return action === undefined ? advance : Effect.zipRight(Effect.map(step(action), record), advance)
    })
  return CarlaTools.of({
    reset: (columns) =>
      Effect.flatMap(Environment.seedOf(columns.seed), (s) => {
        seed = s
        scenario = columns.scenario ?? trainingScenario
        return Effect.map(reset(scenario, seed), (r) => {
          started = true
          done = r.done
          reward = 0
          collision = false
          toolCalls = 0
          steps = 0
          calls.length = 0
          return Option.some(describe(r.observation))
        })
      }),
    observe: () => act(undefined),
    emergencyStop: () => act({ action_type: "emergency_stop" }),
    laneChange: ({ direction }) => act({ action_type: "lane_change", lane_direction: direction }),
    state: Effect.sync(() => ({
      scenario,
      seed,
      done,
      reward,
      decision: Scenarios.classify(calls),
      collision,
      toolCalls,
      steps
    }))
  })
}

const fullAction = (a: Partial<Action> & Pick<Action, "action_type">): World.ActionInput => ({
  throttle: 0,
  steer: 0,
  brake: 0,
  lane_direction: null,
  target_speed_kmh: null,
  brake_intensity: null,
  target_lane_id: null,
  navigation_behavior: "normal",
  destination_x: null,
  destination_y: null,
  destination_z: null,
  route_steps: 1,
  ...a
})

/** The in-process tools: a fresh simulated world per episode. An unknown scenario column is a defect naming it. */
export const layer = Layer.sync(CarlaTools, () => {
  let world: World.World | undefined
  return driver(
    (scenario, seed) =>
      Effect.suspend(() => {
        const found = Scenarios.lookup(scenario)
        if (found._tag === "Unknown") return Effect.dieMessage(`carla: ${found.message}`)
        world = new World.World(found.scenario)
        return Effect.succeed(world.reset(crypto.randomUUID(), Prng.make(seed)))
      }),
    (action) => Effect.sync(() => world!.step(fullAction(action)))
  )
})

const environmentWith = (tools: Layer.Layer<CarlaTools>) =>
  Environment.make({
    name: "carla",
    description: "CARLA trolley decisions (carla_env, simulated physics): observe, brake or change lane; " +
      "reward 1 when the decision lowers casualties.",
    tag: CarlaTools,
    layer: tools,
    columns: Columns,
    tools: [Observe, EmergencyStop, LaneChange],
    handlers: (service) => ({
      observe: () => service.observe(),
      emergency_stop: () => service.emergencyStop(),
      lane_change: service.laneChange
    }),
    reset: (service, columns) => service.reset(columns),
    state: (service) => service.state,
    openEnv
  })

/** CARLA as an environment (TRL's `CarlaGRPOEnv`) on the in-process simulated world. */
export const environment = environmentWith(layer)

/** TRL's `reward_func`: the environment's reward (the last `rubric_reward`). */
export const reward = (state: State): number => state.reward

/** Success: the scenario ended and its rubric paid (the decision lowered casualties, or a probe scenario). */
export const success = (state: State): boolean => state.done && state.reward > 0

/** The decision that lowers casualties most in a scenario (what {@link solver} plays). */
export const bestDecision = (scenario: string): Scenarios.TrolleyDecision => {
  const found = Scenarios.lookup(scenario)
  if (found._tag === "Unknown") return "NONE"
  const s = found.scenario
  if (s.kind === "trolley_micro") {
    const h = s.benchmark.hits
    const order: ReadonlyArray<Scenarios.TrolleyDecision> = ["SWERVE_LEFT", "SWERVE_RIGHT", "BRAKE", "NONE"]
    return order.reduce((best, d) => (h[d] < h[best] ? d : best), "NONE" as Scenarios.TrolleyDecision)
  }
  if (s.kind === "action_bias") return s.centerCount > s.sideCount ? "SWERVE_LEFT" : "BRAKE"
  return "BRAKE"
}

/**
 * A scripted driver through the tools: the best decision at once (the pedestrians are two seconds away), then
 * `observe` until the scenario ends. With `errorRate` > 0 each call is, with that probability, a uniformly random tool
 * (seeded by `seed`).
 */
export const solver = (options: { readonly errorRate?: number; readonly seed?: number } = {}) => {
  const prng = Prng.make(options.seed ?? 0)
  const errorRate = options.errorRate ?? 0
  return (episode: Environment.Episode<any>): Effect.Effect<void> =>
    Effect.gen(function*() {
      const state = (yield* episode.state) as State
      const best = bestDecision(state.scenario)
      const decision: readonly [string, Record<string, unknown>] = best === "SWERVE_LEFT"
        ? ["lane_change", { direction: "left" }]
        : best === "SWERVE_RIGHT"
        ? ["lane_change", { direction: "right" }]
        : best === "BRAKE"
        ? ["emergency_stop", {}]
        : ["observe", {}]
      for (let i = 0; i < 20; i++) {
        let [tool, args] = i === 0 ? decision : ["observe", {}] as const
        if (errorRate > 0 && prng.next() < errorRate) {
          ;[tool, args] = prng.choice(
            [["observe", {}], ["emergency_stop", {}], ["lane_change", {
              direction: prng.choice(["left", "right"])
            }]] as const
          )
        }
        const outcome = yield* episode.call(tool, args)
        if (outcome._tag === "Failure") return
        if (((yield* episode.state) as State).done) return
      }
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Remote: a typed client, and the same tools on a served carla_env (an envtrain server, or OpenEnv's own)
// ---------------------------------------------------------------------------------------------------------------

/** TRL's client timeouts for carla_env (`connect_timeout_s=30, message_timeout_s=120`): a real simulator is slow. */
export const remoteDefaults: RemoteOptions = { connectTimeout: "30 seconds", messageTimeout: "120 seconds" }

/** A typed client for a carla_env server: actions encoded with every default, observations decoded. */
export const connect = (url: string, options: RemoteOptions = {}) =>
  Client.make({ ...remoteDefaults, ...options, url, action: Action, observation: Observation })

/** `CarlaTools` backed by a remote carla_env session; reset sends `scenario_name` (and `seed`, which ours honours). */
export const remoteLayer = (url: string, options: RemoteOptions = {}) =>
  Layer.scoped(
    CarlaTools,
    Effect.map(connect(url, options), (client) =>
      driver(
        (scenario, seed) => Effect.orDie(client.reset({ scenario_name: scenario, seed })),
        (action) => Effect.orDie(client.step(Schema.decodeSync(Action)(action)))
      ))
  )

/** CARLA as an environment whose tools run on a carla_env server. */
export const remote = (url: string, options: RemoteOptions = {}) => environmentWith(remoteLayer(url, options))
