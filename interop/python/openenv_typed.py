"""Typed OpenEnv clients for envtrain's built-ins, written as OpenEnv's own environments write theirs.

Each is an `EnvClient[Action, Observation, State]` subclass with pydantic models on OpenEnv's `Action` /
`Observation` / `State` bases: the legacy `echo_env` (EchoAction → EchoObservation), `openspiel_env` (catch) and
`textarena_env` (Wordle-v0, Sudoku-v0). As in OpenEnv's clients, reward and done are read from the step envelope
(the server strips them from the observation), and fields are picked from the observation by name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from catch_tools import CATCH_COLUMNS, CATCH_ROWS  # the grid, defined once beside the Catch tools

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from openenv_models import (  # noqa: E402  (the models the interop servers use too)
    OpenSpielAction,
    OpenSpielObservation,
    OpenSpielState,
    TextArenaAction,
    TextArenaMessage,
    TextArenaObservation,
    TextArenaState,
)

# ---- echo_env (the legacy, non-MCP variant: `envtrain serve echo`) --------------------------------------------------


class EchoAction(Action):
    message: str = Field(..., min_length=1, description="The message to echo")


class EchoObservation(Observation):
    echoed_message: str = Field(..., description="What the environment echoed")
    message_length: int = Field(default=0, ge=0, description="Its length in characters")


class EchoEnv(EnvClient[EchoAction, EchoObservation, State]):
    def _step_payload(self, action: EchoAction) -> Dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[EchoObservation]:
        obs = payload.get("observation", {})
        observation = EchoObservation(
            echoed_message=obs.get("echoed_message", ""),
            message_length=obs.get("message_length", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=obs.get("metadata", {}),
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State(episode_id=payload.get("episode_id"), step_count=payload.get("step_count", 0))


# ---- openspiel_env (`envtrain serve catch`) -------------------------------------------------------------------------


class OpenSpielEnv(EnvClient[OpenSpielAction, OpenSpielObservation, OpenSpielState]):
    def _step_payload(self, action: OpenSpielAction) -> Dict[str, Any]:
        return {"action_id": action.action_id, "game_name": action.game_name, "game_params": action.game_params}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[OpenSpielObservation]:
        obs = payload.get("observation", {})
        observation = OpenSpielObservation(
            info_state=obs.get("info_state", []),
            legal_actions=obs.get("legal_actions", []),
            game_phase=obs.get("game_phase", "playing"),
            current_player_id=obs.get("current_player_id", 0),
            opponent_last_action=obs.get("opponent_last_action"),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=obs.get("metadata", {}),
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> OpenSpielState:
        return OpenSpielState(
            episode_id=payload.get("episode_id"),
            step_count=payload.get("step_count", 0),
            game_name=payload.get("game_name", "unknown"),
            agent_player=payload.get("agent_player", 0),
            opponent_policy=payload.get("opponent_policy", "random"),
            game_params=payload.get("game_params", {}),
            num_players=payload.get("num_players", 1),
        )


# ---- textarena_env (`envtrain serve wordle`, `envtrain serve sudoku`) -----------------------------------------------


class TextArenaEnv(EnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    def _step_payload(self, action: TextArenaAction) -> Dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[TextArenaObservation]:
        obs = payload.get("observation", {})
        observation = TextArenaObservation(
            prompt=obs.get("prompt", ""),
            messages=[
                TextArenaMessage(
                    sender_id=m.get("sender_id", -1),
                    content=m.get("content", ""),
                    category=m.get("category", "MESSAGE"),
                )
                for m in obs.get("messages", [])
                if isinstance(m, dict)
            ],
            current_player_id=obs.get("current_player_id", 0),
            legal_players=obs.get("legal_players", []),
            info=obs.get("info", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=obs.get("metadata", {}),
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> TextArenaState:
        return TextArenaState(
            episode_id=payload.get("episode_id"),
            step_count=payload.get("step_count", 0),
            env_id=payload.get("env_id", "unknown"),
            num_players=payload.get("num_players", 1),
            max_turns=payload.get("max_turns"),
            turn=payload.get("turn", 0),
            last_reward=payload.get("last_reward", 0.0),
            last_info=payload.get("last_info", {}),
            raw_state=payload.get("raw_state", {}),
        )


# ---- what the tests check an observation against ------------------------------------------------------------------

# The wire observation must carry exactly the model's own fields (the envelope holds reward and done; metadata is
# never sent): `wire_fields(EchoObservation) == set(result.observation)` for a generic client's dict.
ENVELOPE_FIELDS = {"done", "reward", "metadata"}


def wire_fields(model: type[Observation]) -> set[str]:
    return set(model.model_fields) - ENVELOPE_FIELDS


def strict_observation(model: type[Observation], payload: Dict[str, Any]) -> Observation:
    """The envelope validated whole against the model (extra="forbid"): no missing, renamed or unknown field."""
    return model.model_validate(
        {**payload.get("observation", {}), "reward": payload.get("reward"), "done": payload.get("done", False)}
    )


# ---- game helpers (plain rules, for the expected values) -----------------------------------------------------------


def catch_positions(info_state: List[float]) -> tuple[int, int, int]:
    """(ball row, ball column, paddle column) from the 10×5 info_state."""
    ones = [i for i, v in enumerate(info_state) if v == 1.0]
    paddle = [i for i in ones if i // CATCH_COLUMNS == CATCH_ROWS - 1]
    ball = [i for i in ones if i // CATCH_COLUMNS < CATCH_ROWS - 1]
    assert len(paddle) == 1, info_state
    if not ball:  # the ball has reached the paddle's row and sits on it
        return CATCH_ROWS - 1, paddle[0] % CATCH_COLUMNS, paddle[0] % CATCH_COLUMNS
    assert len(ball) == 1, info_state
    return ball[0] // CATCH_COLUMNS, ball[0] % CATCH_COLUMNS, paddle[0] % CATCH_COLUMNS


def catch_move(info_state: List[float], toward: bool = True) -> int:
    """0 LEFT, 1 STAY, 2 RIGHT: toward the ball's column (or away from it)."""
    _, ball, paddle = catch_positions(info_state)
    step = 0 if ball == paddle else (1 if ball > paddle else -1)
    if not toward:
        step = -step if step != 0 else (1 if paddle < CATCH_COLUMNS - 1 else -1)
    return step + 1


def wordle_feedback(guess: str, secret: str) -> str:
    """Wordle's G/Y/X per letter (greens first, then yellows while the secret has that letter left)."""
    marks = ["X"] * len(guess)
    left: Dict[str, int] = {}
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "G"
        else:
            left[s] = left.get(s, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] != "G" and left.get(g, 0) > 0:
            marks[i] = "Y"
            left[g] -= 1
    return " ".join(marks)


def sudoku_solve(board: List[List[int]]) -> List[List[int]]:
    """A solution of a 9×9 board (0 = empty) by backtracking on the most constrained cell."""
    grid = [row[:] for row in board]

    def candidates(r: int, c: int) -> set[int]:
        used = set(grid[r]) | {grid[i][c] for i in range(9)}
        br, bc = 3 * (r // 3), 3 * (c // 3)
        used |= {grid[i][j] for i in range(br, br + 3) for j in range(bc, bc + 3)}
        return set(range(1, 10)) - used

    def solve() -> bool:
        empty = [(r, c) for r in range(9) for c in range(9) if grid[r][c] == 0]
        if not empty:
            return True
        r, c = min(empty, key=lambda rc: len(candidates(*rc)))
        for v in sorted(candidates(r, c)):
            grid[r][c] = v
            if solve():
                return True
        grid[r][c] = 0
        return False

    assert solve(), "the board has no solution"
    return grid
