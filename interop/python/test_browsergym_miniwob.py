"""The real MiniWoB++ suite (Farama's `miniwob` package, installed in .venv by the lock) over the wire.

`envtrain serve browsergym --task miniwob.<name>` finds the package's pages in the project's .venv on its own (no
MINIWOB_HTML_DIR here) and plays them in a real Chromium: the page served is byte for byte the package's file, the
goal is the page's utterance, and the reward is BrowserGym's binary reward on the page's own raw reward. A scripted
player reads the element id from the accessibility tree: the right click scores 1, a wrong one 0.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import miniwob
import pytest
from conftest import EnvtrainServer
from openenv.core import GenericEnvClient

pytestmark = pytest.mark.timeout(120)

PACKAGE_HTML = Path(miniwob.__file__).resolve().parent / "html"


def bid_of(axtree: str, role: str, name: str) -> str:
    match = re.search(rf"^\s*\[(\w+)\] {re.escape(role)} '{re.escape(name)}'$", axtree, re.M)
    assert match, f"no {role} '{name}' in:\n{axtree}"
    return match.group(1)


def serve(task: str) -> EnvtrainServer:
    """The server, with the suite found by auto-detection from the project's .venv."""
    saved = os.environ.pop("MINIWOB_HTML_DIR", None)
    try:
        return EnvtrainServer("browsergym", "--task", task)
    finally:
        if saved is not None:
            os.environ["MINIWOB_HTML_DIR"] = saved


@pytest.fixture(scope="module")
def click_test_server():
    server = serve("miniwob.click-test")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def click_button_server():
    server = serve("miniwob.click-button")
    yield server
    server.stop()


def test_click_test_is_the_package_page_and_the_right_click_gets_1(click_test_server):
    with GenericEnvClient(base_url=click_test_server.url).sync() as env:
        reset = env.reset(seed=1)
        obs = reset.observation
        assert obs["goal"] == "Click the button."
        assert (reset.reward, reset.done, obs["last_action_error"]) == (None, False, False)
        # The page in the browser is the miniwob package's own file, not envtrain's click-test.
        with urllib.request.urlopen(obs["url"], timeout=10) as page:
            assert page.read() == (PACKAGE_HTML / "miniwob" / "click-test.html").read_bytes()
        assert "core.startEpisode()" in (PACKAGE_HTML / "miniwob" / "click-test.html").read_text()
        bid = bid_of(obs["axtree_txt"], "button", "Click Me!")
        result = env.step({"action_str": f"click('{bid}')"})
        assert (result.reward, result.done) == (1.0, True)
        state = env.state()
        assert (state["benchmark"], state["task_name"], state["task_id"]) == (
            "miniwob",
            "miniwob.click-test",
            "browsergym/miniwob.click-test",
        )
        assert (state["step_count"], state["cum_reward"], state["goal"]) == (1, 1.0, "Click the button.")


def test_click_test_wrong_click_gets_0_and_the_episode_goes_on(click_test_server):
    with GenericEnvClient(base_url=click_test_server.url).sync() as env:
        obs = env.reset(seed=2).observation
        # The utterance's box (#query), not the button: MiniWoB's click-test ignores it.
        query = re.search(r'<div bid="(\d+)">Click the button\.</div>', obs["pruned_html"])
        assert query, obs["pruned_html"]
        wrong = env.step({"action_str": f"click('{query.group(1)}')"})
        assert (wrong.reward, wrong.done, wrong.observation["last_action_error"]) == (0.0, False, False)
        won = env.step({"action_str": f"click('{bid_of(obs['axtree_txt'], 'button', 'Click Me!')}')"})
        assert (won.reward, won.done) == (1.0, True)


def test_click_button_right_button_gets_1_on_several_seeds(click_button_server):
    with GenericEnvClient(base_url=click_button_server.url).sync() as env:
        goals = set()
        for seed in (1, 2, 3):
            obs = env.reset(seed=seed).observation
            target = re.fullmatch(r'Click on the "(.+)" button\.', obs["goal"])
            assert target, obs["goal"]
            goals.add(obs["goal"])
            result = env.step({"action_str": f"click('{bid_of(obs['axtree_txt'], 'button', target.group(1))}')"})
            assert (result.reward, result.done) == (1.0, True), (seed, obs["goal"], obs["axtree_txt"])
        # The same seed is the same instance (Math.seedrandom in the page).
        again = env.reset(seed=3).observation
        first = env.reset(seed=3).observation
        assert (again["goal"], again["axtree_txt"]) == (first["goal"], first["axtree_txt"])


def test_click_button_wrong_button_gets_0_and_ends_the_episode(click_button_server):
    with GenericEnvClient(base_url=click_button_server.url).sync() as env:
        for seed in range(1, 20):
            obs = env.reset(seed=seed).observation
            target = re.fullmatch(r'Click on the "(.+)" button\.', obs["goal"]).group(1)
            buttons = re.findall(r"^\s*\[(\w+)\] button '([^']*)'$", obs["axtree_txt"], re.M)
            others = [bid for bid, name in buttons if name != target]
            if others:
                break
        assert others, "no instance with a second button label in seeds 1-19"
        result = env.step({"action_str": f"click('{others[0]}')"})
        assert (result.reward, result.done) == (0.0, True)
        assert env.state()["cum_reward"] == 0.0
