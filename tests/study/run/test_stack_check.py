"""Stability across stacks (repro --stack-check VENV): the check's runs are keyed by the stack
they are trained on and started with that venv's interpreter, a venv is asked for its stack
before the study starts, and the report judges every claim again with the re-run seed, beside
the instruction-set check."""

import copy
import json
import sys
from pathlib import Path

import pytest

from deepdensity.config import Config
from deepdensity.study.core import ledger
from deepdensity.study.core.request import RunRequest
from deepdensity.study.report import paper_report as report
from deepdensity.study.run.design import venv_stack
from deepdensity.study.run.runner import StudyRunner
from deepdensity.utils.errors import UserError
from tests.support import prose

RECORD = json.loads((Path(__file__).parents[1] / "data" / "tiny-reports" / "study.json").read_text())
CURRENT = "TensorFlow 2.21.0, tf-keras 2.21.0"


def test_the_checks_runs_are_keyed_by_their_stack_and_no_other_run_is():
    cfg = {"seed": 0, "base_lr": 0.001}
    plain = ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a")
    assert ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a", "") == plain, "keys of every run before"
    checked = ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a", CURRENT)
    assert checked != plain
    assert checked != ledger.run_key(cfg, "weak", 2, "one process", "", "arrays:a", "TensorFlow 2.15.1, keras 2.15.0")


def test_a_run_on_another_venv_starts_with_its_python_and_sets_its_own_keras(tmp_path, monkeypatch):
    runner = StudyRunner(tmp_path, tmp_path / "train.yaml", None)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert runner.train_command(RunRequest("r", "weak", 2, Config(), ()), False)[0] == sys.executable
    assert runner._environment()["TF_USE_LEGACY_KERAS"] == "1"
    runner.python = "/elsewhere/.venv-paper/bin/python"
    assert (
        runner.train_command(RunRequest("r", "weak", 2, Config(), ()), False)[0] == "/elsewhere/.venv-paper/bin/python"
    )
    # TensorFlow 2.15 given the driver's TF_USE_LEGACY_KERAS=1 would look for a tf_keras it lacks
    assert "TF_USE_LEGACY_KERAS" not in runner._environment()


def stand_in_venv(root: Path, answer: str, status: int = 0) -> Path:
    """A venv whose python answers the stack question with `answer` (JSON) and logs its env."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text(f"#!/bin/sh\nenv > {root}/env.txt\necho '{answer}'\nexit {status}\n")
    python.chmod(0o755)
    return root


def test_a_venv_is_asked_for_its_stack_and_refused_where_it_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    good = stand_in_venv(tmp_path / "good", json.dumps(["2.15.1", "keras 2.15.0", "supported", ["the paper stack"]]))
    assert venv_stack(str(good)) == {
        "python": str(good / "bin" / "python"),
        "tensorflow": "2.15.1",
        "keras": "keras 2.15.0",
    }
    assert "TF_USE_LEGACY_KERAS" not in (good / "env.txt").read_text()
    with pytest.raises(UserError, match="no .*bin/python; name a venv made by make install"):
        venv_stack(str(tmp_path / "nothing"))
    bad = stand_in_venv(tmp_path / "bad", json.dumps(["2.21.0", None, "unsupported", ["no Keras 2 beside it"]]))
    with pytest.raises(UserError, match="its stack is unsupported: no Keras 2 beside it"):
        venv_stack(str(bad))
    broken = stand_in_venv(tmp_path / "broken", "", status=1)
    with pytest.raises(UserError, match="is deepdensity installed there"):
        venv_stack(str(broken))


def test_stack_check_with_another_executor_is_refused_before_anything_runs(tmp_path, capsys):
    from deepdensity.study import repro

    code = repro.main(
        [
            "--preset",
            "default",
            "--runs",
            str(tmp_path / "runs"),
            "--out",
            str(tmp_path / "out"),
            "--stack-check",
            str(tmp_path / "venv"),
            "--runner",
            "horovodrun -np {n}",
            "--dry-run",
        ]
    )
    assert code == 2 and "--stack-check trains its runs as one process" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


@pytest.mark.medium
def test_every_claim_is_judged_again_on_the_other_stack_beside_the_isa_check(tmp_path):
    record = copy.deepcopy(RECORD)
    again = copy.deepcopy(record["cells"])
    for c in again:  # on the other stack, seed 0 of weak N = 2 missed the target; every other re-run matched
        if (c["mode"], c["n"], c["seed"]) == ("weak", 2, 0):
            c.update(status="max_epochs", epochs_to_target=None, time_to_target_s=None, run="stack-tf2210-weak-n2-s0")
    record["stack_check"] = {
        "stack": CURRENT,
        "venv": ".venv",
        "seed": 0,
        "sequential_seed": 0,
        "cells": again,
        "seq_2eta": record["seq_2eta"],
    }
    claims = report.render_reports(tmp_path, record)
    text = (tmp_path / "REPORT.md").read_text()
    said = prose(text)
    at = text.index("Stability across stacks: seed 0 of every trained cell")
    assert text.index("Stability across machines") < at, "beside the instruction-set check, after it"
    assert f"on {CURRENT} (`--stack-check .venv`)" in said
    seed_0_cells = sum(c["seed"] == 0 for c in record["cells"])
    assert f"{seed_0_cells - 1} of {seed_0_cells} cells had the same outcome" in prose(text[at:])
    rows = [
        line
        for line in text[at:].splitlines()
        if line.startswith("| ") and line.endswith(("the same |", "**changed** |"))
    ]
    assert len(rows) == len(claims) and "with seed 0 on TF 2.21.0" in text[at:]
    record.pop("stack_check")
    report.render_reports(tmp_path / "none", record)
    assert "Stability across stacks: not checked for any verdict" in prose(
        (tmp_path / "none" / "REPORT.md").read_text()
    )
