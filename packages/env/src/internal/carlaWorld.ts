/**
 * The simulated world behind carla_env's "mock" mode: a straight road along +x with 3.5 m lanes (y grows to the
 * right, CARLA's left-handed frame), the ego vehicle as a point-mass kinematic model ticked at 20 Hz (dt 0.05 s, one
 * tick per step as carla_env's synchronous mode), static pedestrians placed from the scenario's geometry, concrete
 * barriers where a benchmark says a wall stands, and collisions from overlapping boxes. Seeded: the seed moves the
 * pedestrian line by up to ±1.5 m and picks the action-bias side lane, so one seed is one episode, tick for tick.
 *
 * Deliberate differences from carla_env's own mock (which spawns no actors, so its trolley rewards stay 0 and its
 * micro-benchmarks never end): pedestrians exist and can be hit, the vehicle moves on every tick, controls persist
 * until replaced (as `apply_control` does in CARLA), and a lane change takes one second of lateral travel.
 */
import * as Scenarios from "./carlaScenarios.js"
import type * as Prng from "./prng.js"

export const DT = 0.05
const LANE_WIDTH = 3.5
const HALF_LENGTH = 2.4
const HALF_WIDTH = 0.9
const PEDESTRIAN_RADIUS = 0.3
const LATERAL_SPEED = 3.5
const BARRIER_ID = 9000

/** carla_env's `CarlaAction`, decoded (defaults filled). */
export interface ActionInput {
  readonly action_type:
    | "control"
    | "emergency_stop"
    | "brake_vehicle"
    | "maintain_speed"
    | "lane_change"
    | "observe"
    | "init_navigation_agent"
    | "set_destination"
    | "follow_route"
    | "capture_image"
  readonly throttle: number
  readonly steer: number
  readonly brake: number
  readonly lane_direction: string | null
  readonly target_speed_kmh: number | null
  readonly brake_intensity: number | null
  readonly target_lane_id: string | null
  readonly navigation_behavior: string | null
  readonly destination_x: number | null
  readonly destination_y: number | null
  readonly destination_z: number | null
  readonly route_steps: number | null
}

/** One entry of `nearby_actors`. */
export interface NearbyActor {
  readonly type: string
  readonly id: number
  readonly distance: number
  readonly position: "ahead" | "behind"
}

export interface Collision {
  readonly frame: number
  readonly actor_id: number
  readonly actor_type: string
  readonly intensity: number
}

/** `CarlaObservation` without the envelope's reward/done. */
export interface ObservationData {
  readonly scene_description: string
  readonly speed_kmh: number
  readonly location: readonly [number, number, number]
  readonly rotation: readonly [number, number, number]
  readonly goal_distance: number | null
  readonly goal_direction: string | null
  readonly current_lane: string
  readonly nearby_actors: ReadonlyArray<NearbyActor>
  readonly collision_detected: boolean
  readonly collision_intensity: number
  readonly collided_with: string | null
  readonly scenario_name: string
  readonly simulation_time: number
  readonly step_number: number
  readonly done_reason: string
  readonly rubric_reward: number | null
  readonly camera_image: string | null
}

export interface StepOutput {
  readonly observation: ObservationData
  readonly reward: number | null
  readonly done: boolean
}

/** `CarlaState`. */
export interface StateData {
  readonly episode_id: string | null
  readonly step_count: number
  readonly scenario_name: string
  readonly town: string
  readonly weather: string
  readonly total_distance: number
  readonly total_reward: number
  readonly simulation_time: number
  readonly num_turns: number
  readonly total_tool_calls: number
  readonly tool_call_counts: Readonly<Record<string, number>>
  readonly is_truncated: boolean
  readonly average_speed: number
  readonly max_speed: number
  readonly collisions: ReadonlyArray<Collision>
  readonly collisions_count: number
  readonly collision_intensity_total: number
  readonly scenario_data: Readonly<Record<string, unknown>>
}

type Side = "lane" | "wall" | "open"

interface Pedestrian {
  readonly id: number
  readonly x: number
  readonly y: number
  hit: boolean
}

type Drive =
  | { readonly _tag: "manual"; readonly throttle: number; readonly steer: number; readonly brake: number }
  | { readonly _tag: "cruise"; readonly targetKmh: number }
  | { readonly _tag: "route" }

const round = (x: number, digits: number) => {
  const f = 10 ** digits
  return Math.round(x * f) / f
}

/** What each side of the ego's starting lane is: a drivable lane, a barrier, or open tarmac the planner refuses. */
const sidesOf = (
  scenario: Scenarios.Scenario,
  sideDirection: "left" | "right"
): { readonly left: Side; readonly right: Side } => {
  switch (scenario.kind) {
    case "action_bias":
      // carla_env spawns where one same-direction lane is adjacent; the other side is not a driving lane.
      return { left: sideDirection === "left" ? "lane" : "open", right: sideDirection === "right" ? "lane" : "open" }
    case "trolley_micro": {
      // Where a benchmark's swerve hits nobody or its side holds pedestrians, that lane exists (carla_env requires it
      // at spawn); a wall is a barrier; any other side is open tarmac a lane change does not take (the benchmark
      // counts that swerve as hitting what is ahead).
      const b = scenario.benchmark
      const side = (wall: boolean, beyond: (lateral: number) => boolean, swerveHits: number): Side =>
        wall ? "wall" : (b.pedestrians.some((g) => beyond(g[1])) || swerveHits === 0) ? "lane" : "open"
      return {
        left: side(b.wallLeft, (l) => l < -2.7, b.hits.SWERVE_LEFT),
        right: side(b.wallRight, (l) => l > 2.7, b.hits.SWERVE_RIGHT)
      }
    }
    case "maze":
    case "free_roam":
      return { left: "lane", right: "lane" }
  }
}

/** One carla_env session in mock mode. Not thread-safe; one session owns it. */
export class World {
  scenario: Scenarios.Scenario
  private episodeId: string | null = null
  private stepCount = 0
  private time = 0
  private x = 0
  private y = 0
  private yaw = 0
  private speed = 0
  private drive: Drive = { _tag: "manual", throttle: 0, steer: 0, brake: 0 }
  private laneIndex = 0
  private targetY: number | null = null
  private sides: { readonly left: Side; readonly right: Side } = { left: "lane", right: "lane" }
  private sideDirections: ReadonlyArray<"left" | "right"> = []
  private pedestrians: Array<Pedestrian> = []
  private collisions: Array<Collision> = []
  private calls: Array<Scenarios.ToolCall> = []
  private navigation: { behavior: string; destination: readonly [number, number, number] | null } | null = null
  private goal: readonly [number, number, number] | null = null
  private roam: Scenarios.RoamMemory | undefined
  private totalReward = 0
  private totalDistance = 0
  private averageSpeed = 0
  private maxSpeed = 0
  private toolCallCounts: Record<string, number> = {}
  private scenarioData: Record<string, unknown> = {}

  constructor(scenario: Scenarios.Scenario) {
    this.scenario = scenario
  }

  /** Starts an episode of the current scenario; `prng` places the pedestrians and picks the side lane. */
  reset(episodeId: string, prng: Prng.Prng): StepOutput {
    const s = this.scenario
    this.episodeId = episodeId
    this.stepCount = 0
    this.time = 0
    this.x = 0
    this.y = 0
    this.yaw = 0
    this.speed = s.initialSpeedKmh / 3.6
    this.drive = { _tag: "manual", throttle: 0, steer: 0, brake: 0 }
    this.laneIndex = 0
    this.targetY = null
    this.collisions = []
    this.calls = []
    this.navigation = null
    this.totalReward = 0
    this.totalDistance = 0
    this.averageSpeed = 0
    this.maxSpeed = 0
    this.toolCallCounts = {}
    const shift = (prng.next() * 2 - 1) * 1.5
    const sideDirection = prng.choice(["left", "right"] as const)
    this.sides = sidesOf(s, sideDirection)
    this.pedestrians = []
    const place = (forward: number, lateral: number, count: number, spreadForward: boolean) => {
      for (let i = 0; i < count; i++) {
        const offset = (i - (count - 1) / 2) * (spreadForward ? 0.6 : 0.8)
        this.pedestrians.push({
          id: 100 + this.pedestrians.length,
          x: forward + shift + (spreadForward ? offset : 0),
          y: lateral + (spreadForward ? 0 : offset),
          hit: false
        })
      }
    }
    this.goal = null
    this.roam = undefined
    switch (s.kind) {
      case "action_bias": {
        this.sideDirections = [sideDirection]
        place(25, 0, s.centerCount, false)
        place(25, (sideDirection === "left" ? -1 : 1) * LANE_WIDTH, s.sideCount, false)
        break
      }
      case "trolley_micro": {
        this.sideDirections = []
        for (const [forward, lateral, count] of s.benchmark.pedestrians) place(forward, lateral, count, true)
        break
      }
      case "maze":
        this.sideDirections = []
        this.goal = [s.goalDistance, 0, 0.5]
        break
      case "free_roam":
        this.sideDirections = []
        this.goal = [s.routeDistanceMin, 0, 0.5]
        this.roam = { previousGoalDistance: s.routeDistanceMin, initialRouteDistance: s.routeDistanceMin }
        break
    }
    this.scenarioData = {
      mode: "mock",
      seed_shift_m: round(shift, 3),
      side_directions: [...this.sideDirections],
      left_side: this.sides.left,
      right_side: this.sides.right,
      pedestrians: this.pedestrians.length
    }
    return { observation: this.observe(null), reward: null, done: false }
  }

  private progress(): Scenarios.Progress {
    return {
      envStep: this.stepCount,
      calls: this.calls,
      collisionCount: this.collisions.length,
      pedestriansHit: this.pedestrians.filter((p) => p.hit).length,
      goalDistance: this.goalDistance(),
      sideDirections: this.sideDirections
    }
  }

  private goalDistance(): number | null {
    return this.goal === null ? null : Math.hypot(this.goal[0] - this.x, this.goal[1] - this.y)
  }

  private goalDirection(): string | null {
    if (this.goal === null) return null
    const angle = Math.atan2(this.goal[1] - this.y, this.goal[0] - this.x) * 180 / Math.PI
    if (angle >= -45 && angle < 45) return "east"
    if (angle >= 45 && angle < 135) return "north"
    if (angle >= 135 || angle < -135) return "west"
    return "south"
  }

  private lane(direction: "left" | "right" | null): void {
    if (direction === null) return
    const next = this.laneIndex + (direction === "left" ? -1 : 1)
    // Back to the starting lane is always drivable; beyond a side lane there is no lane.
    const side: Side = next === 0 ? "lane" : this.laneIndex === 0 ? this.sides[direction] : "open"
    if (side === "open") return
    if (side === "lane") this.laneIndex = next
    // A wall side: the vehicle heads for where a lane would be and meets the barrier at its lane's edge.
    this.targetY = next * LANE_WIDTH
  }

  private applyAction(a: ActionInput): void {
    switch (a.action_type) {
      case "control":
        this.drive = { _tag: "manual", throttle: a.throttle, steer: a.steer, brake: a.brake }
        break
      case "emergency_stop":
        this.drive = { _tag: "manual", throttle: 0, steer: 0, brake: 1 }
        break
      case "brake_vehicle": {
        const intensity = Math.max(0, Math.min(1, a.brake_intensity ?? 1))
        this.drive = { _tag: "manual", throttle: 0, steer: 0, brake: intensity }
        break
      }
      case "maintain_speed":
        this.drive = { _tag: "cruise", targetKmh: a.target_speed_kmh ?? 30 }
        break
      case "lane_change": {
        // carla_env: a `lane_N` target steers by the sign of N minus the current lane; else `lane_direction`.
        let direction: "left" | "right" | null = a.lane_direction === "left" ? "left" : "right"
        if (a.target_lane_id !== null) {
          const m = /_(-?\d+)$/.exec(a.target_lane_id)
          const target = m === null ? this.laneIndex : Number(m[1])
          direction = target < this.laneIndex ? "left" : target > this.laneIndex ? "right" : null
        }
        this.drive = { _tag: "manual", throttle: 0, steer: 0, brake: 0 }
        this.lane(direction)
        break
      }
      case "init_navigation_agent":
        this.navigation = { behavior: a.navigation_behavior ?? "normal", destination: null }
        break
      case "set_destination":
        this.navigation ??= { behavior: "normal", destination: null }
        if (a.destination_x !== null && a.destination_y !== null) {
          this.navigation.destination = [a.destination_x, a.destination_y, a.destination_z ?? 0]
        }
        break
      case "observe":
      case "follow_route":
      case "capture_image":
        break
    }
  }

  private tick(route: boolean): void {
    const before = [this.x, this.y] as const
    const destination = route ? this.navigation?.destination ?? null : null
    if (destination !== null) {
      const dx = destination[0] - this.x
      const dy = destination[1] - this.y
      const d = Math.hypot(dx, dy)
      if (d > 1) {
        this.drive = { _tag: "route" }
        this.speed = 30 / 3.6
        this.yaw = Math.atan2(dy, dx)
        const step = Math.min(d, this.speed * DT)
        this.x += dx / d * step
        this.y += dy / d * step
      } else {
        this.speed = 0
      }
    } else {
      let accel = 0
      if (this.drive._tag === "manual") accel = this.drive.throttle * 3 - this.drive.brake * 8
      else if (this.drive._tag === "cruise") {
        const error = this.drive.targetKmh - this.speed * 3.6
        accel = error > 2 ? Math.min(3, error * 0.5) : error < -2 ? Math.max(-8, error * 0.5) : 0
      }
      this.speed = Math.max(0, this.speed + accel * DT)
      if (this.drive._tag === "manual") this.yaw += this.drive.steer * 0.5 * DT
      this.x += this.speed * Math.cos(this.yaw) * DT
      this.y += this.speed * Math.sin(this.yaw) * DT
      if (this.targetY !== null && this.speed > 0.1) {
        const dy = this.targetY - this.y
        const move = Math.sign(dy) * Math.min(Math.abs(dy), LATERAL_SPEED * DT)
        this.y += move
        if (Math.abs(this.targetY - this.y) < 1e-9) this.targetY = null
      }
    }
    this.time += DT
    this.totalDistance += Math.hypot(this.x - before[0], this.y - before[1])
    this.collide()
  }

  private collide(): void {
    const frame = this.stepCount
    const intensity = this.speed * 3.6
    const wall = (this.sides.left === "wall" && this.y - HALF_WIDTH < -LANE_WIDTH / 2) ||
      (this.sides.right === "wall" && this.y + HALF_WIDTH > LANE_WIDTH / 2)
    if (wall && !this.collisions.some((c) => c.actor_id === BARRIER_ID)) {
      this.collisions.push({ frame, actor_id: BARRIER_ID, actor_type: "static.barrier", intensity })
      this.y = Math.max(-LANE_WIDTH / 2 + HALF_WIDTH, Math.min(LANE_WIDTH / 2 - HALF_WIDTH, this.y))
      this.targetY = null
      this.speed = 0
      return
    }
    if (this.speed <= 0.1) return
    for (const p of this.pedestrians) {
      if (p.hit) continue
      if (
        Math.abs(p.x - this.x) < HALF_LENGTH + PEDESTRIAN_RADIUS &&
        Math.abs(p.y - this.y) < HALF_WIDTH + PEDESTRIAN_RADIUS
      ) {
        p.hit = true
        this.collisions.push({ frame, actor_id: p.id, actor_type: "walker.pedestrian", intensity })
      }
    }
  }

  private nearby(): Array<NearbyActor> {
    const out: Array<NearbyActor> = []
    for (const p of this.pedestrians) {
      const forward = p.x - this.x
      if (forward <= -5 || forward >= 50) continue
      out.push({
        type: "pedestrian",
        id: p.id,
        distance: round(Math.hypot(forward, p.y - this.y), 1),
        position: forward > 0 ? "ahead" : "behind"
      })
    }
    return out
  }

  private observe(rubricReward: number | null): ObservationData {
    const done = Scenarios.isDone(this.scenario, this.progress())
    const last = this.collisions.at(-1)
    const goalDistance = this.goalDistance()
    return {
      scene_description: Scenarios.sceneDescription(this.scenario, this.sideDirections),
      speed_kmh: this.speed * 3.6,
      location: [this.x, this.y, 0.5],
      rotation: [0, this.yaw * 180 / Math.PI, 0],
      goal_distance: goalDistance,
      goal_direction: this.goalDirection(),
      current_lane: `lane_${Math.round(this.y / LANE_WIDTH)}`,
      nearby_actors: this.nearby(),
      collision_detected: this.collisions.length > 0,
      collision_intensity: last?.intensity ?? 0,
      collided_with: last === undefined ? null : last.actor_type,
      scenario_name: this.scenario.name,
      simulation_time: this.time,
      step_number: this.stepCount,
      done_reason: done ? "scenario_complete" : "",
      rubric_reward: rubricReward,
      camera_image: null
    }
  }

  /** carla_env's `step`: one action, one tick (follow_route: `route_steps` ticks); `capture_image` only reads. */
  step(a: ActionInput): StepOutput {
    if (a.action_type === "capture_image") {
      // Read-only in carla_env too; the mock has no camera, so the image stays null.
      const observation = this.observe(null)
      return { observation, reward: null, done: observation.done_reason !== "" }
    }
    this.stepCount += 1
    this.toolCallCounts[a.action_type] = (this.toolCallCounts[a.action_type] ?? 0) + 1
    this.applyAction(a)
    const ticks = a.action_type === "follow_route" && this.navigation?.destination ? (a.route_steps ?? 1) : 1
    for (let i = 0; i < ticks; i++) this.tick(a.action_type === "follow_route")
    const kmh = this.speed * 3.6
    this.maxSpeed = Math.max(this.maxSpeed, kmh)
    this.averageSpeed = (this.averageSpeed * (this.stepCount - 1) + kmh) / this.stepCount
    this.calls.push({ name: a.action_type, direction: a.lane_direction, steer: a.steer })
    const progress = this.progress()
    const done = Scenarios.isDone(this.scenario, progress)
    const result = Scenarios.outcome(this.scenario, progress, this.roam)
    this.totalReward += result.reward
    this.scenarioData = { ...this.scenarioData, outcome: result.data }
    // carla_env's rubric: trolley scenarios pay the outcome at the end only, navigation pays every step.
    const trajectory = this.scenario.kind === "action_bias" || this.scenario.kind === "trolley_micro"
    const rubric = trajectory ? (done ? result.reward : 0) : result.reward
    return { observation: this.observe(rubric), reward: result.reward, done }
  }

  state(): StateData {
    return {
      episode_id: this.episodeId,
      step_count: this.stepCount,
      scenario_name: this.scenario.name,
      town: "Town10HD_Opt",
      weather: this.scenario.weather,
      total_distance: this.totalDistance,
      total_reward: this.totalReward,
      simulation_time: this.time,
      num_turns: this.stepCount,
      total_tool_calls: this.stepCount,
      tool_call_counts: { ...this.toolCallCounts },
      is_truncated: false,
      average_speed: this.averageSpeed,
      max_speed: this.maxSpeed,
      collisions: [...this.collisions],
      collisions_count: this.collisions.length,
      collision_intensity_total: this.collisions.reduce((n, c) => n + c.intensity, 0),
      scenario_data: { ...this.scenarioData }
    }
  }
}
