"""The study's runner reuses a finished run only when it ran with what the study asks for now,
on the same data; it never reuses a stale one."""
import json

import pytest
import yaml

from deepdensity.study.preset import StudyError
from deepdensity.study.runner import StudyRunner
from deepdensity.training.runs import data_fingerprint


def _finished_run(root, data, **settings):
    run = root / "seq-s0"
    run.mkdir(parents=True)
    config = {"data_path": str(data), "stall_patience": 3, "base_lr": 0.002, "seed": 0, "max_epochs": 4,
              "data_fingerprint": data_fingerprint(data), **settings}
    (run / "config.json").write_text(json.dumps(config))
    (run / "result.json").write_text(json.dumps({"status": "reached_target", "epochs": 3, "seconds": 1.0}))
    return run


def test_data_fingerprint_is_size_and_content(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    a.write_bytes(b"cubes" * 1000)
    b.write_bytes(b"cubes" * 999 + b"cubeZ")
    assert data_fingerprint(a).startswith("5000:") and data_fingerprint(a) != data_fingerprint(b)
    assert data_fingerprint(a) == "5000:" + __import__("hashlib").sha256(b"cubes" * 1000).hexdigest()


def test_a_finished_run_is_reused_only_with_the_same_settings_and_data(tmp_path):
    data = tmp_path / "data.h5"
    data.write_bytes(b"the study's cubes")
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump({"data_path": str(data), "stall_patience": 3}))
    _finished_run(tmp_path / "runs", data)
    runner = StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None)
    asked = {"base_lr": repr(0.002), "seed": 0, "max_epochs": 4}
    assert runner.run("seq-s0", "strong", 1, asked)["epochs"] == 3 and runner.reused == {"seq-s0"}
    with pytest.raises(StudyError, match=r"seed 0 -> 1"):
        runner.run("seq-s0", "strong", 1, {**asked, "seed": 1})
    with pytest.raises(StudyError, match=r"base_lr 0.002 -> 0.003"):
        runner.run("seq-s0", "strong", 1, {**asked, "base_lr": repr(0.003)})
    data.write_bytes(b"other cubes, same path")
    with pytest.raises(StudyError, match="the data in .*data.h5 changed"):
        StudyRunner(tmp_path / "runs", train_yaml, None, say=lambda *a: None).run("seq-s0", "strong", 1, asked)
