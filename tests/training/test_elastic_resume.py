"""An elastic run resumed at another N (on one host: Horovod's elastic launcher with its
workers on localhost): strong scaling goes on along the sequential path, and the run folder
records the new N as a change at the resumed epoch."""

import json
import sys

import pytest

from tests.support import ROOT, SMOKE, horovodrun, run
from tests.training.test_horovod import LOSS_REL, assert_same_weights, launch, weights

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not horovodrun(), reason="horovodrun not installed")]

ELASTIC = ["--set", "epoch_definition=global"]


def elastic(tmp_path, n: int, out, data, *extra):
    """train.py --elastic under `horovodrun -np n` with a discovery script naming n local slots.
    --network-interface lo: without it the elastic driver looks for an interface that reaches
    every host and, with only localhost, waits for ever."""
    discover = tmp_path / f"hosts{n}.sh"
    discover.write_text(f"#!/bin/sh\necho localhost:{n}\n")
    discover.chmod(0o755)
    run(
        [
            horovodrun(),
            "-np",
            str(n),
            "--min-np",
            "1",
            "--max-np",
            str(n),
            "--host-discovery-script",
            str(discover),
            "--network-interface",
            "lo",
            "--gloo",
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--elastic",
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--out",
            str(out),
            "--quiet",
            *ELASTIC,
            *extra,
        ]
    )


def test_an_elastic_run_resumes_at_another_n_on_its_path(tmp_path, smoke_data):
    out = tmp_path / "elastic"
    elastic(tmp_path, 2, out, smoke_data, "--set", "max_epochs=2")
    elastic(tmp_path, 1, out, smoke_data, "--set", "max_epochs=4", "--resume")
    changes = [json.loads(x) for x in (out / "workers.jsonl").read_text().splitlines()]
    assert changes == [{"epoch": 2, "step": 0, "old_workers": 2, "new_workers": 1}]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["workers"]) for r in rows] == [(1, 2), (2, 2), (3, 1), (4, 1)]
    sequential = launch([], "strong", tmp_path / "sequential", smoke_data, *ELASTIC, "--set", "max_epochs=4")
    for (loss, val_loss, _), row in zip(sequential, rows, strict=True):
        # float32 rounding: two half-batch means are not bitwise one mean (tests/training/test_horovod.py)
        assert row["loss"] == pytest.approx(loss, rel=LOSS_REL) and row["val_loss"] == pytest.approx(
            val_loss, rel=LOSS_REL
        )
    assert_same_weights(weights(tmp_path / "sequential"), weights(out))
