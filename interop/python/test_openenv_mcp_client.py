"""OpenEnv's MCP client (`MCPToolClient`, and `EchoEnv` as OpenEnv's echo_env defines it) against
`envtrain serve echo-mcp`: listing and calling tools, sync and async, the step interface with MCP actions, and the
production mode's session (HTTP `openenv/session/create`, the WebSocket attached with `?session_id=`, closed with
`openenv/session/close`).
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import EnvtrainServer
from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)

pytestmark = pytest.mark.timeout(120)

TOOLS = ["echo_message", "echo_with_length"]


class EchoEnv(MCPToolClient):
    """OpenEnv's echo_env client: everything comes from MCPToolClient."""


@pytest.fixture(scope="module")
def mcp_server():
    server = EnvtrainServer("echo-mcp")
    yield server
    server.stop()


def check_tools(tools: list[Tool]) -> None:
    assert [t.name for t in tools] == TOOLS
    for tool in tools:
        assert isinstance(tool, Tool)
        assert tool.description.startswith("Echo back the")
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert schema["properties"]["message"]["type"] == "string"
        assert schema["required"] == ["message"]


def test_mcp_client_sync(mcp_server):
    with EchoEnv(base_url=mcp_server.url).sync() as env:
        # list_tools swallows every failure into [] (OpenEnv's client): an empty list is a failure here.
        check_tools(env.list_tools())
        assert env.get_tool("echo_with_length").name == "echo_with_length"
        assert env.call_tool("echo_message", message="Hello!") == "Hello!"
        assert env.call_tool("echo_with_length", message="héllo ✓") == {"message": "héllo ✓", "length": 7}
        with pytest.raises(RuntimeError) as unknown:
            env.call_tool("no_such_tool", message="x")
        assert type(unknown.value) is RuntimeError
        assert str(unknown.value).startswith("Tool 'no_such_tool' failed: Unknown tool")

        # reset / state go over the WebSocket attached to the same session.
        result = env.reset(episode_id="mcp-episode")
        assert (result.reward, result.done) == (0.0, False)
        state = env.state()
        assert (state.episode_id, state.step_count) == ("mcp-episode", 0)


def test_mcp_client_async_and_step_actions(mcp_server):
    async def main():
        async with MCPToolClient(base_url=mcp_server.url) as env:
            check_tools(await env.list_tools(use_cache=False))
            assert await env.call_tool("echo_message", message="async") == "async"
            await env.reset()
            # The step interface with MCP actions (what the client's simulation path sends), on the session.
            listed = await env.step(ListToolsAction())
            assert isinstance(listed.observation, ListToolsObservation)
            check_tools(listed.observation.tools)
            called = await env.step(CallToolAction(tool_name="echo_with_length", arguments={"message": "four"}))
            obs = called.observation
            assert isinstance(obs, CallToolObservation)
            assert (obs.tool_name, obs.error) == ("echo_with_length", None)
            assert obs.result["data"] == {"message": "four", "length": 4}
            assert obs.result["structured_content"] == {"message": "four", "length": 4}
            assert obs.result["is_error"] is False
            failed = await env.step(CallToolAction(tool_name="nope", arguments={}))
            assert failed.observation.error is not None
            assert failed.observation.error.error_type.value == "tool_not_found"
            assert (await env.state()).step_count == 3

    asyncio.run(main())


def test_generic_client_mcp_actions(mcp_server):
    # The simulation-mode path: MCP actions as plain step payloads over /ws.
    with GenericEnvClient(base_url=mcp_server.url).sync() as env:
        env.reset()
        listed = env.step({"type": "list_tools"})
        assert [t["name"] for t in listed.observation["tools"]] == TOOLS
        called = env.step({"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "x"}})
        assert called.observation["result"]["data"] == "x"
        assert called.observation["error"] is None
        assert env.state()["step_count"] == 2


def test_openenv_validate_mcp(mcp_server):
    from openenv.cli._validation import validate_running_environment

    report = validate_running_environment(mcp_server.url)
    assert [c for c in report["criteria"] if not c["passed"]] == []
    assert (report["passed"], report["mode"]) == (True, "simulation")


def test_mcp_client_at_capacity_one(envtrain_server):
    # One slot: the client's HTTP session and its WebSocket are one session, so reset/step work beside the tools.
    server = envtrain_server("echo-mcp", "--max-concurrent-envs", "1")
    first = EchoEnv(base_url=server.url).sync()
    first.connect()
    first.reset(episode_id="only")
    assert first.call_tool("echo_message", message="one") == "one"
    assert first.step(CallToolAction(tool_name="echo_message", arguments={"message": "two"})).observation.result[
        "data"
    ] == "two"
    assert (first.state().episode_id, first.state().step_count) == ("only", 1)

    # A second client is refused when it creates its session: OpenEnv's RuntimeError with the server's text.
    with pytest.raises(RuntimeError) as refused:
        EchoEnv(base_url=server.url).sync().connect()
    assert type(refused.value) is RuntimeError
    assert str(refused.value) == (
        "Failed to create MCP session: Server at capacity: 1/1 sessions active. Cannot accept new connections."
    )

    # Closing the first client closes its session (openenv/session/close): the slot is free again.
    first.close()
    with EchoEnv(base_url=server.url).sync() as second:
        assert second.call_tool("echo_message", message="again") == "again"
        second.reset()
        assert second.state().step_count == 0
