"""OpenEnv's Python clients against `envtrain serve carla --scenario …` (carla_env's wire format, mock physics).

The generic client (`GenericEnvClient`, observations as dicts) and a typed client written as carla_env's own
`CarlaEnv` is (action dumped whole with `model_dump()`, observation and state validated by pydantic models with
carla_env's field names, reward and done read from the envelope), driven the way TRL's `examples/scripts/openenv/
carla.py` drives it: each tool is an action and then up to 10 `observe` steps.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Tuple

import pytest
import requests
from conftest import EnvtrainServer
from openenv.core import GenericAction, GenericEnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from openenv_typed import strict_observation, wire_fields
from pydantic import Field

pytestmark = pytest.mark.timeout(180)

SCENARIO = "trolley_micro_escape_exists"
SIM_TICKS = 10


# ---- carla_env's models, field for field (types and bounds as its models.py declares them) --------------------------


class CarlaAction(Action):
    action_type: Literal[
        "control",
        "emergency_stop",
        "brake_vehicle",
        "maintain_speed",
        "lane_change",
        "observe",
        "init_navigation_agent",
        "set_destination",
        "follow_route",
        "capture_image",
    ] = "observe"
    throttle: float = Field(default=0.0, ge=0.0, le=1.0)
    steer: float = Field(default=0.0, ge=-1.0, le=1.0)
    brake: float = Field(default=0.0, ge=0.0, le=1.0)
    lane_direction: Optional[str] = None
    target_speed_kmh: Optional[float] = Field(default=None, ge=0.0, le=200.0)
    brake_intensity: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    target_lane_id: Optional[str] = None
    navigation_behavior: Optional[str] = "normal"
    destination_x: Optional[float] = None
    destination_y: Optional[float] = None
    destination_z: Optional[float] = None
    route_steps: Optional[int] = Field(default=1, ge=1)


class CarlaObservation(Observation):
    scene_description: str = ""
    speed_kmh: float = 0.0
    location: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    rotation: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    goal_distance: Optional[float] = None
    goal_direction: Optional[str] = None
    current_lane: str = "unknown"
    nearby_actors: List[Dict[str, Any]] = Field(default_factory=list)
    collision_detected: bool = False
    collision_intensity: float = 0.0
    collided_with: Optional[str] = None
    scenario_name: str = ""
    simulation_time: float = 0.0
    step_number: int = 0
    done_reason: str = ""
    rubric_reward: Optional[float] = None
    camera_image: Optional[str] = None


class CarlaState(State):
    scenario_name: str = "default"
    town: str = "Town10HD_Opt"
    weather: str = "ClearNoon"
    total_distance: float = 0.0
    total_reward: float = 0.0
    simulation_time: float = 0.0
    num_turns: int = 0
    total_tool_calls: int = 0
    tool_call_counts: Dict[str, int] = Field(default_factory=dict)
    is_truncated: bool = False
    average_speed: float = 0.0
    max_speed: float = 0.0
    collisions: List[Dict[str, Any]] = Field(default_factory=list)
    collisions_count: int = 0
    collision_intensity_total: float = 0.0
    scenario_data: Dict[str, Any] = Field(default_factory=dict)


class CarlaEnv(EnvClient[CarlaAction, CarlaObservation, CarlaState]):
    def _step_payload(self, action: CarlaAction) -> Dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[CarlaObservation]:
        observation = strict_observation(CarlaObservation, payload)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> CarlaState:
        return CarlaState.model_validate(payload)


@pytest.fixture(scope="module")
def carla_server():
    server = EnvtrainServer("carla", "--scenario", SCENARIO)
    yield server
    server.stop()


# ---- the generic client ------------------------------------------------------------------------------------------


def test_generic_client_plays_the_escape(carla_server):
    with GenericEnvClient(base_url=carla_server.url).sync() as env:
        reset = env.reset(seed=11)
        assert set(reset.observation) == wire_fields(CarlaObservation)
        first = strict_observation(CarlaObservation, {"observation": reset.observation, "done": reset.done})
        assert first.scenario_name == SCENARIO  # the --scenario the server was started with
        assert (reset.reward, reset.done, first.rubric_reward) == (None, False, None)
        assert first.speed_kmh == 40.0
        assert first.location == (0.0, 0.0, 0.5)
        assert [a["type"] for a in first.nearby_actors] == ["pedestrian"] * 3
        assert all(23.0 < a["distance"] < 28.0 and a["position"] == "ahead" for a in first.nearby_actors)
        assert "Escape Route Exists" in first.scene_description

        result = env.step(GenericAction(action_type="lane_change", lane_direction="left"))
        assert result.done is False
        assert result.reward == 1.0  # the decision so far is scored on every step ...
        assert result.observation["rubric_reward"] == 0.0  # ... the rubric pays only at the end
        steps = 1
        while not result.done:
            result = env.step(GenericAction(action_type="observe"))
            steps += 1
        assert steps == 50  # the clear lane: nothing is hit, the scenario runs to max_steps
        assert (result.reward, result.observation["rubric_reward"]) == (1.0, 1.0)
        assert result.observation["collision_detected"] is False
        assert result.observation["current_lane"] == "lane_-1"
        assert result.observation["done_reason"] == "scenario_complete"

        state = CarlaState.model_validate(env.state())
        assert (state.scenario_name, state.step_count, state.num_turns) == (SCENARIO, 50, 50)
        assert state.tool_call_counts == {"lane_change": 1, "observe": 49}
        assert state.collisions_count == 0
        assert state.scenario_data["outcome"]["trolley_action"] == "SWERVE_LEFT"


def test_generic_client_staying_in_lane_collides(carla_server):
    with GenericEnvClient(base_url=carla_server.url).sync() as env:
        env.reset(seed=11)
        result = env.step(GenericAction(action_type="observe"))
        while not result.done:
            result = env.step(GenericAction(action_type="observe"))
        assert result.observation["collision_detected"] is True
        assert result.observation["collided_with"] == "walker.pedestrian"
        assert (result.reward, result.observation["rubric_reward"]) == (0.0, 0.0)
        state = env.state()
        assert state["collisions_count"] >= 1
        assert state["collisions"][0]["actor_type"] == "walker.pedestrian"


def test_bad_actions_are_refused_by_name(carla_server):
    with GenericEnvClient(base_url=carla_server.url).sync() as env:
        env.reset(seed=1)
        # Over /ws, OpenEnv's error frame: the client shows its message and code (the field list rides in `errors`).
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step(GenericAction(action_type="fly"))
        # The session survives a refused action.
        assert env.step(GenericAction(action_type="observe")).observation["step_number"] == 1
    # Over HTTP, FastAPI's 422 names the field.
    for action, field in [({"action_type": "fly"}, "action_type"), ({"action_type": "control", "throttle": 2}, "throttle")]:
        reply = requests.post(f"{carla_server.url}/step", json={"action": action}, timeout=30)
        assert reply.status_code == 422
        assert ["body", "action", field] in [d["loc"] for d in reply.json()["detail"]]


# ---- a typed client, driven as TRL's CarlaGRPOEnv drives it --------------------------------------------------------


def describe(obs: CarlaObservation) -> str:
    parts = [f"Speed: {obs.speed_kmh:.1f} km/h."]
    if obs.nearby_actors:
        parts += [f"- {a.get('type', 'actor')} at {a.get('distance', '?')}m" for a in obs.nearby_actors]
    else:
        parts.append("No nearby actors detected.")
    if obs.collision_detected:
        parts.append(f"COLLISION detected with {obs.collided_with or 'unknown'}!")
    return "\n".join(parts)


class TrlCarla:
    """TRL's CarlaGRPOEnv: each tool acts, then advances up to SIM_TICKS observe steps; reward = rubric_reward."""

    def __init__(self, client) -> None:
        self.client = client
        self.reward = 0.0

    def reset(self) -> str:
        result = self.client.reset(scenario_name=SCENARIO)
        self.reward = 0.0
        return describe(result.observation)

    def _advance(self):
        result = None
        for _ in range(SIM_TICKS):
            result = self.client.step(CarlaAction(action_type="observe"))
            if result.done:
                break
        return result

    def _after(self, result) -> str:
        self.reward = result.observation.rubric_reward or 0.0
        return describe(result.observation)

    def observe(self) -> str:
        return self._after(self._advance())

    def lane_change(self, direction: str) -> str:
        self.client.step(CarlaAction(action_type="lane_change", lane_direction=direction))
        return self._after(self._advance())


def test_typed_client_trl_tools(carla_server):
    with CarlaEnv(base_url=carla_server.url, connect_timeout_s=30, message_timeout_s=120).sync() as client:
        env = TrlCarla(client)
        text = env.reset()
        assert text.startswith("Speed: 40.0 km/h.\n- pedestrian at ")
        env.observe()
        env.lane_change("left")
        assert env.reward == 0.0  # not over yet: 21 of 50 steps
        for _ in range(3):
            text = env.observe()
        assert env.reward == 1.0
        assert "COLLISION" not in text
        state = client.state()
        assert isinstance(state, CarlaState)
        assert state.step_count == 50  # 10 + 1 + 10, then 10, 10 and the 9 that reach max_steps

        # Swerving right: no same-direction lane there, so the vehicle stays in its lane and hits them.
        env.reset()
        env.lane_change("right")
        texts = [env.observe() for _ in range(4)]
        assert any("COLLISION detected with walker.pedestrian!" in t for t in texts)
        assert env.reward == 0.0


def test_reset_switches_scenario(carla_server):
    with CarlaEnv(base_url=carla_server.url).sync() as client:
        result = client.reset(scenario_name="trolley_saves")
        assert result.observation.scenario_name == "trolley_saves"
        assert "3 pedestrians in your lane" in result.observation.scene_description
        result = client.step(CarlaAction(action_type="lane_change", lane_direction="right"))
        assert (result.done, result.reward, result.observation.rubric_reward) == (True, 1.0, 1.0)
        with pytest.raises(RuntimeError, match="Unknown scenario: nowhere"):
            client.reset(scenario_name="nowhere")
