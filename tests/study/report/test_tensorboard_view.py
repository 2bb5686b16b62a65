"""The study's TensorBoard view: curves per seed with a tag per cell, on passes over the data,
and the median passes to target against N; read back by TensorBoard's own event reader, and
served by a real `tensorboard` (slow)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepdensity.study.report.tensorboard_view import curve_points, view_series, write_view
from tests.training.test_tensorboard import free_port, get, wait_for_runs


def _run(root: Path, name: str, rows: list) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _cell(mode, n, seed, run, passes):
    return {"mode": mode, "n": n, "seed": seed, "run": run, "passes_to_target": passes}


@pytest.fixture
def study(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        _run(runs, f"seq-s{seed}", [{"epoch": e, "val_loss": 0.01 / e} for e in (1, 2, 3)])
    # weak N = 2 with per_worker epochs: epoch e ends at pass 2e; one validation inside each epoch
    _run(
        runs,
        "weak-n2-s0",
        [
            {"epoch": 1, "val_loss": 0.02, "pass_val_losses": [[1, 0.03]]},
            {"epoch": 2, "val_loss": None, "pass_val_losses": [[3, 0.015]]},
        ],
    )
    _run(runs, "weak-n2-s1", [{"epoch": 1, "val_loss": 0.02}])
    cells = [
        _cell("strong", 1, 0, "seq-s0", 2.0),
        _cell("strong", 1, 1, "seq-s1", 3.0),
        _cell("strong", 2, 0, "seq-s0", 2.0),
        _cell("strong", 2, 1, "seq-s1", 3.0),
        _cell("weak", 2, 0, "weak-n2-s0", None),
        _cell("weak", 2, 1, "weak-n2-s1", 2.0),
    ]
    return {"settings": {"epoch_definition": "per_worker"}, "cells": cells}, runs


def test_curves_are_on_passes_and_skip_what_is_not_finite():
    rows = [
        {"epoch": 1, "val_loss": 0.02, "pass_val_losses": [[1, 0.03]]},
        {"epoch": 2, "val_loss": float("nan"), "pass_val_losses": [[3, None]]},
    ]
    assert curve_points(rows, 2) == [(1, 0.03), (2, 0.02)]


def test_a_chart_per_cell_a_line_per_seed_and_medians_where_most_seeds_reached(study):
    record, runs = study
    seeds, medians = view_series(record, runs)
    assert sorted(seeds) == [0, 1]
    # strong N = 2 follows the sequential run: drawn once, as the sequential run
    assert sorted(seeds[0]) == ["val_loss/sequential N=1", "val_loss/weak N=2"]
    assert seeds[0]["val_loss/weak N=2"] == [(1, 0.03), (2, 0.02), (3, 0.015)]
    assert seeds[1]["val_loss/sequential N=1"] == [(1, 0.01), (2, 0.005), (3, 0.01 / 3)]
    # strong: both seeds reached (median 2.5) at N = 1 and 2; weak N = 2: one of two, no median
    assert medians == {"strong": [(1, 2.5), (2, 2.5)]}


def test_the_view_reads_back_through_tensorboards_own_reader(study, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    record, runs = study
    logdir = write_view(record, runs, tmp_path / "tb")
    assert sorted(p.name for p in logdir.iterdir()) == ["seed 0", "seed 1", "study"]
    acc = EventAccumulator(str(logdir / "seed 0"))
    acc.Reload()
    import tensorflow as tf

    series = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in acc.Tensors("val_loss/weak N=2")]
    # float32 in the event file against the float64 written
    assert [s for s, _ in series] == [1, 2, 3]
    assert [v for _, v in series] == pytest.approx([0.03, 0.02, 0.015], rel=1e-6)


@pytest.mark.slow
def test_tensorboard_opens_the_study_view_with_every_run_listed(study, tmp_path):
    """Fewer than TensorBoard's 40 runs, so that it opens with them selected; served for real."""
    record, runs = study
    logdir = write_view(record, runs, tmp_path / "tb")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("tensorboard")),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        listed = wait_for_runs(port, proc)
        deadline = time.monotonic() + 60
        while len(listed) < 3 and time.monotonic() < deadline:
            listed = json.loads(get(port, "/data/runs"))
        assert sorted(listed) == ["seed 0", "seed 1", "study"]
        series = json.loads(
            get(port, "/data/plugin/scalars/scalars", run="study", tag="median passes to target/strong")
        )
        assert [(step, v) for _, step, v in series] == [(1, 2.5), (2, 2.5)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
