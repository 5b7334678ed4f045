"""envtrain's captured TrainingTrace against OpenEnv's own (issue 19): `openenv.core.harness.training.TrainingTrace`
(strict pydantic, unknown fields forbidden, `validate_training_turn` on every turn) accepts a trace the capture proxy
wrote and round-trips it unchanged; malformed traces are refused by both OpenEnv and `envtrain harness validate`,
which names the same rule and the turn. TRL's loop-owning harness worker (`trl.experimental.async_grpo`) builds its
training rows from the same trace: every sampled token trained in the same context with the same logprob as by
envtrain's harness trainer (`TrainingTrace.rows`).
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


def envtrain_rows(traces: list[dict], tmp_path: Path) -> list[list[dict]]:
    src, out = tmp_path / "traces.json", tmp_path / "rows.json"
    src.write_text(json.dumps(traces))
    done = subprocess.run(
        [str(TSX), str(ROOT / "interop" / "src" / "traceRows.ts"), str(src), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def trl_rows(trace: dict) -> list:
    # TRL's loop-owning harness worker: the session's TrainingTrace -> TurnRecords -> training rows, with its
    # default lossless capture (fork threshold 0: a turn that does not extend the last row exactly starts a new one).
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    turns = _turns_from_training_trace(TrainingTrace.model_validate_json(json.dumps(trace)))
    sequences, _ = _chain_to_sequences(turns, "rollout", 0)
    return sequences


def trained_tokens(rows: list[tuple[list[int], list[int], list[float]]]) -> list[tuple]:
    """Every trained token as (its whole context, the token, its sampled logprob): what the loss sees of it."""
    out = []
    for ids, mask, logprobs in rows:
        for i, m in enumerate(mask):
            if m == 1:
                out.append((tuple(ids[:i]), ids[i], round(logprobs[i], 6)))
    return sorted(out)


def test_trl_harness_worker_trains_what_envtrain_trains(captured: dict, tmp_path: Path) -> None:
    """TRL's harness worker and envtrain's harness trainer, given the same captured trace, train every sampled token
    in the same context with the same old logprob; on a linear conversation their rows are the same rows."""
    linear = captured
    # The title-generation call between the agent's two chat turns (the order an agent that names its session after
    # the first answer produces).
    interleaved = copy.deepcopy(captured)
    interleaved["turns"] = [captured["turns"][i] for i in (0, 3, 1, 2)]
    # A rewritten history: the agent's second call no longer starts with its first prompt's first three tokens
    # (history compacted or edited), so it extends no row.
    rewritten = copy.deepcopy(captured)
    second = rewritten["turns"][1]
    second["prompt_token_ids"] = second["prompt_token_ids"][3:]
    second["loss_mask"] = second["loss_mask"][3:]
    variants = {"linear": linear, "interleaved": interleaved, "rewritten": rewritten}
    ours = dict(zip(variants, envtrain_rows(list(variants.values()), tmp_path)))
    trl_of = {name: trl_rows(trace) for name, trace in variants.items()}
    for name, trace in variants.items():
        theirs = trl_of[name]
        assert theirs, name
        envtrain = [
            (r["prompt_ids"] + r["completion_ids"], [0] * len(r["prompt_ids"]) + r["mask"], [0.0] * len(r["prompt_ids"]) + r["logprobs"])
            for r in ours[name]
        ]
        trl = [(s.input_ids, s.completion_mask, s.old_log_probs) for s in theirs]
        assert trained_tokens(envtrain) == trained_tokens(trl), name
        # Each trained token once: as many as the trace's mask-1 positions.
        assert sum(m for _, mask, _ in trl for m in mask) == sum(m for t in trace["turns"] for m in t["loss_mask"])
    # Linear: the same rows, token for token (TRL keeps logprobs under mask 0 too; the loss never reads them).
    envtrain_linear = [
        (r["prompt_ids"] + r["completion_ids"], [0] * len(r["prompt_ids"]) + r["mask"]) for r in ours["linear"]
    ]
    assert envtrain_linear == [(s.input_ids, s.completion_mask) for s in trl_of["linear"]]
    # Interleaved: TRL compares a turn with its last row only, so the side call splits the agent's conversation into
    # two rows (the first answer re-read as context); envtrain continues the agent's row.
    assert len(ours["interleaved"]) == len(ours["linear"])
    assert len(trl_of["interleaved"]) == len(ours["linear"]) + 1
    # Rewritten: both start a new row at the rewrite.
    assert len(ours["rewritten"]) == len(ours["linear"]) + 1
    assert len(trl_of["rewritten"]) == len(ours["rewritten"])
