"""OpenEnv's own Harbor client (`openenv.harbor.client.HarborEnv`) drives `envtrain harness serve` (issue 19): the real
`envtrain` binary serves the Harbor MCP contract over the shipped task suite in bubblewrap sandboxes, generating on
`envtrain serve-policy` (a tiny model made here) through the capture proxy. The client lists tasks, reads the
capabilities, runs a rollout with the oracle harness (one captured model call, then the task's solution: reward 1,
the engine's token ids in the turns) and gets failures back as `ok=False` results, never as exceptions. Its Task API
methods (`splits`, `num_tasks`, `get_task`, `get_task_range`: plain HTTP on `/harbor_env/...`) read the same tasks.
"""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest
from conftest import BIN, ROOT, TSX, free_port, wait_for_port
from openenv.harbor.client import HarborEnv

pytestmark = pytest.mark.timeout(300)


def start(*args: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [str(TSX), str(BIN), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1"},
        start_new_session=True,
    )
    wait_for_port(port, proc, timeout=120)
    return proc


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def harbor_url(tmp_path_factory: pytest.TempPathFactory):
    model = tmp_path_factory.mktemp("harbor") / "model"
    done = subprocess.run(
        [str(TSX), str(BIN), "init-model", "--preset", "tiny", "--out", str(model), "--seed", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    policy_port = free_port()
    policy = start(
        "serve-policy", "--model", str(model), "--backend", "cpu", "--served-model-name", "tiny",
        "--port", str(policy_port), port=policy_port,
    )
    harbor_port = free_port()
    harbor = start(
        "harness", "serve", "--llm-url", f"http://127.0.0.1:{policy_port}", "--port", str(harbor_port),
        "--max-concurrent-envs", "3", "--agent-steps", "2", "--max-tokens", "8",
        # HarborEnv.run_rollout sends sandbox="e2b" unless told: the operator maps it (each result says so).
        "--sandbox-alias", "e2b=bubblewrap", port=harbor_port,
    )
    try:
        yield f"http://127.0.0.1:{harbor_port}", f"http://127.0.0.1:{policy_port}"
    finally:
        stop(harbor)
        stop(policy)


def test_openenv_harbor_client_runs_rollouts_on_envtrain(harbor_url) -> None:
    url, policy = harbor_url
    with HarborEnv(base_url=url) as env:
        caps = env.capabilities()
        assert caps["sandboxes"] == ["bubblewrap"]
        assert {"bash-agent", "oracle"} <= set(caps["harnesses"])
        assert {d["name"]: d["num_tasks"] for d in caps["datasets"]} == {"train": 12, "held-out": 4}

        tasks = json.loads(env._call("list_tasks", split="train", start=0, stop=3)["content"][0]["text"])
        assert [t["index"] for t in tasks] == [0, 1, 2]
        assert all(t["instruction"] for t in tasks)

        result = env.run_rollout(split="train", task_index=1, harness="oracle", sandbox="bubblewrap")
        assert result.ok, result.error
        assert result.reward == 1.0
        assert result.task_name == tasks[1]["task_name"]
        assert result.rollout_type == "train"
        assert result.n_turns == len(result.turns) == 1
        turn = result.turns[0]
        assert len(turn.prompt_token_ids) > 10 and 1 <= len(turn.completion_token_ids) <= 8
        assert len(turn.per_token_logps) == len(turn.completion_token_ids)
        assert turn.loss_mask == [0] * len(turn.prompt_token_ids) + [1] * len(turn.completion_token_ids)
        assert all(lp <= 0 for lp in turn.per_token_logps)

        # The built-in agent over the tiny model: a graded rollout (it solves nothing), reward 0, not None.
        graded = env.run_rollout(split="held-out", task_index=0, harness="bash-agent", llm_url=policy)
        assert graded.ok, graded.error
        assert graded.reward == 0.0
        assert graded.n_turns >= 1
        assert graded.sandbox == "bubblewrap"
        assert graded.param_fixes == ['sandbox "e2b" ran as "bubblewrap" (the server\'s --sandbox-alias)']
        # The client's default harness, opencode, is not run here and not aliased: refused, not substituted.
        opencode = env.run_rollout(split="train", task_index=0, sandbox="bubblewrap")
        assert not opencode.ok and opencode.reward is None and opencode.exception_type == "ValueError"
        assert 'harness "opencode" is not available: this server runs bash-agent, oracle' in (opencode.error or "")
        assert "--harness-alias opencode=bash-agent" in (opencode.error or "")

        # Failures are returned, not raised.
        missing = env.run_rollout(split="train", task_index=99, harness="oracle")
        assert not missing.ok and missing.reward is None and missing.exception_type == "IndexError"
        unknown = env.run_rollout(split="train", task_index=0, harness="no-such-agent")
        assert not unknown.ok and "no-such-agent" in (unknown.error or "")
        elsewhere = env.run_rollout(split="train", task_index=0, harness="oracle", llm_url="http://127.0.0.1:9")
        assert not elsewhere.ok and "llm_url" in (elsewhere.error or "")


def test_openenv_harbor_client_reads_the_task_api(harbor_url) -> None:
    """The client's Task API methods (plain HTTP, `/harbor_env/...`) against envtrain's routes: the same tasks as
    `list_tasks`, Python's slice for ranges, HTTP errors for an unknown split or an index outside the split."""
    url, _ = harbor_url
    with HarborEnv(base_url=url) as env:
        assert env.splits() == [{"name": "train", "num_tasks": 12}, {"name": "held-out", "num_tasks": 4}]
        assert env.num_tasks("train") == 12 and env.num_tasks("held-out") == 4 and env.num_tasks() == 12

        listed = json.loads(env._call("list_tasks", split="train", start=0, stop=20)["content"][0]["text"])
        ranged = env.get_task_range("train")
        assert [t.model_dump() for t in ranged] == listed
        assert [t.index for t in ranged] == list(range(12))
        assert [t.index for t in env.get_task_range("train", 10, 50)] == [10, 11]
        assert [t.index for t in env.get_task_range("held-out", -2, 4)] == [2, 3]
        assert env.get_task_range("train", 5, 5) == []

        task = env.get_task("held-out", 1)
        assert task.dataset == "held-out" and task.index == 1 and task.instruction
        assert task == env.get_task_range("held-out", 1, 2)[0]
        assert task.task_id == f"held-out/{task.task_name}"

        with pytest.raises(httpx.HTTPStatusError) as unknown:
            env.num_tasks("test")
        assert unknown.value.response.status_code == 404
        assert "train, held-out" in unknown.value.response.json()["detail"]
        with pytest.raises(httpx.HTTPStatusError) as outside:
            env.get_task("train", 12)
        assert outside.value.response.status_code == 400
        assert "0..11" in outside.value.response.json()["detail"]
