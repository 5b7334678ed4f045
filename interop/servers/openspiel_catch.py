"""OpenSpiel's `catch` from the open_spiel package (pyspiel + rl_environment) as an OpenEnv environment.

Written the way OpenEnv's `envs/openspiel_env` serves it: the agent is player 0, `OpenSpielAction{action_id,
game_name, game_params}` (the last two accepted and ignored: the game is fixed by the server), an
`OpenSpielObservation{info_state, legal_actions, game_phase, current_player_id, opponent_last_action}` built from
rl_environment's TimeStep, reward `None` on the first time step, and `reset()` that takes no seed (the chance node's
ball column comes from rl_environment's own unseeded sampler, as on OpenEnv's servers).

    .venv/bin/python interop/servers/openspiel_catch.py --port 8000
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

from open_spiel.python import rl_environment
from openenv.core.env_server import Environment, create_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _serve import max_concurrent_envs, serve  # noqa: E402
from openenv_models import OpenSpielAction, OpenSpielObservation, OpenSpielState  # noqa: E402


class CatchEnvironment(Environment):
    """rl_environment over pyspiel's `catch`, one instance per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._game = rl_environment.Environment("catch")
        self._state = OpenSpielState(num_players=self._game.num_players)

    def reset(self) -> OpenSpielObservation:  # type: ignore[override]
        step = self._game.reset()
        self._state.episode_id = str(uuid.uuid4())
        self._state.step_count = 0
        return self._observe(step)

    def step(self, action: OpenSpielAction) -> OpenSpielObservation:  # type: ignore[override]
        step = self._game.step([action.action_id])
        self._state.step_count += 1
        return self._observe(step)

    @property
    def state(self) -> OpenSpielState:
        return self._state

    def _observe(self, step: Any) -> OpenSpielObservation:
        phase = "terminal" if step.last() else "initial" if step.first() else "playing"
        info_state = step.observations["info_state"][0]
        return OpenSpielObservation(
            info_state=[float(v) for v in info_state],
            legal_actions=list(step.observations["legal_actions"][0]),
            game_phase=phase,
            current_player_id=int(step.observations["current_player"]),
            opponent_last_action=None,
            reward=None if step.rewards is None else float(step.rewards[0]),
            done=step.last(),
        )


def app() -> Any:
    return create_app(
        CatchEnvironment,
        OpenSpielAction,
        OpenSpielObservation,
        env_name="openspiel_env",
        max_concurrent_envs=max_concurrent_envs(),
    )


if __name__ == "__main__":
    serve(app, "OpenSpiel catch as an OpenEnv server")
