"""OpenEnv's own Python clients against `envtrain serve`: echo, catch, wordle, sudoku.

Generic (`GenericEnvClient`, observations as dicts) and typed clients (`openenv_typed.py`, written as OpenEnv's
environments write theirs), sync (`.sync()`) and async (`async with`), reset / step / state, each checked for the
content it carries: observations, rewards, done, state fields.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import EnvtrainServer
from openenv.core import GenericAction, GenericEnvClient
from openenv.core.env_server.types import State
from openenv_typed import (
    EchoAction,
    EchoEnv,
    EchoObservation,
    OpenSpielAction,
    OpenSpielEnv,
    OpenSpielObservation,
    OpenSpielState,
    TextArenaAction,
    TextArenaEnv,
    TextArenaObservation,
    TextArenaState,
    catch_move,
    catch_positions,
    strict_observation,
    sudoku_solve,
    wire_fields,
    wordle_feedback,
)

pytestmark = pytest.mark.timeout(120)


def serve(env: str):
    server = EnvtrainServer(env)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def echo_server():
    yield from serve("echo")


@pytest.fixture(scope="module")
def catch_server():
    yield from serve("catch")


@pytest.fixture(scope="module")
def wordle_server():
    yield from serve("wordle")


@pytest.fixture(scope="module")
def sudoku_server():
    yield from serve("sudoku")


# ---- echo -----------------------------------------------------------------------------------------------------------


def test_echo_typed_sync(echo_server):
    with EchoEnv(base_url=echo_server.url).sync() as env:
        first = env.reset(episode_id="echo-episode-1")
        assert isinstance(first.observation, EchoObservation)
        assert first.observation.echoed_message == "Echo environment ready!"
        assert first.observation.message_length == 0
        assert (first.reward, first.done) == (0.0, False)
        state = env.state()
        assert isinstance(state, State)
        assert (state.episode_id, state.step_count) == ("echo-episode-1", 0)

        for n, message in enumerate(["Hello", "Hi!", "héllo wörld ✓"], start=1):
            result = env.step(EchoAction(message=message))
            assert result.observation.echoed_message == message
            assert result.observation.message_length == len(message)
            # The twin's arithmetic, to the last bit: len(message) * 0.1.
            assert result.reward == len(message) * 0.1
            assert result.observation.reward == result.reward
            assert result.done is False
            assert env.state().step_count == n
        assert env.state().episode_id == "echo-episode-1"

        # A new episode: the step count starts again and a fresh episode id is drawn.
        env.reset()
        state = env.state()
        assert state.step_count == 0
        assert state.episode_id not in (None, "echo-episode-1")


def test_echo_typed_async(echo_server):
    async def main():
        async with EchoEnv(base_url=echo_server.url) as env:
            result = await env.reset()
            assert result.observation.echoed_message == "Echo environment ready!"
            result = await env.step(EchoAction(message="async"))
            assert (result.observation.echoed_message, result.observation.message_length) == ("async", 5)
            assert result.reward == 0.5
            state = await env.state()
            assert state.step_count == 1

    asyncio.run(main())


def test_echo_without_sync_wrapper_on_a_ws_url(echo_server):
    # OpenEnv 0.10's clients also answer plain sync calls (no .sync()), and take a ws:// base URL.
    with EchoEnv(base_url=echo_server.url.replace("http://", "ws://")) as env:
        assert env.reset(episode_id="direct").observation.echoed_message == "Echo environment ready!"
        result = env.step(EchoAction(message="direct"))
        assert (result.observation.echoed_message, result.reward) == ("direct", len("direct") * 0.1)
        assert (env.state().episode_id, env.state().step_count) == ("direct", 1)


def test_echo_generic_and_errors(echo_server):
    with GenericEnvClient(base_url=echo_server.url).sync() as env:
        reset = env.reset()
        assert reset.observation == {"echoed_message": "Echo environment ready!", "message_length": 0}
        result = env.step(GenericAction(message="generic"))
        assert set(result.observation) == wire_fields(EchoObservation)
        assert result.observation == {"echoed_message": "generic", "message_length": 7}
        assert (result.reward, result.done) == (0.7000000000000001, False)
        assert env.state() == {"episode_id": env.state()["episode_id"], "step_count": 1}

        # The server validates as pydantic does (EchoAction: extra="forbid", message min_length=1); the client
        # raises its RuntimeError with the server's code, and the session goes on.
        with pytest.raises(RuntimeError) as unknown:
            env.step({"msg": "x"})
        assert type(unknown.value) is RuntimeError
        assert str(unknown.value) == "Server error: Invalid message (code: VALIDATION_ERROR)"
        with pytest.raises(RuntimeError, match=r"\(code: VALIDATION_ERROR\)$"):
            env.step({"message": ""})
        assert env.step({"message": "still here"}).observation["echoed_message"] == "still here"
        assert env.state()["step_count"] == 2


# ---- catch (openspiel_env) ------------------------------------------------------------------------------------------


def check_catch_initial(obs: OpenSpielObservation) -> int:
    assert len(obs.info_state) == 50
    assert sorted(set(obs.info_state)) == [0.0, 1.0]
    assert obs.info_state.count(1.0) == 2
    row, ball, paddle = catch_positions(obs.info_state)
    assert (row, paddle) == (0, 2)
    assert obs.legal_actions == [0, 1, 2]
    assert (obs.game_phase, obs.current_player_id, obs.opponent_last_action) == ("initial", 0, None)
    return ball


def test_catch_typed_sync_wins_and_loses(catch_server):
    with OpenSpielEnv(base_url=catch_server.url).sync() as env:
        for toward, expected in [(True, 1.0), (False, -1.0)]:
            result = env.reset(seed=11)
            assert (result.reward, result.done) == (None, False)
            ball = check_catch_initial(result.observation)
            for step in range(1, 10):
                action = catch_move(result.observation.info_state, toward)
                result = env.step(OpenSpielAction(action_id=action, game_name="catch"))
                obs = result.observation
                if step < 9:
                    assert (result.done, result.reward, obs.game_phase) == (False, 0.0, "playing")
                    assert obs.legal_actions == [0, 1, 2]
                    row, ball_now, _ = catch_positions(obs.info_state)
                    assert (row, ball_now) == (step, ball)
            assert (result.done, result.reward) == (True, expected)
            assert obs.reward == expected
            assert (obs.game_phase, obs.legal_actions, obs.current_player_id) == ("terminal", [], -4)
            state = env.state()
            assert isinstance(state, OpenSpielState)
            assert state.step_count == 9
            assert (state.game_name, state.agent_player, state.num_players) == ("catch", 0, 1)
            assert (state.opponent_policy, state.game_params) == ("random", {})


def test_catch_typed_async_seeds(catch_server):
    async def first_ball(seed: int) -> tuple[int, str]:
        async with OpenSpielEnv(base_url=catch_server.url) as env:
            result = await env.reset(seed=seed)
            return check_catch_initial(result.observation), (await env.state()).episode_id

    async def main():
        # The seed reset kwarg is honoured: the same seed gives the same ball on any session; seeds differ.
        balls = await asyncio.gather(*(first_ball(seed) for seed in [3, 3, 0, 1, 2, 4, 5, 6]))
        assert balls[0][0] == balls[1][0]
        assert len({ball for ball, _ in balls}) > 1
        assert len({episode for _, episode in balls}) == len(balls)

    asyncio.run(main())


def test_catch_generic(catch_server):
    with GenericEnvClient(base_url=catch_server.url).sync() as env:
        reset = env.reset(seed=5)
        assert set(reset.observation) == wire_fields(OpenSpielObservation)
        strict_observation(OpenSpielObservation, {"observation": reset.observation, "done": reset.done})
        result = env.step({"action_id": 1})
        assert (result.reward, result.done) == (0.0, False)
        assert result.observation["game_phase"] == "playing"
        assert env.state()["step_count"] == 1
        # An action id outside {0, 1, 2}: the environment refuses it, the session survives.
        with pytest.raises(RuntimeError, match=r"^Server error: Invalid action_id 7 .*\(code: EXECUTION_ERROR\)$"):
            env.step({"action_id": 7})
        with pytest.raises(RuntimeError, match=r"\(code: VALIDATION_ERROR\)$"):
            env.step({"action_id": "left"})
        assert env.step({"action_id": 2}).observation["game_phase"] == "playing"


# ---- wordle (textarena_env, Wordle-v0) ------------------------------------------------------------------------------


def other_word(secret: str) -> str:
    return next(w for w in ["crane", "slate", "pious"] if w != secret)


def test_wordle_typed_sync_plays_to_a_win(wordle_server):
    with TextArenaEnv(base_url=wordle_server.url).sync() as env:
        result = env.reset(seed=42)
        obs = result.observation
        assert isinstance(obs, TextArenaObservation)
        assert (result.reward, result.done) == (0.0, False)
        assert obs.prompt.startswith("[GAME] You are Playing Wordle.\nA secret 5-letter word has been chosen.")
        assert [(m.sender_id, m.category) for m in obs.messages] == [(-1, "MESSAGE")]
        assert (obs.current_player_id, obs.legal_players) == (0, [0])
        state = env.state()
        assert isinstance(state, TextArenaState)
        assert (state.env_id, state.num_players, state.turn, state.step_count) == ("Wordle-v0", 1, 0, 0)
        game = state.raw_state["game_state"]
        secret = game["secret_word"]
        assert len(secret) == 5 and game["guess_history"] == []

        guess = other_word(secret)
        result = env.step(TextArenaAction(message=f"[{guess}]"))
        assert (result.reward, result.done) == (0.0, False)
        content = result.observation.messages[-1].content
        assert f"You submitted [{guess}].\nFeedback:\n{' '.join(guess.upper())}\n{wordle_feedback(guess, secret)}" in content
        assert content.endswith("You have 5 guesses left.")
        signals = result.observation.info["reward_signals"]
        assert signals["wordle.correct"] == 0.0
        assert signals["wordle.greens"] == wordle_feedback(guess, secret).count("G") / 5

        result = env.step(TextArenaAction(message=f"[{secret}]"))
        assert (result.reward, result.done) == (1.0, True)
        assert result.observation.info["reward_signals"]["wordle.correct"] == 1.0
        state = env.state()
        assert (state.turn, state.step_count, state.last_reward) == (2, 2, 1.0)
        assert state.raw_state["game_state"]["guess_history"] == [
            [guess, wordle_feedback(guess, secret).split(" ")],
            [secret, ["G"] * 5],
        ]


def test_wordle_typed_async_invalid_then_lost(wordle_server):
    async def main():
        async with TextArenaEnv(base_url=wordle_server.url) as env:
            await env.reset(seed=7)
            secret = (await env.state()).raw_state["game_state"]["secret_word"]
            # Not a word: an invalid move, the game goes on (TextArena's first strike).
            result = await env.step(TextArenaAction(message="[zzzzz]"))
            assert (result.done, result.reward) == (False, 0.0)
            assert result.observation.messages[-1].content.endswith(
                "[GAME] You attempted an invalid move. Reason: 'zzzzz' is not an English word. Please resubmit a"
                " valid move and remember to follow the game rules to avoid penalties."
            )
            guess = other_word(secret)
            result = await env.step(TextArenaAction(message=f"[{guess}]"))
            assert (result.done, result.reward) == (False, 0.0)
            # The same guess again is invalid; twice in a row ends the game, not won, with a partial score.
            result = await env.step(TextArenaAction(message=f"[{guess}]"))
            assert (result.done, result.reward) == (False, 0.0)
            assert "You have already guessed" in result.observation.messages[-1].content
            result = await env.step(TextArenaAction(message=f"[{guess}]"))
            assert result.done is True
            assert 0.0 <= result.reward < 1.0
            assert result.observation.info["reward_signals"]["wordle.correct"] == result.reward
            state = await env.state()
            assert (state.step_count, state.last_reward) == (4, result.reward)
            assert state.raw_state["game_info"]["0"]["reason"] == (
                f"Invalid Move: You have already guessed '{guess}' before. Please try a different word."
            )
            assert state.raw_state["game_state"]["secret_word"] == secret

    asyncio.run(main())


def test_wordle_generic(wordle_server):
    with GenericEnvClient(base_url=wordle_server.url).sync() as env:
        reset = env.reset(seed=42)
        assert set(reset.observation) == wire_fields(TextArenaObservation)
        strict_observation(TextArenaObservation, {"observation": reset.observation, "done": reset.done})
        secret = env.state()["raw_state"]["game_state"]["secret_word"]
        result = env.step({"message": f"[{secret}]"})
        assert (result.reward, result.done) == (1.0, True)
        assert set(result.observation) == wire_fields(TextArenaObservation)
        assert env.state()["last_reward"] == 1.0


# ---- sudoku (textarena_env, Sudoku-v0) ------------------------------------------------------------------------------


def test_sudoku_typed_sync_solves(sudoku_server):
    with TextArenaEnv(base_url=sudoku_server.url).sync() as env:
        result = env.reset(seed=3)
        assert (result.reward, result.done) == (0.0, False)
        assert "You are playing Sudoku." in result.observation.prompt
        assert "[GAME] Game Board:" in result.observation.prompt
        state = env.state()
        assert (state.env_id, state.turn) == ("Sudoku-v0", 0)
        board = state.raw_state["game_state"]["board"]
        assert len(board) == 9 and all(len(row) == 9 for row in board)
        assert state.raw_state["game_state"]["rendered_board"] in result.observation.prompt
        solution = sudoku_solve(board)
        empty = [(r, c) for r in range(9) for c in range(9) if board[r][c] == 0]
        assert empty

        # Overwriting a given cell is refused with TextArena's text; the game goes on.
        r0, c0 = next((r, c) for r in range(9) for c in range(9) if board[r][c] != 0)
        result = env.step(TextArenaAction(message=f"[{r0 + 1} {c0 + 1} {board[r0][c0] % 9 + 1}]"))
        assert result.done is False
        assert "You attempted an invalid move." in result.observation.messages[-1].content

        for i, (r, c) in enumerate(empty):
            result = env.step(TextArenaAction(message=f"I place it: [{r + 1} {c + 1} {solution[r][c]}]"))
            if i < len(empty) - 1:
                assert (result.done, result.reward) == (False, 0.0)
        assert (result.done, result.reward) == (True, 1.0)
        state = env.state()
        assert state.raw_state["game_info"]["0"]["reason"] == "Congratulations! Player 0 completed the Sudoku puzzle."
        # The refused move was a step, not a turn (TextArena lets the player retry).
        assert (state.step_count, state.turn, state.last_reward) == (len(empty) + 1, len(empty), 1.0)
        game = state.raw_state["game_state"]
        assert game["board"] == solution
        assert game["completed"] is True


def test_sudoku_async_and_generic(sudoku_server):
    async def main():
        async with TextArenaEnv(base_url=sudoku_server.url) as env:
            await env.reset(seed=3)
            board = (await env.state()).raw_state["game_state"]["board"]
            r, c = next((r, c) for r in range(9) for c in range(9) if board[r][c] == 0)
            v = sudoku_solve(board)[r][c]
            result = await env.step(TextArenaAction(message=f"[{r + 1} {c + 1} {v}]"))
            assert (result.done, result.reward) == (False, 0.0)
            after = (await env.state()).raw_state["game_state"]["board"]
            assert after[r][c] == v
            return board

    board = asyncio.run(main())
    with GenericEnvClient(base_url=sudoku_server.url).sync() as env:
        reset = env.reset(seed=3)
        assert set(reset.observation) == wire_fields(TextArenaObservation)
        # The same seed, the same puzzle, on another session.
        assert env.state()["raw_state"]["game_state"]["board"] == board


# ---- openenv validate -----------------------------------------------------------------------------------------------


def test_openenv_validate(echo_server, catch_server, wordle_server, sudoku_server):
    # `openenv validate <url>`'s runtime check: OpenAPI version, health, metadata, schema, MCP, one mode's routes.
    from openenv.cli._validation import validate_running_environment

    for server in [echo_server, catch_server, wordle_server, sudoku_server]:
        report = validate_running_environment(server.url)
        failed = [c for c in report["criteria"] if not c["passed"]]
        assert failed == [], failed
        assert report["passed"] is True
        assert (report["mode"], report["standard_profile"]) == ("simulation", "openenv-http/1.x")
        assert len(report["criteria"]) >= 5
