"""What a resumed run's folder says it goes on under (deepdensity/training/run_folder.py)."""

import json

from deepdensity.training import run_folder


def test_a_resumed_runs_config_takes_the_resumable_settings_it_goes_on_under(tmp_path):
    """The stall check continues a stopped run with the stall rule off and a run is extended by a
    larger max_epochs: config.json then says so. Nothing else in it changes (a resume that would
    change another setting is refused before, by check_resume)."""
    saved = {"mode": "warmup", "workers": 16, "seed": 3, "stall_patience": 3, "max_epochs": 64, "lr": 0.0475}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"epoch": e, "val_loss": 0.1 / e}) + "\n" for e in (1, 2, 3))
    )
    now = {**saved, "stall_patience": 0, "max_epochs": 128, "seed": 4, "versions": {"tensorflow": "x"}}
    kept = run_folder.start_files(tmp_path, 2, now)
    assert kept == [0.1, 0.05], "the rows the checkpoint covers"
    assert json.loads((tmp_path / "config.json").read_text()) == {**saved, "stall_patience": 0, "max_epochs": 128}


def test_a_new_run_writes_its_config_whole(tmp_path):
    config = {"mode": "strong", "stall_patience": 3}
    assert run_folder.start_files(tmp_path, 0, config) == []
    assert json.loads((tmp_path / "config.json").read_text()) == config
    assert (tmp_path / "metrics.jsonl").read_text() == ""
