"""A user's environment written once in the README's form (`examples/src/environments/echo.ts`, Definition.make)
and nothing else: the real `envtrain` binary trains it (`envtrain train` with `environment: <module path>`), serves
it (`envtrain serve <module path>`), and OpenEnv's own Python clients play it.
"""

from __future__ import annotations

import json

import pytest
from conftest import EnvtrainServer
from conftest import run_envtrain as envtrain
from openenv.core import GenericEnvClient, MCPToolClient

pytestmark = pytest.mark.timeout(300)

MODULE = "./examples/src/environments/echo.ts"


def test_envtrain_trains_a_module_environment(tmp_path):
    model = tmp_path / "model"
    envtrain("init-model", "--preset", "tiny", "--out", str(model), "--seed", "1")
    config = tmp_path / "echo.yaml"
    out = tmp_path / "out"
    config.write_text(
        "\n".join(
            [
                f"model: {model}",
                "backend: cpu",
                f"environment: {MODULE}",
                'dataset: { seeds: [0, 4], prompt: "Say something." }',
                f"output_dir: {out}",
                "num_generations: 2",
                "per_device_train_batch_size: 2",
                "max_completion_length: 8",
                "max_steps: 2",
                "logging_steps: 1",
            ]
        )
        + "\n"
    )
    envtrain("train", str(config))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rewards/echo-defined/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert (out / "checkpoint-2" / "model.safetensors").exists()


def test_openenv_clients_play_the_served_module():
    server = EnvtrainServer(MODULE)
    try:
        with MCPToolClient(base_url=server.url).sync() as env:
            tools = env.list_tools()
            assert [t.name for t in tools] == ["echo"]
            assert tools[0].input_schema["properties"]["message"] == {
                "type": "string",
                "description": "The message to echo",
            }
            assert tools[0].input_schema["required"] == ["message"]
            env.reset(seed=3)
            assert env.call_tool("echo", message="héllo") == "héllo"
            with pytest.raises(RuntimeError) as failed:
                env.call_tool("echo", message="")
            assert "at least 1 character" in str(failed.value)
        with GenericEnvClient(base_url=server.url).sync() as env:
            env.reset(seed=3)
            step = env.step({"type": "call_tool", "tool_name": "echo", "arguments": {"message": "four"}})
            assert step.observation["result"]["data"] == "four"
            assert step.reward == pytest.approx(0.4)
            state = env.state()
            assert (state["echoes"], state["step_count"]) == (1, 1)
            assert state["reward"] == pytest.approx(0.4)
    finally:
        server.stop()
