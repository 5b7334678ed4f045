"""envtrain's captured TrainingTrace against OpenEnv's own (issue 19): `openenv.core.harness.training.TrainingTrace`
(strict pydantic, unknown fields forbidden, `validate_training_turn` on every turn) accepts a trace the capture proxy
wrote and round-trips it unchanged; malformed traces are refused by both OpenEnv and `envtrain harness validate`,
which names the same rule and the turn.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, ROOT, TSX
from openenv.core.harness.training import TrainingTrace
from pydantic import ValidationError

SCRIPT = ROOT / "interop" / "src" / "captureTrace.ts"


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("capture") / "trace.json"
    done = subprocess.run([str(TSX), str(SCRIPT), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def envtrain_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TSX), str(BIN), "harness", "validate", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_openenv_accepts_and_round_trips_the_captured_trace(captured: dict, tmp_path: Path) -> None:
    trace = TrainingTrace.model_validate_json(json.dumps(captured))
    assert len(trace.turns) == 4
    roles = [t.metadata["role"] for t in trace.turns]
    assert roles == ["agent", "agent", "agent", "auxiliary"]
    assert trace.turns[1].metadata["parent_id"] == "0"
    assert all(lp <= 0 for t in trace.turns for lp in t.per_token_logps)
    # Through OpenEnv's JSON unchanged.
    assert json.loads(trace.model_dump_json()) == captured
    # OpenEnv's entry adapter, both ways: entries carry node_id in metadata (which from_entries keeps there too).
    again = TrainingTrace.from_entries(trace.to_trace_entries())
    for turn in again.turns:
        assert turn.metadata.pop("node_id") == turn.node_id
    assert again.model_dump(mode="json") == captured
    # What OpenEnv writes, envtrain reads.
    path = tmp_path / "openenv.json"
    path.write_text(again.model_dump_json())
    done = envtrain_validate(path)
    assert done.returncode == 0, done.stderr
    assert "valid TrainingTrace (schema_version 1): 4 turns" in done.stdout


@pytest.mark.parametrize(
    ("rule", "mutate"),
    [
        ("trainable_prompt", lambda t: t["turns"][1]["loss_mask"].__setitem__(0, 1)),
        ("positive_logprob", lambda t: t["turns"][1]["per_token_logps"].__setitem__(0, 0.5)),
        ("logprob_misalign", lambda t: t["turns"][1]["per_token_logps"].pop()),
        ("length_mismatch", lambda t: t["turns"][1]["loss_mask"].pop()),
        ("invalid_token_id", lambda t: t["turns"][1]["prompt_token_ids"].__setitem__(0, -3)),
        ("no_prompt_ids", lambda t: t["turns"][1].update(prompt_token_ids=[], loss_mask=t["turns"][1]["loss_mask"][-len(t["turns"][1]["completion_token_ids"]):])),
        ("schema", lambda t: t["turns"][1].update(surprise=1)),
        ("duplicate_node_id", lambda t: t["turns"][1].update(node_id=t["turns"][0]["node_id"])),
    ],
)
def test_a_malformed_trace_is_refused_by_both(captured: dict, tmp_path: Path, rule: str, mutate) -> None:
    bad = copy.deepcopy(captured)
    mutate(bad)
    with pytest.raises(ValidationError) as refused:
        TrainingTrace.model_validate_json(json.dumps(bad))
    openenv_says = str(refused.value)
    if rule == "schema":
        assert "Extra inputs are not permitted" in openenv_says
    elif rule == "duplicate_node_id":
        assert "duplicate node_ids" in openenv_says
    else:
        assert rule in openenv_says, openenv_says
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    done = envtrain_validate(path)
    assert done.returncode == 1, done.stdout
    assert f"turn 1 " in done.stderr and f"breaks rule {rule}" in done.stderr, done.stderr
