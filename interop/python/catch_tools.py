"""The seed's Catch as TRL's example writes it (examples/scripts/openenv/catch.py): the observation text, the tools
move(direction) / stay() and the reward.

Shared by the TRL user's script in test_trl_on_envtrain.py (the game played by `envtrain serve catch`) and by
bench/interop/trl_catch.py (the game played in-process), so both hand TRL the same tools. An environment class
inherits `CatchTools` and defines `_act(action_id)`. TRL finds an environment's tools with
`inspect.getmembers(instance, inspect.ismethod)`, which lists inherited methods too, and builds each schema from the
method's own signature and docstring (transformers' get_json_schema), so the subclass shows move and stay exactly as
if it wrote them; `_act` stays hidden by its underscore.
"""

from __future__ import annotations

from typing import List, Literal

CATCH_ROWS, CATCH_COLUMNS = 10, 5


def catch_info_state(ball_row: int, ball_col: int, paddle_col: int) -> List[float]:
    """OpenSpiel's 50-float info_state: a 1 for the ball, then a 1 for the paddle on the last row."""
    cells = [0.0] * (CATCH_ROWS * CATCH_COLUMNS)
    cells[ball_row * CATCH_COLUMNS + ball_col] = 1.0
    cells[(CATCH_ROWS - 1) * CATCH_COLUMNS + paddle_col] = 1.0
    return cells


def format_observation(info_state: List[float]) -> str:
    """The seed's CatchEnv._format_obs: the 50-float info_state as text (1-based rows and columns; a ball on the
    last row reads as the paddle)."""
    ball = paddle = None
    for index, value in enumerate(info_state):
        if value == 1.0:
            row, col = divmod(index, CATCH_COLUMNS)
            if row < CATCH_ROWS - 1:
                ball = (row + 1, col + 1)
            else:
                paddle = col + 1
    parts = []
    if ball is not None:
        parts.append(f"Ball: row {ball[0]}/{CATCH_ROWS}, column {ball[1]}/{CATCH_COLUMNS}")
    if paddle is not None:
        parts.append(f"Paddle: column {paddle}/{CATCH_COLUMNS}")
    if ball is not None and paddle is not None:
        diff = ball[1] - paddle
        if diff < 0:
            parts.append(f"The ball is {-diff} column(s) to the LEFT of the paddle.")
        elif diff > 0:
            parts.append(f"The ball is {diff} column(s) to the RIGHT of the paddle.")
        else:
            parts.append("The ball is directly above the paddle.")
    return "\n".join(parts)


class CatchTools:
    """The seed's CatchEnv tools over the subclass's `_act(action_id)` (OpenSpiel's 0 left, 1 stay, 2 right)."""

    def _act(self, action_id: int) -> str:
        raise NotImplementedError

    def move(self, direction: Literal["left", "right"]) -> str:
        """
        Move the paddle left or right.

        Args:
            direction: Direction to move, either "left" or "right".

        Returns:
            The observation after moving.
        """
        if direction == "left":
            return self._act(0)
        if direction == "right":
            return self._act(2)
        raise ValueError(f"Invalid direction: {direction!r}. Use 'left' or 'right'.")

    def stay(self) -> str:
        """
        Do nothing and let the ball fall one step.

        Returns:
            The observation after staying.
        """
        return self._act(1)


def reward_from_env(environments, **kwargs) -> List[float]:
    """The seed's reward: max(r, 0) once the episode is done, 0 otherwise."""
    return [max(env.reward, 0.0) if env.done else 0.0 for env in environments]
