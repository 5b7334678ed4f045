"""An echo environment whose tools live on a FastMCP server, served through openenv's MCP environment support.

Written the way OpenEnv's current `envs/echo_env` is: an `MCPEnvironment` (openenv.core.env_server.mcp_environment)
around a `FastMCP` server with two tools, `echo_message(message) -> str` and `echo_with_length(message) -> dict`;
tools are listed and called through `ListToolsAction` / `CallToolAction` steps on `/ws`, and through MCP JSON-RPC
(`{"type":"mcp"}` frames on `/ws`, `POST /mcp`, `WS /mcp`). `reset` answers an empty observation with reward 0.0;
every step, listing included, counts in `step_count`.

    .venv/bin/python interop/servers/mcp_echo.py --port 8000
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, Optional

from fastmcp import FastMCP
from openenv.core.env_server import Action, Observation, State, create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _serve import max_concurrent_envs, serve  # noqa: E402


def echo_tools() -> FastMCP:
    """A FastMCP server with the two echo tools (their docstrings are the tools' descriptions)."""
    server = FastMCP("echo_env")

    @server.tool
    def echo_message(message: str) -> str:
        """
        Echo back the provided message.

        Args:
            message: The message to echo back

        Returns:
            The same message that was provided
        """
        return message

    @server.tool
    def echo_with_length(message: str) -> dict:
        """
        Echo back the message with its length.

        Args:
            message: The message to echo back

        Returns:
            Dictionary with the message and its length
        """
        return {"message": message, "length": len(message)}

    return server


class McpEchoEnvironment(MCPEnvironment):
    """Only MCP actions; anything else gets an observation whose error is in its (never sent) metadata."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(echo_tools())
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return Observation(done=False, reward=0.0, metadata={"status": "ready"})

    def _step_impl(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"Unknown action type: {type(action).__name__}"})

    def step(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        self._state.step_count += 1
        return super().step(action, timeout_s=timeout_s, **kwargs)

    async def step_async(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state


def app() -> Any:
    return create_app(
        McpEchoEnvironment,
        CallToolAction,
        CallToolObservation,
        env_name="echo_env",
        max_concurrent_envs=max_concurrent_envs(),
    )


if __name__ == "__main__":
    serve(app, "An MCP echo (FastMCP tools) as an OpenEnv server")
