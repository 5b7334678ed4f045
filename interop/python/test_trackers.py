"""`report_to` (issue 39): the real `envtrain` binary trains a few steps with `report_to: [tensorboard, trackio]`, and
the real Python packages open what it wrote: TensorBoard's own event reader (CRCs checked) finds every metric of
metrics.jsonl at its step as `train/<name>`, and the evaluations as `eval/<name>`; Trackio imports its inbox the way
its dashboard does and serves the run (name, config, metrics) from its database.
"""

from __future__ import annotations

import json
import struct

import pytest
from conftest import run_envtrain as envtrain

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trackers")
    model = tmp / "model"
    envtrain("init-model", "--preset", "tiny", "--out", str(model), "--seed", "1")
    out = tmp / "out"
    config = tmp / "echo.yaml"
    config.write_text(
        "\n".join(
            [
                f"model: {model}",
                "backend: cpu",
                "environment: ./examples/src/environments/echo.ts",
                'dataset: { seeds: [0, 16], prompt: "Say something." }',
                'evalDataset: { seeds: [1000, 1002], prompt: "Say something." }',
                f"output_dir: {out}",
                "num_generations: 2",
                "per_device_train_batch_size: 2",
                "max_completion_length: 8",
                "max_steps: 3",
                "logging_steps: 1",
                "eval_steps: 2",
                "report_to: [tensorboard, trackio]",
                "run_name: echo-trackers",
            ]
        )
        + "\n"
    )
    trackio_dir = tmp / "trackio"
    printed = envtrain("train", str(config), env={"TRACKIO_DIR": str(trackio_dir), "TRACKIO_PROJECT": "envtrain-it"})
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    return {"out": out, "trackio": trackio_dir, "metrics": metrics, "evals": evals, "printed": printed}


def test_tensorboard_reads_the_event_file(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    (logdir,) = (trained["out"] / "runs").iterdir()
    (events,) = logdir.glob("events.out.tfevents.*")
    assert f"report_to tensorboard: {events}" in trained["printed"]
    # Every record's framing, checked with TensorBoard's own CRC-32C.
    data = events.read_bytes()
    offset, records = 0, 0
    while offset < len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[offset + 8 : offset + 12])[0] == masked_crc32c(header)
        body = data[offset + 12 : offset + 12 + length]
        assert struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])[0] == masked_crc32c(body)
        offset += 16 + length
        records += 1
    assert offset == len(data)
    # The file version, one record per logging step, one per evaluation (steps 0, 2 and 3).
    assert records == 1 + len(trained["metrics"]) + len(trained["evals"])

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for row in trained["metrics"]:
        for name, value in row.items():
            if name == "step" or value is None:
                continue
            (event,) = [e for e in acc.Scalars(f"train/{name}") if e.step == row["step"]]
            assert event.value == pytest.approx(value, rel=1e-6, abs=1e-6), name
    for row in trained["evals"]:
        for name, value in row["metrics"].items():
            assert name in tags
            if value is not None:
                (event,) = [e for e in acc.Scalars(name) if e.step == row["step"]]
                assert event.value == pytest.approx(value, rel=1e-6, abs=1e-6), name
    assert {"train/loss", "train/reward", "train/rewards/echo-defined/mean", "eval/success_rate"} <= tags


def test_trackio_imports_and_serves_the_run(trained, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(trained["trackio"]))
    import importlib

    import trackio.utils

    importlib.reload(trackio.utils)  # TRACKIO_DIR is read when trackio is imported
    from trackio import fragments, sqlite_storage

    importlib.reload(fragments)
    importlib.reload(sqlite_storage)
    imported = fragments.import_inbox_dir()
    assert imported == len(trained["metrics"]) + len(trained["evals"])
    storage = sqlite_storage.SQLiteStorage
    assert storage.get_runs("envtrain-it") == ["echo-trackers"]
    logs = storage.get_logs("envtrain-it", "echo-trackers")
    for row in trained["metrics"]:
        (logged,) = [entry for entry in logs if entry["step"] == row["step"] and "train/loss" in entry]
        for name, value in row.items():
            if name != "step" and value is not None:
                assert logged[f"train/{name}"] == pytest.approx(value), name
    assert sorted(entry["step"] for entry in logs if "eval/success_rate" in entry) == [
        row["step"] for row in trained["evals"]
    ]
    config = storage.get_run_config("envtrain-it", "echo-trackers")
    assert config["numGenerations"] == 2 and config["reportTo"] == ["tensorboard", "trackio"]
