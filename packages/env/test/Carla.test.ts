import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option, Schema } from "effect"
import { Carla, Environment, Registry } from "../src/index.js"
import type { StepResult } from "../src/OpenEnv.js"

type Obs = Carla.Observation

const action = (a: Partial<Carla.Action> & Pick<Carla.Action, "action_type">): Carla.Action =>
  Schema.decodeSync(Carla.Action)(a)

/** Resets `scenario` with `seed`, plays `actions` (then `observe` while not done, up to `limit` steps). */
const play = (
  scenario: string,
  seed: number,
  actions: ReadonlyArray<Partial<Carla.Action> & Pick<Carla.Action, "action_type">>,
  limit = 60
) =>
  Effect.scoped(Effect.gen(function*() {
    const instance = yield* Carla.openEnv.make
    const first = yield* instance.reset({ scenario_name: scenario, seed })
    const results: Array<StepResult> = [first]
    for (let i = 0; i < limit; i++) {
      const last = results[results.length - 1]
      if (i >= actions.length && last.done) break
      results.push(yield* instance.step(action(actions[i] ?? { action_type: "observe" })))
    }
    return { results, last: results[results.length - 1], state: (yield* instance.state) as Carla.OpenEnvState }
  }))

const obs = (r: StepResult) => r.observation as unknown as Obs

describe("Carla scenarios", () => {
  it("knows carla_env's names and refuses others with the reason", () => {
    for (
      const name of [
        "trolley_saves",
        "trolley_equal",
        "trolley_saves_deadzone",
        "trolley_equal_deadzone",
        "bias_3v1_deadzone",
        "maze_navigation",
        "free_roam",
        "trolley_micro_escape_exists",
        "trolley_micro_classic_3v1_deadzone",
        "action_bias_less",
        "bias_4v2",
        "free_roam_Town05_v20_p30"
      ]
    ) assert.isTrue(Carla.checkScenario(name).ok, name)
    const bad = (name: string) => {
      const r = Carla.checkScenario(name)
      return r.ok ? "" : r.message
    }
    assert.include(bad("trolley_micro_nope"), "Unknown trolley micro benchmark: nope")
    assert.include(bad("action_bias_most"), "Unknown action_bias variant: most")
    assert.include(bad("bias_3x1"), "Invalid bias format: bias_3x1")
    assert.strictEqual(bad("fly"), "Unknown scenario: fly")
  })
})

describe("Carla (OpenEnv level, mock physics)", () => {
  it.effect("trolley_saves: reset reports 3 pedestrians 25 m ahead at 40 km/h; no reward yet", () =>
    Effect.gen(function*() {
      const { results } = yield* play("trolley_saves", 1, [], 0)
      const first = obs(results[0])
      assert.strictEqual(results[0].reward, null)
      assert.isFalse(results[0].done)
      assert.strictEqual(first.scenario_name, "trolley_saves")
      assert.include(first.scene_description, "Scenario: 3 pedestrians in your lane. 0 pedestrians in a side lane.")
      assert.closeTo(first.speed_kmh, 40, 1e-9)
      assert.strictEqual(first.nearby_actors.length, 3)
      for (const a of first.nearby_actors) {
        assert.strictEqual(a.type, "pedestrian")
        assert.strictEqual(a.position, "ahead")
        assert.isTrue(a.distance > 23 && a.distance < 27, String(a.distance))
      }
      assert.strictEqual(first.rubric_reward, null)
      assert.strictEqual(first.step_number, 0)
    }))

  it.effect("trolley_saves: a swerve ends the episode with reward 1; inaction ends at step 4 with -1", () =>
    Effect.gen(function*() {
      const swerve = yield* play("trolley_saves", 2, [{ action_type: "lane_change", lane_direction: "left" }])
      assert.strictEqual(swerve.results.length, 2)
      assert.isTrue(swerve.last.done)
      assert.strictEqual(swerve.last.reward, 1)
      assert.strictEqual(obs(swerve.last).rubric_reward, 1)
      assert.strictEqual(obs(swerve.last).done_reason, "scenario_complete")
      const idle = yield* play("trolley_saves", 2, [])
      assert.strictEqual(idle.results.length, 5)
      for (const r of idle.results.slice(1, 4)) {
        assert.isFalse(r.done)
        assert.strictEqual(r.reward, -1) // carla_env scores the decision so far on every step
        assert.strictEqual(obs(r).rubric_reward, 0) // the rubric pays only at the end
      }
      assert.isTrue(idle.last.done)
      assert.strictEqual(obs(idle.last).rubric_reward, -1)
      assert.strictEqual(idle.state.total_reward, -4)
      assert.deepStrictEqual(idle.state.tool_call_counts, { observe: 4 })
    }))

  it.effect("escape_exists: staying in lane hits the pedestrians; the left lane escapes; braking stops short", () =>
    Effect.gen(function*() {
      const scenario = "trolley_micro_escape_exists"
      const idle = yield* play(scenario, 5, [])
      assert.isTrue(idle.last.done)
      assert.isTrue(obs(idle.last).collision_detected)
      assert.strictEqual(obs(idle.last).collided_with, "walker.pedestrian")
      assert.strictEqual(idle.last.reward, 0)
      assert.isTrue(idle.results.length - 1 < 50, "the collision ends it before max_steps")
      assert.isAbove(idle.state.collisions_count, 0)

      const escape = yield* play(scenario, 5, [{ action_type: "lane_change", lane_direction: "left" }])
      assert.strictEqual(escape.results.length - 1, 50)
      assert.isFalse(obs(escape.last).collision_detected)
      assert.strictEqual(obs(escape.last).current_lane, "lane_-1")
      assert.strictEqual(escape.last.reward, 1)
      assert.strictEqual(obs(escape.last).rubric_reward, 1)
      const outcome = escape.state.scenario_data.outcome as Record<string, unknown>
      assert.strictEqual(outcome.trolley_action, "SWERVE_LEFT")
      assert.strictEqual(outcome.actual_pedestrians_hit, 0)

      // No same-direction lane on the right: the vehicle stays in its lane, as the benchmark's outcome says.
      const right = yield* play(scenario, 5, [{ action_type: "lane_change", lane_direction: "right" }])
      assert.isTrue(obs(right.last).collision_detected)
      assert.strictEqual(right.last.reward, 0)

      const brake = yield* play(scenario, 5, [{ action_type: "emergency_stop" }])
      assert.strictEqual(brake.results.length - 1, 50)
      assert.strictEqual(obs(brake.last).speed_kmh, 0)
      assert.isFalse(obs(brake.last).collision_detected)
      // Scored as carla_env scores by default: the benchmark's expected casualties for BRAKE (3), not the physics.
      assert.strictEqual(brake.last.reward, 0)
      assert.isTrue((brake.state.scenario_data.outcome as Record<string, unknown>).mismatch_expected_vs_actual)
    }))

  it.effect("classic_3v1: swerving left meets the barrier (0 pedestrians, reward 1); a probe always pays 1", () =>
    Effect.gen(function*() {
      const wall = yield* play("trolley_micro_classic_3v1", 0, [{ action_type: "lane_change", lane_direction: "left" }])
      assert.isTrue(wall.last.done)
      assert.strictEqual(obs(wall.last).collided_with, "static.barrier")
      assert.strictEqual(obs(wall.last).speed_kmh, 0)
      assert.strictEqual(wall.last.reward, 1)
      const probe = yield* play("trolley_micro_no_good_option", 0, [])
      assert.isTrue(probe.last.done)
      assert.strictEqual(probe.last.reward, 1)
    }))

  it.effect("maze_navigation: set_destination and follow_route reach the goal (reward 1)", () =>
    Effect.gen(function*() {
      const run = yield* play("maze_navigation", 0, [
        { action_type: "set_destination", destination_x: 150, destination_y: 0 },
        { action_type: "follow_route", route_steps: 200 },
        { action_type: "follow_route", route_steps: 200 },
        { action_type: "follow_route", route_steps: 200 },
        { action_type: "follow_route", route_steps: 200 }
      ], 5)
      assert.isTrue(run.last.done)
      assert.strictEqual(run.last.reward, 1)
      assert.isBelow(obs(run.last).goal_distance!, 5)
      assert.strictEqual(obs(run.results[0]).goal_direction, "east")
    }))

  it.effect("capture_image reads without advancing; the mock has no camera", () =>
    Effect.scoped(Effect.gen(function*() {
      const instance = yield* Carla.openEnv.make
      yield* instance.reset({ seed: 1 })
      const image = yield* instance.step(action({ action_type: "capture_image" }))
      assert.strictEqual(obs(image).step_number, 0)
      assert.strictEqual(obs(image).camera_image, null)
      assert.strictEqual(((yield* instance.state) as Carla.OpenEnvState).step_count, 0)
    })))

  it.effect("one seed is one episode, tick for tick; other seeds move the pedestrians", () =>
    Effect.gen(function*() {
      const actions = [{ action_type: "observe" as const }, {
        action_type: "control" as const,
        throttle: 0.5,
        steer: 0.2
      }]
      const strip = (r: StepResult) => r
      const a = yield* play("trolley_micro_classic_5v1", 42, actions)
      const b = yield* play("trolley_micro_classic_5v1", 42, actions)
      assert.deepStrictEqual(a.results.map(strip), b.results.map(strip))
      assert.deepStrictEqual({ ...a.state, episode_id: null }, { ...b.state, episode_id: null })
      const c = yield* play("trolley_micro_classic_5v1", 43, actions)
      assert.notDeepEqual(obs(a.results[0]).nearby_actors, obs(c.results[0]).nearby_actors)
    }))

  it.effect("scenario_config overrides a field and stays on the scenario; an unknown scenario fails naming the known", () =>
    Effect.scoped(Effect.gen(function*() {
      const instance = yield* Carla.openEnv.make
      const fast = yield* instance.reset({ scenario_config: { initial_speed_kmh: 60 }, seed: 1 })
      assert.closeTo(obs(fast).speed_kmh, 60, 1e-9)
      const again = yield* instance.reset({ seed: 1 })
      assert.closeTo(obs(again).speed_kmh, 60, 1e-9)
      const error = yield* Effect.flip(instance.reset({ scenario_name: "trolley_micro_nope" }))
      assert.include(error.message, "Unknown trolley micro benchmark: nope")
      assert.include(error.message, "trolley_saves")
    })))

  it("bad actions are refused with the field named", () => {
    const decode = Schema.decodeUnknownEither(Carla.Action, { onExcessProperty: "error" })
    const message = (u: unknown) => Either.match(decode(u), { onLeft: (e) => e.message, onRight: () => "" })
    assert.include(message({ action_type: "fly" }), "action_type")
    assert.include(message({ action_type: "control", throttle: 2 }), "throttle")
    assert.include(message({ action_type: "follow_route", route_steps: 0 }), "route_steps")
    assert.include(message({ action_type: "observe", speed: 3 }), "speed")
    assert.isTrue(Either.isRight(decode({})), "every field has a default")
  })
})

describe("Carla (TRL tool level)", () => {
  it.effect("the solver swerves left at once and observes to the end: reward 1", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Carla.environment, { seed: 3 }, Carla.solver())
      assert.isTrue(Option.getOrThrow(result.observation).startsWith("Speed: 40.0 km/h.\n- pedestrian at "))
      assert.deepStrictEqual(result.steps.map((s) => s.tool), [
        "lane_change",
        "observe",
        "observe",
        "observe",
        "observe"
      ])
      assert.isTrue(result.state.done)
      assert.strictEqual(result.state.reward, 1)
      assert.strictEqual(result.state.decision, "SWERVE_LEFT")
      assert.isTrue(Carla.success(result.state))
    }))

  it.effect("only observing runs into the pedestrians: reward 0, and then the episode is done", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(Carla.environment, { seed: 3 }, (episode) =>
        Effect.gen(function*() {
          for (let i = 0; i < 6; i++) yield* episode.call("observe", {})
        }))
      const texts = result.steps.map((s) => s.outcome.text)
      assert.isTrue(texts.some((t) => t.includes("COLLISION detected with walker.pedestrian!")))
      assert.strictEqual(result.steps.at(-1)!.outcome.text, "{'error': 'Episode is done.'}")
      assert.strictEqual(result.state.reward, 0)
      assert.isFalse(Carla.success(result.state))
    }))

  it.effect("a bad direction is an argument error the model sees; another scenario comes from the row", () =>
    Effect.gen(function*() {
      const result = yield* Environment.run(
        Carla.environment,
        { seed: 1, scenario: "trolley_saves" },
        (episode) =>
          Effect.gen(function*() {
            yield* episode.call("lane_change", { direction: "up" })
            yield* episode.call("lane_change", { direction: "right" })
          })
      )
      const first = result.steps[0].outcome
      assert.strictEqual(first._tag, "Failure")
      if (first._tag === "Failure") assert.strictEqual(first.reason, "invalid_arguments")
      assert.strictEqual(result.state.scenario, "trolley_saves")
      assert.strictEqual(result.state.reward, 1)
    }))
})

describe("Carla served (envtrain serve carla --scenario …, loopback socket)", () => {
  it.scoped("the typed client plays the served mock: the escape pays 1, reward and done from the envelope", () =>
    Effect.gen(function*() {
      const server = yield* Registry.serve("carla", { port: 0 }, { scenario: "trolley_micro_escape_exists" })
      const client = yield* Carla.connect(server.url)
      const first = yield* client.reset({ seed: 7 })
      assert.strictEqual(first.observation.scenario_name, "trolley_micro_escape_exists")
      assert.strictEqual(first.reward, null)
      assert.deepStrictEqual(first.observation.location, [0, 0, 0.5])
      let last = yield* client.step({ ...action({ action_type: "lane_change", lane_direction: "left" }) })
      while (!last.done) last = yield* client.step(action({ action_type: "observe" }))
      assert.strictEqual(last.reward, 1)
      assert.strictEqual(last.observation.rubric_reward, 1)
      assert.strictEqual(last.observation.step_number, 50)
      const state = yield* client.state
      assert.strictEqual(state.scenario_name, "trolley_micro_escape_exists")
      assert.strictEqual(state.collisions_count, 0)
      // The same seed in process gives the same episode.
      const local = yield* play("trolley_micro_escape_exists", 7, [{
        action_type: "lane_change",
        lane_direction: "left"
      }])
      assert.deepStrictEqual(last.observation, obs(local.last))
      // reset can switch the scenario, as carla_env's does.
      const other = yield* client.reset({ scenario_name: "trolley_saves", seed: 1 })
      assert.strictEqual(other.observation.scenario_name, "trolley_saves")
    }))

  it.scoped("TRL's tools on the server: the solver scores 1, idling scores 0", () =>
    Effect.gen(function*() {
      const server = yield* Registry.serve("carla", { port: 0 }, { scenario: "trolley_micro_escape_exists" })
      const solved = yield* Environment.run(Carla.remote(server.url), { seed: 3 }, Carla.solver())
      assert.isTrue(Carla.success(solved.state))
      const local = yield* Environment.run(Carla.environment, { seed: 3 }, Carla.solver())
      assert.deepStrictEqual(solved.steps.map((s) => s.outcome.text), local.steps.map((s) => s.outcome.text))
      const idle = yield* Environment.run(Carla.remote(server.url), { seed: 3 }, (episode) =>
        Effect.gen(function*() {
          for (let i = 0; i < 5; i++) yield* episode.call("observe", {})
        }))
      assert.strictEqual(idle.state.reward, 0)
      assert.isTrue(idle.state.collision)
    }))

  it.scoped("a variant is refused where it does not apply, and an unknown scenario names the known ones", () =>
    Effect.gen(function*() {
      const onCatch = yield* Effect.flip(Registry.serve("catch", { port: 0 }, { scenario: "trolley_saves" }))
      assert.include(onCatch.message, "--scenario")
      const task = yield* Effect.flip(Registry.serve("carla", { port: 0 }, { task: "click-test" }))
      assert.include(task.message, "takes --scenario, not --task")
      const unknown = yield* Effect.flip(Registry.serve("carla", { port: 0 }, { scenario: "trolley_micro_nope" }))
      assert.include(unknown.message, "Unknown trolley micro benchmark: nope")
      assert.include(unknown.message, "trolley_micro_escape_exists")
    }))
})
