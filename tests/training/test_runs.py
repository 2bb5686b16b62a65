"""Reading a run folder back: what a resume may change, and damage reported as damage."""

import json

import pytest

from deepdensity.config import Config
from deepdensity.training.runs import RESUMABLE, DamagedRun, read_json, read_metrics, resume_changes

DEFAULTS = Config().to_dict()


def saved_config(**over):
    # what config.json holds: tuples come back from JSON as lists
    return json.loads(json.dumps({**DEFAULTS, "mode": "strong", "workers": 1, "world_size": 1, **over}))


def test_a_resume_may_change_only_speed_memory_and_length():
    saved = saved_config()
    for key in RESUMABLE:
        assert key in DEFAULTS, f"{key} is a setting"
    wanted = {
        **DEFAULTS,
        "mode": "strong",
        "workers": 1,
        "world_size": 1,
        "max_epochs": 999,
        "intra_op_threads": 7,
        "allreduce_groups": 0,
        "horovod_cycle_ms": 1.0,
        "max_pass_batch": 64,
        "xla": "off",
        "deterministic": True,
    }
    assert resume_changes(saved, wanted, DEFAULTS) == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("base_lr", 0.01),
        ("n_components", 16),
        ("seed", 3),
        ("mode", "linear"),
        ("workers", 2),
        ("world_size", 2),
        ("conv_filters", (16, 16, 16)),
        ("target_loss", 0.5),
        ("epoch_definition", "global"),
        ("data_path", "other.h5"),
    ],
)
def test_a_resume_refuses_every_change_of_the_optimisation_path(key, value):
    wanted = {**saved_config(), key: value}
    assert resume_changes(saved_config(), wanted, DEFAULTS) == [(key, saved_config()[key], value)]


def test_a_setting_newer_than_the_run_counts_as_its_default():
    old = saved_config()
    del old["collapse_patience"]
    assert resume_changes(old, saved_config(), DEFAULTS) == []
    assert resume_changes(old, {**saved_config(), "collapse_patience": 3}, DEFAULTS) == [("collapse_patience", 0, 3)]


def test_metrics_keep_complete_lines_and_drop_a_cut_last_append(tmp_path):
    rows = [{"epoch": 1, "val_loss": 0.5}, {"epoch": 2, "val_loss": 0.4}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "metrics.jsonl").write_text(text + '{"epoch": 3, "val_l')
    assert read_metrics(tmp_path) == rows
    (tmp_path / "metrics.jsonl").write_text(text)
    assert read_metrics(tmp_path) == rows
    assert read_metrics(tmp_path / "none") == []


@pytest.mark.parametrize("content", [b'{"epoch": 1}\n{"epo\n{"epoch": 3}\n', b"[1, 2]\n", b'\xff\xfe{"epoch": 1}\n'])
def test_damaged_metrics_are_refused_with_the_way_out(tmp_path, content):
    (tmp_path / "metrics.jsonl").write_bytes(content)
    with pytest.raises(DamagedRun, match="metrics.jsonl .*start afresh|not UTF-8"):
        read_metrics(tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "is missing"),
        (b'{"epoch": 3, "elap', "is damaged"),
        (b"[]", "not a JSON object"),
        (b"\xff\x00", "not UTF-8"),
    ],
)
def test_damaged_json_files_name_themselves(tmp_path, content, message):
    path = tmp_path / "state.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DamagedRun, match=message) as e:
        read_json(path, "epoch to resume from")
    assert str(path) in str(e.value) and "start afresh" in str(e.value)
