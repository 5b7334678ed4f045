"""OpenEnv's Python clients against `envtrain serve browsergym --task …` (browsergym_env on a real Chromium).

A typed client written as OpenEnv's `browsergym_env` client is written (BrowserGymAction{action_str}, the
observation's fields by name, reward and done from the envelope, the state's BrowserGym fields) and the generic
client: click-test is won by clicking the element id the accessibility tree shows for the button (reward 1), a
wrong click scores 0, a malformed action string comes back as `last_action_error` with the fix in `error`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

import pytest
from conftest import EnvtrainServer
from openenv.core import GenericEnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State

pytestmark = pytest.mark.timeout(120)


class BrowserGymAction(Action):
    action_str: str


class BrowserGymObservation(Observation):
    text: str = ""
    url: str = ""
    screenshot: Optional[List[List[List[int]]]] = None
    goal: str = ""
    axtree_txt: str = ""
    pruned_html: str = ""
    error: str = ""
    last_action_error: bool = False


class BrowserGymState(State):
    benchmark: str = ""
    task_name: str = ""
    task_id: Optional[str] = None
    goal: str = ""
    current_url: str = ""
    max_steps: Optional[int] = None
    cum_reward: float = 0.0


class BrowserGymEnv(EnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    def _step_payload(self, action: BrowserGymAction) -> Dict[str, Any]:
        return {"action_str": action.action_str}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[BrowserGymObservation]:
        obs = payload.get("observation", {})
        observation = BrowserGymObservation(
            **{k: obs[k] for k in BrowserGymObservation.model_fields if k in obs and k not in ("done", "reward")},
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> BrowserGymState:
        return BrowserGymState(**payload)


def bid_of(axtree: str, role: str, name: str) -> str:
    match = re.search(rf"^\s*\[(\w+)\] {re.escape(role)} '{re.escape(name)}'", axtree, re.M)
    assert match, f"no {role} '{name}' in:\n{axtree}"
    return match.group(1)


@pytest.fixture(scope="module")
def click_test_server():
    server = EnvtrainServer("browsergym", "--task", "click-test")
    yield server
    server.stop()


def test_click_test_typed_client_clicks_the_right_bid_and_gets_reward_1(click_test_server):
    with BrowserGymEnv(base_url=click_test_server.url).sync() as env:
        reset = env.reset(seed=1)
        obs = reset.observation
        assert obs.goal == "Click the button."
        assert (reset.reward, reset.done, obs.last_action_error) == (None, False, False)
        assert obs.url.startswith("http://127.0.0.1:") and "/miniwob/click-test.html" in obs.url
        assert 'bid="' in obs.pruned_html and obs.screenshot is None
        bid = bid_of(obs.axtree_txt, "button", "Click Me!")
        result = env.step(BrowserGymAction(action_str=f"click('{bid}')"))
        assert (result.reward, result.done) == (1.0, True)
        state = env.state()
        assert (state.benchmark, state.task_name) == ("miniwob", "click-test")
        assert state.task_id == "browsergym/miniwob.click-test"
        assert (state.step_count, state.cum_reward, state.goal) == (1, 1.0, "Click the button.")


def test_click_test_generic_client_wrong_click_gets_0_and_bad_action_names_the_fix(click_test_server):
    with GenericEnvClient(base_url=click_test_server.url).sync() as env:
        obs = env.reset(seed=2).observation
        button = bid_of(obs["axtree_txt"], "button", "Click Me!")
        # The goal text, not the button: nothing happens, reward 0, the episode goes on (MiniWoB's click-test).
        query = re.search(r'<div bid="(\d+)">Click the button\.</div>', obs["pruned_html"])
        assert query, obs["pruned_html"]
        wrong = env.step({"action_str": f"click('{query.group(1)}')"})
        assert (wrong.reward, wrong.done, wrong.observation["last_action_error"]) == (0.0, False, False)
        bad = env.step({"action_str": f"click({button})"})
        assert (bad.reward, bad.done) == (0.0, False)
        assert bad.observation["last_action_error"] is True
        assert f"element ids are strings: click('{button}')" in bad.observation["error"]
        won = env.step({"action_str": f"click('{button}')"})
        assert (won.reward, won.done) == (1.0, True)


def test_click_button_wrong_button_ends_with_0():
    server = EnvtrainServer("browsergym", "--task", "click-button")
    try:
        with GenericEnvClient(base_url=server.url).sync() as env:
            obs = env.reset(seed=4).observation
            target = re.search(r'"(\w+)"', obs["goal"]).group(1)
            buttons = re.findall(r"^\s*\[(\w+)\] button '(\w+)'", obs["axtree_txt"], re.M)
            wrong = next(bid for bid, name in buttons if name != target)
            result = env.step({"action_str": f"click('{wrong}')"})
            assert (result.reward, result.done) == (0.0, True)
            assert env.state()["cum_reward"] == 0.0
    finally:
        server.stop()
