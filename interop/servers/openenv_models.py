"""The wire models of OpenEnv's openspiel_env and textarena_env, shared by this folder's servers and the typed
clients of interop/python/openenv_typed.py, as an OpenEnv environment's `models.py` is shared by its server and
its client.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field

# ---- openspiel_env ---------------------------------------------------------------------------------------------------


class OpenSpielAction(Action):
    """The id of the agent's action (catch: 0 = LEFT, 1 = STAY, 2 = RIGHT)."""

    action_id: int
    game_name: str = "catch"
    game_params: Dict[str, Any] = Field(default_factory=dict)


class OpenSpielObservation(Observation):
    """What player 0 sees after a time step."""

    info_state: List[float]
    legal_actions: List[int]
    game_phase: str = "playing"
    current_player_id: int = 0
    opponent_last_action: Optional[int] = None


class OpenSpielState(State):
    """The game being served (fixed per server)."""

    game_name: str = "catch"
    agent_player: int = 0
    opponent_policy: str = "random"
    game_params: Dict[str, Any] = Field(default_factory=dict)
    num_players: int = 1


# ---- textarena_env ---------------------------------------------------------------------------------------------------


class TextArenaMessage(BaseModel):
    sender_id: int
    content: str
    category: str


class TextArenaAction(Action):
    message: str


class TextArenaObservation(Observation):
    prompt: str
    messages: List[TextArenaMessage] = Field(default_factory=list)
    current_player_id: int = 0
    legal_players: List[int] = Field(default_factory=list)
    info: Dict[str, Any] = Field(default_factory=dict)


class TextArenaState(State):
    env_id: str
    num_players: int
    max_turns: Optional[int] = None
    turn: int = 0
    last_reward: float = 0.0
    last_info: Dict[str, Any] = Field(default_factory=dict)
    raw_state: Dict[str, Any] = Field(default_factory=dict)
