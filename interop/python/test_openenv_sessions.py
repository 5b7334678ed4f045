"""Sessions as OpenEnv's clients see them on `envtrain serve`: concurrent sessions are isolated, a full server
refuses a session as OpenEnv's server does, and a server killed mid-episode surfaces as the exceptions OpenEnv's
client raises for it.

What the client raises (openenv/core/env_client.py, 0.10): an error frame becomes `RuntimeError("Server error:
<message> (code: <code>)")` (`_send_and_receive`); a socket that drops while a reply is awaited re-raises
websockets' `ConnectionClosedError` from `recv()` (`_receive`); a call on a socket already seen closed reconnects,
and the refused connection becomes `ConnectionError("Failed to connect to <ws url>: …")` (`_connect_async`). The MCP client's HTTP calls raise
httpx's `ConnectError`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from conftest import EnvtrainServer
from openenv.core import GenericEnvClient, MCPToolClient
from openenv_typed import (
    EchoAction,
    EchoEnv,
    OpenSpielAction,
    OpenSpielEnv,
    TextArenaAction,
    TextArenaEnv,
    catch_move,
    catch_positions,
)
from websockets.exceptions import ConnectionClosedError

pytestmark = pytest.mark.timeout(120)

CAPACITY_ONE = (
    "Server error: Server at capacity: 1/1 sessions active. Cannot accept new connections. (code: CAPACITY_REACHED)"
)


@pytest.fixture(scope="module")
def catch_server():
    server = EnvtrainServer("catch")
    yield server
    server.stop()


# ---- isolation ------------------------------------------------------------------------------------------------------


def test_catch_sessions_isolated_sync(catch_server):
    with OpenSpielEnv(base_url=catch_server.url).sync() as a:
        a.reset(seed=0)
        b = a.new_session()  # a child session on the same server, as a GRPO group opens them
        seeds = next((s, t) for s in range(20) for t in range(20) if ball(a, s) != ball(b, t))
        first_a = a.reset(seed=seeds[0]).observation.info_state
        first_b = b.reset(seed=seeds[1]).observation.info_state
        assert first_a != first_b

        # Interleaved: three steps on a, one on b; each session sees only its own moves and ball.
        for _ in range(3):
            obs_a = a.step(OpenSpielAction(action_id=0)).observation
        obs_b = b.step(OpenSpielAction(action_id=2)).observation
        assert catch_positions(obs_a.info_state) == (3, catch_positions(first_a)[1], 0)
        assert catch_positions(obs_b.info_state) == (1, catch_positions(first_b)[1], 3)
        state_a, state_b = a.state(), b.state()
        assert (state_a.step_count, state_b.step_count) == (3, 1)
        assert state_a.episode_id != state_b.episode_id

        # A reset of b does not touch a, and the same seed gives b a's game.
        assert b.reset(seed=seeds[0]).observation.info_state == first_a
        assert a.state().step_count == 3
        assert a.step(OpenSpielAction(action_id=1)).observation.info_state != first_a


def ball(env, seed: int) -> int:
    return catch_positions(env.reset(seed=seed).observation.info_state)[1]


def test_catch_sessions_isolated_async(catch_server):
    async def play(seed: int) -> tuple[float, int, str, list[float]]:
        async with OpenSpielEnv(base_url=catch_server.url) as env:
            result = await env.reset(seed=seed)
            first = result.observation.info_state
            while not result.done:
                result = await env.step(OpenSpielAction(action_id=catch_move(result.observation.info_state)))
                await asyncio.sleep(0)  # let the other sessions interleave
            state = await env.state()
            return result.reward, state.step_count, state.episode_id, first

    async def main():
        seeds = list(range(8))
        results = await asyncio.gather(*(play(seed) for seed in seeds))
        # Eight concurrent episodes, each played to a catch on its own ball.
        assert [(reward, steps) for reward, steps, _, _ in results] == [(1.0, 9)] * 8
        assert len({episode for _, _, episode, _ in results}) == 8
        # Each first observation is its seed's, as a lone session sees it.
        alone = await play(seeds[5])
        assert alone[3] == results[5][3]

    asyncio.run(main())


def test_wordle_and_echo_sessions_isolated(envtrain_server):
    wordle = envtrain_server("wordle")

    async def wordle_main():
        async with TextArenaEnv(base_url=wordle.url) as a, TextArenaEnv(base_url=wordle.url) as b:
            await a.reset(seed=1)
            secret_a = (await a.state()).raw_state["game_state"]["secret_word"]
            seed_b = 2
            while await secret_of(b, seed_b) == secret_a:
                seed_b += 1
            secret_b = await secret_of(b, seed_b)
            await a.step(TextArenaAction(message=f"[{secret_b}]"))
            state_a, state_b = await a.state(), await b.state()
            assert state_a.raw_state["game_state"]["secret_word"] == secret_a
            assert [g[0] for g in state_a.raw_state["game_state"]["guess_history"]] == [secret_b]
            assert state_b.raw_state["game_state"]["guess_history"] == []
            assert (state_a.turn, state_b.turn) == (1, 0)
            # b wins with its own word; a, given b's word, did not.
            result_b = await b.step(TextArenaAction(message=f"[{secret_b}]"))
            assert (result_b.done, result_b.reward) == (True, 1.0)
            assert (await a.state()).last_reward == 0.0

    async def secret_of(env, seed: int) -> str:
        await env.reset(seed=seed)
        return (await env.state()).raw_state["game_state"]["secret_word"]

    asyncio.run(wordle_main())

    echo = envtrain_server("echo")
    with EchoEnv(base_url=echo.url).sync() as a, EchoEnv(base_url=echo.url).sync() as b:
        a.reset(episode_id="a")
        b.reset(episode_id="b")
        assert a.step(EchoAction(message="from a")).observation.echoed_message == "from a"
        assert b.step(EchoAction(message="b")).reward == 0.1
        assert (a.state().episode_id, a.state().step_count) == ("a", 1)
        assert (b.state().episode_id, b.state().step_count) == ("b", 1)


# ---- capacity -------------------------------------------------------------------------------------------------------


def test_capacity_refusal_sync(envtrain_server):
    server = envtrain_server("catch", "--max-concurrent-envs", "1")
    with GenericEnvClient(base_url=server.url).sync() as first:
        first.reset(seed=1)
        # OpenEnv accepts the socket, sends CAPACITY_REACHED and closes: the client raises at its first call.
        second = GenericEnvClient(base_url=server.url).sync()
        second.connect()
        with pytest.raises(RuntimeError) as refused:
            second.reset()
        assert type(refused.value) is RuntimeError
        assert str(refused.value) == CAPACITY_ONE
        second.close()
        # new_session() on the full server: the same refusal.
        child = first.new_session()
        with pytest.raises(RuntimeError) as refused_child:
            child.step({"action_id": 1})
        assert type(refused_child.value) is RuntimeError
        assert str(refused_child.value) == CAPACITY_ONE
        # The session holding the slot is untouched.
        assert first.step({"action_id": 1}).observation["game_phase"] == "playing"
        assert first.state()["step_count"] == 1
    # Its close freed the slot at once.
    with GenericEnvClient(base_url=server.url).sync() as third:
        assert third.reset(seed=1).observation["game_phase"] == "initial"


def test_capacity_refusal_async(envtrain_server):
    server = envtrain_server("wordle", "--max-concurrent-envs", "1")

    async def main():
        async with TextArenaEnv(base_url=server.url) as first:
            await first.reset(seed=1)
            second = TextArenaEnv(base_url=server.url)
            try:
                with pytest.raises(RuntimeError) as refused:
                    async with second:
                        await second.reset(seed=2)
                assert type(refused.value) is RuntimeError
                assert str(refused.value) == CAPACITY_ONE
            finally:
                await second.close()
            assert (await first.step(TextArenaAction(message="[crane]"))).done is False

    asyncio.run(main())


# ---- a server killed mid-episode ------------------------------------------------------------------------------------


def test_server_killed_between_steps_sync(envtrain_server):
    server = envtrain_server("catch")
    env = OpenSpielEnv(base_url=server.url).sync()
    try:
        env.connect()
        env.reset(seed=4)
        assert env.step(OpenSpielAction(action_id=1)).done is False
        server.kill()
        time.sleep(0.5)  # the client's loop sees the socket drop
        # The client finds its socket closed, reconnects, and the refused connection is its ConnectionError.
        with pytest.raises(ConnectionError) as refused:
            env.step(OpenSpielAction(action_id=1))
        assert type(refused.value) is ConnectionError
        assert str(refused.value).startswith(f"Failed to connect to {server.url.replace('http', 'ws')}/ws: ")
        with pytest.raises(ConnectionError):
            env.state()
    finally:
        env.close()


def test_server_killed_during_a_step_async(envtrain_server):
    server = envtrain_server("wordle")

    async def main():
        env = GenericEnvClient(base_url=server.url)
        try:
            async with env:
                await env.reset(seed=4)
                await env.step({"message": "[crane]"})
                # Freeze the server, send a step, then kill it while the step waits for its reply.
                os.killpg(server.proc.pid, signal.SIGSTOP)
                step = asyncio.create_task(env.step({"message": "[slate]"}))
                await asyncio.sleep(0.5)
                assert not step.done()
                server.kill()
                # The socket drops under the pending reply: websockets' ConnectionClosedError, no close frame.
                with pytest.raises(ConnectionClosedError) as lost:
                    await step
                assert type(lost.value) is ConnectionClosedError
                assert (lost.value.rcvd, lost.value.sent) == (None, None)
                with pytest.raises(ConnectionError) as refused:
                    await env.state()
                assert type(refused.value) is ConnectionError
        finally:
            await env.close()

    asyncio.run(main())


def test_server_killed_mcp_client(envtrain_server):
    server = envtrain_server("echo-mcp")
    env = MCPToolClient(base_url=server.url).sync()
    try:
        env.connect()
        assert env.call_tool("echo_message", message="before") == "before"
        server.kill()
        # Tool calls go over HTTP in production mode: httpx's ConnectError reaches the caller.
        with pytest.raises(httpx.ConnectError) as refused:
            env.call_tool("echo_message", message="after")
        assert type(refused.value) is httpx.ConnectError
        # reset goes over the attached WebSocket, which dropped: the reconnect is refused.
        with pytest.raises(ConnectionError) as lost:
            env.reset()
        assert type(lost.value) is ConnectionError
    finally:
        env.close()
